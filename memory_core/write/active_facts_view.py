"""The active facts of the entities a chunk writes to most, held in memory while upsert applies it.

Upsert compares every fact it writes with the active facts of its entity as they are now
(:meth:`memory_core.write.upsert.Applier._recheck`). Asked of PostgreSQL, that is one statement
per fact, and each computes the distance to every active fact of the entity: in an import, where
most facts are about the two speakers, a chunk of 64 messages asked about the same few hundred
facts a hundred times or more (a third of upsert's database time and a sixth of its Python).

So, for an entity the chunk asks about often (:data:`LOAD_AFTER` questions), its active facts
are read once, vectors included, and the questions after that are answered here: the same
search (the ``limit`` closest by cosine, plus every fact of the attribute's slot, ordered by
similarity then id), on the same rows, kept current with what the chunk itself writes
(facts inserted, closed, or reinforced). The read happens inside the chunk's transaction, under
the agent's lock, so it sees everything the SQL search would see; nobody else writes the agent's
facts until the transaction ends. Cosines are computed in float32 like pgvector's and may differ
from the server's in the seventh digit.

Not used when a failed fact could be rolled back alone (guarded application: a savepoint per
fact would undo writes this view has already recorded), nor for an entity with more than
:data:`MAX_FACTS` active facts (the view would hold too much memory; large agents have an index).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from memory_core.db.statements import sql
from memory_core.write.repository import FactRow

# The third question about an entity loads it: one or two facts cost less as statements.
LOAD_AFTER = 2
MAX_FACTS = 4000

_ENTITY_FACTS = sql(
    """
    SELECT id, fact_text, attribute_key, valid_from, created_at, created_xid,
           vector_send(embedding_vec) AS vec
    FROM memory_facts
    WHERE agent_id = :agent AND entity_key = :key AND valid_to IS NULL
    LIMIT :cap
    """
)


@dataclass
class _Fact:
    fact_id: str
    text: str
    attribute_key: str | None
    valid_from: datetime
    created_at: datetime | None
    created_xid: int | None


@dataclass
class _Entity:
    """One entity's active facts: their rows, a float32 matrix of their vectors (NaN rows: no vector), their norms."""

    facts: list[_Fact]
    vectors: npt.NDArray[np.float32]
    norms: npt.NDArray[np.float64]
    active: npt.NDArray[np.bool_]
    index: dict[str, int] = field(default_factory=dict)
    slots: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def empty(cls, capacity: int, dimensions: int) -> _Entity:
        """Room for ``capacity`` facts of ``dimensions``-long vectors."""
        size = max(8, capacity)
        return cls(
            [], np.full((size, dimensions), np.nan, dtype=np.float32), np.full(size, np.nan), np.zeros(size, dtype=bool)
        )

    def append(self, fact: _Fact, vector: npt.NDArray[np.float32] | None) -> None:
        """Add a fact with its vector (None: it has none)."""
        row = self.add(fact)
        if vector is not None:
            self.vectors[row] = vector
            self.norms[row] = float(np.linalg.norm(vector.astype(np.float64)))

    def add(self, fact: _Fact) -> int:
        """Add a fact's row (its vector and norm are the caller's to write); its row number."""
        row = len(self.facts)
        if row == len(self.vectors):
            size = 2 * row
            vectors = np.full((size, self.vectors.shape[1]), np.nan, dtype=np.float32)
            vectors[:row] = self.vectors
            norms = np.full(size, np.nan)
            norms[:row] = self.norms
            active = np.zeros(size, dtype=bool)
            active[:row] = self.active
            self.vectors, self.norms, self.active = vectors, norms, active
        self.active[row] = True
        self.facts.append(fact)
        self.index[fact.fact_id] = row
        if fact.attribute_key is not None:
            self.slots.setdefault(fact.attribute_key, []).append(row)
        return row


def _vector_from_send(data: bytes | None) -> npt.NDArray[np.float32] | None:
    """A vector from pgvector's binary form: int16 dimensions, int16 unused, big-endian float32s."""
    if data is None:
        return None
    return np.frombuffer(bytes(data), dtype=">f4", offset=4).astype(np.float32)


class ActiveFactsView:
    """What :func:`memory_core.write.repository.closest_active_facts` answers, for a chunk's busy entities."""

    def __init__(self, session: Session, *, load_after: int = LOAD_AFTER, max_facts: int = MAX_FACTS) -> None:
        self.session = session
        self.load_after = load_after
        self.max_facts = max_facts
        self._asked: dict[tuple[str, str], int] = {}
        self._entities: dict[tuple[str, str], _Entity] = {}
        self._too_large: set[tuple[str, str]] = set()
        self._entity_of: dict[tuple[str, str], tuple[str, str]] = {}
        self.loads = 0

    def closest(
        self,
        agent_id: str,
        entity_key: str,
        vector: Sequence[float] | None,
        *,
        limit: int,
        attribute_key: str | None,
    ) -> list[FactRow] | None:
        """The ``limit`` active facts of the entity closest to ``vector`` plus its slot's; None: ask the database."""
        if vector is None:
            return None
        key = (agent_id, entity_key)
        entity = self._entities.get(key)
        if entity is None:
            asked = self._asked.get(key, 0) + 1
            self._asked[key] = asked
            if asked <= self.load_after or key in self._too_large:
                return None
            entity = self._load(key, len(vector))
            if entity is None:
                return None
        query = np.asarray(vector, dtype=np.float32)
        query_norm = float(np.linalg.norm(query.astype(np.float64)))
        if query_norm == 0.0:
            return None  # pgvector's cosine is NaN here; the database orders those its own way
        count = len(entity.facts)
        with np.errstate(invalid="ignore", divide="ignore"):
            similarity = (entity.vectors[:count] @ query).astype(np.float64) / (entity.norms[:count] * query_norm)
        np.clip(similarity, -1.0, 1.0, out=similarity)
        # ORDER BY distance LIMIT n over the active rows: rows without a vector (or a zero one) come last.
        ordering = np.where(np.isnan(similarity), -np.inf, similarity)
        candidates = np.flatnonzero(entity.active[:count])
        if len(candidates) > limit:
            part = np.argpartition(-ordering[candidates], limit - 1)[:limit]
            chosen = {int(row) for row in candidates[part]}
        else:
            chosen = {int(row) for row in candidates}
        if attribute_key is not None:
            chosen.update(row for row in entity.slots.get(attribute_key, ()) if entity.active[row])
        rows = []
        for row in chosen:
            fact = entity.facts[row]
            value = similarity[row]
            rows.append(
                FactRow(
                    fact.fact_id,
                    entity_key,
                    fact.text,
                    fact.attribute_key,
                    fact.valid_from,
                    0.0 if np.isnan(value) else float(value),
                    fact.created_at,
                    fact.created_xid,
                )
            )
        rows.sort(key=lambda row: (-row.similarity, row.fact_id))
        return rows

    def _load(self, key: tuple[str, str], dimensions: int) -> _Entity | None:
        agent_id, entity_key = key
        found = self.session.execute(
            _ENTITY_FACTS, {"agent": agent_id, "key": entity_key, "cap": self.max_facts + 1}
        ).all()
        if len(found) > self.max_facts:
            self._too_large.add(key)
            return None
        entity = _Entity.empty(2 * len(found), dimensions)
        for row_number, row in enumerate(found):
            vector = _vector_from_send(row.vec)
            if vector is not None:
                if len(vector) != dimensions:
                    self._too_large.add(key)  # another embedder's vectors: leave it to the database
                    return None
                entity.vectors[row_number] = vector
            fact = _Fact(str(row.id), row.fact_text, row.attribute_key, row.valid_from, row.created_at, row.created_xid)
            entity.add(fact)
            self._entity_of[(agent_id, fact.fact_id)] = key
        count = len(found)
        entity.norms[:count] = np.linalg.norm(entity.vectors[:count].astype(np.float64), axis=1)
        self._entities[key] = entity
        self.loads += 1
        return entity

    def inserted(
        self,
        agent_id: str,
        fact_id: uuid.UUID,
        *,
        entity_key: str,
        text: str,
        attribute_key: str | None,
        valid_from: datetime,
        vector: Sequence[float] | None,
    ) -> None:
        """An active fact this transaction inserted (facts inserted already closed are not active: skip them)."""
        key = (agent_id, entity_key)
        entity = self._entities.get(key)
        if entity is None:
            return
        values = np.asarray(vector, dtype=np.float32) if vector else None
        if values is not None and len(values) != entity.vectors.shape[1]:
            self.forget(agent_id, str(fact_id), key)
            return
        # created_at / created_xid are this transaction's; the recheck does not read them.
        entity.append(_Fact(str(fact_id), text, attribute_key, valid_from, None, None), values)
        self._entity_of[(agent_id, str(fact_id))] = key

    def closed(self, agent_id: str, fact_id: uuid.UUID | str) -> None:
        """A fact this transaction closed: no longer active."""
        key = self._entity_of.get((agent_id, str(fact_id)))
        entity = self._entities.get(key) if key is not None else None
        if entity is not None:
            row = entity.index.get(str(fact_id))
            if row is not None:
                entity.active[row] = False

    def forget(self, agent_id: str, fact_id: uuid.UUID | str, key: tuple[str, str] | None = None) -> None:
        """A fact changed in a way this view does not follow (reinforced): its entity is read again when next asked."""
        key = key or self._entity_of.get((agent_id, str(fact_id)))
        if key is not None and key in self._entities:
            del self._entities[key]
            self._asked[key] = self.load_after
