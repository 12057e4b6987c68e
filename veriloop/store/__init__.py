"""The trajectory store: SQLAlchemy models, sessions, Alembic migrations and exports."""
