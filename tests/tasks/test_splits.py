"""HumanEval and MBPP: fixed train/test splits and μCode's public/private test split, checked in the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.records import Task
from veriloop.sandbox import default_limits, get_sandbox
from veriloop.sandbox.inside.harness_py import count_tests
from veriloop.sandbox.languages import python_tests_job
from veriloop.tasks import load_suite


@pytest.fixture(scope="module")
def data_settings() -> Settings:
    return load_settings()


def test_humaneval_halves_are_disjoint_and_cover_the_suite() -> None:
    settings = load_settings()
    test = load_suite("humaneval-test", settings)
    train = load_suite("humaneval-train", settings)
    everything = load_suite("humaneval", settings)
    assert len(test.tasks) == 82 and len(train.tasks) == 82
    assert {t.id for t in test.tasks} | {t.id for t in train.tasks} == {t.id for t in everything.tasks}
    assert not {t.id for t in test.tasks} & {t.id for t in train.tasks}
    assert test.tasks[0].id == "HumanEval/0" and train.tasks[0].id == "HumanEval/82"


def test_humaneval_public_test_is_the_first_assert_only() -> None:
    for task in load_suite("humaneval", load_settings()).tasks:
        assert task.public_tests is not None and task.public_tests.rstrip().endswith(f"check({task.entry_point})")
        public = count_tests(task.public_tests, task.entry_point)
        assert 1 <= public <= count_tests(task.tests, task.entry_point), task.id
        body = task.public_tests.split("def check(candidate):", 1)[1].rsplit("check(", 1)[0]
        assert "candidate" in body, task.id  # the public test asserts something of the program
    placeholder = load_suite("humaneval", load_settings()).select(ids=["HumanEval/66"]).tasks[0]
    assert 'assert candidate("") == 0' in (placeholder.public_tests or "")  # not cut at its `assert True`
    task = load_suite("humaneval", load_settings()).select(ids=["HumanEval/2"]).tasks[0]
    assert "assert candidate(3.5) == 0.5" in (task.public_tests or "")
    assert "1.33" not in (task.public_tests or "") and "1.33" in task.tests


@pytest.mark.data("mbpp/mbpp.jsonl")
def test_mbpp_splits_follow_the_standard_task_ids(data_settings: Settings) -> None:
    test = load_suite("mbpp", data_settings)
    train = load_suite("mbpp-train", data_settings)
    assert len(test.tasks) == 500 and len(train.tasks) == 374
    assert test.tasks[0].id == "MBPP/11" and train.tasks[0].id == "MBPP/601"
    assert all(task.entry_point for task in test.tasks + train.tasks)


@pytest.mark.data("mbpp/mbpp.jsonl")
def test_mbpp_public_tests_per_environment(data_settings: Settings) -> None:
    task = load_suite("mbpp", data_settings).tasks[0]
    assert count_tests(task.public_tests or "") == 1 and count_tests(task.tests) == 1 + task.metadata["private_tests"]
    assert task.public_tests and task.public_tests.strip() in task.prompt  # the prompt names the function
    trained = load_suite("mbpp-train", data_settings).tasks[0]
    assert count_tests(trained.public_tests or "") == count_tests(trained.tests) - trained.metadata["private_tests"]


def test_mbpp_without_a_data_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data_dir"):
        load_suite("mbpp", load_settings(paths={"home": tmp_path, "data_dir": None}))


async def _passes(task: Task, code: str, tests: str, settings: Settings) -> bool:
    sandbox = get_sandbox(settings)
    try:
        job = python_tests_job(
            sandbox.toolchain, code, tests, entry_point=task.entry_point, limits=default_limits(settings)
        )
        return (await sandbox.run(job)).passed
    finally:
        await sandbox.aclose()


@pytest.mark.data("mbpp/mbpp.jsonl")
@pytest.mark.bwrap
async def test_references_pass_public_and_private_tests_in_the_sandbox(data_settings: Settings) -> None:
    tasks = [
        *load_suite("humaneval-test", data_settings).tasks[:2],
        *load_suite("mbpp", data_settings).tasks[:2],
        *load_suite("mbpp-train", data_settings).tasks[:1],
    ]
    for task in tasks:
        assert task.reference and task.public_tests
        assert await _passes(task, task.reference, task.public_tests, data_settings), task.id
        assert await _passes(task, task.reference, task.tests, data_settings), task.id
