"""``arandu db upgrade|check|current``: the database schema (migrations), straight on PostgreSQL."""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail
from arandu_cli.target import load_cli_settings
from memory_core.db.engine import create_db_engine
from memory_core.db.migrate import DatabaseSchemaError, check_schema, current_revision, head_revision, upgrade

db = typer.Typer(help="The database schema: apply migrations, check, show the revision.", no_args_is_help=True)


def _failed(error: Exception) -> typer.Exit:
    fail(str(error))
    return typer.Exit(ExitCode.FAILED)


@db.command("upgrade")
def upgrade_command(
    revision: Annotated[str, typer.Argument(help="Target migration (default: the newest).")] = "head",
) -> None:
    """Create the pgvector extension and apply the migrations (ARANDU_DATABASE_URL)."""
    settings = load_cli_settings()
    try:
        upgrade(settings, revision)
    except (DatabaseSchemaError, OSError) as error:
        raise _failed(error) from None
    except Exception as error:  # connection refused, permissions: say it without a traceback
        raise _failed(RuntimeError(f"migration failed: {type(error).__name__}: {error}")) from None
    console.print(f"database migrated to {revision} ({settings.dimensions}-dimensional embeddings)", markup=False)


AsJson = Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")]


@db.command("check")
def check_command(as_json: AsJson = False) -> None:
    """Exit 1 unless the database is reachable, has pgvector, is migrated and fits the embedding size."""
    settings = load_cli_settings()
    engine = create_db_engine(settings, pool_size=1)
    try:
        check_schema(engine, settings)
    except DatabaseSchemaError as error:
        if as_json:
            emit_json({"current": False, "error": str(error)})
        raise _failed(error) from None
    finally:
        engine.dispose()
    if as_json:
        emit_json({"current": True, "revision": head_revision(), "embedding_dimensions": settings.dimensions})
        return
    console.print(f"database schema is current ({head_revision()})", markup=False)


@db.command("current")
def current_command(as_json: AsJson = False) -> None:
    """The migration the database is at."""
    settings = load_cli_settings()
    engine = create_db_engine(settings, pool_size=1)
    try:
        revision = current_revision(engine)
    except Exception as error:
        raise _failed(RuntimeError(f"cannot read the database's revision: {type(error).__name__}: {error}")) from None
    finally:
        engine.dispose()
    if as_json:
        emit_json({"revision": revision, "head": head_revision()})
        return
    console.print(f"{revision or '(none)'} (this code: {head_revision()})", markup=False)
