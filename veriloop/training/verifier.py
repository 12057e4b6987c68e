"""μCode's learned verifier: Bradley-Terry pairs from rollouts, training through `train`, and scoring.

The verifier R(x, y) sees the problem statement and one reply, never the dialogue history
(muCode `convert_multiturn_preference.py`): every intermediate turn of a rollout is a negative
(the episode would have stopped on success), the final turn keeps its label, and per problem with
both classes `per_prompt` random (positive, negative) pairs are drawn with replacement. Training is
`train(TrainSpec(method="rm"))` (Bradley-Terry + L2, `loops.train_reward_model`), so the verifier is a
registered checkpoint like any other and loads back as `checkpoint:ID`.
"""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from veriloop.config import Settings
from veriloop.store.exports import Row
from veriloop.training.common import TrainResult, TrainSpec, encode, load_tokenizer, pad_batch


@dataclass(frozen=True)
class VerifierSample:
    """One reply to one problem with its oracle label; `prompt` is the problem's first user turn only."""

    key: str
    prompt: list[dict[str, str]]
    reply: str
    label: bool


def preference_pairs(samples: Sequence[VerifierSample], per_prompt: int = 32, seed: int = 0) -> list[Row]:
    """(prompt, chosen, rejected) rows: `per_prompt` draws with replacement per problem having both classes."""
    by_key: dict[str, list[VerifierSample]] = defaultdict(list)
    for sample in samples:
        by_key[sample.key].append(sample)
    rng = random.Random(seed)
    rows: list[Row] = []
    for key in sorted(by_key):
        group = by_key[key]
        positives = [sample for sample in group if sample.label]
        negatives = [sample for sample in group if not sample.label]
        if not positives or not negatives:
            continue
        for _ in range(per_prompt):
            chosen, rejected = rng.choice(positives), rng.choice(negatives)
            rows.append(
                {
                    "prompt": chosen.prompt,
                    "chosen": [{"role": "assistant", "content": chosen.reply}],
                    "rejected": [{"role": "assistant", "content": rejected.reply}],
                    "task_id": key,
                }
            )
    return rows


def write_jsonl(rows: Sequence[Row], path: Path) -> Path:
    """Write rows atomically (a rerun never reads half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return path


def train_verifier(
    rows: Sequence[Row],
    out: Path,
    settings: Settings,
    *,
    base: str | None = None,
    steps: int = 40,
    batch_size: int = 2,
    learning_rate: float | None = None,
    max_length: int = 384,
    lora: bool = False,
    seed: int = 0,
    threads: int | None = None,
    bf16: bool = False,
) -> TrainResult:
    """Train and register a Bradley-Terry verifier on `rows`; a rerun with the same `out` resumes."""
    from veriloop.training import train

    data = write_jsonl(rows, out / "pairs.jsonl")
    spec = TrainSpec(
        method="rm",
        data=data,
        out=out / "rm",
        model=base,
        lora=lora,
        steps=steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        seed=seed,
        save_every=max(5, steps // 4),
        options={"loss": "bt", "l2": 1e-3, "eval_fraction": 0.2},
        threads=threads,
        bf16=bf16,
    )
    return train(spec, settings)


class LearnedVerifier:
    """Scores replies to a problem with a trained reward model (one scalar per reply, higher is better).

    Thread-safe: the agent scores from worker threads while the event loop keeps generating.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_length: int = 384, batch_size: int = 8) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self._lock = threading.Lock()

    @classmethod
    def load(cls, spec: str, settings: Settings, *, max_length: int = 384) -> LearnedVerifier:
        """A verifier from a model spec (`checkpoint:ID` or a folder) trained by `train_verifier`."""
        from transformers import AutoModelForSequenceClassification

        from veriloop.errors import BackendError
        from veriloop.llm.embedded import resolve_model, set_torch_threads

        folder = resolve_model(spec, settings)
        set_torch_threads(settings.llm.torch_threads)
        try:
            tokenizer = load_tokenizer(folder)
            model: Any = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, dtype=torch.float32)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise BackendError(f"cannot load the verifier in {folder}: {str(exc).splitlines()[0]}") from None
        model.config.pad_token_id = tokenizer.pad_token_id
        model.eval()
        return cls(model, tokenizer, max_length=max_length)

    def score(self, prompt: list[dict[str, str]], replies: Sequence[str]) -> list[float]:
        """R(x, y) for each reply y to the problem x."""
        items = [encode(self.tokenizer, prompt, reply, self.max_length) for reply in replies]
        scores: list[float] = []
        with self._lock, torch.no_grad():
            for start in range(0, len(items), self.batch_size):
                ids, mask, _ = pad_batch(items[start : start + self.batch_size], self.tokenizer.pad_token_id)
                logits = self.model(input_ids=ids, attention_mask=mask).logits[:, 0]
                scores.extend(float(value) for value in logits)
        return scores
