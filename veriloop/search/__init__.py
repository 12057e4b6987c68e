"""Search over candidate programs, generic over any verifier score: Treefinement (REBASE), breadth, beam,
best-of-N and linear refinement, with budget accounting, stored and resumable trees, and a networkx view."""

from veriloop.search.budget import Budget, Spend
from veriloop.search.engine import (
    SEARCHES,
    Evaluation,
    Problem,
    SearchConfig,
    SearchKind,
    SearchOutcome,
    TreeSearch,
    run_search,
)
from veriloop.search.score import alphaverus_score, fraction_passed, resample, scorer_for, softmax

__all__ = [
    "SEARCHES",
    "Budget",
    "Evaluation",
    "Problem",
    "SearchConfig",
    "SearchKind",
    "SearchOutcome",
    "Spend",
    "TreeSearch",
    "alphaverus_score",
    "fraction_passed",
    "resample",
    "run_search",
    "scorer_for",
    "softmax",
]
