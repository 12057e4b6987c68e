"""Alembic environment and revisions of the trajectory store."""
