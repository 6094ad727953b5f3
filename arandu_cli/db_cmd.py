"""``arandu db upgrade|check|current|index-agents``: the database schema and indexes, straight on PostgreSQL."""

from __future__ import annotations

from typing import Annotated

import typer

from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import console, emit_json, fail
from arandu_cli.target import load_cli_settings
from memory_core.db.engine import create_db_engine
from memory_core.db.migrate import DatabaseSchemaError, check_schema, current_revision, head_revision, upgrade
from memory_core.read.agent_index import BuildOutcome, index_large_agents

db = typer.Typer(
    help="The database schema: apply migrations, check, show the revision, build large agents' indexes.",
    no_args_is_help=True,
)


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


@db.command("index-agents")
def index_agents_command(
    min_facts: Annotated[
        int | None,
        typer.Option(
            "--min-facts",
            min=1,
            help="Index agents with at least this many facts (default: ARANDU_RETRIEVAL_AGENT_INDEX_MIN_FACTS).",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Build the partial vector and keyword indexes of every large agent that lacks them, largest first.

    The service builds an agent's indexes in the background the first time it searches a large
    agent without them (searching it exactly meanwhile); this builds them beforehand, after an
    upgrade or a bulk import. Writes go on during the builds (CREATE INDEX CONCURRENTLY).
    """
    settings = load_cli_settings()
    threshold = min_facts if min_facts is not None else settings.retrieval_agent_index_min_facts
    if threshold <= 0:
        raise _failed(
            RuntimeError("agent indexes are off (ARANDU_RETRIEVAL_AGENT_INDEX_MIN_FACTS=0); pass --min-facts")
        )
    engine = create_db_engine(settings, pool_size=1)
    built: list[dict[str, object]] = []

    def report(position: int, agent_id: str, facts: int, outcome: BuildOutcome) -> None:
        built.append(
            {
                "agent_id": agent_id,
                "facts": facts,
                "built": outcome.created,
                "reason": outcome.reason,
                "seconds": round(outcome.seconds, 2),
            }
        )
        if not as_json:
            console.print(
                f"[{position}] {agent_id} ({facts:,} facts): {outcome.reason} in {outcome.seconds:.1f} s", markup=False
            )

    def announce(needing: list[tuple[str, int]]) -> None:
        if not as_json:
            console.print(f"{len(needing)} agents with at least {threshold:,} facts need indexes", markup=False)

    try:
        index_large_agents(engine, threshold, on_listed=announce, on_built=report)
    except Exception as error:  # connection refused, a failed build: say it without a traceback
        if as_json:
            emit_json({"min_facts": threshold, "agents": built, "error": f"{type(error).__name__}: {error}"})
        raise _failed(RuntimeError(f"index build failed: {type(error).__name__}: {error}")) from None
    finally:
        engine.dispose()
    if as_json:
        emit_json({"min_facts": threshold, "agents": built})
