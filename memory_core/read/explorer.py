"""The reads of the memory explorer (``/ui/``): agents, an agent's entities, facts with their history, events, imports.

Every function reads at most one page of rows (plus one, to know whether a next page exists)
and walks an index to get there, so a page of an agent with 100k facts costs what a page of a
small agent costs. Counts shown next to lists are capped (:data:`COUNT_CAP`): "10000+" is as
useful to a person as the exact number and does not read the whole agent.

Every list pages by keyset, never by ``OFFSET``: lists ordered by time take a :class:`Cursor`
(the last row's time and id), the entity list an opaque cursor of its order's sort key
(:func:`list_entity_rows`). A deep page then costs what the first one costs.

Like :mod:`memory_core.read.management`, every statement is scoped by ``agent_id`` and the
functions take a session and never commit.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.shadow import SHADOW_LIKE

__all__ = [
    "COUNT_CAP",
    "AgentSummary",
    "Cursor",
    "EntityRow",
    "EventRow",
    "FactVersion",
    "ImportRow",
    "Neighbour",
    "Page",
    "entity_facts",
    "entity_names",
    "fact_histories",
    "list_agent_events",
    "list_agent_imports",
    "list_agents",
    "list_entity_rows",
    "recent_facts",
]

T = TypeVar("T")

# Counts beyond this are shown as "COUNT_CAP+": the count reads at most this many index entries.
COUNT_CAP = 10_000
# How many older versions a fact's history shows (a chain longer than that is cut, and says so).
MAX_HISTORY_DEPTH = 20
# How many neighbours the relationship graph draws around one entity.
MAX_NEIGHBOURS = 12
# How many agent ids the agents page probes, at most, to fill one page of a prefix-scoped key.
_MAX_AGENT_PROBES = 5_000


@dataclass(frozen=True)
class Cursor:
    """Where the next page of a time-ordered list starts: strictly before ``(at, key)``."""

    at: datetime
    key: str

    def encode(self) -> str:
        """``<iso time>~<key>``, for a query string."""
        return f"{self.at.isoformat()}~{self.key}"

    @classmethod
    def decode(cls, raw: str | None) -> Cursor | None:
        """The cursor of :meth:`encode`, or None for a missing or malformed one (the first page)."""
        if not raw or "~" not in raw:
            return None
        at, _, key = raw.partition("~")
        try:
            return cls(datetime.fromisoformat(at), key)
        except ValueError:
            return None


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of rows and where the next one starts (None on the last page)."""

    items: list[T]
    next_cursor: str | None = None


@dataclass(frozen=True)
class AgentSummary:
    """An agent as the agents page lists it; counts are capped at :data:`COUNT_CAP`."""

    agent_id: str
    active_facts: int
    entities: int
    last_received_at: datetime | None
    last_message_at: datetime | None


@dataclass(frozen=True)
class EntityRow:
    """An entity as lists show it (``entity_id`` is the list's tie-break, for its cursor)."""

    entity_id: str
    canonical_key: str
    display_name: str | None
    entity_type: str
    fact_count: int
    importance_score: float | None
    last_seen_at: datetime


@dataclass(frozen=True)
class FactVersion:
    """A fact (active or not) with its validity window and where it came from."""

    fact_id: str
    entity_key: str
    entity_name: str | None
    attribute_key: str | None
    fact_text: str
    speaker: str | None
    valid_from: datetime
    valid_to: datetime | None
    invalidated_at: datetime | None
    supersedes_fact_id: str | None
    source_event_id: str | None
    source_text: str | None
    source_speaker: str | None
    source_occurred_at: datetime | None
    confidence: float
    importance: float
    created_at: datetime

    @property
    def is_active(self) -> bool:
        """Whether the fact is valid now (its window is open)."""
        return self.valid_to is None


@dataclass(frozen=True)
class EventRow:
    """A message and its processing."""

    event_id: str
    status: str
    stage: str | None
    attempts: int
    error: str | None
    text: str
    speaker: str
    occurred_at: datetime
    created_at: datetime
    finished_at: datetime | None
    import_id: str | None


@dataclass(frozen=True)
class ImportRow:
    """An import and how far it got (counted from its runs)."""

    import_id: str
    source: str
    total: int
    duplicates: int
    done: int
    failed: int
    created_at: datetime

    @property
    def pending(self) -> int:
        """Messages neither done nor failed yet."""
        return max(self.total - self.done - self.failed, 0)

    @property
    def status(self) -> str:
        """``running`` while messages are pending, else ``failed`` (some failed) or ``done``."""
        if self.pending:
            return "running"
        return "failed" if self.failed else "done"


@dataclass(frozen=True)
class Neighbour:
    """An entity one active relationship away, for the graph picture."""

    canonical_key: str
    display_name: str | None
    rel_type: str
    outgoing: bool
    strength: float


@dataclass(frozen=True)
class FactHistory:
    """The versions a fact superseded, newest first, and whether the chain goes on past them."""

    versions: list[FactVersion] = field(default_factory=list)
    truncated: bool = False


def _like_pattern(fragment: str) -> str:
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


# ---- Agents --------------------------------------------------------------------------------------------

# A loose index scan of memory_events' agent_id: one index probe per distinct agent, however many
# events each has (SELECT DISTINCT would read every event).
_AGENT_SCAN_SQL = """
WITH RECURSIVE agents(agent_id, probes) AS (
    (SELECT agent_id, 1 FROM memory_events WHERE agent_id > :after ORDER BY agent_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.agent_id FROM memory_events e WHERE e.agent_id > a.agent_id ORDER BY e.agent_id LIMIT 1),
           a.probes + 1
    FROM agents a WHERE a.agent_id IS NOT NULL AND a.probes < :max_probes
)
SELECT agent_id FROM agents
WHERE agent_id IS NOT NULL AND (CAST(:prefix AS text) IS NULL OR starts_with(agent_id, :prefix))
  AND agent_id NOT LIKE :shadows
LIMIT :limit
"""

_LISTED_AGENTS_SQL = """
SELECT a.agent_id FROM unnest(CAST(:ids AS text[])) AS a(agent_id)
WHERE a.agent_id > :after AND EXISTS (SELECT 1 FROM memory_events e WHERE e.agent_id = a.agent_id)
ORDER BY a.agent_id LIMIT :limit
"""

_AGENT_STATS_SQL = """
SELECT a.agent_id,
    (SELECT count(*) FROM (SELECT 1 FROM memory_facts f
        WHERE f.agent_id = a.agent_id AND f.valid_to IS NULL LIMIT :cap) c) AS active_facts,
    (SELECT count(*) FROM (SELECT 1 FROM memory_entities n
        WHERE n.agent_id = a.agent_id AND n.is_active LIMIT :cap) c) AS entities,
    (SELECT max(r.created_at) FROM pipeline_runs r WHERE r.agent_id = a.agent_id) AS last_received_at,
    (SELECT max(e.occurred_at) FROM memory_events e WHERE e.agent_id = a.agent_id) AS last_message_at
FROM unnest(CAST(:ids AS text[])) WITH ORDINALITY AS a(agent_id, position)
ORDER BY a.position
"""


def list_agents(
    session: Session,
    *,
    agent_ids: Sequence[str] | None = None,
    prefix: str | None = None,
    after: str | None = None,
    limit: int = 25,
) -> Page[AgentSummary]:
    """Agents that have memory, by id, with capped counts and their last activity.

    ``agent_ids`` (a tenant key's list) or ``prefix`` (a tenant key's prefix) restrict the list;
    with neither, every agent is listed (an operator key). ``after`` is the last agent id of the
    previous page.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    params: dict[str, Any] = {"after": after or "", "limit": limit + 1}
    if agent_ids is not None:
        ids = [
            str(agent_id)
            for agent_id in session.execute(
                text(_LISTED_AGENTS_SQL), {**params, "ids": sorted(set(agent_ids))}
            ).scalars()
        ]
    else:
        start = after or ""
        if prefix and start < prefix:
            # The scan starts just before the prefix: every id at or past it sorts after this.
            start = prefix[:-1] if len(prefix) > 1 else ""
        # A re-process's hidden shadow agent (memory_core.shadow) is never listed.
        params.update({"after": start, "prefix": prefix, "max_probes": _MAX_AGENT_PROBES, "shadows": SHADOW_LIKE})
        ids = [str(agent_id) for agent_id in session.execute(text(_AGENT_SCAN_SQL), params).scalars()]
        if after:
            ids = [agent_id for agent_id in ids if agent_id > after]
    more = len(ids) > limit
    ids = ids[:limit]
    if not ids:
        return Page([])
    rows = session.execute(text(_AGENT_STATS_SQL), {"ids": ids, "cap": COUNT_CAP}).all()
    summaries = [
        AgentSummary(
            agent_id=str(row.agent_id),
            active_facts=int(row.active_facts),
            entities=int(row.entities),
            last_received_at=row.last_received_at,
            last_message_at=row.last_message_at,
        )
        for row in rows
    ]
    return Page(summaries, ids[-1] if more else None)


# ---- Entities ------------------------------------------------------------------------------------------

EntityOrder = Literal["recent", "importance", "name"]

_ENTITY_COLUMNS = (
    "id, canonical_key, display_name, entity_type, fact_count, importance_score, last_seen_at, "
    "COALESCE(display_name, canonical_key) AS shown_name"
)

# Each order is a keyset over an index of memory_entities: (agent_id, last_seen_at) for "recent",
# (agent_id, importance_score) for "importance", (agent_id, COALESCE(display_name, canonical_key), id)
# for "name" (migration 0016). The row comparison's leading column bounds the index range; ties
# on it (equal times or scores) are ordered by a small incremental sort.
_RECENT_SQL = """
SELECT {columns} FROM memory_entities WHERE {where} {keyset}
ORDER BY last_seen_at DESC, id DESC LIMIT :limit
"""
_NAME_SQL = """
SELECT {columns} FROM memory_entities WHERE {where} {keyset}
ORDER BY COALESCE(display_name, canonical_key), id LIMIT :limit
"""
# NULL scores (not computed yet) come last: the scored entities by score, then the others by
# recency, each part its own index range of at most a page; the cursor says which part it is in.
_IMPORTANCE_SQL = """
SELECT * FROM (
    (SELECT 0 AS part, {columns} FROM memory_entities
     WHERE {where} AND importance_score IS NOT NULL {scored_keyset}
     ORDER BY importance_score DESC, last_seen_at DESC, id DESC LIMIT :limit)
    UNION ALL
    (SELECT 1 AS part, {columns} FROM memory_entities
     WHERE {where} AND importance_score IS NULL {unscored_keyset}
     ORDER BY last_seen_at DESC, id DESC LIMIT :limit)
) page
ORDER BY part, importance_score DESC, last_seen_at DESC, id DESC LIMIT :limit
"""


def _entity_cursor(order: EntityOrder, row: EntityRow) -> str:
    """The cursor after ``row`` in ``order``: its sort key, as url-safe base64 of a JSON list."""
    key: list[Any]
    if order == "name":
        key = [order, row.display_name or row.canonical_key, row.entity_id]
    elif order == "importance":
        key = [order, row.importance_score, row.last_seen_at.isoformat(), row.entity_id]
    else:
        key = [order, row.last_seen_at.isoformat(), row.entity_id]
    return base64.urlsafe_b64encode(json.dumps(key).encode("utf-8")).decode("ascii")


def _decode_entity_cursor(order: EntityOrder, raw: str | None) -> list[Any] | None:
    """The sort key of a cursor of ``order`` (without the order), or None: no cursor, malformed, or of another order."""
    if not raw:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(raw.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        return None
    expected = {"recent": 3, "importance": 4, "name": 3}[order]
    if not isinstance(key, list) or len(key) != expected or key[0] != order:
        return None
    values = key[1:]
    try:
        entity_id = uuid.UUID(str(values[-1]))
        if order == "name":
            return [str(values[0]), entity_id]
        at = datetime.fromisoformat(str(values[-2]))
        if order == "importance":
            score = None if values[0] is None else float(values[0])
            return [score, at, entity_id]
        return [at, entity_id]
    except (ValueError, TypeError):
        return None


def list_entity_rows(
    session: Session,
    agent_id: str,
    *,
    search: str | None = None,
    entity_type: str | None = None,
    order: EntityOrder = "recent",
    limit: int = 50,
    after: str | None = None,
) -> Page[EntityRow]:
    """Active entities of the agent matching ``search`` (name or key) and ``entity_type``, a page in ``order``.

    ``after`` is the previous page's ``next_cursor``; a malformed one (or one of another order)
    gives the first page. Filters are applied while the order's index is walked: a page reads
    its rows plus the non-matching ones between them, never the agent's other entities.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    conditions = ["agent_id = :agent", "is_active"]
    params: dict[str, Any] = {"agent": agent_id, "limit": limit + 1}
    if search:
        conditions.append("(display_name ILIKE :pattern OR canonical_key ILIKE :pattern)")
        params["pattern"] = _like_pattern(search)
    if entity_type:
        conditions.append("entity_type = :type")
        params["type"] = entity_type
    where = " AND ".join(conditions)
    key = _decode_entity_cursor(order, after)
    if order == "name":
        keyset = ""
        if key is not None:
            keyset = "AND (COALESCE(display_name, canonical_key), id) > (:name, :id)"
            params.update({"name": key[0], "id": key[1]})
        sql = _NAME_SQL.format(columns=_ENTITY_COLUMNS, where=where, keyset=keyset)
    elif order == "importance":
        scored_keyset = unscored_keyset = ""
        if key is not None:
            score, at, entity_id = key
            params.update({"at": at, "id": entity_id})
            if score is None:  # the cursor is among the unscored: every scored one was shown
                scored_keyset = "AND false"
                unscored_keyset = "AND (last_seen_at, id) < (:at, :id)"
            else:
                scored_keyset = "AND (importance_score, last_seen_at, id) < (:score, :at, :id)"
                params["score"] = score
        sql = _IMPORTANCE_SQL.format(
            columns=_ENTITY_COLUMNS, where=where, scored_keyset=scored_keyset, unscored_keyset=unscored_keyset
        )
    else:
        keyset = ""
        if key is not None:
            keyset = "AND (last_seen_at, id) < (:at, :id)"
            params.update({"at": key[0], "id": key[1]})
        sql = _RECENT_SQL.format(columns=_ENTITY_COLUMNS, where=where, keyset=keyset)
    rows = session.execute(text(sql), params).all()
    entities = [
        EntityRow(
            entity_id=str(row.id),
            canonical_key=str(row.canonical_key),
            display_name=row.display_name,
            entity_type=str(row.entity_type),
            fact_count=int(row.fact_count or 0),
            importance_score=float(row.importance_score) if row.importance_score is not None else None,
            last_seen_at=row.last_seen_at,
        )
        for row in rows
    ]
    shown = entities[:limit]
    if len(entities) <= limit or not shown:
        return Page(shown)
    return Page(shown, _entity_cursor(order, shown[-1]))


def entity_types(session: Session, agent_id: str, *, limit: int = 50) -> list[str]:
    """The entity types the agent has (for the type filter), alphabetically.

    A loose scan of the ``split_part(canonical_key, ':', 1)`` index: one probe per type.
    """
    rows = session.execute(
        text(
            """
            WITH RECURSIVE types(kind, probes) AS (
                (SELECT split_part(canonical_key, ':', 1), 1 FROM memory_entities
                 WHERE agent_id = :agent ORDER BY split_part(canonical_key, ':', 1) LIMIT 1)
                UNION ALL
                SELECT (SELECT split_part(e.canonical_key, ':', 1) FROM memory_entities e
                        WHERE e.agent_id = :agent AND split_part(e.canonical_key, ':', 1) > t.kind
                        ORDER BY split_part(e.canonical_key, ':', 1) LIMIT 1), t.probes + 1
                FROM types t WHERE t.kind IS NOT NULL AND t.probes < :limit
            )
            SELECT kind FROM types WHERE kind IS NOT NULL AND kind <> ''
            """
        ),
        {"agent": agent_id, "limit": limit},
    ).scalars()
    return [str(kind) for kind in rows]


def entity_names(session: Session, agent_id: str, keys: Sequence[str]) -> dict[str, str | None]:
    """Display names of the given canonical keys (keys the agent does not have are left out)."""
    if not keys:
        return {}
    rows = session.execute(
        text(
            "SELECT canonical_key, display_name FROM memory_entities "
            "WHERE agent_id = :agent AND canonical_key = ANY(CAST(:keys AS text[]))"
        ),
        {"agent": agent_id, "keys": list(dict.fromkeys(keys))},
    ).all()
    return {str(row.canonical_key): row.display_name for row in rows}


def neighbours(session: Session, agent_id: str, canonical_key: str, *, limit: int = MAX_NEIGHBOURS) -> list[Neighbour]:
    """The entity's strongest active relationships, one per neighbour, with the neighbours' names."""
    rows = session.execute(
        text(
            """
            SELECT DISTINCT ON (other) other, rel_type, outgoing, strength FROM (
                SELECT CASE WHEN source_entity_key = :key THEN target_entity_key ELSE source_entity_key END AS other,
                       rel_type, source_entity_key = :key AS outgoing, strength, valid_from, id
                FROM memory_entity_relationships
                WHERE agent_id = :agent AND (source_entity_key = :key OR target_entity_key = :key)
                  AND valid_to IS NULL
                ORDER BY strength DESC, valid_from DESC, id LIMIT :scan
            ) edges
            WHERE other <> :key
            ORDER BY other, strength DESC
            """
        ),
        {"agent": agent_id, "key": canonical_key, "scan": limit * 4},
    ).all()
    strongest = sorted(rows, key=lambda row: (-float(row.strength), str(row.other)))[:limit]
    names = entity_names(session, agent_id, [str(row.other) for row in strongest])
    return [
        Neighbour(
            canonical_key=str(row.other),
            display_name=names.get(str(row.other)),
            rel_type=str(row.rel_type),
            outgoing=bool(row.outgoing),
            strength=float(row.strength),
        )
        for row in strongest
    ]


# ---- Facts ---------------------------------------------------------------------------------------------

_VERSION_COLUMNS = """
    f.id, f.entity_key, f.entity_name, f.attribute_key, f.fact_text, f.speaker, f.valid_from, f.valid_to,
    f.invalidated_at, f.supersedes_fact_id, f.source_event_id, left(ev.text, 1000) AS source_text,
    ev.speaker AS source_speaker, ev.occurred_at AS source_occurred_at, f.confidence, f.importance, f.created_at
"""


def _version(row: Any) -> FactVersion:
    return FactVersion(
        fact_id=str(row.id),
        entity_key=str(row.entity_key),
        entity_name=row.entity_name,
        attribute_key=row.attribute_key,
        fact_text=str(row.fact_text),
        speaker=row.speaker,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        invalidated_at=row.invalidated_at,
        supersedes_fact_id=_str(row.supersedes_fact_id),
        source_event_id=_str(row.source_event_id),
        source_text=row.source_text,
        source_speaker=row.source_speaker,
        source_occurred_at=row.source_occurred_at,
        confidence=float(row.confidence),
        importance=float(row.importance),
        created_at=row.created_at,
    )


def recent_facts(
    session: Session, agent_id: str, *, before: Cursor | None = None, limit: int = 20
) -> Page[FactVersion]:
    """Active facts, newest first, by keyset on (created_at, id) over the active-facts index."""
    params: dict[str, Any] = {"agent": agent_id, "limit": limit + 1}
    keyset = ""
    if before is not None and (fact_id := _uuid(before.key)) is not None:
        keyset = "AND (f.created_at, f.id) < (:at, :id)"
        params.update({"at": before.at, "id": fact_id})
    rows = session.execute(
        text(
            f"SELECT {_VERSION_COLUMNS} FROM memory_facts f LEFT JOIN memory_events ev ON ev.id = f.source_event_id "  # noqa: S608
            f"WHERE f.agent_id = :agent AND f.valid_to IS NULL {keyset} "
            "ORDER BY f.created_at DESC, f.id DESC LIMIT :limit"
        ),
        params,
    ).all()
    facts = [_version(row) for row in rows]
    return _time_page(facts[:limit], len(facts) > limit, lambda fact: Cursor(fact.created_at, fact.fact_id))


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _time_page(items: list[T], more: bool, cursor_of: Callable[[T], Cursor]) -> Page[T]:
    if not more or not items:
        return Page(items)
    return Page(items, cursor_of(items[-1]).encode())


# Facts of an entity: its links (every fact has one to its own subject, migration 0011), whose
# copies of the fact's validity window are indexed newest first, open and closed apart
# (migration 0016). The page is chosen from the index (at most :limit entries of each range),
# then only its facts are read.
_LINKS_RANGE = """
    (SELECT l.fact_id, l.fact_valid_from FROM memory_fact_entity_links l
     WHERE l.agent_id = :agent AND l.entity_key = :key AND {window} {keyset}
     ORDER BY l.fact_valid_from DESC, l.fact_id DESC LIMIT :limit)
"""
_ENTITY_FACTS_SQL = """
WITH page AS (
    SELECT fact_id, fact_valid_from FROM ({ranges}) ranges
    ORDER BY fact_valid_from DESC, fact_id DESC LIMIT :limit
)
SELECT {columns} FROM page p JOIN memory_facts f ON f.id = p.fact_id AND f.agent_id = :agent
LEFT JOIN memory_events ev ON ev.id = f.source_event_id
ORDER BY p.fact_valid_from DESC, p.fact_id DESC
"""

FactWindow = Literal["active", "past"]


def entity_facts(
    session: Session,
    agent_id: str,
    canonical_key: str,
    *,
    which: FactWindow = "active",
    as_of: datetime | None = None,
    before: Cursor | None = None,
    limit: int = 50,
) -> Page[FactVersion]:
    """A page of the entity's facts, newest first (by ``valid_from``, then id), by keyset.

    ``active``: valid now, or at ``as_of`` when given (valid_from <= as_of < valid_to);
    ``past``: closed windows (superseded or invalidated). ``before`` is the previous page's
    ``next_cursor``. Facts valid now and past facts are each one index range of at most a page;
    facts valid at ``as_of`` are two (those still open, and those closed after ``as_of``: the
    latter skips, in the index, the closed facts that had ended by then).
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    params: dict[str, Any] = {"agent": agent_id, "key": canonical_key, "limit": limit + 1}
    keyset = ""
    if before is not None and (fact_id := _uuid(before.key)) is not None:
        keyset = "AND (l.fact_valid_from, l.fact_id) < (:at, :id)"
        params.update({"at": before.at, "id": fact_id})
    if which == "past":
        windows = ["l.fact_valid_to IS NOT NULL"]
    elif as_of is None:
        windows = ["l.fact_valid_to IS NULL"]
    else:
        windows = [
            "l.fact_valid_to IS NULL AND l.fact_valid_from <= :as_of",
            "l.fact_valid_to IS NOT NULL AND l.fact_valid_from <= :as_of AND l.fact_valid_to > :as_of",
        ]
        params["as_of"] = as_of
    ranges = " UNION ALL ".join(_LINKS_RANGE.format(window=window, keyset=keyset) for window in windows)
    rows = session.execute(text(_ENTITY_FACTS_SQL.format(columns=_VERSION_COLUMNS, ranges=ranges)), params).all()
    facts = [_version(row) for row in rows]
    return _time_page(facts[:limit], len(facts) > limit, lambda fact: Cursor(fact.valid_from, fact.fact_id))


_HISTORY_SQL = """
WITH RECURSIVE chain(head, previous, depth) AS (
    SELECT f.id, f.supersedes_fact_id, 1 FROM memory_facts f
    WHERE f.agent_id = :agent AND f.id = ANY(CAST(:ids AS uuid[])) AND f.supersedes_fact_id IS NOT NULL
    UNION ALL
    SELECT c.head, p.supersedes_fact_id, c.depth + 1
    FROM chain c JOIN memory_facts p ON p.id = c.previous AND p.agent_id = :agent
    WHERE p.supersedes_fact_id IS NOT NULL AND c.depth <= :depth
)
SELECT c.head, c.depth, {columns}
FROM chain c JOIN memory_facts f ON f.id = c.previous AND f.agent_id = :agent
LEFT JOIN memory_events ev ON ev.id = f.source_event_id
ORDER BY c.head, c.depth
"""


def fact_histories(session: Session, agent_id: str, fact_ids: Sequence[str]) -> dict[str, FactHistory]:
    """For each fact, the versions it superseded (the ``supersedes_fact_id`` chain), newest first.

    At most :data:`MAX_HISTORY_DEPTH` versions per fact; a longer chain is marked ``truncated``.
    """
    ids = [parsed for parsed in (_uuid(fact_id) for fact_id in fact_ids) if parsed is not None]
    if not ids:
        return {}
    rows = session.execute(
        text(_HISTORY_SQL.format(columns=_VERSION_COLUMNS)),
        {"agent": agent_id, "ids": ids, "depth": MAX_HISTORY_DEPTH},
    ).all()
    histories: dict[str, FactHistory] = {}
    for row in rows:
        history = histories.setdefault(str(row.head), FactHistory())
        if int(row.depth) > MAX_HISTORY_DEPTH:
            object.__setattr__(history, "truncated", True)
            continue
        history.versions.append(_version(row))
    return histories


# ---- Events and imports --------------------------------------------------------------------------------

_EVENTS_SQL = """
SELECT r.event_id, r.status, r.stage, r.attempts, r.error, r.created_at, r.finished_at, r.import_id,
       left(e.text, 2000) AS text, e.speaker, e.occurred_at
FROM pipeline_runs r JOIN memory_events e ON e.id = r.event_id
WHERE r.agent_id = :agent {status} {keyset}
ORDER BY r.created_at DESC, r.event_id DESC LIMIT :limit
"""

EventFilter = Literal["all", "failed", "pending"]
_EVENT_FILTERS: dict[str, str] = {
    "all": "",
    "failed": "AND r.status = 'failed'",
    "pending": "AND r.status NOT IN ('done', 'failed', 'skipped')",
}


def list_agent_events(
    session: Session,
    agent_id: str,
    *,
    status: EventFilter = "all",
    before: Cursor | None = None,
    limit: int = 25,
) -> Page[EventRow]:
    """The agent's messages with their processing, newest received first (keyset on the runs' index).

    ``error`` is the stored text; the caller decides how much of it a client sees.
    """
    params: dict[str, Any] = {"agent": agent_id, "limit": limit + 1}
    keyset = ""
    if before is not None and (event_id := _uuid(before.key)) is not None:
        keyset = "AND (r.created_at, r.event_id) < (:at, :id)"
        params.update({"at": before.at, "id": event_id})
    rows = session.execute(
        text(_EVENTS_SQL.format(status=_EVENT_FILTERS[status], keyset=keyset)),
        params,
    ).all()
    events = [
        EventRow(
            event_id=str(row.event_id),
            status=str(row.status),
            stage=row.stage,
            attempts=int(row.attempts),
            error=row.error,
            text=str(row.text),
            speaker=str(row.speaker),
            occurred_at=row.occurred_at,
            created_at=row.created_at,
            finished_at=row.finished_at,
            import_id=_str(row.import_id),
        )
        for row in rows
    ]
    return _time_page(events[:limit], len(events) > limit, lambda event: Cursor(event.created_at, event.event_id))


def event_agent(session: Session, event_id: str) -> str | None:
    """The agent an event belongs to (None for an unknown or malformed id)."""
    parsed = _uuid(event_id)
    if parsed is None:
        return None
    owner = session.execute(
        text("SELECT agent_id FROM pipeline_runs WHERE event_id = :id"), {"id": parsed}
    ).scalar_one_or_none()
    return _str(owner)


# The page of imports is chosen first (LIMIT in the subquery), so only its imports' runs are
# counted, each count one range of ix_pipeline_runs_import_status (an import's done, then its
# failed runs). That is the one read here not bounded by the page: it grows with the import's
# size, ~1-2 ms per 10,000 runs (tests/ui/test_scale.py).
_IMPORTS_SQL = """
SELECT i.id, i.source, i.total, i.duplicates, i.created_at,
       (SELECT count(*) FROM pipeline_runs r WHERE r.import_id = i.id AND r.status = 'done') AS done,
       (SELECT count(*) FROM pipeline_runs r WHERE r.import_id = i.id AND r.status = 'failed') AS failed
FROM (
    SELECT id, source, total, duplicates, created_at FROM imports
    WHERE agent_id = :agent {keyset}
    ORDER BY created_at DESC, id DESC LIMIT :limit
) i
ORDER BY i.created_at DESC, i.id DESC
"""


def list_agent_imports(
    session: Session, agent_id: str, *, before: Cursor | None = None, limit: int = 20
) -> Page[ImportRow]:
    """The agent's imports, newest first, with done and failed counts (from the runs' import/status index)."""
    params: dict[str, Any] = {"agent": agent_id, "limit": limit + 1}
    keyset = ""
    if before is not None and (import_id := _uuid(before.key)) is not None:
        keyset = "AND (created_at, id) < (:at, :id)"
        params.update({"at": before.at, "id": import_id})
    rows = session.execute(text(_IMPORTS_SQL.format(keyset=keyset)), params).all()
    imports = [
        ImportRow(
            import_id=str(row.id),
            source=str(row.source),
            total=int(row.total),
            duplicates=int(row.duplicates),
            done=int(row.done),
            failed=int(row.failed),
            created_at=row.created_at,
        )
        for row in rows
    ]
    return _time_page(imports[:limit], len(imports) > limit, lambda item: Cursor(item.created_at, item.import_id))
