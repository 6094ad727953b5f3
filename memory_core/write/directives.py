"""Procedural memory in the write pipeline: plan a message's directives (``extract``), apply them (``upsert``).

``extract`` finds the directives a message gives (the extraction call's ``directives`` with an
LLM; the rule twin offline), embeds them and compares each with the agent's active directives,
read as a snapshot outside any transaction:

1. the same comparison key as an active directive -> **reinforce** it;
2. else every active directive at least ``contradiction_similarity_threshold`` similar (the
   embedding pre-filter, closest first) goes to the contradiction judge (the LLM, its answer
   cached per run; offline the rule twin): the first it finds contradicted is **superseded**;
3. else the closest one at least :data:`DUPLICATE_SIMILARITY` similar is **reinforced**
   (a rewording);
4. else the directive is **added**.

The plan is stored in the stage output, so a redelivered ``upsert`` never judges twice, and
``upsert`` applies it under the agent's lock, once (the run's check-and-set): a target that is
no longer active (deleted, superseded meanwhile) turns the plan into an addition, and the one
active row per (agent, key) makes two messages teaching the same directive at once reinforce one
row. Time is respected as for facts: a directive older than the one it contradicts is stored as
history (inactive, superseded by the newer one) instead of replacing it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from memory_core.cognition.directive_models import (
    ContradictionInput,
    ContradictionOutput,
    DirectiveDetectionInput,
    DirectiveDetectionOutput,
    ExtractedDirective,
)
from memory_core.cognition.offline.directives import (
    OfflineContradictionSkill,
    OfflineDirectiveDetectionSkill,
    directive_key,
)
from memory_core.config import MemoryConfig
from memory_core.db.statements import sql
from memory_core.db.vectors import vector_param
from memory_core.write.context import WriteContext
from memory_core.write.schemas import DirectiveChange, DirectivePlan, TokenCount
from memory_core.write.skill_calls import SkillCache, call_skill

__all__ = [
    "DUPLICATE_SIMILARITY",
    "DirectivePlanning",
    "apply_directives",
    "detect_offline",
    "plan_directives",
]

# A new directive this close to an active one (and not contradicting it) says the same thing
# in other words: it reinforces that one instead of adding a near-copy. Name ours.
DUPLICATE_SIMILARITY = 0.95
# How many of the closest active directives the judge may be asked about, per new directive.
JUDGED_CANDIDATES = 3
_MAX_TEXT = 500

_OFFLINE_DETECTION = OfflineDirectiveDetectionSkill()
_OFFLINE_JUDGE = OfflineContradictionSkill()

_CLOSEST = sql(
    "SELECT id, text, text_key, learned_at, 1 - (embedding_vec <=> CAST(:vec AS vector)) AS similarity "
    "FROM memory_directives WHERE agent_id = :agent AND is_active AND embedding_vec IS NOT NULL "
    "ORDER BY embedding_vec <=> CAST(:vec AS vector) LIMIT :limit"
)
_BY_KEY = sql("SELECT id FROM memory_directives WHERE agent_id = :agent AND is_active AND text_key = :key")


@dataclass
class DirectivePlanning:
    """A message's directive plans, the tokens the judge cost and the trace of what was decided."""

    plans: list[DirectivePlan] = field(default_factory=list)
    tokens: TokenCount = field(default_factory=TokenCount)
    errors: list[str] = field(default_factory=list)


def detect_offline(ctx: WriteContext, message: str, speaker: str) -> list[ExtractedDirective]:
    """The directives of ``message`` by the offline detection skill (the bundle's, else the rule twin)."""
    skill = ctx.skills.detect_directives or _OFFLINE_DETECTION
    call = call_skill(skill, DirectiveDetectionInput(message=message, speaker_name=speaker), DirectiveDetectionOutput)
    return call.output.directives if call.output is not None else []


def _clean(detected: Sequence[ExtractedDirective]) -> list[ExtractedDirective]:
    seen: set[str] = set()
    kept: list[ExtractedDirective] = []
    for directive in detected:
        text = " ".join(directive.text.split())[:_MAX_TEXT]
        key = directive_key(text)
        if not key or key in seen:
            continue
        seen.add(key)
        kept.append(directive.model_copy(update={"text": text}))
    return kept


def plan_directives(
    ctx: WriteContext,
    session: Session,
    *,
    agent_id: str,
    detected: Sequence[ExtractedDirective],
    config: MemoryConfig,
    cache: SkillCache | None = None,
) -> DirectivePlanning:
    """What ``upsert`` should do with each detected directive (see the module docstring); reads only."""
    planning = DirectivePlanning()
    directives = _clean(detected)
    if not directives:
        return planning
    if not ctx.embedder_in_process:
        session.close()  # the embedder may be remote: give the connection back meanwhile
    vectors = ctx.embedder.embed([directive.text for directive in directives])
    judge = ctx.skills.judge_directive or _OFFLINE_JUDGE
    cacheable = ctx.skills.kind == "llm"
    for number, (directive, vector) in enumerate(zip(directives, vectors, strict=True)):
        key = directive_key(directive.text)
        plan = DirectivePlan(text=directive.text, key=key, confidence=directive.confidence, embedding=vector)
        same = session.execute(_BY_KEY, {"agent": agent_id, "key": key}).scalar()
        if same is not None:
            planning.plans.append(plan.model_copy(update={"action": "reinforce", "target_id": str(same)}))
            continue
        closest = session.execute(
            _CLOSEST, {"agent": agent_id, "vec": vector_param(vector), "limit": JUDGED_CANDIDATES}
        ).all()
        decided = False
        for row in closest:
            if float(row.similarity) < config.contradiction_similarity_threshold:
                break
            call = call_skill(
                judge,
                ContradictionInput(new_directive=directive.text, existing_directive=row.text),
                ContradictionOutput,
                cache=cache,
                cache_key=f"{judge.name}:{number}:{row.id}",
                cacheable=cacheable,
                release=ctx.release(session),
            )
            planning.tokens = planning.tokens.plus(call.tokens)
            if call.output is None:  # seeds: the check is fail-safe, no contradiction on error
                planning.errors.append(call.error or "contradiction check failed")
                continue
            if call.output.contradicts:
                planning.plans.append(
                    plan.model_copy(
                        update={"action": "supersede", "target_id": str(row.id), "reason": call.output.reason}
                    )
                )
                decided = True
                break
        if decided:
            continue
        if closest and float(closest[0].similarity) >= DUPLICATE_SIMILARITY:
            planning.plans.append(plan.model_copy(update={"action": "reinforce", "target_id": str(closest[0].id)}))
            continue
        planning.plans.append(plan)
    return planning


# ---- upsert ----------------------------------------------------------------------------------------

_REINFORCE = sql(
    "UPDATE memory_directives SET times_reinforced = times_reinforced + 1, "
    "confidence = GREATEST(confidence, :confidence), last_reinforced_at = GREATEST(last_reinforced_at, :at) "
    "WHERE id = :id AND agent_id = :agent AND is_active RETURNING id"
)
# One active row per (agent, key): a concurrent message that taught the same directive first
# makes this one a reinforcement of its row.
_INSERT = sql(
    "INSERT INTO memory_directives (id, agent_id, text, text_key, confidence, source_event_id, embedding_vec, "
    "learned_at, last_reinforced_at, is_active, superseded_by_id, supersession_reason, invalidated_at) "
    "VALUES (:id, :agent, :text, :key, :confidence, :event, CAST(:vec AS vector), :at, :at, :active, "
    ":superseded_by, :reason, CASE WHEN :active THEN NULL ELSE now() END) "
    "ON CONFLICT (agent_id, text_key) WHERE is_active DO UPDATE SET "
    "times_reinforced = memory_directives.times_reinforced + 1, "
    "confidence = GREATEST(memory_directives.confidence, EXCLUDED.confidence), "
    "last_reinforced_at = GREATEST(memory_directives.last_reinforced_at, EXCLUDED.last_reinforced_at) "
    "RETURNING id, (xmax = 0) AS inserted"
)
_TARGET = sql(
    "SELECT id, learned_at FROM memory_directives WHERE id = :id AND agent_id = :agent AND is_active FOR UPDATE"
)
_CLOSE = sql(
    "UPDATE memory_directives SET is_active = false, superseded_by_id = :by, supersession_reason = :reason, "
    "invalidated_at = now() WHERE id = :id AND agent_id = :agent"
)


def _insert(
    session: Session,
    agent_id: str,
    plan: DirectivePlan,
    event_id: uuid.UUID | None,
    at: datetime,
    *,
    active: bool = True,
    superseded_by: uuid.UUID | None = None,
) -> tuple[uuid.UUID, bool]:
    row = session.execute(
        _INSERT,
        {
            "id": uuid.uuid4(),
            "agent": agent_id,
            "text": plan.text,
            "key": plan.key,
            "confidence": plan.confidence,
            "event": event_id,
            "vec": vector_param(plan.embedding),
            "at": at,
            "active": active,
            "superseded_by": superseded_by,
            "reason": plan.reason if superseded_by is not None else None,
        },
    ).one()
    return row.id, bool(row.inserted)


def apply_directives(
    session: Session,
    *,
    agent_id: str,
    event_id: uuid.UUID | None,
    occurred_at: datetime,
    plans: Sequence[DirectivePlan],
) -> list[DirectiveChange]:
    """Apply ``plans`` in the caller's transaction (which holds the agent's lock); what changed."""
    changes: list[DirectiveChange] = []
    for plan in plans:
        target = uuid.UUID(plan.target_id) if plan.target_id else None
        if plan.action == "reinforce" and target is not None:
            hit = session.execute(
                _REINFORCE, {"id": target, "agent": agent_id, "confidence": plan.confidence, "at": occurred_at}
            ).scalar()
            if hit is not None:
                changes.append(DirectiveChange(directive_id=str(hit), text=plan.text, change="reinforced"))
                continue
        if plan.action == "supersede" and target is not None:
            old = session.execute(_TARGET, {"id": target, "agent": agent_id}).one_or_none()
            if old is not None and old.learned_at > occurred_at:
                # Said before the directive it contradicts (a shuffled import): history, not a replacement.
                new_id, _ = _insert(session, agent_id, plan, event_id, occurred_at, active=False, superseded_by=old.id)
                changes.append(
                    DirectiveChange(directive_id=str(new_id), text=plan.text, change="history", superseded_id=None)
                )
                continue
            if old is not None:
                # Close the old one first: the new text may share its key only if the judge erred,
                # and the unique active key must not see both.
                session.execute(
                    _CLOSE, {"id": old.id, "agent": agent_id, "by": None, "reason": plan.reason or "contradicted"}
                )
                new_id, _ = _insert(session, agent_id, plan, event_id, occurred_at)
                session.execute(
                    _CLOSE, {"id": old.id, "agent": agent_id, "by": new_id, "reason": plan.reason or "contradicted"}
                )
                changes.append(
                    DirectiveChange(
                        directive_id=str(new_id), text=plan.text, change="superseded", superseded_id=str(old.id)
                    )
                )
                continue
        new_id, inserted = _insert(session, agent_id, plan, event_id, occurred_at)
        changes.append(
            DirectiveChange(directive_id=str(new_id), text=plan.text, change="added" if inserted else "reinforced")
        )
    return changes
