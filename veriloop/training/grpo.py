"""GRPO on TRL's `GRPOTrainer` with veriloop's judge as the reward (`veriloop train grpo`).

Rows are tasks: `prompt` plus what judges it (`tests` + `entry_point`, `task_id` + `suite`, or `spec` +
`verifier`); a suite's tasks are written as such rows by `task_rows`. Each step samples
`num_generations` completions per prompt, the judge scores them (`JudgeReward`), and GRPO moves the
policy towards the better ones of each group. Options (`--option KEY=VALUE`): `num_generations` (4),
`max_completion_length` (64), `temperature` (1.0), `beta` (0.0, KL weight), `reward` (all_pass or
pass_rate), `partial_credit`, `security_weight`, `judge_url` + `judge_token` (a remote `veriloop serve`;
default: the judge in this process).

TRL 1.16 on the CPU: `use_cpu=True` and no bf16 unless asked, no gradient checkpointing; the
generation batch is `batch_size x num_generations` completions (one generation per optimiser step).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Task
from veriloop.training.common import (
    Progress,
    TrainResult,
    TrainSpec,
    loss_summary,
    read_rows,
    save_and_register,
    seed_everything,
    with_lora,
)
from veriloop.training.configs import GRPOConfig
from veriloop.training.rewards import JudgeFn, LocalJudge, judge_reward
from veriloop.training.trl_trainers import _callback, _common_args, _dataset, _load_causal_lm, _quiet

JUDGED_BY = (("tests",), ("task_id",), ("spec", "verifier"))


def task_rows(tasks: Iterable[Task]) -> list[dict[str, Any]]:
    """GRPO rows for tasks with tests: the prompt (a code prefix) and the checks the judge runs."""
    return [
        {
            "prompt": task.prompt,
            "tests": task.tests,
            "entry_point": task.entry_point or "",
            "task_id": task.id,
            "language": task.language,
        }
        for task in tasks
        if task.tests.strip()
    ]


def judge_for(spec: TrainSpec, settings: Settings) -> tuple[JudgeFn, Any]:
    """The remote judge (`judge_url`) or one in this process; the second item closes it."""
    options = GRPOConfig.of(spec)
    if options.judge_url:
        from veriloop.judge.client import JudgeClient

        client = JudgeClient(options.judge_url, token=options.judge_token)
        return client, client.close
    local = LocalJudge(settings)
    return local, local.close


def _check_rows(rows: list[dict[str, Any]], spec: TrainSpec) -> None:
    first = rows[0]
    if not any(all(first.get(column) for column in group) for group in JUDGED_BY):
        raise ConfigError(
            f"dataset {spec.data}: GRPO rows need a prompt plus tests, task_id, or spec and verifier "
            f"(it has: {', '.join(first)})"
        )


def train_grpo(
    spec: TrainSpec, settings: Settings, progress: Progress | None = None, judge: JudgeFn | None = None
) -> TrainResult:
    """GRPO with the judge's reward; `judge` overrides the one the options name."""
    trl = importlib.import_module("trl")
    from veriloop.store.exports import content_hash

    rows = read_rows(spec, ("prompt",))
    _check_rows(rows, spec)
    options = GRPOConfig.of(spec)  # num_generations >= 2: advantages are relative to the group
    generations = options.num_generations
    closer = None
    if judge is None:
        judge, closer = judge_for(spec, settings)
    reward = judge_reward(  # async where TRL awaits it (1.16 does)
        judge,
        mode=options.reward,
        partial_credit=options.partial_credit,
        security_weight=options.security_weight,
    )
    try:
        seed_everything(spec.seed)
        model, tokenizer = _load_causal_lm(spec, settings)
        model = with_lora(model, spec, "CAUSAL_LM")
        common = _common_args(spec, spec.learning_rate or (1e-5 if spec.lora else 1e-6))
        common.pop("max_length")
        common["per_device_train_batch_size"] = spec.batch_size * generations
        config = trl.GRPOConfig(
            **common,
            num_generations=generations,
            max_completion_length=options.max_completion_length,
            temperature=options.temperature,
            beta=options.beta,
            steps_per_generation=1,
            log_completions=False,
        )
        trainer = _quiet(
            trl.GRPOTrainer(
                model=model,
                reward_funcs=[reward],
                args=config,
                train_dataset=_dataset(rows),
                processing_class=tokenizer,
                callbacks=[_callback(progress, spec.steps)],
            )
        )
        trainer.train()
    finally:
        if closer is not None:
            closer()
    history = trainer.state.log_history
    losses = [float(entry["loss"]) for entry in history if "loss" in entry]
    rewards = [float(entry["reward"]) for entry in history if "reward" in entry]
    metrics: dict[str, Any] = {
        **loss_summary(losses),
        "losses": losses,
        "rewards": rewards,
        "reward_calls": reward.calls,
        "num_generations": generations,
        "reward_mode": reward.options["mode"],
    }
    return save_and_register(
        spec,
        settings,
        trainer.model,
        tokenizer,
        rows_hash=content_hash([[row.get(c) for c in ("prompt", "tests", "task_id", "spec")] for row in rows]),
        steps=int(trainer.state.global_step),
        metrics=metrics,
    )
