"""Stage ``upsert``: apply the decisions under the agent's lock (seeds W11, W12, W14-W18).

One short transaction per message, holding a transaction-scoped advisory lock keyed by the
agent, so two messages about the same agent never interleave their graph changes. Nothing
in here calls an LLM or an embedding model: everything slow happened in earlier stages.
Decisions computed outside the lock are re-checked against what other messages committed
since (optimistic): new names are re-resolved by exact alias, and every fact is compared
again with the active facts of its entity before it is written.

Time is the event's ``occurred_at``: a fact is valid from it, a newer fact supersedes an
older one, and an older fact arriving late becomes history instead of replacing a newer
one. Single-valued slots (residence, employer, partner...) keep at most one active fact,
the newest, so the final state does not depend on the order messages are processed in.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy.orm import Session

from memory_core.cognition.offline.reconciliation import retraction_partner, retracts
from memory_core.config import MemoryConfig
from memory_core.db.statements import sql
from memory_core.db.vectors import vector_array, vector_param
from memory_core.write import repository
from memory_core.write.active_facts_view import ActiveFactsView
from memory_core.write.attribute_keys import ATTRIBUTE_CATALOGUE, is_single_valued
from memory_core.write.directives import apply_directives
from memory_core.write.naming import fold, normalize_alias
from memory_core.write.reconcile import entity_for
from memory_core.write.runs import RunView
from memory_core.write.schemas import (
    DirectiveChange,
    ExtractStageOutput,
    FactChange,
    FactDecision,
    ReconcileStageOutput,
    ResolvedEntity,
    ResolveStageOutput,
)

NEAR_DUPLICATE_SIMILARITY = 0.95
RELATIONSHIP_REINFORCEMENT = 0.05


def lock_agent(session: Session, agent_id: str) -> None:
    """Serialise graph changes of one agent until the transaction ends (blocks, never spins)."""
    session.execute(sql("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": f"arandu:{agent_id}"})


def try_lock_agents(session: Session, agent_ids: Sequence[str]) -> set[str]:
    """Take, without waiting, the locks of ``agent_ids`` that are free; the agents whose lock was taken.

    Never waiting is what lets one transaction hold several agents' locks without deadlocks.
    """
    if not agent_ids:
        return set()
    rows = session.execute(
        sql(
            "SELECT agent, pg_try_advisory_xact_lock(hashtextextended('arandu:' || agent, 0)) "
            "FROM unnest(CAST(:agents AS text[])) WITH ORDINALITY AS a(agent, position) ORDER BY position"
        ),
        {"agents": list(agent_ids)},
    ).all()
    return {agent for agent, locked in rows if locked}


@lru_cache(maxsize=4096)
def _folded_text(value: str) -> str:
    return " ".join("".join(ch if ch.isalnum() else " " for ch in fold(value)).split())


@dataclass
class FactRecord:
    """A fact row as the apply step needs it."""

    fact_id: uuid.UUID
    text: str
    attribute_key: str | None
    valid_from: datetime
    valid_to: datetime | None
    confidence: float


@dataclass
class EntitySighting:
    """When an entity was named, and the name and embedding it may lack: what naming it changes.

    A chunk sums its messages' sightings (:meth:`merge`) and writes each entity once, with its
    fact count (:func:`refresh_entity_counts_of_agents`): the same final row as touching it at
    every message, in one row version instead of one per message (the speaker is named by each).
    """

    first_at: datetime
    last_at: datetime
    name: str | None
    embedding: list[float] | None

    def merge(self, later: EntitySighting) -> None:
        """Fold in a sighting of a message applied after this one (the first name and embedding win)."""
        self.first_at = min(self.first_at, later.first_at)
        self.last_at = max(self.last_at, later.last_at)
        if self.name is None:
            self.name = later.name
        if self.embedding is None:
            self.embedding = later.embedding


def merge_sightings(into: dict[str, EntitySighting], later: Mapping[str, EntitySighting]) -> None:
    """Fold ``later`` (a message applied after those in ``into``) into ``into``, by entity key."""
    for key, sighting in later.items():
        known = into.get(key)
        if known is None:
            into[key] = EntitySighting(sighting.first_at, sighting.last_at, sighting.name, sighting.embedding)
        else:
            known.merge(sighting)


@dataclass
class ApplyOutcome:
    """What applying one message changed."""

    added: list[FactChange] = field(default_factory=list)
    updated: list[FactChange] = field(default_factory=list)
    unchanged: list[FactChange] = field(default_factory=list)
    deleted: list[FactChange] = field(default_factory=list)
    relationships: list[dict[str, Any]] = field(default_factory=list)
    # decision index -> id of the fact that now carries it (inserted, or the NOOP target)
    fact_for_decision: dict[int, uuid.UUID] = field(default_factory=dict)
    touched_entities: set[str] = field(default_factory=set)
    # The existing entities this message names, by key: their row is touched once per chunk.
    sightings: dict[str, EntitySighting] = field(default_factory=dict)
    # Facts this message closed: the entities they are linked to lose an active fact.
    closed_facts: set[uuid.UUID] = field(default_factory=set)
    # Facts whose value a newer one replaced (each counted once in user_correction_count), with their slot.
    corrected: dict[uuid.UUID, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Procedural memory: what the message did to the agent's directives.
    directives: list[DirectiveChange] = field(default_factory=list)


_FACT = sql(
    "SELECT id, fact_text, attribute_key, valid_from, valid_to, confidence FROM memory_facts "
    "WHERE id = :id AND agent_id = :agent"
)
# FOR NO KEY UPDATE: the apply changes a fact's validity and counters, never its id, and this
# lock leaves the KEY SHARE a retrieval count's foreign key check takes (memory_fact_usage) free.
_FACT_FOR_UPDATE = sql(
    "SELECT id, fact_text, attribute_key, valid_from, valid_to, confidence FROM memory_facts "
    "WHERE id = :id AND agent_id = :agent FOR NO KEY UPDATE"
)


# The entities of a message upserted, and their aliases added (first write wins: an alias
# already pointing elsewhere keeps pointing there; within the statement, rows go in list order).
_UPSERT_ENTITIES_AND_ALIASES = sql(
    """
    WITH entities AS (
        INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, embedding_vec,
                                     first_seen_at, last_seen_at)
        SELECT :agent, e.key, e.name, e.type, e.vec, :at, :at
        FROM unnest(CAST(:keys AS text[]), CAST(:names AS text[]), CAST(:types AS text[]), CAST(:vecs AS vector[]))
             AS e(key, name, type, vec)
        ON CONFLICT (agent_id, canonical_key) DO NOTHING
    )
    INSERT INTO memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type)
    SELECT :agent, a.alias, a.key, a.type
    FROM unnest(CAST(:aliases AS text[]), CAST(:alias_keys AS text[]), CAST(:alias_types AS text[]))
         WITH ORDINALITY AS a(alias, key, type, n)
    ORDER BY a.n
    ON CONFLICT (agent_id, alias) DO NOTHING
    """
)


_INSERT_LINKS = sql(
    """
    INSERT INTO memory_fact_entity_links (fact_id, entity_key, is_primary, agent_id)
    SELECT l.fact, l.key, l.is_primary, :agent
    FROM unnest(CAST(:facts AS uuid[]), CAST(:keys AS text[]), CAST(:primary AS boolean[])) AS l(fact, key, is_primary)
    ON CONFLICT (fact_id, entity_key) DO NOTHING
    """
)


class Applier:
    """Applies one message's decisions inside the caller's locked transaction."""

    def __init__(
        self,
        session: Session,
        run: RunView,
        config: MemoryConfig,
        *,
        provenance: str,
        facts_view: ActiveFactsView | None = None,
    ) -> None:
        self.session = session
        self.facts_view = facts_view
        self.provenance = provenance
        self.run = run
        self.agent_id = run.agent_id
        self.occurred_at = run.occurred_at
        self.config = config
        self.outcome = ApplyOutcome()

    # --- entities ----------------------------------------------------------------------

    def settle_entities(self, resolution: ResolveStageOutput) -> list[ResolvedEntity]:
        """Re-resolve new names by exact alias (someone may have created them meanwhile), then upsert all."""
        entities = list(resolution.entities)
        new_names = [n for e in entities if e.is_new for n in (e.display_name, *e.aliases)]
        now_known = repository.aliases_for(self.session, self.agent_id, new_names)
        settled: list[ResolvedEntity] = []
        for entity in entities:
            chosen = entity
            if entity.is_new:
                for name in (entity.display_name, *entity.aliases):
                    key = now_known.get(normalize_alias(name))
                    if key is not None and key != entity.canonical_key:
                        chosen = entity.model_copy(update={"canonical_key": key, "is_new": False, "method": "alias"})
                        break
            settled.append(chosen)
        seen: set[str] = set()
        unique: list[ResolvedEntity] = []
        for entity in settled:
            if entity.canonical_key not in seen:
                seen.add(entity.canonical_key)
                unique.append(entity)
        self.outcome.touched_entities.update(seen)
        # An existing entity's row (seen times, a missing name or embedding, reactivation) is
        # written with its fact count, once for the chunk; a new one is inserted here complete.
        merge_sightings(
            self.outcome.sightings,
            {
                e.canonical_key: EntitySighting(self.occurred_at, self.occurred_at, e.display_name[:256], e.embedding)
                for e in unique
            },
        )
        aliases = [
            (normalize_alias(name)[:256], e.canonical_key, e.entity_type)
            for e in settled
            for name in {e.display_name, e.mention, *e.aliases}
            if (normalize_alias(name) and e.method not in ("speaker", "relationship_term")) or name == e.display_name
        ]
        # One statement for the message's entities and aliases (it used to be one per entity,
        # plus the aliases): the agent's lock is held, so no other writer races these rows.
        self.session.execute(
            _UPSERT_ENTITIES_AND_ALIASES,
            {
                "agent": self.agent_id,
                "at": self.occurred_at,
                "keys": [e.canonical_key for e in unique],
                "names": [e.display_name[:256] for e in unique],
                "types": [e.entity_type[:64] for e in unique],
                "vecs": vector_array(e.embedding for e in unique),
                "aliases": [alias for alias, _, _ in aliases],
                "alias_keys": [key for _, key, _ in aliases],
                "alias_types": [kind for _, _, kind in aliases],
            },
        )
        return settled

    # --- facts -------------------------------------------------------------------------

    def _fact(self, fact_id: uuid.UUID | str, *, lock: bool = True) -> FactRecord | None:
        row = self.session.execute(
            _FACT_FOR_UPDATE if lock else _FACT, {"id": str(fact_id), "agent": self.agent_id}
        ).first()
        if row is None:
            return None
        return FactRecord(row.id, row.fact_text, row.attribute_key, row.valid_from, row.valid_to, row.confidence)

    def _close(self, fact: FactRecord, at: datetime) -> None:
        self.session.execute(
            sql(
                "UPDATE memory_facts SET valid_to = :at, invalidated_at = now() "
                "WHERE id = :id AND agent_id = :agent AND valid_to IS NULL"
            ),
            {"at": at, "id": str(fact.fact_id), "agent": self.agent_id},
        )
        # Cascade: an edge whose evidence stops being true stops being active too.
        self.session.execute(
            sql(
                "UPDATE memory_entity_relationships SET valid_to = :at, invalidated_at = now(), updated_at = now() "
                "WHERE agent_id = :agent AND evidence_fact_id = :id AND valid_to IS NULL"
            ),
            {"at": at, "id": str(fact.fact_id), "agent": self.agent_id},
        )
        fact.valid_to = at
        self.outcome.closed_facts.add(fact.fact_id)
        if self.facts_view is not None:
            self.facts_view.closed(self.agent_id, fact.fact_id)

    def _insert(
        self,
        decision: FactDecision,
        *,
        valid_to: datetime | None = None,
        supersedes: uuid.UUID | None = None,
    ) -> uuid.UUID:
        fact_id = uuid.uuid4()
        self.session.execute(
            sql(
                """
                INSERT INTO memory_facts (id, agent_id, entity_type, entity_key, entity_name, attribute_key, fact_text,
                    speaker, confidence, importance, valid_from, valid_to, invalidated_at, source_event_id,
                    supersedes_fact_id, embedding_vec, source_context)
                VALUES (:id, :agent, :etype, :ekey, :ename, :attr, :text, :speaker, :confidence, :importance,
                    :valid_from, :valid_to, CASE WHEN CAST(:valid_to AS timestamptz) IS NULL THEN NULL ELSE now() END,
                    :event, :supersedes, CAST(:vec AS vector), :source_context)
                """
            ),
            {
                "id": str(fact_id),
                "agent": self.agent_id,
                "etype": decision.entity_type[:64],
                "ekey": decision.entity_key,
                "ename": decision.entity_name[:256],
                "attr": decision.attribute_key,
                "text": decision.text,
                "speaker": self.run.speaker[:256],
                "confidence": decision.confidence,
                "importance": decision.importance,
                "valid_from": self.occurred_at,
                "valid_to": valid_to,
                "event": str(self.run.event_id),
                "supersedes": str(supersedes) if supersedes else None,
                "vec": vector_param(decision.embedding),
                "source_context": decision.source_context,
            },
        )
        if self.facts_view is not None and valid_to is None:
            self.facts_view.inserted(
                self.agent_id,
                fact_id,
                entity_key=decision.entity_key,
                text=decision.text,
                attribute_key=decision.attribute_key,
                valid_from=self.occurred_at,
                vector=decision.embedding,
            )
        return fact_id

    def _change(self, decision: FactDecision, fact_id: uuid.UUID | None, **extra: Any) -> FactChange:
        return FactChange(
            fact_id=str(fact_id) if fact_id else None,
            entity_key=decision.entity_key,
            fact_text=decision.text,
            attribute_key=decision.attribute_key,
            valid_from=self.occurred_at,
            **extra,
        )

    def _recheck(self, decision: FactDecision) -> FactDecision:
        """Compare the decision with the active facts as they are now, under the lock.

        Asked of the chunk's in-memory view when it holds the entity (the same answer without a
        statement, see :mod:`memory_core.write.active_facts_view`), else of the database.
        """
        current = (
            self.facts_view.closest(
                self.agent_id, decision.entity_key, decision.embedding, limit=10, attribute_key=decision.attribute_key
            )
            if self.facts_view is not None
            else None
        )
        if current is None:
            current = repository.closest_active_facts(
                self.session,
                self.agent_id,
                decision.entity_key,
                decision.embedding,
                limit=10,
                attribute_key=decision.attribute_key,
            )
        active_ids = {candidate.fact_id for candidate in current}
        folded = _folded_text(decision.text)
        # "no longer likes jazz" is very similar to "likes jazz" yet ends it: never a repeat of it.
        retracting = retracts(decision.text)
        duplicate = next(
            (
                c
                for c in current
                if _folded_text(c.text) == folded
                or (
                    c.similarity >= NEAR_DUPLICATE_SIMILARITY
                    and c.attribute_key == decision.attribute_key
                    and retracts(c.text) is retracting
                )
            ),
            None,
        )
        if decision.action in ("UPDATE", "NOOP", "DELETE") and decision.target_fact_id in active_ids:
            if decision.action == "UPDATE" and duplicate is not None and duplicate.fact_id != decision.target_fact_id:
                return decision.model_copy(update={"action": "NOOP", "target_fact_id": duplicate.fact_id})
            return decision
        if duplicate is not None:
            return decision.model_copy(
                update={"action": "NOOP", "target_fact_id": duplicate.fact_id, "reason": "duplicate of an active fact"}
            )
        if decision.action in ("UPDATE", "DELETE"):
            # The target was replaced meanwhile: aim at whatever holds the same slot now.
            successor = next(
                (c for c in current if decision.attribute_key and c.attribute_key == decision.attribute_key), None
            )
            if successor is not None:
                return decision.model_copy(update={"target_fact_id": successor.fact_id})
            if decision.action == "DELETE":
                return decision.model_copy(update={"action": "NOOP", "target_fact_id": None})
        opposite = self._unseen_opposite(decision, current, retracting=retracting)
        if opposite is not None:
            return decision.model_copy(
                update={
                    "action": "UPDATE",
                    "target_fact_id": opposite.fact_id,
                    "reason": "a retraction pair with a fact written after this decision was made",
                }
            )
        return decision.model_copy(update={"action": "ADD", "target_fact_id": None})

    @staticmethod
    def _unseen_opposite(
        decision: FactDecision, current: Sequence[repository.FactRow], *, retracting: bool
    ) -> repository.FactRow | None:
        """The other side of a retraction pair with ``decision``, among the facts its reconciliation did not see.

        A chunk's messages are reconciled before its earlier ones are written, so "I no longer
        like jazz" may be decided without "I like jazz" of the same import (or the other way
        round, when history arrives out of order). The facts it saw were judged there (an LLM
        may have kept both on purpose); the others are paired here by the offline rule, and the
        update that follows orders the two by time.
        """
        if decision.attribute_key is None:
            return None
        seen = set(decision.candidate_ids)
        unseen_same_slot = [c for c in current if c.fact_id not in seen and c.attribute_key == decision.attribute_key]
        return retraction_partner(unseen_same_slot, retracting=retracting)

    def apply_decision(self, decision: FactDecision) -> None:
        """Write one decision (inside its own savepoint, opened by the caller)."""
        decision = self._recheck(decision)
        at = self.occurred_at
        if decision.action == "NOOP":
            if decision.target_fact_id is None:
                return
            self._reinforce(decision)
            return
        if decision.action == "DELETE":
            target = self._fact(decision.target_fact_id or "")
            if target is not None and target.valid_to is None and at >= target.valid_from:
                self._close(target, at)
                self.outcome.deleted.append(self._change(decision, target.fact_id, valid_to=at))
            return
        fact_id: uuid.UUID
        if decision.action == "UPDATE" and decision.target_fact_id:
            target = self._fact(decision.target_fact_id)
            if target is not None and target.valid_to is None and at >= target.valid_from:
                self._close(target, at)
                if decision.attribute_key and decision.attribute_key == target.attribute_key:
                    self._count_correction(target.fact_id, decision.attribute_key)
                fact_id = self._insert(decision, supersedes=target.fact_id)
                self.outcome.updated.append(self._change(decision, fact_id, supersedes_fact_id=str(target.fact_id)))
            elif target is not None and target.valid_to is None:
                # Said before the active fact: it is history, valid until the newer one began.
                fact_id = self._insert(decision, valid_to=target.valid_from)
                if decision.attribute_key and decision.attribute_key == target.attribute_key:
                    # Whatever order they arrive in, the older value is the corrected one.
                    self._count_correction(fact_id, decision.attribute_key)
                self.session.execute(
                    sql(
                        "UPDATE memory_facts SET supersedes_fact_id = :old "
                        "WHERE id = :id AND agent_id = :agent AND supersedes_fact_id IS NULL"
                    ),
                    {"old": str(fact_id), "id": str(target.fact_id), "agent": self.agent_id},
                )
                self.outcome.added.append(self._change(decision, fact_id, valid_to=target.valid_from))
            else:
                fact_id = self._insert(decision)
                self.outcome.added.append(self._change(decision, fact_id))
        else:
            fact_id = self._insert(decision)
            self.outcome.added.append(self._change(decision, fact_id))
        self.outcome.fact_for_decision[decision.index] = fact_id
        if is_single_valued(decision.attribute_key):
            self._keep_newest_in_slot(decision, fact_id)

    def _reinforce(self, decision: FactDecision) -> None:
        target = decision.target_fact_id
        assert target is not None
        # The earliest statement of a repeated fact keeps its wording and start, whatever order
        # the repetitions are processed in (at the same instant, as a conversation's session dates
        # its turns, the lowest wording). The wording comes with its message, speaker and vector:
        # a text taken from one message must never name another as its source.
        earlier = "(:at < valid_from OR (:at = valid_from AND :text < fact_text))"
        self.session.execute(
            sql(
                f"""
                UPDATE memory_facts SET
                    reinforcement_count = reinforcement_count + 1,
                    last_confirmed_at = GREATEST(COALESCE(last_confirmed_at, :at), :at),
                    confidence = GREATEST(confidence, :confidence),
                    fact_text = CASE WHEN {earlier} THEN :text ELSE fact_text END,
                    source_event_id = CASE WHEN {earlier} THEN CAST(:event AS uuid) ELSE source_event_id END,
                    speaker = CASE WHEN {earlier} THEN :speaker ELSE speaker END,
                    embedding_vec = CASE WHEN {earlier} THEN COALESCE(CAST(:vec AS vector), embedding_vec)
                                         ELSE embedding_vec END,
                    valid_from = LEAST(valid_from, :at)
                WHERE id = :id AND agent_id = :agent
                """  # noqa: S608 - the interpolated text is the constant condition above
            ),
            {
                "at": self.occurred_at,
                "confidence": decision.confidence,
                "text": decision.text,
                "event": str(self.run.event_id),
                "speaker": self.run.speaker[:256],
                "vec": vector_param(decision.embedding),
                "id": target,
                "agent": self.agent_id,
            },
        )
        if self.facts_view is not None:
            # Its wording, vector and start may have changed (the SQL above decides): read it again.
            self.facts_view.forget(self.agent_id, target)
        self.outcome.unchanged.append(self._change(decision, uuid.UUID(target)))
        self.outcome.fact_for_decision[decision.index] = uuid.UUID(target)

    def _count_correction(self, fact_id: uuid.UUID, attribute_key: str) -> None:
        self.outcome.corrected[fact_id] = attribute_key
        self.session.execute(
            sql(
                "UPDATE memory_facts SET user_correction_count = user_correction_count + 1 "
                "WHERE id = :id AND agent_id = :agent"
            ),
            {"id": str(fact_id), "agent": self.agent_id},
        )

    def _keep_newest_in_slot(self, decision: FactDecision, fact_id: uuid.UUID) -> None:
        """At most one active fact per single-valued slot: the one said last."""
        rows = self.session.execute(
            sql(
                "SELECT id, fact_text, attribute_key, valid_from, valid_to, confidence FROM memory_facts "
                "WHERE agent_id = :agent AND entity_key = :key AND attribute_key = :attr AND valid_to IS NULL "
                "ORDER BY valid_from DESC, created_at DESC, id FOR NO KEY UPDATE"
            ),
            {"agent": self.agent_id, "key": decision.entity_key, "attr": decision.attribute_key},
        ).all()
        if len(rows) <= 1:
            return
        records = [FactRecord(r.id, r.fact_text, r.attribute_key, r.valid_from, r.valid_to, r.confidence) for r in rows]
        # Newest first; on equal times the fact written now wins (it was said later in the message).
        records.sort(key=lambda r: (r.valid_from, r.fact_id == fact_id), reverse=True)
        newest = records[0]
        for older in records[1:]:
            self._close(older, newest.valid_from)
            if _folded_text(older.text) != _folded_text(newest.text):
                # A newer value replaced it in its slot: a correction (seeds: a supersede that
                # changes the value), whether reconciliation saw the two or the slot rule did.
                self._count_correction(older.fact_id, older.attribute_key or "")
        if newest.fact_id != fact_id:
            # Said before the fact that holds the slot: what was written is history.
            self._report(fact_id, valid_to=newest.valid_from)
            return
        replaced = records[1]
        # Another message took the slot while this one was being reconciled: this is an update.
        self.session.execute(
            sql(
                "UPDATE memory_facts SET supersedes_fact_id = :old "
                "WHERE id = :id AND agent_id = :agent AND supersedes_fact_id IS NULL"
            ),
            {"old": str(replaced.fact_id), "id": str(fact_id), "agent": self.agent_id},
        )
        self._report(fact_id, supersedes=replaced.fact_id)

    def _report(
        self, fact_id: uuid.UUID, *, valid_to: datetime | None = None, supersedes: uuid.UUID | None = None
    ) -> None:
        """Correct how a just-written fact is reported once the slot rule has run."""
        for change in self.outcome.added:
            if change.fact_id != str(fact_id):
                continue
            if valid_to is not None:
                change.valid_to = valid_to
            elif supersedes is not None and change.supersedes_fact_id is None:
                self.outcome.added.remove(change)
                change.supersedes_fact_id = str(supersedes)
                self.outcome.updated.append(change)
            return

    # --- relationships -------------------------------------------------------------------

    def upsert_relationships(
        self,
        extraction: ExtractStageOutput,
        entities: Sequence[ResolvedEntity],
        decisions: Sequence[FactDecision],
        speaker_key: str,
    ) -> None:
        """Edges with evidence facts, reinforced on repetition, active only while their evidence is."""
        names_of: dict[str, list[str]] = {}
        for entity in entities:
            names_of.setdefault(entity.canonical_key, []).extend([entity.display_name, *entity.aliases])
        for relation in extraction.extraction.relations:
            source = entity_for(relation.source, entities, speaker_key)
            target = entity_for(relation.target, entities, speaker_key)
            if source.canonical_key == target.canonical_key:
                continue
            evidence = self._evidence(
                [relation.source, *names_of.get(source.canonical_key, [])],
                [relation.target, *names_of.get(target.canonical_key, [])],
                decisions,
            )
            evidence_row = self._fact(evidence, lock=False) if evidence else None
            active = evidence_row is None or evidence_row.valid_to is None
            existing = self.session.execute(
                sql(
                    "SELECT r.id, r.strength, r.evidence_fact_id, f.valid_to AS evidence_valid_to, "
                    "f.valid_from AS evidence_valid_from FROM memory_entity_relationships r "
                    "LEFT JOIN memory_facts f ON f.id = r.evidence_fact_id "
                    "WHERE r.agent_id = :agent AND r.source_entity_key = :s AND r.target_entity_key = :t "
                    "AND r.rel_type = :type FOR UPDATE OF r"
                ),
                {"agent": self.agent_id, "s": source.canonical_key, "t": target.canonical_key, "type": relation.type},
            ).first()
            if existing is None:
                self.session.execute(
                    sql(
                        """
                        INSERT INTO memory_entity_relationships (agent_id, source_entity_key, target_entity_key,
                            rel_type, strength, evidence_fact_id, provenance, valid_from, valid_to, invalidated_at)
                        VALUES (:agent, :s, :t, :type, :strength, :evidence, :provenance, :at,
                            :valid_to, CASE WHEN CAST(:valid_to AS timestamptz) IS NULL THEN NULL ELSE now() END)
                        """
                    ),
                    {
                        "agent": self.agent_id,
                        "s": source.canonical_key,
                        "t": target.canonical_key,
                        "type": relation.type,
                        "strength": self.config.relationship_initial_strength,
                        "evidence": str(evidence) if evidence else None,
                        "provenance": self.provenance,
                        "at": self.occurred_at,
                        "valid_to": None if active else evidence_row.valid_to if evidence_row else None,
                    },
                )
            else:
                old_active = existing.evidence_fact_id is None or existing.evidence_valid_to is None
                # Keep the evidence that is still true; between equals, the more recent statement.
                take_new = evidence is not None and (
                    (active and not old_active)
                    or (
                        active == old_active
                        and (existing.evidence_valid_from is None or self.occurred_at >= existing.evidence_valid_from)
                    )
                )
                now_active = active if take_new else old_active
                self.session.execute(
                    sql(
                        """
                        UPDATE memory_entity_relationships SET
                            strength = LEAST(:cap, strength + :step),
                            evidence_fact_id = CASE WHEN :take THEN CAST(:evidence AS uuid) ELSE evidence_fact_id END,
                            valid_to = CASE WHEN :active THEN NULL ELSE COALESCE(valid_to, :closed) END,
                            invalidated_at = CASE WHEN :active THEN NULL ELSE COALESCE(invalidated_at, now()) END,
                            updated_at = now()
                        WHERE id = :id
                        """
                    ),
                    {
                        "cap": self.config.relationship_max_strength,
                        "step": RELATIONSHIP_REINFORCEMENT,
                        "take": take_new,
                        "evidence": str(evidence) if evidence else None,
                        "active": now_active,
                        "closed": evidence_row.valid_to if evidence_row and evidence_row.valid_to else self.occurred_at,
                        "id": existing.id,
                    },
                )
            self.outcome.relationships.append(
                {
                    "source": source.canonical_key,
                    "target": target.canonical_key,
                    "rel_type": relation.type,
                    "evidence_fact_id": str(evidence) if evidence else None,
                    "active": active,
                }
            )

    def _evidence(
        self, source_names: list[str], target_names: list[str], decisions: Sequence[FactDecision]
    ) -> uuid.UUID | None:
        best: tuple[float, int, uuid.UUID] | None = None
        for decision in decisions:
            fact_id = self.outcome.fact_for_decision.get(decision.index)
            if fact_id is None:
                continue
            folded = fold(decision.text)
            mentions_source = any(len(fold(n)) >= 3 and fold(n) in folded for n in source_names)
            mentions_target = any(len(fold(n)) >= 3 and fold(n) in folded for n in target_names)
            if mentions_source and mentions_target:
                rank = (decision.confidence, -decision.index, fact_id)
                if best is None or rank[:2] > best[:2]:
                    best = rank
        return best[2] if best else None

    # --- links, counters, profiles, registry ---------------------------------------------

    def link_facts(self, decisions: Sequence[FactDecision], entities: Sequence[ResolvedEntity]) -> None:
        """Link every written fact to every entity of the message it names (names >= 3 characters)."""
        rows: list[dict[str, Any]] = []
        for decision in decisions:
            fact_id = self.outcome.fact_for_decision.get(decision.index)
            if fact_id is None:
                continue
            folded = fold(decision.text)
            keys = {decision.entity_key: True}
            for entity in entities:
                if entity.canonical_key in keys:
                    continue
                names = [entity.display_name, *entity.aliases]
                if any(
                    len(fold(name)) >= self.config.entity_link_min_name_chars and fold(name) in folded for name in names
                ):
                    keys[entity.canonical_key] = False
            for key, primary in keys.items():
                rows.append({"fact": str(fact_id), "key": key, "primary": primary, "agent": self.agent_id})
                self.outcome.touched_entities.add(key)
        if rows:
            # One statement for all the links (an executemany is still one statement per row for PostgreSQL).
            self.session.execute(
                _INSERT_LINKS,
                {
                    "agent": self.agent_id,
                    "facts": [row["fact"] for row in rows],
                    "keys": [row["key"] for row in rows],
                    "primary": [row["primary"] for row in rows],
                },
            )

    def refresh_entity_counts(self) -> None:
        """``fact_count`` = active facts linked to the entity."""
        refresh_entity_counts(
            self.session,
            self.agent_id,
            self.outcome.touched_entities,
            self.outcome.closed_facts,
            self.outcome.sightings,
        )

    def seed_profiles(self, profiles: dict[str, str], entities: Sequence[ResolvedEntity], speaker_key: str) -> None:
        """The write path only seeds a profile that does not exist yet (seeds W17)."""
        for name, profile in profiles.items():
            if not profile.strip():
                continue
            entity = entity_for(name, entities, speaker_key)
            self.session.execute(
                sql(
                    "UPDATE memory_entities SET profile_text = :profile, profile_refreshed_at = now() "
                    "WHERE agent_id = :agent AND canonical_key = :key AND profile_text IS NULL"
                ),
                {"profile": profile.strip(), "agent": self.agent_id, "key": entity.canonical_key},
            )

    def register_attributes(self, decisions: Sequence[FactDecision]) -> None:
        """Count attribute keys per agent; catalogue keys are active, others proposed."""
        register_attributes(self.session, self.agent_id, attribute_counts(decisions, self.config))


def attribute_counts(decisions: Sequence[FactDecision], config: MemoryConfig) -> dict[str, tuple[int, str]]:
    """Each attribute key of a message's decisions, counted once, with the status a new key gets."""
    keys = sorted({d.attribute_key for d in decisions if d.attribute_key})
    return {
        key: (1, "active" if key in ATTRIBUTE_CATALOGUE or key in config.extra_attribute_keys else "proposed")
        for key in keys
    }


def register_attributes(session: Session, agent_id: str, counts: dict[str, tuple[int, str]]) -> None:
    """Add ``counts`` to the agent's attribute registry (a key first seen gets the status given)."""
    register_attributes_of_agents(session, {agent_id: counts})


def register_attributes_of_agents(session: Session, counts_by_agent: Mapping[str, dict[str, tuple[int, str]]]) -> None:
    """:func:`register_attributes` for several agents in one statement (a chunk of many agents' messages)."""
    # One row per (agent, stored key): two long keys cut to the same 64 characters add up
    # (an INSERT ... ON CONFLICT may not update one row twice).
    merged: dict[tuple[str, str], tuple[str, int]] = {}
    for agent_id, counts in counts_by_agent.items():
        for key, (count, status) in counts.items():
            first_status, so_far = merged.get((agent_id, key[:64]), (status, 0))
            merged[(agent_id, key[:64])] = (first_status, so_far + count)
    if not merged:
        return
    ordered = sorted(merged.items())
    session.execute(
        sql(
            """
            INSERT INTO memory_attribute_registry (agent_id, key, status, seen_count, proposed_by)
            SELECT agent_id, key, status, seen_count, 'llm'
            FROM unnest(CAST(:agents AS text[]), CAST(:keys AS text[]), CAST(:statuses AS text[]),
                        CAST(:seen AS integer[])) AS x(agent_id, key, status, seen_count)
            ON CONFLICT (agent_id, key) DO UPDATE SET
                seen_count = memory_attribute_registry.seen_count + EXCLUDED.seen_count,
                last_seen_at = now(), updated_at = now()
            """
        ),
        {
            "agents": [agent_id for (agent_id, _), _ in ordered],
            "keys": [key for (_, key), _ in ordered],
            "statuses": [status for _, (status, _) in ordered],
            "seen": [count for _, (_, count) in ordered],
        },
    )


def refresh_entity_counts(
    session: Session,
    agent_id: str,
    keys: set[str],
    closed_facts: set[uuid.UUID] | None = None,
    sightings: Mapping[str, EntitySighting] | None = None,
) -> None:
    """``fact_count`` = active linked facts, for the agent's entities ``keys`` and those linked to ``closed_facts``.

    A fact that stops being active changes the count of every entity it names, not only of
    the entities the closing message names ("I moved to Porto" lowers Lisbon's count).
    ``sightings`` are written on the same rows (see :class:`EntitySighting`).
    """
    refresh_entity_counts_of_agents(session, {agent_id: (keys, closed_facts or set())}, {agent_id: sightings or {}})


_REFRESH_ENTITIES = sql(
    """
    WITH sighted AS (
        SELECT * FROM unnest(CAST(:seen_agents AS text[]), CAST(:seen_keys AS text[]),
                             CAST(:seen_first AS timestamptz[]), CAST(:seen_last AS timestamptz[]),
                             CAST(:seen_names AS text[]), CAST(:seen_vecs AS vector[]))
            AS s(agent_id, entity_key, first_at, last_at, name, vec)
    ), targets AS (
        SELECT agent_id, entity_key
        FROM unnest(CAST(:agents AS text[]), CAST(:keys AS text[])) AS t(agent_id, entity_key)
        UNION
        SELECT agent_id, entity_key FROM sighted
        UNION
        SELECT l.agent_id, l.entity_key
        FROM unnest(CAST(:closed_agents AS text[]), CAST(:closed_facts AS uuid[])) AS c(agent_id, fact_id)
        JOIN memory_fact_entity_links l ON l.agent_id = c.agent_id AND l.fact_id = c.fact_id
    ), changed AS (
        SELECT e.id, s.first_at, s.last_at, s.name, s.vec, s.entity_key IS NOT NULL AS sighted,
               (SELECT count(*) FROM memory_fact_entity_links l JOIN memory_facts f ON f.id = l.fact_id
                WHERE l.agent_id = e.agent_id AND l.entity_key = e.canonical_key AND f.valid_to IS NULL) AS fact_count
        FROM targets t
        JOIN memory_entities e ON e.agent_id = t.agent_id AND e.canonical_key = t.entity_key
        LEFT JOIN sighted s ON s.agent_id = t.agent_id AND s.entity_key = t.entity_key
    )
    UPDATE memory_entities e SET
        fact_count = c.fact_count,
        first_seen_at = LEAST(e.first_seen_at, c.first_at),
        last_seen_at = GREATEST(e.last_seen_at, c.last_at),
        embedding_vec = COALESCE(e.embedding_vec, c.vec),
        display_name = COALESCE(e.display_name, c.name),
        is_active = e.is_active OR c.sighted
    FROM changed c
    -- A row that would not change keeps its version: no dead tuple, no index entries.
    WHERE e.id = c.id AND (
        e.fact_count IS DISTINCT FROM c.fact_count
        OR (c.sighted AND (
            NOT e.is_active
            OR e.first_seen_at IS NULL OR c.first_at < e.first_seen_at
            OR e.last_seen_at IS NULL OR c.last_at > e.last_seen_at
            OR (e.embedding_vec IS NULL AND c.vec IS NOT NULL)
            OR (e.display_name IS NULL AND c.name IS NOT NULL))))
    """
)


def refresh_entity_counts_of_agents(
    session: Session,
    changes: Mapping[str, tuple[set[str], set[uuid.UUID]]],
    sightings: Mapping[str, Mapping[str, EntitySighting]] | None = None,
) -> None:
    """:func:`refresh_entity_counts` for several agents (entity keys, closed facts, sightings) in one statement."""
    pairs = sorted((agent_id, key) for agent_id, (keys, _) in changes.items() for key in keys)
    closed = sorted((agent_id, str(fact_id)) for agent_id, (_, facts) in changes.items() for fact_id in facts)
    seen = sorted(
        (
            (agent_id, key, sighting)
            for agent_id, by_key in (sightings or {}).items()
            for key, sighting in by_key.items()
        ),
        key=lambda item: (item[0], item[1]),
    )
    if not pairs and not closed and not seen:
        return
    session.execute(
        _REFRESH_ENTITIES,
        {
            "agents": [agent_id for agent_id, _ in pairs],
            "keys": [key for _, key in pairs],
            "closed_agents": [agent_id for agent_id, _ in closed],
            "closed_facts": [fact_id for _, fact_id in closed],
            "seen_agents": [agent_id for agent_id, _, _ in seen],
            "seen_keys": [key for _, key, _ in seen],
            "seen_first": [sighting.first_at for _, _, sighting in seen],
            "seen_last": [sighting.last_at for _, _, sighting in seen],
            "seen_names": [sighting.name for _, _, sighting in seen],
            "seen_vecs": vector_array(sighting.embedding for _, _, sighting in seen),
        },
    )


def _settled_decision(decision: FactDecision, extract: ExtractStageOutput, entity_key: str | None) -> FactDecision:
    """``decision`` with its settled entity and its fact's embedding (stored once, in the extract output)."""
    update: dict[str, Any] = {}
    if entity_key is not None:
        update["entity_key"] = entity_key
    if decision.embedding is None and 0 <= decision.index < len(extract.facts):
        update["embedding"] = extract.facts[decision.index].embedding
    return decision.model_copy(update=update) if update else decision


def apply_message(
    session: Session,
    run: RunView,
    *,
    extract: ExtractStageOutput,
    resolution: ResolveStageOutput,
    reconciliation: ReconcileStageOutput,
    config: MemoryConfig,
    speaker_key: str,
    offline: bool,
    counters: bool = True,
    guard_facts: bool = True,
    facts_view: ActiveFactsView | None = None,
) -> ApplyOutcome:
    """Apply one message inside the caller's transaction (the caller holds the agent lock).

    ``counters=False`` leaves the attribute registry and the entities' fact counts to the
    caller (a chunk updates them once for all its messages: both are sums, in any order).
    ``guard_facts=False`` writes each fact without a savepoint of its own: a failing fact then
    raises, and the caller must roll back and apply again guarded (see ``_upsert_chunk``).
    ``facts_view``: the chunk's in-memory view of busy entities' active facts, kept current by
    the writes here; only without guards (a fact's savepoint rolled back would leave it wrong).
    """
    applier = Applier(
        session,
        run,
        config,
        provenance="rule" if offline else "llm",
        facts_view=None if guard_facts else facts_view,
    )
    entities = applier.settle_entities(resolution)
    remap = {
        before.canonical_key: after.canonical_key
        for before, after in zip(resolution.entities, entities, strict=True)
        if before.canonical_key != after.canonical_key
    }
    decisions = [
        _settled_decision(decision, extract, remap.get(decision.entity_key)) for decision in reconciliation.decisions
    ]
    for decision in decisions:
        if not guard_facts:
            applier.apply_decision(decision)
            continue
        try:
            with session.begin_nested():
                applier.apply_decision(decision)
        # Seeds: one fact failing (its savepoint rolled back) must not abort the others.
        except Exception as error:
            applier.outcome.warnings.append(f"fact {decision.index} not written: {type(error).__name__}: {error}")
    applier.link_facts(decisions, entities)
    applier.upsert_relationships(extract, entities, decisions, speaker_key)
    applier.seed_profiles(extract.extraction.updated_profiles, entities, speaker_key)
    if extract.directives:
        applier.outcome.directives = apply_directives(
            session,
            agent_id=run.agent_id,
            event_id=run.event_id,
            occurred_at=run.occurred_at,
            plans=extract.directives,
        )
    if counters:
        applier.register_attributes(decisions)
        applier.refresh_entity_counts()
    return applier.outcome
