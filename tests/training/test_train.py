"""Trainers on the embedded model and demo exports: checkpoints registered and served as checkpoint:ID."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from veriloop.cli import main
from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.store import TrajectoryStore
from veriloop.store.exports import load_rows
from veriloop.training import default_out, loops, train, trainer_for, trl_trainers
from veriloop.training.common import TrainSpec, encode
from veriloop.training.losses import IGNORE_INDEX


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    result: dict[str, Any] = json.loads(captured.out)
    return result


def _train_argv(home: Path, method: str, data: Path, base: Path, out: Path, *extra: str) -> list[str]:
    return ["--home", str(home), "train", method, "--data", str(data), "--model", str(base), "--out", str(out), *extra]


# --------------------------------------------------------------------------- fast checks


def test_encode_trains_on_the_completion_only(base_model: Path) -> None:
    from veriloop.training.common import load_tokenizer

    tokenizer = load_tokenizer(base_model)
    prompt = [{"role": "user", "content": "say hi"}]
    item = encode(tokenizer, prompt, [{"role": "assistant", "content": "hi there"}], 256)
    assert len(item.input_ids) == len(item.labels)
    reply = [token for token, label in zip(item.input_ids, item.labels, strict=True) if label != IGNORE_INDEX]
    assert tokenizer.decode(reply).startswith("hi there")
    assert item.labels[0] == IGNORE_INDEX
    long = encode(tokenizer, [{"role": "user", "content": "word " * 500}], "answer " * 500, 64)
    assert len(long.input_ids) == 64 and sum(mask for mask in long.completion_mask) == 32


def test_trainer_dispatch_by_method_loss_and_engine() -> None:
    assert trainer_for("dpo", None, None) is trl_trainers.train_dpo
    assert trainer_for("dpo", "ipo", "loop") is loops.train_preference_loop
    assert trainer_for("dpo", "epa", None) is loops.train_preference_loop
    assert trainer_for("rm", None, None) is loops.train_reward_model
    with pytest.raises(ConfigError, match="plain loop only"):
        trainer_for("dpo", "ns_dpo", "trl")
    with pytest.raises(ConfigError, match="unknown training method"):
        trainer_for("ppo", None, None)


def test_ns_dpo_timesteps_count_days_from_the_oldest_pair() -> None:
    rows = [{"created_at": "2026-01-03T10:00:00+00:00"}, {"created_at": "2026-01-01T09:00:00+00:00"}, {}]
    assert loops.timesteps_from_rows(rows) == [2, 0, 0]


def test_default_out_ignores_steps_so_reruns_resume(demo_settings: Settings, exports: dict[str, Path]) -> None:
    one = TrainSpec(method="dpo", data=exports["preference"], out=Path(), steps=2)
    two = TrainSpec(method="dpo", data=exports["preference"], out=Path(), steps=9)
    other = TrainSpec(method="dpo", data=exports["preference"], out=Path(), options={"loss": "ipo"})
    assert default_out(demo_settings, one) == default_out(demo_settings, two) != default_out(demo_settings, other)


def test_train_refuses_bad_input_in_one_line(
    demo_home: Path, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = ["--home", str(demo_home)]
    assert main([*home, "train", "ppo", "--data", str(exports["preference"])]) != 0
    assert "unknown training method" in capsys.readouterr().err
    assert main([*home, "train", "dpo", "--data", str(tmp_path / "missing.jsonl")]) != 0
    assert "does not exist" in capsys.readouterr().err
    assert main([*home, "train", "prm", "--data", str(exports["preference"]), "--out", str(tmp_path / "o")]) != 0
    assert "lacks column(s) completions, labels" in capsys.readouterr().err
    assert main([*home, "train", "dpo", "--data", str(exports["preference"]), "--option", "oops"]) != 0
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main([*home, "train", "reinforce", "--data", str(exports["preference"]), "--out", str(tmp_path / "r")]) != 0
    assert "needs a Q-RM" in capsys.readouterr().err


def test_train_runs_under_the_spec_threads_and_restores_them(
    demo_settings: Settings, exports: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from veriloop.training import configs

    seen: list[int] = []

    class Trainer:
        def trainer(self) -> Any:
            def run(spec: TrainSpec, settings: Settings, progress: Any) -> Any:
                seen.append(torch.get_num_threads())
                raise RuntimeError("the trainer failed")

            return run

    monkeypatch.setattr(configs, "config_for", lambda spec: Trainer())
    spec = TrainSpec(method="sft", data=exports["sft"], out=Path(), threads=2)
    with pytest.raises(RuntimeError, match="the trainer failed"):
        train(spec, demo_settings)
    with pytest.raises(RuntimeError):
        train(replace(spec, threads=None), demo_settings)
    assert seen == [2, 1] and torch.get_num_threads() == 1


@pytest.mark.slow
def test_dpo_variants_by_name(
    demo_home: Path, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from veriloop.testing import tiny_model_folder

    tiny = tiny_model_folder(tmp_path / "tiny", context=4096)  # byte-level tokens: prompts are long
    rows = load_rows(exports["preference"])
    out = tmp_path / "radpo"
    short = ("--steps", "1", "--max-length", "4096", "--json")
    result = _cli(_train_argv(demo_home, "radpo", exports["preference"], tiny, out, *short), capsys)
    augmented = load_rows(out / "reward-augmented.jsonl")
    kept = [row for row in rows if float(row["chosen_score"]) >= float(row["rejected_score"])]
    assert len(augmented) == 2 * len(kept) and {row["augmented"] for row in augmented} == {"positive", "negative"}
    assert result["method"] == "dpo" and result["steps"] == 1
    nsdpo = _cli(_train_argv(demo_home, "nsdpo", exports["preference"], tiny, tmp_path / "ns", *short), capsys)
    assert nsdpo["metrics"]["loss_type"] == "ns_dpo"
    assert main(["--home", str(demo_home), "train", "ipo", "--loss", "epa", "--data", str(exports["preference"])]) != 0
    assert "ipo is dpo --loss ipo; drop --loss epa" in capsys.readouterr().err


def test_generate_with_an_unknown_checkpoint_is_one_line(demo_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(demo_home), "--model", "checkpoint:feedbeef", "generate", "hi"]) != 0
    assert "not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- acceptance chains


@pytest.mark.slow
@pytest.mark.model
def test_dpo_chain_export_train_register_generate(
    demo_runs: Any, demo_home: Path, base_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo-sized runs -> export preference -> train dpo --steps 10 -> checkpoint in store -> generate answers."""
    data = tmp_path / "pref.jsonl"
    runs = ["--run", demo_runs.good_run, "--run", demo_runs.bad_run]
    _cli(["--home", str(demo_home), "export", "preference", *runs, "--out", str(data), "--json"], capsys)
    result = _cli(
        _train_argv(demo_home, "dpo", data, base_model, tmp_path / "dpo", "--lora", "--steps", "10", "--json"), capsys
    )
    assert result["steps"] == 10 and result["method"] == "dpo"
    metrics = result["metrics"]
    assert metrics["loss_first"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at the start
    assert metrics["loss_end_mean"] < metrics["loss_start_mean"]  # a few steps on the exported pairs lower the loss
    with TrajectoryStore(f"sqlite:///{demo_home / 'veriloop.db'}") as store:
        record = store.get_model(result["model_id"])
    assert record.method == "dpo" and record.base == str(base_model) and record.data_hash == result["data_hash"]
    assert (Path(record.path) / "config.json").is_file()
    served = f"checkpoint:{result['model_id'][:8]}"
    prompt = "Write a Python function that adds two numbers."
    answer = _cli(
        ["--home", str(demo_home), "--model", served, "generate", prompt, "--max-tokens", "24", "--json"], capsys
    )
    assert answer["model"] == served
    assert answer["completions"][0]["text"].strip()
    more = _cli(
        _train_argv(demo_home, "dpo", data, base_model, tmp_path / "dpo", "--lora", "--steps", "11", "--json"), capsys
    )
    assert more["resumed_from"] == 10 and more["steps"] == 11  # TRL picked up its last saved checkpoint


@pytest.mark.slow
@pytest.mark.model
def test_rm_chain_reports_heldout_ranking(
    demo_home: Path, base_model: Path, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _cli(
        _train_argv(demo_home, "rm", exports["preference"], base_model, tmp_path / "rm", "--steps", "4", "--json"),
        capsys,
    )
    metrics = result["metrics"]
    assert metrics["loss_type"] == "bt" and metrics["heldout_rows"] == 1
    assert metrics["heldout_accuracy"] in (0.0, 1.0)  # measured and reported, whatever it came out as
    assert 0.0 <= metrics["train_accuracy"] <= 1.0 and metrics["accuracy_rows"] == 1
    assert json.loads((Path(result["path"]) / "veriloop-head.json").read_text())["kind"] == "reward"
    bce = _cli(
        _train_argv(
            demo_home,
            "rm",
            exports["verifier"],
            base_model,
            tmp_path / "bce",
            "--loss",
            "bce",
            "--steps",
            "1",
            "--max-length",
            "128",
            "--json",
        ),
        capsys,
    )
    assert bce["metrics"]["loss_type"] == "bce" and bce["model_id"]


@pytest.mark.slow
@pytest.mark.model
def test_prm_chain(
    demo_home: Path, base_model: Path, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_rows(exports["prm"])[0]["labels"]
    result = _cli(
        _train_argv(demo_home, "prm", exports["prm"], base_model, tmp_path / "prm", "--lora", "--steps", "3", "--json"),
        capsys,
    )
    assert result["steps"] == 3 and result["model_id"]
    assert 0.0 <= result["metrics"]["heldout_step_accuracy"] <= 1.0


@pytest.mark.slow
@pytest.mark.model
def test_ns_dpo_and_epa_on_the_loop_resume_from_the_last_save(
    demo_settings: Settings, base_model: Path, exports: dict[str, Path], tmp_path: Path
) -> None:
    spec = TrainSpec(
        method="dpo",
        data=exports["preference"],
        out=tmp_path / "ns",
        model=str(base_model),
        lora=True,
        steps=1,
        save_every=1,
        max_length=160,
        options={"loss": "ns_dpo", "gamma": "0.9"},
    )
    first = train(spec, demo_settings)
    assert first.steps == 1 and list((tmp_path / "ns").glob("ref_logps-*.pt"))
    spec.steps = 2
    second = train(spec, demo_settings)
    assert second.steps == 2 and second.resumed_from == 1 and second.metrics["gamma"] == 0.9
    assert second.metrics["loss_first"] == first.metrics["loss_first"]  # step 1 came from the saved state
    epa = train(
        TrainSpec(
            method="dpo",
            data=exports["preference"],
            out=tmp_path / "epa",
            model=str(base_model),
            lora=True,
            steps=1,
            max_length=160,
            options={"loss": "epa"},
        ),
        demo_settings,
    )
    assert epa.metrics["loss_first"] == pytest.approx(0.6931, abs=1e-3)


@pytest.mark.slow
@pytest.mark.model
def test_qrm_then_reinforce_with_its_token_rewards(
    demo_settings: Settings, base_model: Path, exports: dict[str, Path], tmp_path: Path
) -> None:
    qrm = train(
        TrainSpec(
            method="qrm", data=exports["preference"], out=tmp_path / "qrm", model=str(base_model), lora=True, steps=2
        ),
        demo_settings,
    )
    assert qrm.model_id and 0.0 <= qrm.metrics["heldout_accuracy"] <= 1.0
    policy = train(
        TrainSpec(
            method="reinforce",
            data=exports["sft"],
            out=tmp_path / "rl",
            model=str(base_model),
            lora=True,
            steps=1,
            options={"qrm": f"checkpoint:{qrm.model_id}", "gen_tokens": "8"},
        ),
        demo_settings,
    )
    assert policy.steps == 1 and "qrm_score_first" in policy.metrics


@pytest.mark.slow
@pytest.mark.model
def test_sft_on_trl_with_label_smoothing(
    demo_home: Path, base_model: Path, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _cli(
        _train_argv(
            demo_home,
            "sft",
            exports["sft"],
            base_model,
            tmp_path / "sft",
            "--lora",
            "--steps",
            "2",
            "--label-smoothing",
            "0.1",
            "--json",
        ),
        capsys,
    )
    assert result["steps"] == 2 and result["metrics"]["label_smoothing"] == 0.1 and result["model_id"]


@pytest.mark.slow
@pytest.mark.model
def test_a_real_training_runs_under_the_spec_threads(
    demo_settings: Settings, base_model: Path, exports: dict[str, Path], tmp_path: Path
) -> None:
    import torch

    during: list[int] = []
    spec = TrainSpec(
        method="sft", data=exports["sft"], out=tmp_path / "sft", model=str(base_model), lora=True, steps=2, threads=2
    )
    result = train(spec, demo_settings, lambda step, total, metrics: during.append(torch.get_num_threads()))
    assert result.steps == 2 and during and set(during) == {2} and torch.get_num_threads() == 1
    assert result.metrics["torch_threads"] == 2


def test_prm_steps_keep_room_after_a_long_prompt(base_model: Path) -> None:
    from veriloop.training.common import load_tokenizer

    tokenizer = load_tokenizer(base_model)
    item, positions, targets = loops.encode_steps(
        tokenizer, [{"role": "user", "content": "word " * 400}], ["a = 1", "b = 2"], [True, False], 64
    )
    assert len(item.input_ids) <= 64 and targets == [1.0, 0.0]
    assert positions[-1] == len(item.input_ids) - 1 and positions[0] < positions[1]
    assert tokenizer.decode(item.input_ids[positions[0] + 1 : positions[1] + 1]).strip() == "b = 2"
