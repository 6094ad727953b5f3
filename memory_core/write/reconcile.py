"""Stage ``reconcile``: ADD / UPDATE / NOOP / DELETE for every prepared fact (seeds W13).

Always runs. Facts whose closest active fact of the same entity is below the similarity
threshold, and that share no single-valued attribute slot with one, are ADDed without a
skill call (the seeds' fast path). The rest go to the reconcile skill; a failed call means
ADD (a near-duplicate beats a lost fact). With an LLM and batching on, a chunk's decisions
are asked for together first (:mod:`memory_core.write.reconcile_batching`) and found here in
the run's LLM cache. Decisions are computed outside any lock from a
snapshot; ``upsert`` re-checks them against what changed since.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from memory_core.cognition.models import ExistingFact, KnownEntity, ReconcileAction, ReconcileInput, ReconcileOutput
from memory_core.cognition.offline.reconciliation import retracts
from memory_core.config import MemoryConfig
from memory_core.write import repository
from memory_core.write.attribute_keys import is_single_valued
from memory_core.write.context import WriteContext
from memory_core.write.naming import normalize_alias
from memory_core.write.schemas import (
    FactDecision,
    PreparedFact,
    ReconcileStageOutput,
    ResolvedEntity,
    TokenCount,
    TraceStep,
)
from memory_core.write.skill_calls import SkillCache, call_skill

CANDIDATES_PER_FACT = 10


def entity_for(subject: str, entities: Sequence[ResolvedEntity], speaker_key: str) -> ResolvedEntity:
    """The resolved entity of a fact's subject (the speaker's when the subject is unknown)."""
    wanted = normalize_alias(subject)
    for entity in entities:
        if entity.mention == wanted or wanted in {normalize_alias(a) for a in entity.aliases}:
            return entity
    return next(
        (entity for entity in entities if entity.canonical_key == speaker_key),
        entities[0]
        if entities
        else ResolvedEntity(
            mention=wanted,
            canonical_key=speaker_key,
            display_name=subject,
            entity_type="person",
            method="speaker",
            is_new=False,
        ),
    )


def candidate_queries(
    agent_id: str, facts: Sequence[PreparedFact], entities: Sequence[ResolvedEntity], speaker_key: str
) -> list[repository.ClosestFactsQuery]:
    """The searches :func:`reconcile_facts` makes for ``facts``, to run beforehand for a whole chunk."""
    return [
        repository.ClosestFactsQuery(
            agent_id, entity_for(fact.subject, entities, speaker_key).canonical_key, fact.embedding, fact.attribute_key
        )
        for fact in facts
    ]


def reconcile_cache_key(index: int) -> str:
    """The run's LLM-cache key of the decision on its fact ``index`` (batched decisions are stored under it too)."""
    return f"reconcile:{index}"


def _relevant(
    fact: PreparedFact, found: Sequence[repository.FactRow], config: MemoryConfig
) -> list[repository.FactRow]:
    """The candidates worth a decision: similar enough, or holding the same single-valued slot."""
    same_slot = is_single_valued(fact.attribute_key)
    return [
        candidate
        for candidate in found
        if candidate.similarity >= config.reconciliation_similarity_threshold
        or (same_slot and candidate.attribute_key == fact.attribute_key)
    ]


def shown_fact_ids(known: Sequence[KnownEntity]) -> frozenset[str]:
    """The ids of the known facts informed extraction was shown for a message."""
    return frozenset(fact.fact_id for entity in known for fact in entity.facts)


# Transaction ids count within one database cluster: rows restored from a dump into another keep
# their ids but not its counter, so an id can look newer than every read. No read races with a
# transaction begun this long before it, so such a row counts as seen, as the clock would say.
RACE_HORIZON = timedelta(hours=1)


def _begun_long_before(candidate: repository.FactRow, known_as_of: datetime | None) -> bool:
    return (
        known_as_of is not None
        and candidate.created_at is not None
        and candidate.created_at < known_as_of - RACE_HORIZON
    )


def written_since(
    candidate: repository.FactRow, known_as_of: datetime | None, known_snapshot: str | None = None
) -> bool:
    """Whether ``candidate`` was written after informed extraction read memory (so it could not be shown).

    Exactly, when both are known: its writing transaction (``created_xid``) is not visible in the
    snapshot taken after the read (``known_snapshot``). Otherwise (a row older than migration
    0022, an extract output stored before snapshots were), by the clock: its ``created_at``, its
    writing transaction's start, later than the read. The clock misses a transaction begun
    before the read that committed after it (waiting for the agent's lock, or applying the rest
    of its chunk), whose facts are then sent to the reconcile skill, as if shown and judged wrong.
    """
    if known_snapshot is not None and candidate.created_xid is not None:
        if _begun_long_before(candidate, known_as_of):
            return False
        return not repository.visible_in(known_snapshot, candidate.created_xid)
    return known_as_of is not None and candidate.created_at is not None and candidate.created_at > known_as_of


def judged_by_extraction(
    fact: PreparedFact,
    relevant: Sequence[repository.FactRow],
    shown: frozenset[str],
    known_as_of: datetime | None = None,
    known_snapshot: str | None = None,
) -> tuple[ReconcileAction, str | None] | None:
    """The decision informed extraction already made for ``fact``, when it saw every fact that matters.

    Extraction was shown numbered known facts and said which one, if any, each new fact replaces.
    When every candidate worth a decision was among them, that judgement is the decision a
    reconcile call would be asked for: UPDATE of the replaced fact, else ADD (a repeat is still
    caught as a duplicate by upsert). Candidates written after extraction read memory
    (:func:`written_since`: another message of the agent applied meanwhile) are left to upsert's
    re-check, exactly as a chunk's earlier messages are for its later ones: repeats and
    near-duplicates, single-valued slots and retraction pairs. Otherwise, a retraction (which
    DELETEs rather than replaces), an existing candidate it was not shown, or a replaced fact
    that is no candidate: ``None``, and the reconcile skill decides.
    """
    if not fact.judged or not relevant:
        return None
    ids = {candidate.fact_id for candidate in relevant if not written_since(candidate, known_as_of, known_snapshot)}
    if not ids <= shown or retracts(fact.text):
        return None
    if fact.replaces_fact_id is None:
        return "ADD", None
    if fact.replaces_fact_id in ids:
        return "UPDATE", fact.replaces_fact_id
    return None


def _skill_input(
    fact: PreparedFact, entity: ResolvedEntity, relevant: Sequence[repository.FactRow], occurred_at: datetime
) -> ReconcileInput:
    return ReconcileInput(
        entity_key=entity.canonical_key,
        entity_name=entity.display_name,
        new_text=fact.text,
        new_attribute_key=fact.attribute_key,
        new_valid_from=occurred_at,
        existing=[
            ExistingFact(
                fact_id=candidate.fact_id,
                text=candidate.text,
                attribute_key=candidate.attribute_key,
                valid_from=candidate.valid_from,
                similarity=round(candidate.similarity, 4),
            )
            for candidate in relevant
        ],
    )


@dataclass(frozen=True)
class ReconcileRequest:
    """A fact of a message that needs the reconcile skill: its index, its cache key, the skill's input."""

    index: int
    cache_key: str
    skill_input: ReconcileInput


def reconcile_requests(
    *,
    facts: Sequence[PreparedFact],
    entities: Sequence[ResolvedEntity],
    speaker_key: str,
    occurred_at_iso: str,
    config: MemoryConfig,
    candidates: Sequence[Sequence[repository.FactRow]],
    shown: frozenset[str] = frozenset(),
    known_as_of: datetime | None = None,
    known_snapshot: str | None = None,
) -> list[ReconcileRequest]:
    """The skill calls :func:`reconcile_facts` would make for these facts and ``candidates``, same inputs.

    The fast path's facts (nothing similar) and those extraction judged already (``shown``: the
    known facts it saw, see :func:`judged_by_extraction`) are not among them.
    """
    if len(candidates) != len(facts):
        raise ValueError(f"{len(candidates)} candidate lists for {len(facts)} facts")
    occurred_at = datetime.fromisoformat(occurred_at_iso)
    requests: list[ReconcileRequest] = []
    for index, (fact, found) in enumerate(zip(facts, candidates, strict=True)):
        relevant = _relevant(fact, found, config)
        if relevant and judged_by_extraction(fact, relevant, shown, known_as_of, known_snapshot) is None:
            entity = entity_for(fact.subject, entities, speaker_key)
            requests.append(
                ReconcileRequest(index, reconcile_cache_key(index), _skill_input(fact, entity, relevant, occurred_at))
            )
    return requests


def reconcile_facts(
    ctx: WriteContext,
    session: Session,
    *,
    agent_id: str,
    facts: Sequence[PreparedFact],
    entities: Sequence[ResolvedEntity],
    speaker_key: str,
    occurred_at_iso: str,
    config: MemoryConfig,
    cache: SkillCache | None = None,
    candidates: Sequence[Sequence[repository.FactRow]] | None = None,
    batch_tokens: TokenCount | None = None,
    shown: frozenset[str] = frozenset(),
    known_as_of: datetime | None = None,
    known_snapshot: str | None = None,
) -> ReconcileStageOutput:
    """One decision per fact, in the facts' order.

    ``candidates``: the results of :func:`candidate_queries` for these facts, when read already
    (one statement for a chunk's messages); otherwise each fact's are read here.
    ``batch_tokens``: this message's share of the batched calls that left its decisions in
    ``cache`` (see :mod:`memory_core.write.reconcile_batching`). ``shown``: the known facts
    informed extraction was shown (:func:`shown_fact_ids`), ``known_as_of`` and ``known_snapshot``
    when it read them;
    a fact it judged against all its candidates costs no call (:func:`judged_by_extraction`).
    """
    started = time.perf_counter()
    occurred_at = datetime.fromisoformat(occurred_at_iso)
    tokens = batch_tokens or TokenCount()
    decisions: list[FactDecision] = []
    skill_calls = 0
    batched = 0
    extraction_decided = 0
    if candidates is not None and len(candidates) != len(facts):
        raise ValueError(f"{len(candidates)} candidate lists for {len(facts)} facts")
    for index, fact in enumerate(facts):
        entity = entity_for(fact.subject, entities, speaker_key)
        decision = FactDecision(
            index=index,
            entity_key=entity.canonical_key,
            entity_name=entity.display_name,
            entity_type=entity.entity_type,
            text=fact.text,
            attribute_key=fact.attribute_key,
            importance=fact.importance,
            confidence=fact.confidence,
            source_context=fact.source_context,
            # Not copied: upsert takes it from the extract output (decision.index), so the
            # vector is stored once per fact, not once per stage that handles it.
        )
        found = (
            candidates[index]
            if candidates is not None
            else repository.closest_active_facts(
                session,
                agent_id,
                entity.canonical_key,
                fact.embedding,
                limit=CANDIDATES_PER_FACT,
                attribute_key=fact.attribute_key,
            )
        )
        decision.candidate_ids = [candidate.fact_id for candidate in found]
        relevant = _relevant(fact, found, config)
        if not relevant:
            decision.reason = "fast path: nothing similar"
            decisions.append(decision)
            continue
        judged = judged_by_extraction(fact, relevant, shown, known_as_of, known_snapshot)
        if judged is not None:
            decision.action, decision.target_fact_id = judged
            decision.reason = "decided by informed extraction, which saw every candidate"
            later = [c.fact_id for c in relevant if written_since(c, known_as_of, known_snapshot)]
            if later:
                # Not judged here: upsert compares them with this fact as facts it never saw.
                decision.candidate_ids = [fact_id for fact_id in decision.candidate_ids if fact_id not in later]
                decision.reason = "decided by informed extraction, which saw every candidate written before it"
            extraction_decided += 1
            decisions.append(decision)
            continue
        skill_calls += 1
        key = reconcile_cache_key(index)
        if cache is not None and isinstance((cache.get(key) or {}).get("batch"), dict):
            batched += 1
        call = call_skill(
            ctx.skills.reconcile,
            _skill_input(fact, entity, relevant, occurred_at),
            ReconcileOutput,
            cache=cache,
            cache_key=key,
            cacheable=ctx.skills.kind == "llm",
            release=ctx.release(session),
        )
        tokens = tokens.plus(call.tokens)
        verdict = call.output
        if verdict is None:
            decision.reason = f"reconcile failed, ADD: {call.error}"
        elif verdict.action != "ADD" and verdict.target_fact_id not in {c.fact_id for c in relevant}:
            decision.reason = f"target {verdict.target_fact_id!r} is not a candidate, ADD"
        else:
            decision.action = verdict.action
            decision.target_fact_id = verdict.target_fact_id if verdict.action != "ADD" else None
            decision.reason = verdict.reason
        decisions.append(decision)
    trace = [
        TraceStep(
            name="reconciliation",
            duration_ms=(time.perf_counter() - started) * 1000,
            data={
                "skill_calls": skill_calls,
                **({"batched": batched} if batched else {}),
                **({"decided_by_extraction": extraction_decided} if extraction_decided else {}),
                "decisions": [{"text": d.text, "action": d.action, "target": d.target_fact_id} for d in decisions],
            },
        )
    ]
    return ReconcileStageOutput(decisions=decisions, tokens=tokens, trace=trace)
