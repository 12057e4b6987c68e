"""Migrations: the schema they build matches the models, and the app refuses a database that is not at head."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from veriloop.errors import DatabaseNotMigratedError, StoreError
from veriloop.records import Run
from veriloop.store import TrajectoryStore, database_state, head_revision, migrate, upgrade_database
from veriloop.store.engine import ENGINES, parse_url, write_engine
from veriloop.store.models import Base

REPO = Path(__file__).resolve().parents[2]


def _execute(url: str, statement: str) -> None:
    parsed = parse_url(url)
    engine = ENGINES.acquire(parsed, 30000)
    try:
        with write_engine(engine).begin() as connection:
            connection.execute(text(statement))
    finally:
        ENGINES.release(engine)


def test_migrated_schema_matches_the_models(db_url: str) -> None:
    upgrade_database(db_url)
    parsed = parse_url(db_url)
    engine = ENGINES.acquire(parsed, 30000)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        ENGINES.release(engine)


def test_upgrade_is_idempotent_and_reports_revisions(db_url: str) -> None:
    head = head_revision()
    first = upgrade_database(db_url)
    assert (first.before, first.after) == (None, head)
    second = upgrade_database(db_url)
    assert (second.before, second.after) == (head, head)
    state = database_state(db_url)
    assert (state.current, state.head, state.up_to_date) == (head, head, True)


def test_a_brand_new_sqlite_file_is_created_and_migrated(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "veriloop.db"
    with TrajectoryStore(f"sqlite:///{path}") as store:
        store.create_run(Run(agent="a", suite="s", model="m"))
    assert path.exists()
    assert database_state(f"sqlite:///{path}").up_to_date


def test_new_sqlite_refused_when_auto_creation_is_off(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'veriloop.db'}"
    with pytest.raises(DatabaseNotMigratedError) as caught:
        TrajectoryStore(url, create_new_sqlite=False)
    assert str(caught.value) == (
        f"database at {url} is not migrated (at revision none, code needs {head_revision()}); run `veriloop db upgrade`"
    )
    upgrade_database(url)
    TrajectoryStore(url, create_new_sqlite=False).close()


def test_db_current_does_not_create_a_missing_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    state = database_state(f"sqlite:///{path}")
    assert (state.current, state.up_to_date) == (None, False)
    assert not path.exists()


@pytest.mark.postgres
def test_postgres_is_never_migrated_implicitly(postgres_url: str) -> None:
    with pytest.raises(DatabaseNotMigratedError, match=r"is not migrated \(at revision none, code needs .*db upgrade"):
        TrajectoryStore(postgres_url)
    upgrade_database(postgres_url)
    TrajectoryStore(postgres_url).close()


def test_database_with_tables_but_no_revision_is_refused(db_url: str) -> None:
    """An existing SQLite file is never migrated implicitly: here, one downgraded back to base."""
    upgrade_database(db_url)
    parsed = parse_url(db_url)
    engine = ENGINES.acquire(parsed, 30000)
    try:
        with write_engine(engine).connect() as connection, connection.begin():
            config = migrate.alembic_config()
            config.attributes["connection"] = connection
            command.downgrade(config, "base")
    finally:
        ENGINES.release(engine)
    assert database_state(db_url).current is None
    with pytest.raises(DatabaseNotMigratedError, match="at revision none"):
        TrajectoryStore(db_url)
    assert upgrade_database(db_url).after == head_revision()
    TrajectoryStore(db_url).close()


def test_older_revision_is_refused_with_the_revisions_named(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    upgrade_database(db_url)
    current = head_revision()
    monkeypatch.setattr(migrate, "head_revision", lambda: "0099")  # as if the code had moved on
    with pytest.raises(DatabaseNotMigratedError) as caught:
        TrajectoryStore(db_url)
    message = str(caught.value)
    assert f"is not migrated (at revision {current}, code needs 0099); run `veriloop db upgrade`" in message
    assert "\n" not in message


def test_database_newer_than_the_code_is_refused(db_url: str) -> None:
    upgrade_database(db_url)
    _execute(db_url, "UPDATE alembic_version SET version_num = 'ffff9999'")
    with pytest.raises(StoreError, match="revision ffff9999, which this veriloop does not know"):
        TrajectoryStore(db_url)
    with pytest.raises(StoreError, match="does not know"):
        upgrade_database(db_url)


def test_unusable_urls_fail_in_one_line(tmp_path: Path) -> None:
    from veriloop.errors import ConfigError

    with pytest.raises(ConfigError, match="unsupported database 'mysql'"):
        TrajectoryStore("mysql://u@h/db")
    with pytest.raises(ConfigError, match="invalid database URL"):
        TrajectoryStore("not a url")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create folder"):
        TrajectoryStore(f"sqlite:///{blocker / 'sub' / 'x.db'}")
    with pytest.raises(StoreError, match=re.escape("cannot open database at postgresql+psycopg://u:***@127.0.0.1:1/x")):
        TrajectoryStore("postgresql://u:secret@127.0.0.1:1/x?connect_timeout=2")


def test_plain_postgresql_urls_use_psycopg() -> None:
    assert parse_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert parse_url("postgres://u@h/db").drivername == "postgresql+psycopg"


@pytest.mark.slow
def test_installed_wheel_carries_and_runs_the_migrations(tmp_path: Path) -> None:
    """Built and installed elsewhere (not this checkout), veriloop still finds and runs its migrations."""
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "veriloop", source / "veriloop", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=source,
    )
    (wheel,) = wheels.glob("veriloop-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("env.py", "script.py.mako", "alembic.ini", "versions/v0001_initial_schema.py"):
        assert f"veriloop/store/migrations/{shipped}" in names
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    database = tmp_path / "installed.db"
    script = (
        "import veriloop.store as s, sys; "
        "assert s.migrate.MIGRATIONS_DIR.is_relative_to(sys.argv[2]), s.migrate.MIGRATIONS_DIR; "
        "print(s.upgrade_database(sys.argv[1]).after)"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}  # ahead of the editable install of this checkout
    result = subprocess.run(
        [sys.executable, "-c", script, f"sqlite:///{database}", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == head_revision()
