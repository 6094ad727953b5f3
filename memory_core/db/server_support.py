"""What this service needs of its PostgreSQL server, and a check that names whatever is missing.

The supported range (README, docs/production.md): PostgreSQL 16 or newer with pgvector 0.6 or
newer and the contrib module ``unaccent``. The embedded default (``./ops/dev``, the tests) and the
compose image both run PostgreSQL 18 with pgvector 0.8, which is what the suite is run against.

The API, every worker and ``arandu doctor`` read this at start (through
:func:`memory_core.db.migrate.check_schema`), so a server that lacks something fails with a
sentence naming it and the way to get it, instead of with the first statement that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

__all__ = [
    "MIN_PGVECTOR_VERSION",
    "MIN_SERVER_VERSION",
    "REQUIRED_EXTENSIONS",
    "ExtensionState",
    "ServerSupport",
    "read_server_support",
    "version_tuple",
]

# server_version_num of PostgreSQL 16.0. Older servers are not tested (the suite runs on 18).
MIN_SERVER_VERSION = 160_000
MIN_PGVECTOR_VERSION = "0.6.0"
# Created by the migrations in every database of the service: pgvector for the embeddings,
# unaccent for the accent-insensitive text-search configuration of the keyword signal.
REQUIRED_EXTENSIONS: tuple[str, ...] = ("vector", "unaccent")
_MINIMUM_EXTENSION_VERSIONS = {"vector": MIN_PGVECTOR_VERSION}
_WHERE_TO_GET = {
    "vector": "install pgvector on that server (https://github.com/pgvector/pgvector), "
    "or use the embedded stack (./ops/dev) or the pgvector/pgvector:pg18 image",
    "unaccent": "install PostgreSQL's contrib modules on that server (Debian: the postgresql-contrib "
    "package; the pgvector/pgvector images and managed services ship them)",
}


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.8.6"`` as ``(0, 8, 6)``; a suffix such as ``"0.8.0-dev"`` is ignored."""
    parts: list[int] = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(parts)


@dataclass(frozen=True)
class ExtensionState:
    """One extension as the server knows it: installable at which version, created at which."""

    name: str
    available: str | None
    installed: str | None

    @property
    def usable_version(self) -> str | None:
        """The version a database of the service runs (installed), or would after migrating."""
        return self.installed or self.available


@dataclass(frozen=True)
class ServerSupport:
    """The server's version and the required extensions, with what is missing."""

    server_version: str
    server_version_num: int
    extensions: tuple[ExtensionState, ...]

    def problems(self) -> list[str]:
        """One sentence per thing missing or too old; empty when the server fits."""
        found: list[str] = []
        if self.server_version_num < MIN_SERVER_VERSION:
            found.append(
                f"PostgreSQL {self.server_version} is older than the {MIN_SERVER_VERSION // 10_000} this service needs"
            )
        for extension in self.extensions:
            version = extension.usable_version
            if version is None:
                found.append(
                    f"no {'pgvector' if extension.name == 'vector' else extension.name} extension "
                    f"('{extension.name}' is not among the server's available extensions): "
                    f"{_WHERE_TO_GET[extension.name]}"
                )
                continue
            minimum = _MINIMUM_EXTENSION_VERSIONS.get(extension.name)
            if minimum is not None and version_tuple(version) < version_tuple(minimum):
                found.append(
                    f"extension {extension.name} {version} is older than the {minimum} this service needs: "
                    f"{_WHERE_TO_GET[extension.name]}"
                    + ("" if extension.installed is None else f", then ALTER EXTENSION {extension.name} UPDATE")
                )
        return found

    def summary(self) -> str:
        """``PostgreSQL 18.6, vector 0.8.6, unaccent 1.1``: what a health check shows."""
        versions = ", ".join(f"{ext.name} {ext.usable_version or 'missing'}" for ext in self.extensions)
        return f"PostgreSQL {self.server_version}, {versions}"


def read_server_support(conn: Connection) -> ServerSupport:
    """Read the server's version and the state of :data:`REQUIRED_EXTENSIONS` on ``conn``."""
    version = str(conn.execute(text("SHOW server_version")).scalar())
    version_num = int(conn.execute(text("SELECT current_setting('server_version_num')::int")).scalar() or 0)
    rows = conn.execute(
        text(
            "SELECT n.name, a.default_version, e.extversion FROM unnest(CAST(:names AS text[])) AS n(name) "
            "LEFT JOIN pg_available_extensions a ON a.name = n.name "
            "LEFT JOIN pg_extension e ON e.extname = n.name ORDER BY array_position(CAST(:names AS text[]), n.name)"
        ),
        {"names": list(REQUIRED_EXTENSIONS)},
    ).all()
    states = {row[0]: ExtensionState(row[0], row[1], row[2]) for row in rows}
    extensions = tuple(states.get(name, ExtensionState(name, None, None)) for name in REQUIRED_EXTENSIONS)
    return ServerSupport(version, version_num, extensions)
