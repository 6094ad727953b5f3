"""Erase an agent: every row of every table that holds its data, in one transaction.

What is erased
--------------
The tables come from the live schema, not from a list kept here, so a table added later is
erased without touching this module:

* every base table of the current schema with an ``agent_id`` column: the rows of the agent;
* every table *without* one whose foreign key to such a table is ``ON DELETE CASCADE`` (its rows
  belong to the parent row, e.g. ``pipeline_stage_outputs`` of ``pipeline_runs``), transitively:
  the rows hanging off the agent's rows. A foreign key that is ``SET NULL`` or ``RESTRICT``
  says the referencing row has a life of its own, so it is left to the key's action.

Tables are emptied children first (a table before every table it references), so no row is
removed by a cascade without being counted, and no ``SET NULL`` updates a row about to go.
The answer counts the rows deleted per table, zeros included.

Races
-----
* The write pipeline applies a message under the agent's advisory lock, after locking the
  message's run row (:mod:`memory_core.write.pipeline`). Erasure takes the same locks in the
  same order: the agent's run rows, then the agent's lock. An apply in flight finishes first;
  one that comes later finds its run gone and ends as ``missing`` (a no-op), and so does every
  earlier stage (their check-and-set finds no run to advance).
* Maintenance jobs write in many short transactions with no agent lock. A job run by a worker
  (:func:`erasure_guarded`) begins each transaction with a *shared* erasure lock of its agent
  and checks that its run row still exists; erasure takes that lock exclusively and deletes the
  run row. So erasure waits for a job's transaction in flight, and every later transaction of
  the job raises :class:`AgentErasedError` before it writes anything. A queued run's row is
  gone, so its task finds nothing to claim.
* Messages accepted after the erasure began start a fresh memory. A message accepted while the
  erasure runs whose apply gets between the two locks is a deadlock that PostgreSQL breaks by
  failing one side: the erasure is then tried again (an apply retries on its own).

After the commit the agent's own search indexes (:mod:`memory_core.read.agent_index`) are
dropped, outside any transaction as ``DROP INDEX CONCURRENTLY`` requires, and this process's
caches about the agent are forgotten. The service keeps nothing per agent in Redis.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from memory_core.errors import AranduError
from memory_core.maintenance.context import MaintenanceContext
from memory_core.read.agent_index import database_key, drop_agent_index
from memory_core.read.keywords import document_frequency_cache
from memory_core.shadow import SHADOW_PREFIX
from memory_core.write.upsert import lock_agent

__all__ = [
    "AGENT_COLUMN",
    "AgentErasedError",
    "Erasure",
    "ForeignKey",
    "TableErasure",
    "agent_tables",
    "delete_agent_rows",
    "erase_agent",
    "erasure_guarded",
    "erasure_plan",
    "foreign_keys",
    "hold_off_erasure",
    "plan_erasure",
    "stop_maintenance",
]

logger = logging.getLogger(__name__)

AGENT_COLUMN = "agent_id"
# Tries of the erasure when PostgreSQL breaks a deadlock with a concurrent apply by failing it.
_ATTEMPTS = 3
_DEADLOCK = "40P01"
# How long dropping the agent's indexes waits for a build of them in progress to end.
_INDEX_BUILD_WAIT_S = 60.0

_AGENT_TABLES_SQL = text(
    """
    SELECT c.relname::text
    FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
    WHERE c.relnamespace = CAST(current_schema() AS regnamespace)
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND a.attname = :column AND a.attnum > 0 AND NOT a.attisdropped
    ORDER BY 1
    """
)

_FOREIGN_KEYS_SQL = text(
    """
    SELECT child.relname::text AS child, parent.relname::text AS parent, con.confdeltype::text AS on_delete,
           ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(num, ord)
                 JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.ord) AS child_columns,
           ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY AS k(num, ord)
                 JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num
                 ORDER BY k.ord) AS parent_columns
    FROM pg_constraint con
    JOIN pg_class child ON child.oid = con.conrelid
    JOIN pg_class parent ON parent.oid = con.confrelid
    WHERE con.contype = 'f'
      AND child.relnamespace = CAST(current_schema() AS regnamespace)
      AND parent.relnamespace = CAST(current_schema() AS regnamespace)
    ORDER BY 1, 2, con.conname
    """
)

# The write pipeline's lock order (memory_core.write.pipeline._upsert_under_locks): run rows first.
_LOCK_RUNS_SQL = text("SELECT event_id FROM pipeline_runs WHERE agent_id = :agent ORDER BY event_id FOR UPDATE")
_ERASURE_LOCK_SQL = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")
_HOLD_OFF_SQL = text("SELECT pg_advisory_xact_lock_shared(hashtextextended(:key, 0))")
_RUN_EXISTS_SQL = text("SELECT 1 FROM maintenance_job_runs WHERE id = :run_id")


class AgentErasedError(AranduError):
    """The agent of a maintenance run was erased while the run went on: the job must write nothing."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id!r} was erased while this job ran; nothing more is written")
        self.agent_id = agent_id


@dataclass(frozen=True, slots=True)
class ForeignKey:
    """One foreign key of the schema: ``child(child_columns)`` references ``parent(parent_columns)``."""

    child: str
    parent: str
    on_delete: str  # pg_constraint.confdeltype: 'c' cascade, 'n' set null, 'a' no action, 'r' restrict...
    child_columns: tuple[str, ...]
    parent_columns: tuple[str, ...]

    @property
    def cascades(self) -> bool:
        """Whether deleting the parent row deletes the child rows (they belong to it)."""
        return self.on_delete == "c"


@dataclass(frozen=True, slots=True)
class TableErasure:
    """One step of an erasure: delete from ``table`` the rows that match ``condition`` (SQL, ``:agent`` bound)."""

    table: str
    condition: str


@dataclass(frozen=True, slots=True)
class Erasure:
    """What :func:`erase_agent` did: rows deleted per table (every table of the plan, zeros included)."""

    agent_id: str
    deleted: dict[str, int]
    indexes_dropped: bool

    @property
    def total(self) -> int:
        """Rows deleted in all tables."""
        return sum(self.deleted.values())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def agent_tables(connection: Session | Connection) -> list[str]:
    """The base tables of the current schema that have an ``agent_id`` column, by name."""
    return [str(name) for name in connection.execute(_AGENT_TABLES_SQL, {"column": AGENT_COLUMN}).scalars()]


def foreign_keys(connection: Session | Connection) -> list[ForeignKey]:
    """Every foreign key between tables of the current schema."""
    return [
        ForeignKey(
            child=row.child,
            parent=row.parent,
            on_delete=row.on_delete,
            child_columns=tuple(row.child_columns),
            parent_columns=tuple(row.parent_columns),
        )
        for row in connection.execute(_FOREIGN_KEYS_SQL)
    ]


def plan_erasure(with_agent_column: Iterable[str], keys: Sequence[ForeignKey]) -> list[TableErasure]:
    """The tables to empty of one agent and how, children before the tables they reference.

    ``with_agent_column`` are scoped by ``agent_id``; a table without the column is scoped
    through its ``ON DELETE CASCADE`` keys to scoped tables (any of them, transitively).
    """
    conditions: dict[str, list[str]] = {table: [f"{_quote(AGENT_COLUMN)} = :agent"] for table in with_agent_column}
    direct = set(conditions)
    # Dependents of dependents are reached on a later pass: repeat until nothing is added.
    changed = True
    while changed:
        changed = False
        for key in keys:
            if key.child in direct or key.child == key.parent or not key.cascades or key.parent not in conditions:
                continue
            condition = _through(key, conditions[key.parent])
            found = conditions.setdefault(key.child, [])
            if condition not in found:
                found.append(condition)
                changed = True
    return [
        TableErasure(table, " OR ".join(f"({part})" for part in conditions[table]))
        for table in _children_first(conditions, keys)
    ]


def _through(key: ForeignKey, parent_conditions: Sequence[str]) -> str:
    """``key.child``'s rows whose key points at a row of ``key.parent`` that matches ``parent_conditions``."""
    child_columns = ", ".join(_quote(column) for column in key.child_columns)
    parent_columns = ", ".join(_quote(column) for column in key.parent_columns)
    parent_condition = " OR ".join(f"({part})" for part in parent_conditions)
    # Quoted names from the catalog and conditions built here: no input reaches the text.
    return f"({child_columns}) IN (SELECT {parent_columns} FROM {_quote(key.parent)} WHERE {parent_condition})"  # noqa: S608


def _children_first(tables: Mapping[str, Any], keys: Sequence[ForeignKey]) -> list[str]:
    """``tables`` ordered so that each comes before every table it references (by name among equals).

    A cycle of references (none today) cannot be ordered: its tables come last, by name, and
    the keys' own actions take care of the rows between them.
    """
    references = {
        table: {key.parent for key in keys if key.child == table and key.parent in tables} for table in tables
    }
    for table, parents in references.items():
        parents.discard(table)
    referenced_by = {table: {child for child, parents in references.items() if table in parents} for table in tables}
    ordered: list[str] = []
    left = set(tables)
    while left:
        ready = sorted(table for table in left if not (referenced_by[table] & left))
        if not ready:
            ordered.extend(sorted(left))
            break
        ordered.extend(ready)
        left.difference_update(ready)
    return ordered


def erasure_plan(connection: Session | Connection) -> list[TableErasure]:
    """The erasure plan of the live schema (:func:`plan_erasure` of its tables and keys)."""
    return plan_erasure(agent_tables(connection), foreign_keys(connection))


def _erasure_lock_key(agent_id: str) -> str:
    return f"arandu-erase:{agent_id}"


def stop_maintenance(session: Session, agent_id: str) -> int:
    """Stop the agent's maintenance runs as erasure does, for a caller about to replace its memory.

    Waits for a job's transaction in flight (the erasure lock, exclusively, until the caller's
    transaction ends) and deletes the agent's queued and running runs, so every later
    transaction of those jobs raises :class:`AgentErasedError` before writing anything, and a
    queued one finds nothing to claim. Returns how many runs were stopped.
    """
    session.execute(_ERASURE_LOCK_SQL, {"key": _erasure_lock_key(agent_id)})
    result = session.execute(
        text("DELETE FROM maintenance_job_runs WHERE agent_id = :agent AND status IN ('queued', 'running')"),
        {"agent": agent_id},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def hold_off_erasure(connection: Session | Connection, agent_id: str) -> None:
    """Keep ``agent_id`` from being erased until this transaction ends (shared: other holders go on)."""
    connection.execute(_HOLD_OFF_SQL, {"key": _erasure_lock_key(agent_id)})


def delete_agent_rows(session: Session, agent_id: str, plan: Sequence[TableErasure]) -> dict[str, int]:
    """Run ``plan`` (from :func:`plan_erasure`) for ``agent_id`` in the caller's transaction; rows per table."""
    deleted: dict[str, int] = {}
    for step in plan:
        # The table is a quoted catalog name, the condition built by plan_erasure; the agent is bound.
        statement = text(f"DELETE FROM {_quote(step.table)} WHERE {step.condition}")  # noqa: S608
        result = session.execute(statement, {"agent": agent_id})
        deleted[step.table] = int(getattr(result, "rowcount", 0) or 0)
    return deleted


# The hidden agents of the agent's running re-processes (memory_core.maintenance.reprocess),
# read before their rows go: their shadows are erased right after the agent.
_RUNNING_SHADOWS_SQL = text(
    "SELECT :prefix || CAST(id AS text) FROM agent_reprocesses WHERE agent_id = :agent AND status = 'running'"
)


def _erase_in_transaction(session: Session, agent_id: str) -> tuple[dict[str, int], list[str]]:
    session.execute(_LOCK_RUNS_SQL, {"agent": agent_id})
    lock_agent(session, agent_id)
    session.execute(_ERASURE_LOCK_SQL, {"key": _erasure_lock_key(agent_id)})
    shadows: list[str] = []
    if "agent_reprocesses" in agent_tables(session):
        shadows = [
            str(s)
            for s in session.execute(_RUNNING_SHADOWS_SQL, {"agent": agent_id, "prefix": SHADOW_PREFIX}).scalars()
        ]
    return delete_agent_rows(session, agent_id, erasure_plan(session)), shadows


def _is_deadlock(error: OperationalError) -> bool:
    return getattr(error.orig, "sqlstate", None) == _DEADLOCK


def erase_agent(engine: Engine, agent_id: str) -> Erasure:
    """Delete everything of ``agent_id`` in one transaction; rows deleted per table.

    Erasing an agent that has nothing deletes nothing and answers zeros. See the module
    docstring for what is erased and how concurrent work of the agent is kept out.
    """
    if not agent_id or "\x00" in agent_id:
        raise ValueError("agent_id must be a non-empty string without NUL characters")
    sessions = sessionmaker(bind=engine, expire_on_commit=False)
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with sessions.begin() as session:
                deleted, shadows = _erase_in_transaction(session, agent_id)
            break
        except OperationalError as error:
            if not _is_deadlock(error) or attempt == _ATTEMPTS:
                raise
            logger.warning("erasing agent %s met a deadlock with a concurrent write; trying again", agent_id)
    for shadow in shadows:
        # A re-process of the agent was running: its new memory goes with the agent.
        erase_agent(engine, shadow)
    indexes_dropped = drop_agent_index(engine, agent_id, wait_for_build_s=_INDEX_BUILD_WAIT_S)
    document_frequency_cache.forget_agent(database_key(engine), agent_id)
    logger.info("erased agent %s: %d rows (%s)", agent_id, sum(deleted.values()), deleted)
    return Erasure(agent_id=agent_id, deleted=deleted, indexes_dropped=indexes_dropped)


def erasure_guarded(context: MaintenanceContext, run_id: uuid.UUID, agent_id: str) -> MaintenanceContext:
    """``context`` for one maintenance run, whose every transaction is safe against the agent's erasure.

    Each transaction first takes the agent's erasure lock shared (:func:`hold_off_erasure`),
    then checks that the run's row still exists: once the agent was erased it does not, and
    the transaction raises :class:`AgentErasedError` before any statement of the job runs.
    """
    sessions: sessionmaker[Session] = sessionmaker(class_=context.sessions.class_, **context.sessions.kw)

    def check(session: Session, transaction: SessionTransaction, connection: Connection) -> None:
        hold_off_erasure(connection, agent_id)
        if connection.execute(_RUN_EXISTS_SQL, {"run_id": run_id}).first() is None:
            raise AgentErasedError(agent_id)

    event.listen(sessions, "after_begin", check)
    return dataclasses.replace(context, sessions=sessions)
