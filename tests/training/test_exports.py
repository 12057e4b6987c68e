"""Exports from stored trajectories: row shapes, pairing, filters, dedupe, and loading with `datasets`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from veriloop.bench._sample_data import SampleRuns
from veriloop.cli import main
from veriloop.errors import ConfigError, NotFoundError
from veriloop.records import (
    Completion,
    ExecResult,
    ExecStatus,
    Message,
    Node,
    Run,
    VerifyResult,
    VerifyStatus,
)
from veriloop.store import TrajectoryStore
from veriloop.store.exports import (
    ExportFilter,
    ExportOptions,
    build_rows,
    content_hash,
    datasets_module,
    load_rows,
    split_steps,
)

DEMO_TASKS = 5
PROMPT = [Message(role="user", content="write f")]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _node(run: Run, text: str, passed: bool, **fields: object) -> Node:
    status = ExecStatus.PASSED if passed else ExecStatus.FAILED
    values: dict[str, object] = {
        "run_id": run.id,
        "task_id": "t1",
        "messages": PROMPT,
        "completion": Completion(text=text, token_ids=[1, 2, 3], model="m"),
        "exec_result": ExecResult(status=status),
        "score": 1.0 if passed else 0.0,
        "created_at": T0,
    }
    values.update(fields)
    return Node.model_validate(values)


@pytest.fixture
def store() -> TrajectoryStore:
    return TrajectoryStore("sqlite://")


def test_siblings_give_every_passed_failed_pair_and_provenance(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="tree", suite="s", model="m"))
    root = _node(run, "root", False)
    kids = [_node(run, f"kid{i}", i < 2, parent_id=root.id, depth=1) for i in range(4)]
    store.add_nodes([root, *kids])
    rows = build_rows(store, "preference", [run.id], ExportOptions(pairing=("siblings",)))
    assert len(rows) == 4  # 2 passed x 2 failed children; the root has no sibling
    row = rows[0]
    assert row["prompt"] == [{"role": "user", "content": "write f"}]
    assert row["chosen"][0]["role"] == "assistant" and row["chosen"][0]["content"] in ("kid0", "kid1")
    assert row["rejected"][0]["content"] in ("kid2", "kid3")
    assert row["chosen_token_ids"] == [1, 2, 3] and row["run_id"] == run.id and row["model"] == "m"
    assert {row["chosen_node_id"] for row in rows} == {kids[0].id, kids[1].id}


def test_best_worst_pairs_by_score_even_when_all_failed(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="tree", suite="s", model="m"))
    nodes = [_node(run, f"n{i}", False, score=s) for i, s in enumerate((0.2, 0.9, 0.5))]
    store.add_nodes(nodes)
    rows = build_rows(store, "preference", [run.id], ExportOptions())
    assert [(row["chosen"][0]["content"], row["rejected"][0]["content"]) for row in rows] == [("n1", "n0")]
    assert rows[0]["pair_source"] == "best_worst"


def test_pairs_are_capped_per_group(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="tree", suite="s", model="m"))
    store.add_nodes([_node(run, f"n{i}", i % 2 == 0) for i in range(12)])
    rows = build_rows(store, "preference", [run.id], ExportOptions(pairing=("siblings",), max_pairs_per_group=5))
    assert len(rows) == 5


def test_sft_and_verifier_rows(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="a", suite="s", model="m"))
    store.add_nodes(
        [_node(run, "good", True), _node(run, "bad", False), _node(run, "unjudged", True, exec_result=None, score=None)]
    )
    sft = build_rows(store, "sft", [run.id], ExportOptions())
    assert [row["completion"][0]["content"] for row in sft] == ["good"]
    verifier = build_rows(store, "verifier", [run.id], ExportOptions())
    assert sorted((row["completion"][0]["content"], row["label"]) for row in verifier) == [
        ("bad", False),
        ("good", True),
    ]


def test_a_refusing_verifier_makes_a_passing_node_fail(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="a", suite="s", model="m"))
    store.add_node(_node(run, "x", True, verify_result=VerifyResult(status=VerifyStatus.FAILED)))
    [row] = build_rows(store, "verifier", [run.id], ExportOptions())
    assert row["label"] is False


def test_prm_rows_label_each_step_of_a_path(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="refine", suite="s", model="m"))
    root = _node(run, "draft", False)
    child = _node(run, "fix", True, parent_id=root.id, depth=1)
    single = _node(run, "a = 1\n\nb = 2\n\n\nc = 3", True, task_id="t2")
    store.add_nodes([root, child, single])
    rows = {row["task_id"]: row for row in build_rows(store, "prm", [run.id], ExportOptions())}
    assert rows["t1"]["completions"] == ["draft", "fix"] and rows["t1"]["labels"] == [False, True]
    assert rows["t2"]["completions"] == ["a = 1", "b = 2", "\nc = 3"] and rows["t2"]["labels"] == [True] * 3
    assert split_steps("x\n\n  \n\ny") == ["x", "y"]


def test_trees_hold_every_node(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="refine", suite="s", model="m"))
    root = _node(run, "draft", False)
    store.add_nodes([root, _node(run, "fix", True, parent_id=root.id, depth=1)])
    [row] = build_rows(store, "trees", [run.id], ExportOptions())
    assert [node["completion"] for node in row["nodes"]] == ["draft", "fix"]
    assert row["nodes"][1]["parent_id"] == root.id and row["nodes"][1]["passed"] is True


def test_filters_by_suite_agent_verifier_status_and_time(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="a", suite="s", model="m"))
    other = store.create_run(Run(agent="b", suite="z", model="m"))
    verified = VerifyResult(status=VerifyStatus.VERIFIED)
    later = T0 + timedelta(days=2)
    store.add_nodes(
        [
            _node(run, "old", True),
            _node(run, "new", True, created_at=later, verify_result=verified),
            _node(other, "elsewhere", True),
        ]
    )

    def texts(filters: ExportFilter) -> list[str]:
        rows = build_rows(store, "sft", [run.id, other.id], ExportOptions(filters=filters))
        return sorted(row["completion"][0]["content"] for row in rows)

    assert texts(ExportFilter()) == ["elsewhere", "new", "old"]
    assert texts(ExportFilter(suites=["s"])) == ["new", "old"]
    assert texts(ExportFilter(agents=["b"])) == ["elsewhere"]
    assert texts(ExportFilter(verify_status=["verified"])) == ["new"]
    assert texts(ExportFilter(verify_status=["none"])) == ["elsewhere", "old"]
    assert texts(ExportFilter(since=T0 + timedelta(days=1))) == ["new"]
    assert texts(ExportFilter(until=T0 + timedelta(days=1))) == ["elsewhere", "old"]


def test_dedupe_by_content(store: TrajectoryStore) -> None:
    run = store.create_run(Run(agent="a", suite="s", model="m"))
    store.add_nodes([_node(run, "same", True), _node(run, "same", True)])
    assert len(build_rows(store, "sft", [run.id], ExportOptions())) == 1
    assert len(build_rows(store, "sft", [run.id], ExportOptions(dedupe=False))) == 2
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})


def test_bad_requests_are_typed_errors(store: TrajectoryStore, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown export kind"):
        build_rows(store, "nope", ["x"], ExportOptions())
    with pytest.raises(ConfigError, match="--run"):
        build_rows(store, "sft", [], ExportOptions())
    with pytest.raises(NotFoundError):
        build_rows(store, "sft", ["missing-run"], ExportOptions())
    with pytest.raises(ConfigError, match="does not exist"):
        load_rows(tmp_path / "none.jsonl")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "hf"])
def test_cli_export_of_a_demo_run_loads_with_datasets(
    demo_runs: SampleRuns, demo_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    datasets = datasets_module()
    suffix = {"jsonl": ".jsonl", "parquet": ".parquet", "hf": ""}[fmt]
    out = tmp_path / f"pref{suffix}"
    argv = ["--home", str(demo_home), "export", "preference", "--out", str(out), "--format", fmt, "--json"]
    for run in demo_runs.runs:
        argv += ["--run", run[:8]]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == DEMO_TASKS
    if fmt == "jsonl":
        loaded = datasets.load_dataset("json", data_files=str(out), split="train")
    elif fmt == "parquet":
        loaded = datasets.load_dataset("parquet", data_files=str(out), split="train")
    else:
        loaded = datasets.load_from_disk(str(out))
    assert loaded.num_rows == DEMO_TASKS
    assert {"prompt", "chosen", "rejected", "chosen_token_ids", "run_id", "chosen_node_id"} <= set(loaded.column_names)
    row = loaded[0]
    assert row["chosen"][0]["role"] == "assistant" and row["prompt"][0]["role"] == "user"
    assert row["run_id"] == demo_runs.good_run and row["rejected_run_id"] == demo_runs.bad_run
    assert load_rows(out)[0]["chosen"] == row["chosen"]


def test_cli_export_refuses_bad_input_in_one_line(
    demo_runs: SampleRuns, demo_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = ["--home", str(demo_home)]
    assert main([*home, "export", "bogus", "--run", demo_runs.good_run, "--out", str(tmp_path / "x")]) != 0
    assert "unknown export kind" in capsys.readouterr().err
    assert main([*home, "export", "sft", "--run", "nope-nope", "--out", str(tmp_path / "x")]) != 0
    assert "not found" in capsys.readouterr().err
    assert (
        main(
            [*home, "export", "sft", "--run", demo_runs.good_run, "--out", str(tmp_path / "x"), "--since", "yesterday"]
        )
        != 0
    )
    assert "ISO" in capsys.readouterr().err


def test_cli_export_every_kind_from_the_demo(
    demo_runs: SampleRuns, demo_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = {}
    for kind in ("sft", "verifier", "prm", "trees"):
        out = tmp_path / f"{kind}.jsonl"
        argv = ["--home", str(demo_home), "export", kind, "--run", demo_runs.good_run, "--run", demo_runs.bad_run]
        assert main([*argv, "--out", str(out), "--json"]) == 0
        counts[kind] = json.loads(capsys.readouterr().out)["rows"]
    assert counts == {"sft": DEMO_TASKS, "verifier": 2 * DEMO_TASKS, "prm": 2 * DEMO_TASKS, "trees": 2 * DEMO_TASKS}
