"""GRPO rewarded by the judge: the reward function (real sandbox), then TRL GRPOTrainer on the embedded model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from veriloop.config import load_settings
from veriloop.tasks import load_suite
from veriloop.training.common import TrainSpec
from veriloop.training.grpo import task_rows, train_grpo
from veriloop.training.rewards import JudgeReward, LocalJudge, candidate_code, cut_at_stop

TASKS = ("HumanEval/138", "HumanEval/157")
"""One-line boolean answers: with `return ` given, a few tokens finish a sample, and samples differ in how many
of the task's asserts they pass (pass-rate rewards vary within a group, so GRPO's advantages are not all 0)."""


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalJudge]:
    settings = load_settings(paths={"home": tmp_path_factory.mktemp("grpo-judge")})
    local = LocalJudge(settings)
    yield local
    local.close()


def test_a_completion_is_cut_where_humaneval_cuts_it() -> None:
    assert cut_at_stop("    return 1\n\ndef other():\n    pass") == "    return 1\n"
    assert candidate_code("def f():\n", "    return 2\nprint(f())") == "def f():\n    return 2"
    reply = [{"role": "assistant", "content": "Here:\n```python\ndef f():\n    return 3\n```\nDone."}]
    assert candidate_code([{"role": "user", "content": "f"}], reply) == "def f():\n    return 3"


def test_rewards_follow_the_verdicts_and_infra_errors_give_no_signal(judge: LocalJudge) -> None:
    reward = JudgeReward(judge, mode="pass_rate")
    prompt = "def add(a, b):\n"
    tests = "assert add(1, 2) == 3\nassert add(0, 0) == 0\n"
    completions = ["    return a + b\n", "    return a * b\n", "    return (\n", "    return a + b\n"]
    values = reward(
        [prompt] * 4,
        completions,
        tests=[tests, tests, tests, ""],
        entry_point=["add"] * 4,
        task_id=[None, None, None, "no-such-suite-task"],
        suite=[None, None, None, "humaneval"],
    )
    assert values[:3] == [1.0, 0.5, 0.0]  # add(0, 0) == 0 holds for a * b too; a syntax error scores 0
    assert values[3] is None, reward.last[3]  # the judge could not judge (an unknown task): no signal, not 0
    assert reward.last[3]["status"] == "infra_error"
    strict = JudgeReward(judge, mode="all_pass")
    assert strict([prompt] * 2, completions[:2], tests=[tests] * 2, entry_point=["add"] * 2) == [1.0, 0.0]


def test_insecure_code_is_penalised_by_the_configured_weight(judge: LocalJudge) -> None:
    code = "import pickle\ndef load(data):\n    return pickle.loads(data)\n"
    tests = "import pickle\nassert load(pickle.dumps(3)) == 3\n"
    prompt, reply = [{"role": "user", "content": "load"}], [{"role": "assistant", "content": code}]
    plain = JudgeReward(judge)([prompt], [reply], tests=[tests])
    weighted = JudgeReward(judge, security_weight=0.25)
    assert plain == [1.0]
    assert weighted([prompt], [reply], tests=[tests]) == [0.75]  # one medium finding (B301); B403 is low
    assert {f["test_id"] for f in weighted.last[0]["security"]} >= {"B301", "B403"}


@pytest.mark.slow
@pytest.mark.model
def test_grpo_trains_the_embedded_model_with_judge_rewards(model_home: Path, tmp_path: Path) -> None:
    settings = load_settings(paths={"home": model_home}, llm={"torch_threads": 1})
    tasks = load_suite("humaneval-train", settings).select(ids=TASKS).tasks
    data = tmp_path / "tasks.jsonl"
    rows = [{**row, "prompt": row["prompt"] + "    return "} for row in task_rows(tasks)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = TrainSpec(
        method="grpo",
        data=data,
        out=tmp_path / "out",
        steps=2,
        batch_size=1,
        seed=3,
        options={"num_generations": 4, "max_completion_length": 16, "reward": "pass_rate", "temperature": 1.2},
    )
    local = LocalJudge(settings)
    try:
        result = train_grpo(spec, settings, judge=local)
    finally:
        local.close()
    metrics = result.metrics
    assert result.steps == 2 and metrics["reward_calls"] == 2
    assert len(metrics["rewards"]) == 2 and all(0.0 <= r <= 1.0 for r in metrics["rewards"])
    assert len(metrics["losses"]) == 2 and any(loss != 0.0 for loss in metrics["losses"]), metrics
    assert result.model_id is not None and (Path(result.path) / "config.json").exists()


def test_grpo_is_a_training_method_and_takes_a_suite_as_data(tmp_path: Path) -> None:
    from veriloop.cli.train_cmd import METHOD_NAMES, _suite_rows
    from veriloop.errors import ConfigError
    from veriloop.store.exports import load_rows
    from veriloop.training import METHODS, trainer_for

    assert "grpo" in METHODS and "grpo" in METHOD_NAMES and trainer_for("grpo", None, None) is train_grpo
    settings = load_settings(paths={"home": tmp_path})
    rows = load_rows(_suite_rows(settings, Path("humaneval-train")))
    assert len(rows) == 82 and rows[0]["task_id"] == "HumanEval/82" and "def check" in rows[0]["tests"]
    bad = tmp_path / "rows.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n")
    spec = TrainSpec(method="grpo", data=bad, out=tmp_path / "out")
    with pytest.raises(ConfigError, match="GRPO rows need a prompt plus tests"):
        train_grpo(spec, settings)


@pytest.mark.model
def test_a_trained_policy_stops_generating_at_every_end_of_text_token(model_home: Path, tmp_path: Path) -> None:
    """GRPO's completions end where the embedded backend's samples end, `<|endoftext|>` included."""
    from veriloop.training.trl_trainers import _load_causal_lm

    spec = TrainSpec(method="grpo", data=tmp_path, out=tmp_path / "out")
    model, tokenizer = _load_causal_lm(spec, load_settings(paths={"home": model_home}))
    ends = model.generation_config.eos_token_id
    assert {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")} <= set(ends)
