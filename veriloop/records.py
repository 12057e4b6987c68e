"""The shared vocabulary: every layer passes these records, and the store persists them.

Agents produce them, the store keeps them, exports and trainers read them back. Later
features add fields here (with defaults, so stored rows stay readable); no module keeps a
private copy of these shapes.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def new_id() -> str:
    """A fresh opaque identifier (32 hex characters)."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    """Timezone-aware now, so stored times compare across machines."""
    return datetime.now(UTC)


class Record(BaseModel):
    """Base for all records: strict field names, JSON round-trips losslessly."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --------------------------------------------------------------------------- inference


class Message(Record):
    """One chat turn."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str


Prompt = str | list[Message]
"""A raw text prompt (no chat template) or a conversation (rendered with the model's template)."""


ConstraintKind = Literal["regex", "json_schema", "lark", "gbnf"]


class Constraint(Record):
    """A structure every sample must have: a regular expression, a JSON Schema (as JSON text), or a
    context-free grammar in Lark or GBNF. Backends enforce it while decoding (`veriloop.llm.constraints`)."""

    kind: ConstraintKind
    value: str = Field(min_length=1, description="The pattern, the schema's JSON text, or the grammar.")


class SamplingParams(Record):
    """How to sample; the same object is stored with every completion it produced."""

    n: int = Field(1, ge=1, le=256, description="Samples per request.")
    temperature: float = Field(0.0, ge=0.0, le=5.0, description="0 means greedy decoding.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_tokens: int = Field(256, ge=1, le=32768, description="New tokens per sample at most.")
    stop: list[str] = Field(default_factory=list, description="Strings that end a sample; not included.")
    seed: int | None = Field(None, description="Seed for reproducible sampling; None draws one.")
    logprobs: bool = Field(False, description="Return the log-probability of each sampled token.")
    constraint: Constraint | None = Field(None, description="Structure every sample must match; None: free text.")


class Usage(Record):
    """Token counts of one completion (prompt tokens are counted once per request)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


FinishReason = Literal["stop", "length", "error"]


class Completion(Record):
    """One sample from a backend, with everything needed to train on it later."""

    text: str
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: FinishReason = "stop"
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    params: SamplingParams = Field(default_factory=SamplingParams)
    latency_s: float = 0.0


# --------------------------------------------------------------------------- tasks and candidates


class Task(Record):
    """One problem of a suite: what to write, in which language, and how it is checked."""

    id: str
    suite: str
    prompt: str = Field(description="What the model sees: a description, a signature or a spec prefix.")
    language: str = "python"
    entry_point: str | None = Field(None, description="Function under test, where there is one.")
    tests: str = Field("", description="Test code or script run against the candidate.")
    public_tests: str | None = Field(None, description="Tests the agent may see as feedback.")
    spec: str | None = Field(None, description="Formal specification the candidate must keep.")
    reference: str | None = Field(None, description="A known-good solution, when the suite has one.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class Candidate(Record):
    """A program proposed for a task."""

    task_id: str
    code: str
    language: str = "python"
    node_id: str | None = None


# --------------------------------------------------------------------------- execution


class ExecStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    INFRA_ERROR = "infra_error"


class TestOutcome(Record):
    """The verdict on one test case."""

    __test__ = False  # not a pytest class

    name: str
    passed: bool
    message: str = ""


class ExecResult(Record):
    """What running a program (usually with its tests) did."""

    status: ExecStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float | None = None
    max_rss_mb: float | None = None
    sandbox: str = ""
    sandbox_version: str = ""
    tests: list[TestOutcome] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status is ExecStatus.PASSED


# --------------------------------------------------------------------------- verification


class VerifyStatus(StrEnum):
    VERIFIED = "verified"
    FAILED = "failed"
    SYNTAX_ERROR = "syntax_error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    INFRA_ERROR = "infra_error"


class Diagnostic(Record):
    """One message of a verifier, pinned to a source position where the tool gives one."""

    severity: Literal["error", "warning", "note"] = "error"
    kind: str = Field("other", alias="class", description="postcondition, invariant, syntax, ...")
    message: str
    line: int | None = None
    column: int | None = None
    file: str | None = None


class VerifyResult(Record):
    """A verifier's structured verdict on a candidate."""

    status: VerifyStatus
    verified: int = 0
    errors: int = 0
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    score: float = 0.0
    tool: str = ""
    version: str = ""
    duration_s: float = 0.0
    cache_hit: bool = False
    reason: str | None = None
    cpu_s: float | None = Field(None, description="CPU seconds of the tool run, where the kernel reported them.")
    max_rss_mb: float | None = Field(None, description="Peak memory of the tool run, where reported.")


# --------------------------------------------------------------------------- trajectories


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Run(Record):
    """One invocation of an agent over a suite."""

    id: str = Field(default_factory=new_id)
    agent: str
    suite: str
    model: str
    status: RunStatus = RunStatus.PENDING
    settings: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    error: str | None = None


STEP_KEY = "turn"
"""The one name of a node's step counter in `Node.metadata` for every method (μCode's and F2STrans's turn,
AlphaVerus's self-improvement iteration, ReVISE's refinement round); runs stored before it was unified may
carry `iteration` or `round` instead, which readers still accept (`store.figures.turn_of`)."""


class Node(Record):
    """One step of an agent's tree for one task: a prompt, what came back, and how it scored."""

    id: str = Field(default_factory=new_id)
    run_id: str
    task_id: str
    parent_id: str | None = None
    depth: int = 0
    role: str = Field("generate", description="generate, refine, verify, select, ...")
    messages: list[Message] = Field(default_factory=list)
    completion: Completion | None = None
    code: str | None = None
    exec_result: ExecResult | None = None
    verify_result: VerifyResult | None = None
    score: float | None = None
    created_at: datetime = Field(default_factory=utcnow)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def child(self, role: str, **fields: Any) -> Node:
        """A new node one level below this one, in the same run and task (a refinement, a critique)."""
        return Node(
            run_id=self.run_id, task_id=self.task_id, parent_id=self.id, depth=self.depth + 1, role=role, **fields
        )


class Attempt(Record):
    """The outcome of one task within a run: the agent's final answer and its cost."""

    id: str = Field(default_factory=new_id)
    run_id: str
    task_id: str
    status: Literal["pending", "running", "passed", "failed", "error"] = "pending"
    best_node_id: str | None = None
    score: float | None = None
    tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    budget: dict[str, float] = Field(
        default_factory=dict, description="Search cost: llm_calls, tokens, verifier_calls, verifier_s, wall_s."
    )


class LLMCall(Record):
    """One backend call kept on its own (a node's completion is stored the same way, linked to the node)."""

    id: str = Field(default_factory=new_id)
    run_id: str | None = None
    node_id: str | None = None
    task_id: str | None = None
    prompt: Prompt = Field(default_factory=list, description="Raw text or the conversation sent.")
    completion: Completion
    created_at: datetime = Field(default_factory=utcnow)


# --------------------------------------------------------------------------- self-improvement and checkpoints


class Exemplar(Record):
    """An item of a self-improvement pool (a verified program, a critique, a translation pair, ...)."""

    id: str = Field(default_factory=new_id)
    kind: str = Field(description="Pool name: proof, critique, translation, ...")
    language: str = "python"
    payload: dict[str, Any] = Field(default_factory=dict)
    iteration: int = Field(0, ge=0, description="Self-improvement round that produced it.")
    run_id: str | None = None
    task_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class RegisteredModel(Record):
    """A trained checkpoint the backends can load as `checkpoint:ID`."""

    id: str = Field(default_factory=new_id)
    base: str = Field(description="Model it was trained from.")
    method: str = Field(description="Training method: sft, dpo, rm, ...")
    path: str = Field(description="Folder holding the weights.")
    data_hash: str = Field("", description="Content hash of the training data.")
    metrics: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
