"""Read-side views of a run (what `veriloop runs show` and the dashboard print), built by aggregate queries."""

from __future__ import annotations

from pydantic import Field

from veriloop.records import Record, Run


class TaskTreeSummary(Record):
    """One task's search tree within a run, and how its attempts ended."""

    task_id: str
    nodes: int = 0
    max_depth: int = 0
    best_score: float | None = None
    attempts: int = 0
    status: str | None = Field(None, description="Status of the latest attempt, if any.")


class TokenCounts(Record):
    prompt: int = 0
    completion: int = 0
    total: int = 0


class Timings(Record):
    """Seconds: the run's wall clock, and the time spent in each kind of call (summed over calls)."""

    wall_s: float | None = None
    llm_s: float = 0.0
    exec_s: float = 0.0
    verify_s: float = 0.0
    attempts_s: float = 0.0


class RunSummary(Record):
    run: Run
    tasks: int = 0
    tasks_passed: int = Field(0, description="Tasks with at least one passed attempt.")
    attempts: int = 0
    attempts_by_status: dict[str, int] = Field(default_factory=dict)
    nodes: int = 0
    llm_calls: int = 0
    executions: dict[str, int] = Field(default_factory=dict, description="Execution count per ExecStatus.")
    verifications: dict[str, int] = Field(default_factory=dict, description="Verification count per VerifyStatus.")
    tokens: TokenCounts = Field(default_factory=TokenCounts)
    timings: Timings = Field(default_factory=Timings)
    pass_rate: float | None = Field(None, description="tasks_passed / tasks; None without tasks.")
    per_task: list[TaskTreeSummary] = Field(default_factory=list)
