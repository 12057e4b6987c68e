"""Alembic revisions, oldest first; each file names its parent in `down_revision`."""
