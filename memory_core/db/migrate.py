"""Apply migrations and check that a database fits this deployment.

``python -m memory_core.db.migrate upgrade`` checks the server (:mod:`memory_core.db.server_support`),
creates the extensions the service needs (``vector``, ``unaccent``), applies the
Alembic migrations with the configured embedding dimension and verifies the result.
Every process checks the schema at start (:func:`check_schema`), so a database built for
another embedding dimension, or a server that is too old or lacks an extension, stops it with a message that
says what is wrong instead of failing on the first insert.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError, OperationalError

from memory_core.db.engine import create_db_engine
from memory_core.db.server_support import ServerSupport, read_server_support
from memory_core.settings import Settings, SettingsError, load_settings

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


class DatabaseSchemaError(RuntimeError):
    """The database cannot serve this deployment (no pgvector, not migrated, other dimension)."""


def _server_label(engine: Engine) -> str:
    url = engine.url
    where = url.host or (url.query.get("host") if url.query else None) or "localhost"
    port = f":{url.port}" if url.port else ""
    return f"{where}{port}/{url.database}"


def alembic_config(settings: Settings, connection: Connection | None = None) -> Config:
    """Alembic configuration pointing at the packaged migrations and this deployment's dimension."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))
    config.attributes["embedding_dimensions"] = settings.dimensions
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def check_server(engine: Engine) -> ServerSupport:
    """Raise :class:`DatabaseSchemaError` naming everything the server lacks (version, extensions)."""
    try:
        with engine.connect() as conn:
            support = read_server_support(conn)
    except OperationalError as error:
        raise DatabaseSchemaError(f"cannot connect to the database at {_server_label(engine)}: {error.orig}") from None
    problems = support.problems()
    if problems:
        raise DatabaseSchemaError(
            f"the PostgreSQL server at {_server_label(engine)} (version {support.server_version}) "
            "cannot serve this service: " + "; ".join(problems)
        )
    return support


def ensure_extensions(engine: Engine, support: ServerSupport | None = None) -> None:
    """Create the extensions the service needs (pgvector, unaccent), or explain why this server cannot.

    ``support`` is what :func:`check_server` already read, when the caller has it.
    """
    support = support or check_server(engine)
    missing = [extension.name for extension in support.extensions if extension.installed is None]
    if not missing:
        return
    try:
        with engine.begin() as conn:
            for name in missing:
                conn.execute(text(f'CREATE EXTENSION IF NOT EXISTS "{name}"'))
    except DBAPIError as error:
        raise DatabaseSchemaError(
            f"could not create the extensions {', '.join(missing)} in {_server_label(engine)}: {error.orig}; "
            f"ask a superuser to run CREATE EXTENSION for each of them in that database"
        ) from None


def head_revision() -> str:
    """The newest migration shipped with this code."""
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head = script.get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at, or None when it was never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_schema(engine: Engine, settings: Settings) -> None:
    """Raise :class:`DatabaseSchemaError` unless the database is migrated for these settings."""
    support = check_server(engine)
    if any(extension.installed is None for extension in support.extensions):
        ensure_extensions(engine, support)
    revision = current_revision(engine)
    head = head_revision()
    if revision is None:
        raise DatabaseSchemaError(
            f"the database at {_server_label(engine)} has no arandu schema: "
            "run `python -m memory_core.db.migrate upgrade`"
        )
    if revision != head:
        raise DatabaseSchemaError(
            f"the database at {_server_label(engine)} is at migration {revision}, this code needs {head}: "
            "run `python -m memory_core.db.migrate upgrade`"
        )
    if "schema_info" not in inspect(engine).get_table_names():
        raise DatabaseSchemaError("the schema_info table is missing: the database was not created by these migrations")
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT embedding_dimensions FROM schema_info WHERE id = 1")).scalar()
    if stored != settings.dimensions:
        raise DatabaseSchemaError(
            f"embedding dimension mismatch: the database at {_server_label(engine)} stores {stored}-dimensional "
            f"vectors but ARANDU_EMBEDDING_DIMENSIONS is {settings.dimensions} "
            f"(provider {settings.embedder.value}, model {settings.embedding_model}); "
            "use the embedder the database was built with, or migrate into a new database"
        )


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Create the extension, apply migrations up to ``revision`` and verify the result."""
    engine = create_db_engine(settings, pool_size=1)
    try:
        ensure_extensions(engine)
        with engine.begin() as conn:
            command.upgrade(alembic_config(settings, conn), revision)
        if revision == "head":
            check_schema(engine, settings)
    finally:
        engine.dispose()


def downgrade(settings: Settings, revision: str = "base") -> None:
    """Revert migrations down to ``revision`` (``base`` drops every table of the service)."""
    engine = create_db_engine(settings, pool_size=1)
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(settings, conn), revision)
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``upgrade [REV]``, ``downgrade [REV]``, ``check``, ``current``."""
    parser = argparse.ArgumentParser(prog="python -m memory_core.db.migrate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("upgrade", help="apply migrations (default: to head)")
    up.add_argument("revision", nargs="?", default="head")
    down = sub.add_parser("downgrade", help="revert migrations (default: to base, dropping every table)")
    down.add_argument("revision", nargs="?", default="base")
    sub.add_parser("check", help="exit non-zero unless the database fits these settings")
    sub.add_parser("current", help="print the database's migration")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        if args.action == "upgrade":
            upgrade(settings, args.revision)
            print(f"database migrated to {args.revision} ({settings.dimensions}-dimensional embeddings)")
        elif args.action == "downgrade":
            downgrade(settings, args.revision)
            print(f"database downgraded to {args.revision}")
        else:
            engine = create_db_engine(settings, pool_size=1)
            try:
                if args.action == "check":
                    check_schema(engine, settings)
                    print("database schema is current")
                else:
                    print(current_revision(engine) or "(none)")
            finally:
                engine.dispose()
    except (SettingsError, DatabaseSchemaError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
