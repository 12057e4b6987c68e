"""Store fixtures: every store test runs on SQLite and on a real PostgreSQL.

PostgreSQL comes from `VERILOOP_TEST_POSTGRES_URL` (e.g. `scripts/start-postgres.sh | tail -n 1`),
else from a private throw-away cluster (initdb + pg_ctl, as the postgres user when we are root)
when Debian's server binaries are installed, else the tests are skipped with the reason; with
`VERILOOP_REQUIRE_POSTGRES=1` (CI) a missing server fails them instead, and a server named in
`VERILOOP_TEST_POSTGRES_URL` that cannot be used always fails them. Each test gets its own schema
(via `options=-csearch_path=...` in the URL; the role needs CREATE on the database), dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from veriloop.store import TrajectoryStore, upgrade_database

URL_ENV = "VERILOOP_TEST_POSTGRES_URL"
REQUIRE_ENV = "VERILOOP_REQUIRE_POSTGRES"


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"PostgreSQL is required ({REQUIRE_ENV}=1) but {reason}")
    pytest.skip(f"no PostgreSQL: {reason}; set {URL_ENV} or install Debian's postgresql")


def _server_bin() -> Path | None:
    bins = Path("/usr/lib/postgresql").glob("*/bin")
    found = [b for b in bins if (b / "initdb").is_file() and (b / "pg_ctl").is_file()]
    return max(found, key=lambda b: [int(x) if x.isdigit() else 0 for x in b.parent.name.split(".")], default=None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateCluster:
    """A throw-away PostgreSQL cluster in a temp folder: trust auth on 127.0.0.1, no fsync, own port."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="veriloop-pg-"))
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, user="postgres")

    def _run(self, *args: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *args] if self.as_root else list(args)
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> str:
        data = self.root / "data"
        initdb, pg_ctl = str(self.bindir / "initdb"), str(self.bindir / "pg_ctl")
        self._run(initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        self._run(pg_ctl, "-D", str(data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE veriloop_test")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/veriloop_test"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_base_url() -> Iterator[str]:
    """A PostgreSQL database the tests may create schemas in."""
    given = os.environ.get(URL_ENV)
    if given:
        yield given
        return
    bindir = _server_bin()
    if bindir is None:
        _unavailable("no server binaries under /usr/lib/postgresql/*/bin")
        return
    cluster = PrivateCluster(bindir)
    try:
        url = cluster.start()
    except (subprocess.SubprocessError, OSError, psycopg.Error) as exc:
        detail = exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else ""
        cluster.stop()
        _unavailable(f"a private cluster did not start: {exc} {detail}".strip())
        return
    try:
        yield url
    finally:
        cluster.stop()


def _libpq(url: str) -> str:
    parsed = make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """A fresh, empty schema of the test database, as a URL whose connections use it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(_libpq(postgres_base_url), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.Error as exc:
        where = make_url(postgres_base_url).render_as_string()
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if os.environ.get(URL_ENV):  # a server named explicitly must work
            pytest.fail(f"{URL_ENV}={where} is not usable: {first_line}")
        _unavailable(f"cannot use {where}: {first_line}")
    url = make_url(postgres_base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    yield url.render_as_string(hide_password=False)
    with psycopg.connect(_libpq(postgres_base_url), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a fresh, unmigrated database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'veriloop.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(db_url: str) -> Iterator[TrajectoryStore]:
    """A migrated store on each backend."""
    upgrade_database(db_url)
    with TrajectoryStore(db_url) as opened:
        yield opened
