"""Real services for the test session: embedded PostgreSQL + pgvector and Redis, or given URLs.

``ARANDU_TEST_DATABASE_URL`` (an admin URL of a PostgreSQL server with pgvector) and
``ARANDU_TEST_BROKER_URL`` (a Redis URL, ideally a dedicated DB number) replace the embedded
servers. Either way every test session works in databases of its own, created with a unique
name and dropped at the end, so no run depends on what an earlier one left.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ops.embedded import EmbeddedStack, create_database, drop_database


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _with_database(admin_uri: str, database: str) -> str:
    base, _, query = admin_uri.partition("?")
    return base.rsplit("/", 1)[0] + f"/{database}" + (f"?{query}" if query else "")


@dataclass
class TestServices:
    """Where the session's PostgreSQL and Redis are, and the databases it created."""

    admin_uri: str
    broker_url: str
    home: Path
    embedded: EmbeddedStack | None = None
    created: list[str] = field(default_factory=list)

    __test__ = False  # not a test class, despite the name

    def new_database(self, prefix: str = "arandu_test") -> str:
        """Create a uniquely named database with pgvector; return its SQLAlchemy URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        create_database(self.admin_uri, name)
        self.created.append(name)
        return _with_database(self.admin_uri, name).replace("postgresql://", "postgresql+psycopg://", 1)

    def close(self) -> None:
        """Drop every database of the session and stop the embedded servers."""
        for name in self.created:
            drop_database(self.admin_uri, name)
        self.created.clear()
        if self.embedded is not None:
            self.embedded.stop()


def start_test_services(home: Path) -> TestServices:
    """Start (or connect to) the services for one test session."""
    admin = os.environ.get("ARANDU_TEST_DATABASE_URL")
    broker = os.environ.get("ARANDU_TEST_BROKER_URL")
    embedded: EmbeddedStack | None = None
    if not admin or not broker:
        # One server serves the whole session: API processes, worker pools, and a killed worker's
        # backends that linger until PostgreSQL notices; the default 100 runs out on a slow host.
        embedded = EmbeddedStack(home, extra_pg_settings={"max_connections": "300"})
        if not admin:
            embedded.postgres.start()
            admin = embedded.postgres.admin_uri
        if not broker:
            embedded.redis.start()
            broker = embedded.redis.url
    return TestServices(admin_uri=_libpq(admin), broker_url=broker, home=home, embedded=embedded)
