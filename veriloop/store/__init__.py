"""The trajectory store: runs, tasks, attempts, search-tree nodes, LLM calls, executions, verifications,
exemplar pools and registered checkpoints, in SQLite (default) or PostgreSQL.

The API (`TrajectoryStore`) takes and returns `veriloop.records`; the ORM stays inside this
package. Migrations ship in `migrations/` and run from code; see `migrate` for when a database is
created automatically and when `veriloop db upgrade` is required.
"""

from veriloop.store.migrate import RevisionState, UpgradeResult, database_state, head_revision, upgrade_database
from veriloop.store.summary import RunSummary, TaskTreeSummary, Timings, TokenCounts
from veriloop.store.trajectory import TrajectoryStore

__all__ = [
    "RevisionState",
    "RunSummary",
    "TaskTreeSummary",
    "Timings",
    "TokenCounts",
    "TrajectoryStore",
    "UpgradeResult",
    "database_state",
    "head_revision",
    "upgrade_database",
]
