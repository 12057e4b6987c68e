"""Initial schema: runs, tasks, attempts, nodes, llm_calls, executions, verifications, exemplars, models.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 15:18:46.064102
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("base", sa.String(length=512), nullable=False),
        sa.Column("method", sa.String(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("data_hash", sa.String(length=128), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
    )
    op.create_index(op.f("ix_models_created_at"), "models", ["created_at"])

    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("agent", sa.String(length=128), nullable=False),
        sa.Column("suite", sa.String(length=255), nullable=False),
        sa.Column("model", sa.String(length=512), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_agent"), "runs", ["agent"])
    op.create_index(op.f("ix_runs_created_at"), "runs", ["created_at"])
    op.create_index(op.f("ix_runs_status"), "runs", ["status"])
    op.create_index(op.f("ix_runs_suite"), "runs", ["suite"])

    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("suite", sa.String(length=255), nullable=False),
        sa.Column("language", sa.String(length=32), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("entry_point", sa.String(length=255), nullable=True),
        sa.Column("tests", sa.Text(), nullable=False),
        sa.Column("public_tests", sa.Text(), nullable=True),
        sa.Column("spec", sa.Text(), nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    op.create_index(op.f("ix_tasks_suite"), "tasks", ["suite"])

    op.create_table(
        "attempts",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("best_node_id", sa.String(length=128), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_attempts_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
    )
    op.create_index("ix_attempts_run_id_task_id", "attempts", ["run_id", "task_id"])

    op.create_table(
        "exemplars",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("language", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=True),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_exemplars_run_id_runs"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exemplars")),
    )
    op.create_index("ix_exemplars_kind_language_iteration", "exemplars", ["kind", "language", "iteration"])
    op.create_index(op.f("ix_exemplars_run_id"), "exemplars", ["run_id"])

    op.create_table(
        "nodes",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("parent_id", sa.String(length=128), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=True),
        sa.Column("code", sa.Text(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["nodes.id"], name=op.f("fk_nodes_parent_id_nodes"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_nodes_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
    )
    op.create_index(op.f("ix_nodes_parent_id"), "nodes", ["parent_id"])
    op.create_index("ix_nodes_run_id_task_id", "nodes", ["run_id", "task_id"])
    op.create_index(op.f("ix_nodes_task_id"), "nodes", ["task_id"])

    op.create_table(
        "executions",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=True),
        sa.Column("node_id", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("signal", sa.Integer(), nullable=True),
        sa.Column("stdout", sa.Text(), nullable=False),
        sa.Column("stderr", sa.Text(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("cpu_s", sa.Float(), nullable=True),
        sa.Column("max_rss_mb", sa.Float(), nullable=True),
        sa.Column("sandbox", sa.String(length=64), nullable=False),
        sa.Column("sandbox_version", sa.String(length=128), nullable=False),
        sa.Column("tests", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_executions_node_id_nodes"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_executions_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_executions")),
        sa.UniqueConstraint("node_id", name=op.f("uq_executions_node_id")),
    )
    op.create_index(op.f("ix_executions_run_id"), "executions", ["run_id"])

    op.create_table(
        "llm_calls",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=True),
        sa.Column("node_id", sa.String(length=128), nullable=True),
        sa.Column("task_id", sa.String(length=255), nullable=True),
        sa.Column("model", sa.String(length=512), nullable=False),
        sa.Column("prompt", sa.JSON(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_ids", sa.JSON(), nullable=False),
        sa.Column("logprobs", sa.JSON(), nullable=True),
        sa.Column("finish_reason", sa.String(length=16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_llm_calls_node_id_nodes"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_llm_calls_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_llm_calls")),
        sa.UniqueConstraint("node_id", name=op.f("uq_llm_calls_node_id")),
    )
    op.create_index(op.f("ix_llm_calls_run_id"), "llm_calls", ["run_id"])

    op.create_table(
        "verifications",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=True),
        sa.Column("node_id", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("verified", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("diagnostics", sa.JSON(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("tool", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_verifications_node_id_nodes"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_verifications_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verifications")),
        sa.UniqueConstraint("node_id", name=op.f("uq_verifications_node_id")),
    )
    op.create_index(op.f("ix_verifications_run_id"), "verifications", ["run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_verifications_run_id"), table_name="verifications")

    op.drop_table("verifications")
    op.drop_index(op.f("ix_llm_calls_run_id"), table_name="llm_calls")

    op.drop_table("llm_calls")
    op.drop_index(op.f("ix_executions_run_id"), table_name="executions")

    op.drop_table("executions")
    op.drop_index(op.f("ix_nodes_task_id"), table_name="nodes")
    op.drop_index("ix_nodes_run_id_task_id", table_name="nodes")
    op.drop_index(op.f("ix_nodes_parent_id"), table_name="nodes")

    op.drop_table("nodes")
    op.drop_index(op.f("ix_exemplars_run_id"), table_name="exemplars")
    op.drop_index("ix_exemplars_kind_language_iteration", table_name="exemplars")

    op.drop_table("exemplars")
    op.drop_index("ix_attempts_run_id_task_id", table_name="attempts")

    op.drop_table("attempts")
    op.drop_index(op.f("ix_tasks_suite"), table_name="tasks")

    op.drop_table("tasks")
    op.drop_index(op.f("ix_runs_suite"), table_name="runs")
    op.drop_index(op.f("ix_runs_status"), table_name="runs")
    op.drop_index(op.f("ix_runs_created_at"), table_name="runs")
    op.drop_index(op.f("ix_runs_agent"), table_name="runs")

    op.drop_table("runs")
    op.drop_index(op.f("ix_models_created_at"), table_name="models")

    op.drop_table("models")
