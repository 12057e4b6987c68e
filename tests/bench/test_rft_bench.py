"""`veriloop bench rft`: which rollouts become SFT rows, and the round's wiring through the real judge.

A scripted model writes the rollouts so that the verdicts are known; the real sandbox judges them, and the SFT
step is caught at `training.train` (SFT itself trains for real in tests/training). The bench end to end on the
real model: `test_rft_round_on_the_embedded_model`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench.toys import add_task
from veriloop.bench import _held_out as held_out
from veriloop.bench import rft
from veriloop.config import load_settings
from veriloop.records import Task
from veriloop.testing import ScriptedBackend
from veriloop.training.common import TrainResult
from veriloop.training.rewards import JudgeReward, LocalJudge, through_stop


def test_kept_rows_are_distinct_passing_completions_through_their_stop_capped_per_prompt() -> None:
    judged = [
        [
            held_out.Judged("    return a + b\n\n\ndef main():\n    pass\n", 1.0),
            held_out.Judged("    return a + b\n\n\nif __name__ == '__main__':\n", 1.0),  # the same code
            held_out.Judged("    return a * b\n\ndef f", 0.5),  # passes one assert of two
            held_out.Judged("    return b + a", 1.0),  # ended by the model: kept whole
            held_out.Judged("    return sum((a, b))\n\ndef g", 1.0),  # over the cap of 2
        ],
        [
            held_out.Judged("    pass\n", 0.0),
            held_out.Judged("\ndef add1(a, b):", 1.0),  # no code before its stop
            held_out.Judged("    return a + b\n    # and on to the token limit", 1.0, ended=False),
        ],
    ]
    rows = rft.kept_rows([add_task(0), add_task(1)], judged, keep=2)
    assert [(row["task_id"], row["completion"]) for row in rows] == [
        ("toy/0", "    return a + b\n\n\ndef "),
        ("toy/0", "    return b + a"),
    ]
    assert all(row["prompt"] == "def add0(a, b):\n" for row in rows)


def test_a_completion_runs_through_its_first_stop_sequence() -> None:
    assert through_stop("    x = 1\n# note\ndef f():") == "    x = 1\n#"
    assert through_stop("    return 1\n\nif __name__ == '__main__':") == "    return 1\n\nif __name__"
    assert through_stop("    return 1\n") is None


@pytest.mark.parametrize(
    "argv",
    [["--rollouts", "0"], ["--keep-per-prompt", "0"], ["--epochs", "0"], ["--batch-size", "0"], ["--samples", "0"]],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        rft.parse(argv)
    assert raised.value.code == 2


def test_a_round_trains_sft_on_what_the_judge_passed(
    judge: LocalJudge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    replies = [
        "    return a + b\n\n\ndef main():\n",
        "    return a - b\n\n\ndef main():\n",
        "    return a + b\n\nprint(add1(1, 2))\n",
        "    return (\n",
        "    return a + b\n\ndef extra():\n",
        "    return a * b\n",
    ]
    backend = ScriptedBackend(replies)
    monkeypatch.setattr("veriloop.llm.get_backend", lambda settings: backend)
    specs: list[Any] = []

    def fake_train(spec: Any, settings: Any, progress: Any = None) -> TrainResult:
        specs.append(spec)
        rows = [json.loads(line) for line in spec.data.read_text().splitlines()]
        return TrainResult("sft", "sft-model", str(spec.out), "base", "hash", spec.steps, {"rows_seen": len(rows)})

    monkeypatch.setattr("veriloop.training.train", fake_train)
    args = rft.parse(["--rollouts", "2", "--keep-per-prompt", "1", "--epochs", "3", "--batch-size", "2", "--seed", "5"])
    settings = load_settings(paths={"home": tmp_path})
    tasks = [add_task(0), add_task(1), add_task(2)]
    result = rft.train(settings, tasks, args, tmp_path, JudgeReward(judge, mode="pass_rate"))
    # toy/0: a + b passes; toy/1: a + b passes, a syntax error fails; toy/2: a + b passes (the judge cuts the
    # extra function), a * b fails
    assert result["passing_rollouts"] == 3 and result["prompts_with_a_pass"] == 3 and result["rows"] == 3
    [spec] = specs
    assert spec.method == "sft" and spec.lora and spec.steps == 5  # ceil(3 rows x 3 epochs / 2)
    assert not spec.bf16  # autocast only when asked: it is slower on CPUs without AVX512-BF16
    rows = [json.loads(line) for line in spec.data.read_text().splitlines()]
    assert [row["task_id"] for row in rows] == ["toy/0", "toy/1", "toy/2"]
    # each row runs through the stop sequence where the judge stopped reading
    assert [row["completion"] for row in rows] == [
        "    return a + b\n\n\ndef ",
        "    return a + b\n\nprint(",
        "    return a + b\n\ndef ",
    ]
    assert all(params.stop == [] for _, params in backend.requests)  # rollouts sample past the stop
    assert [params.seed for _, params in backend.requests] == [100_005, 100_006, 100_007]
    assert result["model_id"] == "sft-model"


def test_a_round_with_no_passing_rollout_says_so(
    judge: LocalJudge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("veriloop.llm.get_backend", lambda settings: ScriptedBackend(["    return 0\n"]))
    args = rft.parse(["--rollouts", "2"])
    with pytest.raises(RuntimeError, match="nothing to train on"):
        rft.train(load_settings(paths={"home": tmp_path}), [add_task(0)], args, tmp_path, JudgeReward(judge))


@pytest.mark.slow
@pytest.mark.model
def test_rft_round_on_the_embedded_model(scratch_model_home: Path, judge: LocalJudge, tmp_path: Path) -> None:
    """The round on the real model: its own rollouts, judged in the sandbox, train a LoRA SFT checkpoint.

    The prompt is led as far as `return a`: SmolLM2-135M writes `0` after a bare `return `.
    """
    task = Task(
        id="toy/add",
        suite="toy",
        prompt='def add(a, b):\n    """Return the sum of a and b.\n    >>> add(1, 2)\n    3\n    """\n    return a',
        tests="assert add(1, 2) == 3\nassert add(-1, 1) == 0\n",
        entry_point="add",
    )
    settings = load_settings(paths={"home": scratch_model_home}, llm={"torch_threads": 1})
    args = rft.parse(
        ["--rollouts", "4", "--max-tokens", "24", "--temperature", "0.2", "--epochs", "1", "--batch-size", "2"]
    )
    result = rft.train(settings, [task], args, tmp_path, JudgeReward(judge, mode="pass_rate"))
    assert result["rollouts"] == 4 and 1 <= result["passing_rollouts"] <= 4
    assert 1 <= result["rows"] <= 4 and result["steps"] == -(-result["rows"] // 2)
    rows = [json.loads(line) for line in (tmp_path / "sft-rows.jsonl").read_text().splitlines()]
    assert all(row["prompt"] == task.prompt and row["completion"].strip() for row in rows)
    assert result["model_id"] is not None and result["metrics"]["loss_first"] > 0.0, result["metrics"]


def test_bf16_autocast_is_passed_to_the_sft_step(
    judge: LocalJudge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    specs: list[Any] = []
    monkeypatch.setattr("veriloop.llm.get_backend", lambda settings: ScriptedBackend(["    return a + b\n"]))
    monkeypatch.setattr(
        "veriloop.training.train",
        lambda spec, settings, progress=None: specs.append(spec) or TrainResult("sft", "m", "", "base", "h", 1, {}),
    )
    args = rft.parse(["--rollouts", "1", "--bf16"])
    rft.train(load_settings(paths={"home": tmp_path}), [add_task(0)], args, tmp_path, JudgeReward(judge))
    assert [spec.bf16 for spec in specs] == [True]
