"""AlphaVerus's options and the graph's state (plain JSON values, so LangGraph can checkpoint them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict

from pydantic import Field

from veriloop.agents.base import AgentOptions
from veriloop.search.budget import Spend
from veriloop.search.engine import SearchKind
from veriloop.verifiers.target import VerifierChoice as Target


class AlphaVerusOptions(AgentOptions):
    """AlphaVerus's knobs; defaults are the paper's code scaled to the embedded model on two cores."""

    source: Literal["dafny"] = Field("dafny", description="Language of the source programs.")
    target: Target = Field(
        None, description="Target verifier, any registered one (dafny, nagini, verus, tests); None: the tasks' own."
    )
    mode: Literal["auto", "translate", "inference"] = Field(
        "auto", description="translate: the self-improving loop; inference: Treefinement from the task's prompt."
    )
    iterations: int = Field(1, ge=1, le=50, description="Self-improvement rounds (exploration, tree, filter).")
    explore_samples: int = Field(8, ge=1, le=256, description="Translations sampled per program per round.")
    width: int = Field(8, ge=1, le=256, description="Treefinement width (nodes per depth).")
    depth: int = Field(2, ge=1, le=32, description="Treefinement depth.")
    search: SearchKind = Field("treefinement", description="Tree phase search: treefinement, breadth, beam, ...")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="Sampling temperature of generation.")
    node_temperature: float = Field(0.1, gt=0.0, description="Softmax temperature over node scores.")
    max_tokens: int = Field(512, ge=16, le=8192, description="New tokens per program sample.")
    history: int = Field(1, ge=1, le=10, description="Refinement turns kept in a node's prompt history.")
    few_shot: int = Field(4, ge=0, le=100, description="Most exemplars of each pool shown in one prompt.")
    exploit_samples: int = Field(4, ge=0, le=64, description="Trivial bodies the exploit model proposes; 0 = off.")
    judge_votes: int = Field(4, ge=0, le=32, description="Equivalence judge samples; 0 = off.")
    max_candidates: int = Field(6, ge=1, le=32, description="Solved candidates tried by the filters per program.")
    verify_concurrency: int = Field(2, ge=1, le=64, description="Verifier runs in flight at once.")
    verifier_seconds: float | None = Field(
        None, gt=0, description="Verifier seconds one search may spend (besides its width x depth LLM calls)."
    )
    seed: int = Field(0, description="Seed of exemplar sampling and frontier draws.")
    prune_steps: int = Field(
        8,
        ge=0,
        le=64,
        description="Hints infill: after a search that did not verify, Houdini pruning of the union of the model's "
        "hint candidates by the verifier's diagnostics (no LLM call), at most this many verifier runs; 0 = off.",
    )
    grow_pools: bool = Field(
        True,
        description="Inference on hints tasks: each verified hint set joins the solved pool, so later prompts (this "
        "run's and later runs') show it as a worked example; off: the pools are only read.",
    )
    infill: Literal["hints", "whole"] = Field(
        "hints",
        description="Hints tasks (DafnyBench hints): hints = the model writes only loop invariants and decreases "
        "clauses under a grammar, spliced into the task's program; whole = it writes the whole program (the paper).",
    )


def merge(left: dict[str, Any], right: dict[str, Any] | None) -> dict[str, Any]:
    """Reducer of per-task maps: each task's branch writes its own keys; `None` empties the map (a new round)."""
    return {} if right is None else {**left, **right}


def add_counts(left: dict[str, int], right: dict[str, int]) -> dict[str, int]:
    """Reducer of counters: every branch adds its own."""
    return {key: left.get(key, 0) + right.get(key, 0) for key in {**left, **right}}


def add_spend(left: dict[str, dict[str, float]], right: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Reducer of per-task budgets: a branch's spend adds to what its task spent before."""
    total = dict(left)
    for task_id, extra in right.items():
        spent = Spend.from_dict(total.get(task_id, {}))
        spent.add(Spend.from_dict(extra))
        total[task_id] = spent.as_dict()
    return total


class SuiteState(TypedDict, total=False):
    """What the loop carries from phase to phase and round to round (node ids, not nodes).

    Each phase fans out over the tasks (one branch per task, `Send`); the branches write only their own
    task's keys and the reducers join them.
    """

    iteration: int
    iterations: int
    task_ids: list[str]
    candidates: Annotated[dict[str, list[str]], merge]
    """Solved (pre-filter) candidate node ids of this round, per task."""
    partial: Annotated[dict[str, str], merge]
    """Best partially verified node of this round, per unsolved task."""
    accepted: Annotated[dict[str, str], merge]
    """Task -> the node that passed every filter (a task is solved once)."""
    best: Annotated[dict[str, str], merge]
    """Task -> the best-scoring node seen so far (what an unsolved task's attempt points at)."""
    triplets: Annotated[dict[str, list[dict[str, Any]]], merge]
    """Error triplets of this round's tree successes, kept only when their fix survives the filters."""
    rejections: Annotated[dict[str, int], add_counts]
    """Candidates rejected per filter: exploit, judge."""
    spend: Annotated[dict[str, dict[str, float]], add_spend]
    """Budget spent per task (LLM calls, tokens, verifier calls and seconds, wall seconds)."""


class Branch(TypedDict):
    """One task's share of a phase, sent to that phase's node (`Send`)."""

    branch_task: str
    branch_round: int
    branch_best: str | None
    """The task's best node so far, which this branch's outcome may replace."""
    branch_nodes: list[str]
    """The nodes the phase starts from: tree, the partial node; filter, the solved candidates."""
