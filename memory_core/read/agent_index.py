"""Indexes of its own for every large agent: partial HNSW and GIN indexes ``WHERE agent_id = '<id>'``.

Why
---
A table-wide HNSW index filters by agent only while it walks a graph of everyone's facts
(pgvector 0.6 yielded ``hnsw.ef_search`` tuples and then filtered: an agent owning 10% of a
1M-row table got ~30 of 200; so the schema has no such index since migration 0010). pgvector
0.8's iterative index scans keep walking until enough of the agent's rows are found, but on the
retrieve benchmark's 1M-fact table (docs/performance.md, "Vector search") that walk was both
slower and far less accurate than the agent's own graph: recall@10 0.67-0.86 against 0.97-1.00,
a 100,000-fact agent's retrieve 1.7-2x as long, and every fact of every agent paid an insertion
into a 1.8 GB graph. A partial index holds that agent's rows only, so every tuple it
yields is the agent's and a few milliseconds find the nearest ones.

The keyword signal has the same shape of problem with the table-wide GIN index on
``search_vector``: a word's matches are everybody's, so PostgreSQL either visits them all and
filters by agent, or intersects them with a bitmap of the agent's whole b-tree range. For the
benchmark's 100,000-fact agent in a 1M-fact table that bitmap alone took 15 ms, and the keyword
search ~40 ms of a 45 ms signal statement (docs/performance.md). The agent's partial GIN index
holds its own words only.

How
---
* :func:`agent_index_name` and :func:`agent_text_index_name` derive the index names from the
  agent id (a hash: ids are free text).
* :func:`build_agent_index` creates both ``CONCURRENTLY`` (writes go on) under an advisory lock, so
  two processes never build the same one; an invalid leftover of a failed build is dropped first,
  and an index that exists is kept (an agent indexed before the GIN index existed gets only that).
* :class:`AgentIndexes` answers "does this agent have both valid indexes?" from ``pg_index``, cached
  briefly per process, and starts a background build the first time a large agent is searched
  without one (:meth:`AgentIndexes.request`). :func:`agents_needing_index` lists the agents a
  maintenance pass should index (the benchmark calls it after loading its table).
* The search statement names the agent as a **literal** in the semantic and keyword CTEs
  (``:agent_literal``, written in by :func:`memory_core.db.driver_reads.fetch_all` after the
  parameters were converted): a partial index is only usable when the planner can prove its
  predicate, which a generic plan with a bound parameter never allows (psycopg prepares a
  statement after a few executions, and PostgreSQL may then switch to a generic plan).
* Agent ids are free text (``acme:alice``, ``x-:agent``, ``50%``): every statement that holds
  one as a literal is composed by psycopg (:mod:`psycopg.sql`) and sent as it is, never scanned
  again for ``:name`` or ``%`` placeholders.

The predicate is the agent alone (not ``valid_to IS NULL``): time travel searches the same index,
and the read filter (validity, confidence, session, entities) is applied to what it yields.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

from memory_core.shadow import SHADOW_LIKE

__all__ = [
    "AGENT_INDEX_EF_CONSTRUCTION",
    "AGENT_INDEX_M",
    "AGENT_INDEX_PREFIX",
    "AGENT_TEXT_INDEX_PREFIX",
    "BUSY_REASON",
    "AgentIndexes",
    "BuildOutcome",
    "IndexPass",
    "agent_index_name",
    "agent_indexes",
    "agent_text_index_name",
    "agents_needing_index",
    "build_agent_index",
    "build_memory",
    "database_key",
    "drop_agent_index",
    "index_large_agents",
]

logger = logging.getLogger(__name__)

AGENT_INDEX_PREFIX = "ix_memory_facts_hnsw_v2_agent_"
AGENT_TEXT_INDEX_PREFIX = "ix_memory_facts_text_agent_"
# The first version's indexes (pgvector's default ef_construction 64): dropped once a v2 one is built.
_LEGACY_PREFIX = "ix_memory_facts_hnsw_agent_"
# Build parameters. A graph built with a wider candidate list (ef_construction 200 instead of
# pgvector's 64) is searched to the same recall with a quarter of the ef_search, for a build
# ~2.5x longer in the background (docs/performance.md, "A large agent's vector search").
AGENT_INDEX_M = 16
AGENT_INDEX_EF_CONSTRUCTION = 200
# Memory for a build, sized by the agent: pgvector builds the graph in memory, and with parallel
# workers it reserves the whole of maintenance_work_mem at once as a shared memory segment (in
# /dev/shm, which is 64MB in a default Docker container), and a graph that outgrows it builds
# several times slower. So: a fact's vector, its level-0 neighbour list and the element around
# them, with a quarter more for the upper layers, between a floor and a cap (docs/performance.md).
_BUILD_MEMORY_FLOOR_MB = 64
_BUILD_MEMORY_CAP_MB = 1024
_BUILD_BYTES_PER_ELEMENT = 300
# How long "this agent has a valid index" / "has none" is believed without asking again.
_PRESENT_TTL_S = 300.0
_ABSENT_TTL_S = 15.0
# A failed background build is not retried by the same process before this long.
_RETRY_AFTER_S = 600.0
# Advisory lock namespace of the builds (two int4 keys: this and a hash of the agent).
_LOCK_NAMESPACE = 0x0A1D
# One index build at a time per database: two CREATE INDEX CONCURRENTLY on memory_facts each wait
# for the other's transaction, and PostgreSQL ends that deadlock by failing one of them.
_BUILD_SLOT_NAMESPACE = 0x0A1E
_BUILD_SLOT_KEY = 0
BUSY_REASON = "another index build is running (one at a time per database)"
# How often a build waiting for the slot tries again.
_SLOT_POLL_S = 0.5
# A build refused for that reason is asked again this much later (a failed one after _RETRY_AFTER_S).
_BUSY_RETRY_S = 60.0


def agent_index_name(agent_id: str) -> str:
    """The partial index of ``agent_id`` (a hash of the id: any text is a valid agent id)."""
    return f"{AGENT_INDEX_PREFIX}{_digest(agent_id)}"


def agent_text_index_name(agent_id: str) -> str:
    """The partial GIN index (keyword search) of ``agent_id``."""
    return f"{AGENT_TEXT_INDEX_PREFIX}{_digest(agent_id)}"


def _legacy_index_name(agent_id: str) -> str:
    return f"{_LEGACY_PREFIX}{_digest(agent_id)}"


def _digest(agent_id: str) -> str:
    return hashlib.sha256(agent_id.encode("utf-8")).hexdigest()[:20]


# An engine's URL never changes: rendered once per engine (a retrieve asks several times).
_DATABASE_KEYS: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()


def database_key(connectable: Session | Connection | Engine) -> str:
    """Which database ``connectable`` reads (caches keyed by agent id alone would mix databases)."""
    bind = connectable.get_bind() if isinstance(connectable, Session) else connectable
    engine = bind.engine if isinstance(bind, Connection) else bind
    key = _DATABASE_KEYS.get(engine)
    if key is None:
        key = _DATABASE_KEYS[engine] = engine.url.render_as_string(hide_password=True)
    return key


def _lock_key(agent_id: str) -> int:
    return int.from_bytes(hashlib.sha256(agent_id.encode("utf-8")).digest()[:4], "big", signed=True)


_VALID_SQL = text(
    """
    SELECT i.indisvalid AND i.indisready
    FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
    WHERE c.relname = :name AND c.relkind = 'i' AND c.relnamespace = CAST(current_schema() AS regnamespace)
    """
)


_VALID_COUNT_SQL = text(
    """
    SELECT count(*) FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
    WHERE c.relname = ANY(CAST(:names AS text[])) AND c.relkind = 'i' AND i.indisvalid AND i.indisready
      AND c.relnamespace = CAST(current_schema() AS regnamespace)
    """
)


def _index_state(connection: Session | Connection, name: str) -> bool | None:
    """True valid, False present but invalid (a failed concurrent build), None absent."""
    value = connection.execute(_VALID_SQL, {"name": name}).scalar()
    return None if value is None else bool(value)


@dataclass(frozen=True, slots=True)
class BuildOutcome:
    """What :func:`build_agent_index` did."""

    agent_id: str
    index_name: str
    created: bool
    seconds: float
    reason: str


def build_memory(facts: int, dimensions: int) -> str:
    """``maintenance_work_mem`` for building the vector index of ``facts`` vectors of ``dimensions``."""
    per_fact = dimensions * 4 + 2 * AGENT_INDEX_M * 16 + _BUILD_BYTES_PER_ELEMENT
    megabytes = math.ceil(facts * per_fact * 5 / 4 / (1024 * 1024))
    return f"{min(max(megabytes, _BUILD_MEMORY_FLOOR_MB), _BUILD_MEMORY_CAP_MB)}MB"


_AGENT_FACTS_AND_DIMENSIONS = text(
    """
    SELECT (SELECT count(*) FROM memory_facts WHERE agent_id = :agent),
           (SELECT atttypmod FROM pg_attribute
            WHERE attrelid = CAST('memory_facts' AS regclass) AND attname = 'embedding_vec')
    """
)


def _sized_build_memory(connection: Connection, agent_id: str) -> str:
    facts, dimensions = connection.execute(_AGENT_FACTS_AND_DIMENSIONS, {"agent": agent_id}).one()
    # pgvector keeps a vector column's dimension as its type modifier (-1 when unconstrained).
    if not dimensions or dimensions <= 0:
        return f"{_BUILD_MEMORY_CAP_MB}MB"
    return build_memory(int(facts), int(dimensions))


def _agent_index_statements(agent_id: str) -> list[tuple[str, sql.Composed]]:
    """(index name, CREATE statement) of each of ``agent_id``'s partial indexes.

    Composed by psycopg and sent without parameters (:func:`_run_ddl`): the agent's literal is
    never scanned for placeholders, whatever its characters.
    """
    if "\x00" in agent_id:
        raise ValueError("agent_id must not contain NUL characters")
    vector_name = agent_index_name(agent_id)
    text_name = agent_text_index_name(agent_id)
    vector = sql.SQL(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memory_facts "
        "USING hnsw (embedding_vec vector_cosine_ops) WITH (m = {m}, ef_construction = {ef}) WHERE agent_id = {agent}"
    ).format(
        name=sql.Identifier(vector_name),
        m=sql.Literal(AGENT_INDEX_M),
        ef=sql.Literal(AGENT_INDEX_EF_CONSTRUCTION),
        agent=sql.Literal(agent_id),
    )
    keyword = sql.SQL(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memory_facts "
        "USING gin (search_vector) WHERE agent_id = {agent}"
    ).format(name=sql.Identifier(text_name), agent=sql.Literal(agent_id))
    return [(vector_name, vector), (text_name, keyword)]


def _run_ddl(connection: Connection, statement: sql.Composed) -> None:
    """Run ``statement`` on the autocommit ``connection``'s psycopg connection, with no parameters to look for."""
    driver_connection: psycopg.Connection[Any] = connection.connection.driver_connection  # type: ignore[assignment]
    driver_connection.execute(statement)


def _agent_index_names(agent_id: str) -> tuple[str, str]:
    return agent_index_name(agent_id), agent_text_index_name(agent_id)


def build_agent_index(
    engine: Engine, agent_id: str, *, maintenance_work_mem: str | None = None, wait_for_slot: bool = False
) -> BuildOutcome:
    """Create ``agent_id``'s partial HNSW and GIN indexes concurrently, unless they exist or another builds them.

    Runs outside any transaction (``CREATE INDEX CONCURRENTLY`` needs that) on a connection of
    its own; takes as long as the builds (seconds for 10,000 facts, about a minute for 100,000).
    One build runs at a time per database: with ``wait_for_slot`` this one waits for the others
    (background maintenance), otherwise it gives up at once with :data:`BUSY_REASON`.
    """
    name = agent_index_name(agent_id)
    started = time.monotonic()
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
        key = _lock_key(agent_id)
        locked = connection.execute(
            text("SELECT pg_try_advisory_lock(:ns, :key)"), {"ns": _LOCK_NAMESPACE, "key": key}
        ).scalar()
        if not locked:
            return BuildOutcome(agent_id, name, False, time.monotonic() - started, "another process is building it")
        try:
            missing: list[tuple[str, sql.Composed, bool]] = []
            for index_name, statement in _agent_index_statements(agent_id):
                state = _index_state(connection, index_name)
                if not state:
                    missing.append((index_name, statement, state is False))
            if not missing:
                return BuildOutcome(agent_id, name, False, time.monotonic() - started, "exists")
            if not _take_build_slot(connection, wait=wait_for_slot):
                return BuildOutcome(agent_id, name, False, time.monotonic() - started, BUSY_REASON)
            try:
                memory = maintenance_work_mem or _sized_build_memory(connection, agent_id)
                _build_missing(connection, agent_id, missing, memory)
            finally:
                connection.execute(
                    text("SELECT pg_advisory_unlock(:ns, :key)"), {"ns": _BUILD_SLOT_NAMESPACE, "key": _BUILD_SLOT_KEY}
                )
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), {"ns": _LOCK_NAMESPACE, "key": key})
    agent_indexes.forget(engine, agent_id)
    built = " and ".join("vector" if index_name == name else "keyword" for index_name, _, _ in missing)
    return BuildOutcome(agent_id, name, True, time.monotonic() - started, f"built ({built})")


def _take_build_slot(connection: Connection, *, wait: bool) -> bool:
    """Take the database's build slot; with ``wait``, try again until it is free.

    Waiting is a loop of instant tries, never a blocking ``pg_advisory_lock``: a statement blocked
    on the slot keeps a snapshot open, and the ``CREATE INDEX CONCURRENTLY`` of the build holding
    the slot waits for every older snapshot before it finishes, so each waited for the other and
    PostgreSQL failed one of them as a deadlock (seen when maintenance's agent indexer queued
    behind a build).
    """
    while True:
        taken = connection.execute(
            text("SELECT pg_try_advisory_lock(:ns, :key)"), {"ns": _BUILD_SLOT_NAMESPACE, "key": _BUILD_SLOT_KEY}
        ).scalar()
        if taken or not wait:
            return bool(taken)
        time.sleep(_SLOT_POLL_S)


def _build_missing(
    connection: Connection, agent_id: str, missing: list[tuple[str, sql.Composed, bool]], memory: str
) -> None:
    """Drop the invalid leftovers of failed builds, then create what is missing (the build slot held)."""
    for index_name, _, invalid in missing:
        if invalid:
            connection.execute(text(f'DROP INDEX CONCURRENTLY IF EXISTS "{index_name}"'))
    current = str(connection.execute(text("SHOW maintenance_work_mem")).scalar())
    connection.execute(text("SELECT set_config('maintenance_work_mem', :value, false)"), {"value": memory})
    try:
        for _, statement, _ in missing:
            _run_ddl(connection, statement)
    finally:
        connection.execute(text("SELECT set_config('maintenance_work_mem', :value, false)"), {"value": current})
    # The agent's first-version index, if any, only costs writes now.
    connection.execute(text(f'DROP INDEX CONCURRENTLY IF EXISTS "{_legacy_index_name(agent_id)}"'))


def drop_agent_index(engine: Engine, agent_id: str, *, wait_for_build_s: float = 0.0) -> bool:
    """Drop ``agent_id``'s partial indexes if it has any (the agent shrank, or was deleted).

    With ``wait_for_build_s``, a build of them in progress (which holds the agent's build lock) is
    first waited for, up to that long, so it cannot leave an index behind once this returns; past
    that the indexes are dropped anyway.
    """
    with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as connection:
        key = _lock_key(agent_id)
        locked = wait_for_build_s > 0 and _take_agent_build_lock(connection, key, wait_for_build_s)
        try:
            present = False
            for index in (*_agent_index_names(agent_id), _legacy_index_name(agent_id)):
                if _index_state(connection, index) is not None:
                    present = True
                    connection.execute(text(f'DROP INDEX CONCURRENTLY IF EXISTS "{index}"'))
        finally:
            if locked:
                connection.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), {"ns": _LOCK_NAMESPACE, "key": key})
    agent_indexes.forget(engine, agent_id)
    return present


def _take_agent_build_lock(connection: Connection, key: int, wait_s: float) -> bool:
    """Take the agent's build lock, trying again until ``wait_s`` has passed (never a blocking wait: see
    :func:`_take_build_slot`)."""
    deadline = time.monotonic() + wait_s
    while True:
        taken = connection.execute(
            text("SELECT pg_try_advisory_lock(:ns, :key)"), {"ns": _LOCK_NAMESPACE, "key": key}
        ).scalar()
        if taken:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_SLOT_POLL_S)


def _has_agent_indexes(connection: Session | Connection, agent_id: str) -> bool:
    names = list(_agent_index_names(agent_id))
    return int(connection.execute(_VALID_COUNT_SQL, {"names": names}).scalar_one()) == len(names)


def agents_needing_index(session: Session, min_facts: int) -> list[tuple[str, int]]:
    """Agents with at least ``min_facts`` facts lacking a valid index of their own, largest first.

    Counts every agent's facts (a scan of an index of the whole table): a maintenance query.
    """
    if min_facts <= 0:
        return []
    rows = session.execute(
        text(
            "SELECT agent_id, count(*) AS facts FROM memory_facts WHERE agent_id NOT LIKE :shadows GROUP BY agent_id "
            "HAVING count(*) >= :min ORDER BY facts DESC, agent_id"
        ),
        # A re-process's shadow (memory_core.shadow) is searched by nobody: no index of its own.
        {"min": min_facts, "shadows": SHADOW_LIKE},
    ).all()
    return [(str(row.agent_id), int(row.facts)) for row in rows if not _has_agent_indexes(session, str(row.agent_id))]


@dataclass
class IndexPass:
    """What :func:`index_large_agents` did: the agents it found lacking indexes, and what it built."""

    min_facts: int
    needing: list[tuple[str, int]]
    outcomes: list[tuple[str, int, BuildOutcome]]

    @property
    def left(self) -> int:
        """Agents still lacking indexes because the pass ran out of time (the next pass takes them)."""
        return len(self.needing) - len(self.outcomes)


def index_large_agents(
    engine: Engine,
    min_facts: int,
    *,
    budget_s: float | None = None,
    on_listed: Callable[[list[tuple[str, int]]], None] | None = None,
    on_built: Callable[[int, str, int, BuildOutcome], None] | None = None,
) -> IndexPass:
    """Build the indexes of every agent with at least ``min_facts`` facts that lacks them, largest first.

    Stops starting builds once ``budget_s`` has passed (a build already started finishes); waits
    for a build another process runs; a failed build is reported (its reason starts with
    ``failed:``) and the pass goes on. ``on_listed(needing)`` hears which agents the pass found,
    ``on_built(position, agent_id, facts, outcome)`` each build as it ends.
    """
    started = time.monotonic()
    with Session(bind=engine) as session:
        needing = agents_needing_index(session, min_facts)
    if on_listed is not None:
        on_listed(needing)
    done = IndexPass(min_facts, needing, [])
    for position, (agent_id, facts) in enumerate(needing, start=1):
        if budget_s is not None and time.monotonic() - started >= budget_s:
            break
        begun = time.monotonic()
        try:
            outcome = build_agent_index(engine, agent_id, wait_for_slot=True)
        except Exception as error:  # one agent's failed build must not stop the others'
            logger.warning("could not build the search indexes of agent %s", agent_id, exc_info=True)
            reason = f"failed: {type(error).__name__}: {error}"
            outcome = BuildOutcome(agent_id, agent_index_name(agent_id), False, time.monotonic() - begun, reason)
        done.outcomes.append((agent_id, facts, outcome))
        if on_built is not None:
            on_built(position, agent_id, facts, outcome)
    return done


class AgentIndexes:
    """Which agents have a valid partial index (cached per process), and background builds on demand."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Keyed by (database, agent): one process may serve several databases (tests do).
        self._known: dict[tuple[str, str], tuple[float, bool]] = {}
        self._building: set[tuple[str, str]] = set()
        # Agents whose last build failed or was refused, and when to ask again (monotonic time).
        self._retry_at: dict[tuple[str, str], float] = {}

    def has_index(self, session: Session, agent_id: str) -> bool:
        """True when ``agent_id``'s partial indexes exist and are valid (asked at most every few minutes)."""
        now = time.monotonic()
        key = (database_key(session), agent_id)
        with self._lock:
            known = self._known.get(key)
        if known is not None and now - known[0] < (_PRESENT_TTL_S if known[1] else _ABSENT_TTL_S):
            return known[1]
        present = _has_agent_indexes(session, agent_id)
        with self._lock:
            if len(self._known) > 100_000:
                self._known.clear()
            self._known[key] = (now, present)
        return present

    def forget(self, engine: Engine, agent_id: str) -> None:
        """Drop what is cached about ``agent_id`` (its index was just built or dropped)."""
        with self._lock:
            self._known.pop((database_key(engine), agent_id), None)

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._known.clear()
            self._retry_at.clear()

    def building(self, connectable: Session | Engine, agent_id: str) -> bool:
        """True while this process builds ``agent_id``'s index."""
        key = (database_key(connectable), agent_id)
        with self._lock:
            return key in self._building

    def request(self, engine: Engine, agent_id: str, *, on_done: Callable[[BuildOutcome], None] | None = None) -> bool:
        """Start building ``agent_id``'s index in a background thread; False if one runs or failed lately."""
        now = time.monotonic()
        key = (database_key(engine), agent_id)
        with self._lock:
            if key in self._building or now < self._retry_at.get(key, now):
                return False
            self._building.add(key)

        def work() -> None:
            try:
                outcome = build_agent_index(engine, agent_id)
                logger.info(
                    "search indexes of agent %s: %s in %.1f s (%s)",
                    agent_id,
                    outcome.reason,
                    outcome.seconds,
                    outcome.index_name,
                )
                if outcome.reason == BUSY_REASON:
                    with self._lock:
                        self._retry_at[key] = time.monotonic() + _BUSY_RETRY_S
                if on_done is not None:
                    on_done(outcome)
            except Exception:  # a failed build leaves the exact search in place; retried later
                logger.warning("could not build the search indexes of agent %s", agent_id, exc_info=True)
                with self._lock:
                    self._retry_at[key] = time.monotonic() + _RETRY_AFTER_S
            finally:
                with self._lock:
                    self._building.discard(key)
                    self._known.pop(key, None)

        threading.Thread(target=work, name=f"agent-index-{agent_id[:32]}", daemon=True).start()
        return True


agent_indexes = AgentIndexes()
