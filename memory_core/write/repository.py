"""SQL of the write pipeline: the reads stages make outside the lock, and vector helpers.

Every statement is scoped by ``agent_id``. Vectors are bound in pgvector's binary form
(:mod:`memory_core.db.vectors`); :func:`vector_literal` is their text form, for the places that
still print one (clustering, tests, benchmarks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson
from sqlalchemy.orm import Session

from memory_core.db.statements import sql
from memory_core.db.vectors import vector_array, vector_param
from memory_core.write.naming import fold, normalize_alias

_TOKEN = re.compile(r"[\w'’-]+")


@lru_cache(maxsize=8)
def _vector_format(dimensions: int) -> str:
    return "[" + ",".join(["%.7g"] * dimensions) + "]"


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of ``vector``.

    One ``%`` over a format cached per dimension: the same text as formatting each value, in
    about half the time (stages format several vectors per message).
    """
    return _vector_format(len(vector)) % tuple(vector)


def message_ngrams(message: str, max_words: int = 4) -> list[str]:
    """Every run of 1..``max_words`` folded words: the strings an alias could be."""
    tokens = _TOKEN.findall(fold(message))
    grams: set[str] = set()
    for size in range(1, max_words + 1):
        for start in range(len(tokens) - size + 1):
            grams.add(" ".join(tokens[start : start + size]))
    return sorted(grams)


@dataclass(frozen=True)
class EntityRow:
    """An entity as the write stages see it."""

    canonical_key: str
    display_name: str
    entity_type: str
    profile_text: str | None
    summary_text: str | None


def aliases_for(session: Session, agent_id: str, aliases: Iterable[str]) -> dict[str, str]:
    """Normalised alias -> canonical key, for those of ``aliases`` the agent knows."""
    wanted = sorted({normalize_alias(alias) for alias in aliases if alias.strip()})
    if not wanted:
        return {}
    rows = session.execute(
        sql(
            "SELECT alias, canonical_entity_key FROM memory_entity_aliases "
            "WHERE agent_id = :agent AND alias = ANY(:aliases)"
        ),
        {"agent": agent_id, "aliases": wanted},
    ).all()
    return {row.alias: row.canonical_entity_key for row in rows}


@dataclass(frozen=True)
class KnownAliases:
    """What :func:`aliases_for` and :func:`entities_by_keys` would answer, for several agents at once.

    The extract stage reads it once per chunk (:func:`known_aliases`) instead of two statements
    per message. Nothing a chunk's extraction does writes aliases or entities, so the answers are
    the same as asking message by message.
    """

    aliases: dict[tuple[str, str], str]
    entities: dict[tuple[str, str], EntityRow]
    # normalize_alias of every string asked about: a chunk's messages are asked about again
    # (their n-grams, a thousand or so a chunk) by each message's pre-retrieval.
    normal: dict[str, str] = field(default_factory=dict)

    def aliases_for(self, agent_id: str, aliases: Iterable[str]) -> dict[str, str]:
        """As :func:`aliases_for`, from what was read."""
        found: dict[str, str] = {}
        normal = self.normal
        for alias in {normal.get(alias) or normalize_alias(alias) for alias in aliases if alias.strip()}:
            key = self.aliases.get((agent_id, alias))
            if key is not None:
                found[alias] = key
        return found

    def entities_by_keys(self, agent_id: str, keys: Iterable[str]) -> dict[str, EntityRow]:
        """As :func:`entities_by_keys`, from what was read (the entities the aliases point to)."""
        return {key: row for key in set(keys) if (row := self.entities.get((agent_id, key))) is not None}


# The candidates travel as one JSON object, agent -> its distinct strings: a chunk asks about a
# thousand n-grams or so, and psycopg dumps a text[] element by element in Python (the statement's
# two arrays were a tenth of an ingest worker's CPU with batched extraction); orjson writes it in C.
_KNOWN_ALIASES = sql(
    """
    SELECT a.agent_id, a.alias, a.canonical_entity_key, e.canonical_key, e.display_name, e.entity_type,
           e.profile_text, e.summary_text
    FROM jsonb_each(CAST(:wanted AS jsonb)) AS w(agent_id, aliases)
    CROSS JOIN LATERAL jsonb_array_elements_text(w.aliases) AS q(alias)
    JOIN memory_entity_aliases a ON a.agent_id = w.agent_id AND a.alias = q.alias
    LEFT JOIN memory_entities e ON e.agent_id = a.agent_id AND e.canonical_key = a.canonical_entity_key
    """
)


def known_aliases(session: Session, grams_by_agent: Iterable[tuple[str, Iterable[str]]]) -> KnownAliases:
    """Every alias among the (agent, candidate strings) pairs that its agent knows, with its entity: one statement."""
    normal: dict[str, str] = {}
    wanted: dict[str, set[str]] = {}
    for agent_id, grams in grams_by_agent:
        asked = wanted.setdefault(agent_id, set())
        for gram in grams:
            if not gram.strip():
                continue
            alias = normal.get(gram)
            if alias is None:
                alias = normal[gram] = normalize_alias(gram)
            asked.add(alias)
    if not any(wanted.values()):
        return KnownAliases({}, {}, normal)
    aliases: dict[tuple[str, str], str] = {}
    entities: dict[tuple[str, str], EntityRow] = {}
    payload = orjson.dumps({agent_id: sorted(asked) for agent_id, asked in wanted.items() if asked}).decode()
    for row in session.execute(_KNOWN_ALIASES, {"wanted": payload}).all():
        aliases[(row.agent_id, row.alias)] = row.canonical_entity_key
        if row.canonical_key is not None:
            entities[(row.agent_id, row.canonical_key)] = EntityRow(
                row.canonical_key,
                row.display_name or row.canonical_key,
                row.entity_type,
                row.profile_text,
                row.summary_text,
            )
    return KnownAliases(aliases, entities, normal)


def entities_by_keys(session: Session, agent_id: str, keys: Iterable[str]) -> dict[str, EntityRow]:
    """The agent's entities with these canonical keys."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    rows = session.execute(
        sql(
            "SELECT canonical_key, display_name, entity_type, profile_text, summary_text FROM memory_entities "
            "WHERE agent_id = :agent AND canonical_key = ANY(:keys)"
        ),
        {"agent": agent_id, "keys": wanted},
    ).all()
    return {
        row.canonical_key: EntityRow(
            row.canonical_key,
            row.display_name or row.canonical_key,
            row.entity_type,
            row.profile_text,
            row.summary_text,
        )
        for row in rows
    }


def entities_by_display_name(session: Session, agent_id: str, names: Iterable[str]) -> dict[str, list[EntityRow]]:
    """Lower-cased display name -> the agent's entities with that display name."""
    wanted = sorted({name.strip().lower() for name in names if name.strip()})
    if not wanted:
        return {}
    rows = session.execute(
        sql(
            "SELECT canonical_key, display_name, entity_type, profile_text, summary_text FROM memory_entities "
            "WHERE agent_id = :agent AND lower(display_name) = ANY(:names) ORDER BY canonical_key"
        ),
        {"agent": agent_id, "names": wanted},
    ).all()
    found: dict[str, list[EntityRow]] = {}
    for row in rows:
        found.setdefault(row.display_name.lower(), []).append(
            EntityRow(row.canonical_key, row.display_name, row.entity_type, row.profile_text, row.summary_text)
        )
    return found


@dataclass(frozen=True)
class NameLookup:
    """What an agent already knows of a message's names: the answers of three lookups."""

    aliases: dict[str, str]
    by_key: dict[str, EntityRow]
    by_display_name: dict[str, list[EntityRow]]


_LOOKUP_NAMES = sql(
    """
    WITH hits AS (
        SELECT alias, canonical_entity_key FROM memory_entity_aliases
        WHERE agent_id = :agent AND alias = ANY(:aliases)
    )
    SELECT alias, canonical_entity_key AS canonical_key, NULL AS display_name, NULL AS entity_type,
           NULL AS profile_text, NULL AS summary_text, false AS by_key, false AS by_name
    FROM hits
    UNION ALL
    SELECT NULL, canonical_key, display_name, entity_type, profile_text, summary_text,
           canonical_key = ANY(:keys) OR canonical_key IN (SELECT canonical_entity_key FROM hits),
           coalesce(lower(display_name) = ANY(:names), false)
    FROM memory_entities
    WHERE agent_id = :agent AND (
        canonical_key = ANY(:keys)
        OR canonical_key IN (SELECT canonical_entity_key FROM hits)
        OR lower(display_name) = ANY(:names)
    )
    ORDER BY canonical_key
    """
)


def lookup_names(
    session: Session, agent_id: str, *, aliases: Iterable[str], keys: Iterable[str], display_names: Iterable[str]
) -> NameLookup:
    """The answers of :func:`aliases_for` (``aliases``), :func:`entities_by_keys` (``keys`` and the keys the
    aliases found point to) and :func:`entities_by_display_name` (``display_names``), in one statement.
    """
    wanted_aliases = sorted({normalize_alias(alias) for alias in aliases if alias.strip()})
    wanted_names = sorted({name.strip().lower() for name in display_names if name.strip()})
    wanted_keys = sorted(set(keys))
    if not wanted_aliases and not wanted_names and not wanted_keys:
        return NameLookup({}, {}, {})
    rows = session.execute(
        _LOOKUP_NAMES, {"agent": agent_id, "aliases": wanted_aliases, "keys": wanted_keys, "names": wanted_names}
    ).all()
    found_aliases: dict[str, str] = {}
    by_key: dict[str, EntityRow] = {}
    by_display_name: dict[str, list[EntityRow]] = {}
    for row in rows:
        if row.alias is not None:
            found_aliases[row.alias] = row.canonical_key
            continue
        if row.by_key:
            by_key[row.canonical_key] = EntityRow(
                row.canonical_key,
                row.display_name or row.canonical_key,
                row.entity_type,
                row.profile_text,
                row.summary_text,
            )
        if row.by_name:
            by_display_name.setdefault(row.display_name.lower(), []).append(
                EntityRow(row.canonical_key, row.display_name, row.entity_type, row.profile_text, row.summary_text)
            )
    return NameLookup(found_aliases, by_key, by_display_name)


@dataclass(frozen=True)
class NameRequest:
    """The names one message asks :func:`lookup_names` about."""

    aliases: list[str]
    keys: list[str]
    display_names: list[str]


def lookup_names_many(session: Session, requests: Sequence[tuple[str, NameRequest]]) -> list[NameLookup]:
    """:func:`lookup_names` for several (agent, request) pairs: one statement per agent, the answers in order.

    Each agent's requests are asked together (their names put together), and each request's answer
    is then cut from what was read: every part of :func:`lookup_names`' answer tests each alias or
    entity row on its own (an alias asked, a key asked or pointed to, a display name asked), so the
    cut answers are the ones each request gets alone.
    """
    by_agent: dict[str, list[NameRequest]] = {}
    for agent_id, request in requests:
        by_agent.setdefault(agent_id, []).append(request)
    read = {
        agent_id: lookup_names(
            session,
            agent_id,
            aliases=[alias for request in asked for alias in request.aliases],
            keys=[key for request in asked for key in request.keys],
            display_names=[name for request in asked for name in request.display_names],
        )
        for agent_id, asked in by_agent.items()
    }
    return [_cut_lookup(read[agent_id], request) for agent_id, request in requests]


def _cut_lookup(read: NameLookup, request: NameRequest) -> NameLookup:
    """The part of ``read`` (an agent's answer to several requests) that answers ``request`` alone."""
    aliases = {
        alias: read.aliases[alias]
        for alias in sorted({normalize_alias(alias) for alias in request.aliases if alias.strip()})
        if alias in read.aliases
    }
    wanted_keys = set(request.keys) | set(aliases.values())
    names = {name.strip().lower() for name in request.display_names if name.strip()}
    return NameLookup(
        aliases,
        {key: row for key, row in read.by_key.items() if key in wanted_keys},
        {name: rows for name, rows in read.by_display_name.items() if name in names},
    )


def person_prefix_matches(session: Session, agent_id: str, first_name: str) -> list[EntityRow]:
    """Person entities whose first name starts with ``first_name`` (diminutives: Carol -> Carolina)."""
    pattern = first_name.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = session.execute(
        sql(
            "SELECT canonical_key, display_name, entity_type, profile_text, summary_text FROM memory_entities "
            "WHERE agent_id = :agent AND entity_type = 'person' AND lower(display_name) LIKE :pattern "
            "ORDER BY canonical_key LIMIT 5"
        ),
        {"agent": agent_id, "pattern": pattern},
    ).all()
    return [EntityRow(r.canonical_key, r.display_name, r.entity_type, r.profile_text, r.summary_text) for r in rows]


def nearest_entities(
    session: Session, agent_id: str, vector: Sequence[float], limit: int = 3
) -> list[tuple[EntityRow, float]]:
    """The agent's entities closest to ``vector`` by cosine similarity."""
    rows = session.execute(
        sql(
            "SELECT canonical_key, display_name, entity_type, profile_text, summary_text, "
            "1 - (embedding_vec <=> CAST(:vec AS vector)) AS similarity FROM memory_entities "
            "WHERE agent_id = :agent AND embedding_vec IS NOT NULL "
            "ORDER BY embedding_vec <=> CAST(:vec AS vector) LIMIT :limit"
        ),
        {"agent": agent_id, "vec": vector_param(vector), "limit": limit},
    ).all()
    return [
        (EntityRow(r.canonical_key, r.display_name, r.entity_type, r.profile_text, r.summary_text), float(r.similarity))
        for r in rows
    ]


@dataclass(frozen=True)
class FactRow:
    """An active fact as reconciliation and informed extraction see it."""

    fact_id: str
    entity_key: str
    text: str
    attribute_key: str | None
    valid_from: datetime
    similarity: float
    # When the row was written (its transaction's start), and by which transaction (NULL for
    # rows older than migration 0022): tell facts written after a read (see ReadPoint).
    created_at: datetime | None = None
    created_xid: int | None = None


@dataclass(frozen=True)
class ClosestFactsQuery:
    """One fact's search for :func:`closest_active_facts_many`: what :func:`closest_active_facts` takes."""

    agent_id: str
    entity_key: str
    vector: Sequence[float] | None
    attribute_key: str | None = None


_CLOSEST_MANY = sql(
    """
    SELECT w.ord, f.id, f.entity_key, f.fact_text, f.attribute_key, f.valid_from, f.created_at,
           f.created_xid,
           COALESCE(1 - (f.embedding_vec <=> w.vec), 0.0) AS similarity
    FROM unnest(CAST(:agents AS text[]), CAST(:keys AS text[]), CAST(:vecs AS vector[]),
                CAST(:attributes AS text[])) WITH ORDINALITY AS w(agent, entity_key, vec, attribute, ord)
    CROSS JOIN LATERAL (
        (SELECT id FROM memory_facts
         WHERE agent_id = w.agent AND entity_key = w.entity_key AND valid_to IS NULL
         ORDER BY embedding_vec <=> w.vec LIMIT :limit)
        UNION
        SELECT id FROM memory_facts
        WHERE agent_id = w.agent AND entity_key = w.entity_key AND valid_to IS NULL
          AND w.attribute IS NOT NULL AND attribute_key = w.attribute
    ) c
    JOIN memory_facts f ON f.id = c.id
    ORDER BY w.ord, similarity DESC, f.id
    """
)


def closest_active_facts_many(
    session: Session, queries: Sequence[ClosestFactsQuery], *, limit: int
) -> list[list[FactRow]]:
    """:func:`closest_active_facts` for several facts (any agents), in one statement for those with a vector.

    The lists come back in ``queries``' order and are the ones :func:`closest_active_facts`
    gives for each query on its own.
    """
    found: list[list[FactRow]] = [[] for _ in queries]
    with_vector: list[int] = []
    for index, query in enumerate(queries):
        if query.vector:
            with_vector.append(index)
        else:
            found[index] = closest_active_facts(session, query.agent_id, query.entity_key, None, limit=limit)
    if not with_vector:
        return found
    rows = session.execute(
        _CLOSEST_MANY,
        {
            "agents": [queries[index].agent_id for index in with_vector],
            "keys": [queries[index].entity_key for index in with_vector],
            "vecs": vector_array(queries[index].vector for index in with_vector),
            "attributes": [queries[index].attribute_key for index in with_vector],
            "limit": limit,
        },
    ).all()
    for row in rows:
        found[with_vector[row.ord - 1]].append(_fact_row(row))
    return found


def closest_active_facts(
    session: Session,
    agent_id: str,
    entity_key: str,
    vector: Sequence[float] | None,
    *,
    limit: int,
    attribute_key: str | None = None,
) -> list[FactRow]:
    """Active facts of ``entity_key``: the ``limit`` closest to ``vector`` plus any in ``attribute_key``'s slot."""
    if vector is None:
        rows = session.execute(
            sql(
                "SELECT id, entity_key, fact_text, attribute_key, valid_from, created_at, "
                "created_xid, 0.0 AS similarity "
                "FROM memory_facts "
                "WHERE agent_id = :agent AND entity_key = :key AND valid_to IS NULL "
                "ORDER BY valid_from DESC LIMIT :limit"
            ),
            {"agent": agent_id, "key": entity_key, "limit": limit},
        ).all()
    else:
        rows = session.execute(
            sql(
                """
                WITH nearest AS (
                    SELECT id FROM memory_facts
                    WHERE agent_id = :agent AND entity_key = :key AND valid_to IS NULL
                    ORDER BY embedding_vec <=> CAST(:vec AS vector) LIMIT :limit
                ), same_slot AS (
                    SELECT id FROM memory_facts
                    WHERE agent_id = :agent AND entity_key = :key AND valid_to IS NULL
                      AND CAST(:attribute AS varchar) IS NOT NULL AND attribute_key = CAST(:attribute AS varchar)
                )
                SELECT f.id, f.entity_key, f.fact_text, f.attribute_key, f.valid_from, f.created_at,
                       f.created_xid,
                       COALESCE(1 - (f.embedding_vec <=> CAST(:vec AS vector)), 0.0) AS similarity
                FROM memory_facts f
                WHERE f.id IN (SELECT id FROM nearest UNION SELECT id FROM same_slot)
                ORDER BY similarity DESC, f.id
                """
            ),
            {
                "agent": agent_id,
                "key": entity_key,
                "vec": vector_param(vector),
                "limit": limit,
                "attribute": attribute_key,
            },
        ).all()
    return [_fact_row(row) for row in rows]


def _fact_row(row: Any) -> FactRow:
    return FactRow(
        str(row.id),
        row.entity_key,
        row.fact_text,
        row.attribute_key,
        row.valid_from,
        float(row.similarity),
        getattr(row, "created_at", None),
        getattr(row, "created_xid", None),
    )


@dataclass(frozen=True)
class ReadPoint:
    """When a read of memory ran: the database's clock and snapshot just after it (:func:`read_point`).

    ``snapshot`` is ``pg_current_snapshot()`` as text (``xmin:xmax:xip,...``): the transactions
    whose writes a statement begun then could not see.
    """

    at: datetime
    snapshot: str


def read_point(session: Session) -> ReadPoint:
    """The database's clock (``clock_timestamp()``, not the transaction's start) and snapshot now.

    Read after the statements it stands for (each sees what was committed when it began, so
    a later snapshot sees at least as much): a row it cannot see, none of them saw.
    """
    at, snapshot = session.execute(sql("SELECT clock_timestamp(), CAST(pg_current_snapshot() AS text)")).one()
    assert isinstance(at, datetime)
    return ReadPoint(at, str(snapshot))


def visible_in(snapshot: str, xid: int) -> bool:
    """Whether transaction ``xid``'s writes are visible in ``snapshot`` (``pg_visible_in_snapshot``).

    Committed before it was taken: older than every transaction then running (``xmin``), or
    begun before it (below ``xmax``) and not among those running (``xip``).
    """
    xmin, xmax, running = snapshot.split(":")
    if xid < int(xmin):
        return True
    return xid < int(xmax) and str(xid) not in running.split(",")
