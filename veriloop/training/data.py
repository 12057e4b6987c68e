"""Dataset transforms between an export and a trainer.

Reward-augmented preference data (Zhang et al., ICML 2025): every pair is duplicated with a
score-conditioned goal. The positive copy asks for the chosen response's score and keeps
chosen > rejected; the negative copy asks for the rejected response's score and swaps the two
responses, since under that goal the response that actually has that score is the better match. The
loss stays plain DPO. The reference code's no-system-prompt variant swaps the *user* messages instead
of the responses; here both variants swap the assistant responses.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from veriloop.store.exports import Row

RA_GOAL = (
    "You are an assistant that generates responses for the instruction while implicitly achieving the "
    "following target scores (on a scale of 1-10, where 1 is lowest and 10 is highest):\nOverall score: {score}."
)


def to_scale(score: float, low: float = 1.0, high: float = 10.0) -> float:
    """A 0..1 score (share of tests passed) on the paper's 1..10 scale, to one decimal."""
    return round(low + (high - low) * min(max(score, 0.0), 1.0), 1)


def goal_text(score: float) -> str:
    shown = int(score) if float(score).is_integer() else score
    return RA_GOAL.format(score=shown)


def _with_goal(prompt: Sequence[dict[str, Any]], goal: str, system: bool) -> list[dict[str, Any]]:
    messages = copy.deepcopy(list(prompt))
    if system:
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = goal + "\n\n" + str(messages[0]["content"])
            return messages
        return [{"role": "system", "content": goal}, *messages]
    for message in messages:
        if message["role"] == "user":
            message["content"] = goal + "\n\n" + str(message["content"])
            break
    return messages


def reward_augment(rows: Sequence[Row], *, system: bool = True) -> list[Row]:
    """Twice the pairs: goal = chosen score (kept), goal = rejected score (responses swapped).

    Pairs whose chosen score is below the rejected one are dropped, as in the paper's filter. Scores
    come from the export's `chosen_score`/`rejected_score` (0..1) and are shown on the 1..10 scale.
    """
    positive: list[Row] = []
    negative: list[Row] = []
    for row in rows:
        high, low = float(row["chosen_score"]), float(row["rejected_score"])
        if high < low:
            continue
        keep = dict(row)
        keep["prompt"] = _with_goal(row["prompt"], goal_text(to_scale(high)), system)
        keep["goal_score"], keep["augmented"] = to_scale(high), "positive"
        positive.append(keep)
        swap = dict(row)
        swap["prompt"] = _with_goal(row["prompt"], goal_text(to_scale(low)), system)
        swap["chosen"], swap["rejected"] = row["rejected"], row["chosen"]
        for left, right in (
            ("chosen_token_ids", "rejected_token_ids"),
            ("chosen_score", "rejected_score"),
            ("chosen_node_id", "rejected_node_id"),
        ):
            if left in row and right in row:
                swap[left], swap[right] = row[right], row[left]
        swap["goal_score"], swap["augmented"] = to_scale(low), "negative"
        negative.append(swap)
    return positive + negative
