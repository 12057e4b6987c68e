"""Node scores and frontier resampling, as AlphaVerus's `evaluate_node` and `rebase.py` compute them.

Score (`evaluate_node` in `cmu-l3/alphaverus`; arXiv 2412.06176), checks in order:
1. a rule filter fired (the spec guard rejected the program): -1;
2. nothing verified and nothing failed (did not parse), or more than `max_verified` verified (the
   parse bug guard of the original): -1;
3. no errors: 1, which here is the `verified` status (the guard's triviality probes already turned trivial
   proofs into rejections; a `failed` verdict with no error counted is discarded);
4. otherwise `v/(v+e) - (0.1*n_err + 0.04*n_note)/(v+e)`, where `n_err` leaves out Verus's final
   `aborting due to N previous errors` block.

Resampling: children of the next depth are drawn *with replacement* from all surviving nodes of the
depth (score >= 0) with probabilities softmax(weight / T), T = 0.1; REBASE weighs by score, the
breadth baseline weighs every survivor 1, the beam baseline gives +1000 to the top k and -1000 to
the rest (`inference/rebase.py` MODE 0/1/2).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Literal

from veriloop.records import VerifyResult, VerifyStatus

DISCARD = -1.0
NODE_TEMPERATURE = 0.1
MAX_VERIFIED = 20
ERROR_PENALTY = 0.1
NOTE_PENALTY = 0.04

Scorer = Callable[[VerifyResult], float]
Weighting = Literal["rebase", "uniform", "top_k"]


def _counts(result: VerifyResult) -> tuple[int, int]:
    errors = [d for d in result.diagnostics if d.severity == "error"]
    n_err = sum(not d.message.startswith("aborting due to") for d in errors)
    n_note = sum(d.severity == "note" for d in result.diagnostics)
    return n_err, n_note


def alphaverus_score(result: VerifyResult, *, max_verified: int | None = MAX_VERIFIED) -> float:
    """The node score of a formal verifier's result (Dafny, Nagini, Verus); -1 means discard."""
    if result.status is VerifyStatus.VERIFIED:
        return 1.0
    if result.status is not VerifyStatus.FAILED:
        return DISCARD  # rejected by the guard, did not parse, timed out, tool broken
    v, e = result.verified, result.errors
    if v + e == 0:
        return DISCARD
    if max_verified is not None and v > max_verified:
        return DISCARD
    if e == 0:
        return DISCARD  # the tool said failed yet counted no error: a verdict we cannot trust either way
    n_err, n_note = _counts(result)
    return v / (v + e) - (ERROR_PENALTY * n_err + NOTE_PENALTY * n_note) / (v + e)


def fraction_passed(result: VerifyResult) -> float:
    """The node score of the `tests` verifier: the share of tests passed; -1 when nothing ran."""
    if result.status is VerifyStatus.VERIFIED:
        return 1.0
    if result.status is not VerifyStatus.FAILED or result.verified + result.errors == 0:
        return DISCARD
    return result.verified / (result.verified + result.errors)


def scorer_for(verifier: str) -> Scorer:
    """Fraction of tests passed for the `tests` verifier, AlphaVerus's score for formal ones."""
    return fraction_passed if verifier == "tests" else alphaverus_score


def softmax(values: Sequence[float], temperature: float = NODE_TEMPERATURE) -> list[float]:
    """Numerically stable softmax(values / temperature)."""
    if not values:
        return []
    scaled = [value / temperature for value in values]
    top = max(scaled)
    exps = [math.exp(value - top) for value in scaled]
    total = sum(exps)
    return [value / total for value in exps]


def weights(scores: Sequence[float], weighting: Weighting = "rebase", top_k: int = 4) -> list[float]:
    """What the softmax sees for each survivor: its score, 1, or +-1000 by top-k rank."""
    if weighting == "rebase":
        return list(scores)
    if weighting == "uniform":
        return [1.0] * len(scores)
    ranked = sorted(range(len(scores)), key=lambda index: -scores[index])[:top_k]
    chosen = set(ranked)
    return [1000.0 if index in chosen else -1000.0 for index in range(len(scores))]


def resample(
    scores: Sequence[float],
    k: int,
    rng: random.Random,
    *,
    temperature: float = NODE_TEMPERATURE,
    weighting: Weighting = "rebase",
    top_k: int = 4,
) -> list[int]:
    """Indices (into `scores`) of the next frontier: k draws with replacement, sorted; survivors only."""
    survivors = [index for index, score in enumerate(scores) if score >= 0]
    if not survivors:
        return []
    probabilities = softmax(weights([scores[i] for i in survivors], weighting, top_k), temperature)
    return sorted(rng.choices(survivors, weights=probabilities, k=k))
