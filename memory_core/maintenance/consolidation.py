"""Consolidation L2 (seeds B3): observations from the lookback window, and emotion tags on its events.

1. **Emotion tagging.** Events of the window without ``emotion_primary`` are tagged with
   ``skills.tag_emotion`` (emotion, intensity, energy level), newest first, at most
   :data:`MAX_TAGGED_PER_RUN` per run. Tagging runs even when the window is too quiet for
   observations: emotional trends read these tags.
2. **Observations.** With at least ``consolidation_min_events`` events in the last
   ``consolidation_lookback_days`` (otherwise the result says ``skipped`` and why), one
   ``skills.consolidate`` call sees the window's newest :data:`MAX_EVENTS` events in time
   order (with their tags) and the active facts stated in the window, plus the active facts
   that share an (entity, attribute key) with them, so a new fact contradicting an old one
   is visible (at most :data:`MAX_FACTS`).
3. **Storage.** Each observation becomes a ``memory_meta_observations`` row of its kind
   (``insight``, ``pattern``, ``contradiction``, ``trend``) with its supporting event and fact
   ids (only ids the skill was shown) and an embedding of its text; retrieval shows it under
   "Observed patterns" next to its facts, for a similar query, or (trends) while recent. An
   active observation of the same kind and title (case- and space-insensitive) is reinforced
   instead of duplicated (``times_reinforced`` + 1, ``last_reinforced_at``, text refreshed,
   evidence merged), but only on new evidence: ids it did not cite yet, or, for an
   observation citing none, events newer than its last reinforcement. Re-running over the
   same window therefore changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from memory_core.cognition.maintenance_models import ConsolidationInput, EventLine, FactLine, ObservationDraft
from memory_core.cognition.models import EmotionInput
from memory_core.config import MemoryConfig
from memory_core.db.vectors import vector_param
from memory_core.maintenance.context import MaintenanceContext

__all__ = ["MAX_EVENTS", "MAX_EVIDENCE_IDS", "MAX_FACTS", "MAX_OBSERVATIONS", "MAX_TAGGED_PER_RUN", "run"]

# Events shown to the consolidation skill (newest of the window).
MAX_EVENTS = 200
# Facts shown to the consolidation skill: stated in the window, and older ones on the same keys.
MAX_FACTS = 200
_MAX_OLDER_FACTS = 50
# Events tagged with an emotion per run: the bound on tagging LLM calls.
MAX_TAGGED_PER_RUN = 100
# Observations stored per run.
MAX_OBSERVATIONS = 20
# Evidence ids kept per observation (newest kept when merging).
MAX_EVIDENCE_IDS = 200
_TITLE_MAX_CHARS = 256
_EMOTION_MAX_CHARS = 32

_COUNT_EVENTS_SQL = text(
    "SELECT count(*) FROM memory_events WHERE agent_id = :agent AND occurred_at >= :since AND occurred_at <= :now"
)

_UNTAGGED_SQL = text(
    """
    SELECT id, text FROM memory_events
    WHERE agent_id = :agent AND occurred_at >= :since AND occurred_at <= :now AND emotion_primary IS NULL
    ORDER BY occurred_at DESC, seq DESC NULLS LAST, id DESC
    LIMIT :limit
    """
)

_TAG_SQL = text(
    """
    UPDATE memory_events SET emotion_primary = :emotion, emotion_intensity = :intensity, energy_level = :energy
    WHERE agent_id = :agent AND id = :id AND emotion_primary IS NULL
    """
)

_EVENTS_SQL = text(
    """
    SELECT id, speaker, text, occurred_at, emotion_primary FROM memory_events
    WHERE agent_id = :agent AND occurred_at >= :since AND occurred_at <= :now
    ORDER BY occurred_at DESC, seq DESC NULLS LAST, id DESC
    LIMIT :limit
    """
)

_FACTS_SQL = text(
    """
    WITH recent AS (
        SELECT id, entity_key, attribute_key, fact_text, valid_from FROM memory_facts
        WHERE agent_id = :agent AND valid_to IS NULL AND valid_from >= :since
        ORDER BY valid_from DESC, id
        LIMIT :recent_limit
    ),
    related AS (
        SELECT f.id, f.entity_key, f.attribute_key, f.fact_text, f.valid_from
        FROM memory_facts f
        JOIN (SELECT DISTINCT entity_key, attribute_key FROM recent WHERE attribute_key IS NOT NULL) k
          ON f.entity_key = k.entity_key AND f.attribute_key = k.attribute_key
        WHERE f.agent_id = :agent AND f.valid_to IS NULL AND f.valid_from < :since
        ORDER BY f.valid_from DESC, f.id
        LIMIT :older_limit
    )
    SELECT * FROM recent UNION ALL SELECT * FROM related
    ORDER BY valid_from, id
    """
)

_FIND_SQL = text(
    """
    SELECT id, supporting_event_ids, supporting_fact_ids, confidence, last_reinforced_at
    FROM memory_meta_observations
    WHERE agent_id = :agent AND observation_type = :kind AND is_active
      AND lower(regexp_replace(title, '\\s+', ' ', 'g')) = :title_key
    ORDER BY first_detected_at, id
    LIMIT 1
    """
)

_INSERT_SQL = text(
    """
    INSERT INTO memory_meta_observations (agent_id, observation_type, title, text, supporting_event_ids,
        supporting_fact_ids, confidence, embedding_vec, first_detected_at, last_reinforced_at, created_at)
    VALUES (:agent, :kind, :title, :text, CAST(:events AS jsonb), CAST(:facts AS jsonb), :confidence,
        CAST(:vec AS vector), :now, :now, :now)
    """
)

_REINFORCE_SQL = text(
    """
    UPDATE memory_meta_observations
    SET text = :text, supporting_event_ids = CAST(:events AS jsonb), supporting_fact_ids = CAST(:facts AS jsonb),
        confidence = :confidence, embedding_vec = COALESCE(CAST(:vec AS vector), embedding_vec),
        times_reinforced = times_reinforced + 1, last_reinforced_at = :now
    WHERE agent_id = :agent AND id = :id
    """
)


@dataclass
class _Tally:
    created: int = 0
    reinforced: int = 0
    unchanged: int = 0


def _tag_emotions(context: MaintenanceContext, agent_id: str, since: datetime, now: datetime) -> tuple[int, int]:
    """Tag the window's untagged events (bounded); (events tagged, fallbacks)."""
    with context.sessions.begin() as session:
        rows = session.execute(
            _UNTAGGED_SQL, {"agent": agent_id, "since": since, "now": now, "limit": MAX_TAGGED_PER_RUN}
        ).all()
    tags: list[dict[str, Any]] = []
    fallbacks = 0
    for row in rows:
        # No connection is held while the skill answers.
        outcome = context.skills.tag_emotion.run(EmotionInput(text=str(row.text)))
        fallbacks += int(outcome.used_fallback)
        tag = outcome.output
        tags.append(
            {
                "agent": agent_id,
                "id": row.id,
                "emotion": (tag.emotion.strip().lower() or "neutral")[:_EMOTION_MAX_CHARS],
                "intensity": tag.intensity,
                "energy": tag.energy,
            }
        )
    if tags:
        with context.sessions.begin() as session:
            session.execute(_TAG_SQL, tags)
    return len(tags), fallbacks


def _skill_input(context: MaintenanceContext, agent_id: str, since: datetime, now: datetime) -> ConsolidationInput:
    with context.sessions.begin() as session:
        events = session.execute(
            _EVENTS_SQL, {"agent": agent_id, "since": since, "now": now, "limit": MAX_EVENTS}
        ).all()
        facts = session.execute(
            _FACTS_SQL,
            {
                "agent": agent_id,
                "since": since,
                "recent_limit": MAX_FACTS - _MAX_OLDER_FACTS,
                "older_limit": _MAX_OLDER_FACTS,
            },
        ).all()
    return ConsolidationInput(
        events=[
            EventLine(
                event_id=str(row.id),
                speaker=str(row.speaker),
                text=str(row.text),
                occurred_at=row.occurred_at,
                emotion=row.emotion_primary,
            )
            for row in reversed(events)
        ],
        facts=[
            FactLine(
                fact_id=str(row.id),
                text=str(row.fact_text),
                attribute_key=row.attribute_key,
                valid_from=row.valid_from,
                entity_key=row.entity_key,
            )
            for row in facts
        ],
    )


def _merged(old: list[Any], new: list[str]) -> list[str]:
    combined = list(dict.fromkeys([*(str(item) for item in old), *new]))
    return combined[-MAX_EVIDENCE_IDS:]


def _store(
    context: MaintenanceContext,
    agent_id: str,
    drafts: list[ObservationDraft],
    *,
    newest_event: datetime | None,
    now: datetime,
    tally: _Tally,
) -> None:
    texts = [draft.text for draft in drafts]
    vectors = context.embedder.embed(texts) if texts else []
    with context.sessions.begin() as session:
        for draft, vector in zip(drafts, vectors, strict=True):
            title = draft.title[:_TITLE_MAX_CHARS]
            found = session.execute(
                _FIND_SQL, {"agent": agent_id, "kind": draft.kind, "title_key": " ".join(title.split()).lower()}
            ).first()
            params: dict[str, Any] = {
                "agent": agent_id,
                "kind": draft.kind,
                "title": title,
                "text": draft.text,
                "confidence": draft.confidence,
                "vec": vector_param(vector),
                "now": now,
            }
            if found is None:
                session.execute(
                    _INSERT_SQL,
                    {
                        **params,
                        "events": json.dumps(draft.supporting_event_ids[-MAX_EVIDENCE_IDS:]),
                        "facts": json.dumps(draft.supporting_fact_ids[-MAX_EVIDENCE_IDS:]),
                    },
                )
                tally.created += 1
                continue
            cited = {str(item) for item in [*found.supporting_event_ids, *found.supporting_fact_ids]}
            evidence = [*draft.supporting_event_ids, *draft.supporting_fact_ids]
            if evidence:
                fresh = any(item not in cited for item in evidence)
            else:
                fresh = newest_event is not None and newest_event > found.last_reinforced_at
            if not fresh:
                tally.unchanged += 1
                continue
            session.execute(
                _REINFORCE_SQL,
                {
                    **params,
                    "id": found.id,
                    "events": json.dumps(_merged(found.supporting_event_ids, draft.supporting_event_ids)),
                    "facts": json.dumps(_merged(found.supporting_fact_ids, draft.supporting_fact_ids)),
                    "confidence": max(float(found.confidence), draft.confidence),
                },
            )
            tally.reinforced += 1


def _clean(drafts: list[ObservationDraft], skill_input: ConsolidationInput) -> list[ObservationDraft]:
    """Drop empty drafts and duplicates (same kind and title), and evidence ids the skill was not shown."""
    event_ids = {event.event_id for event in skill_input.events}
    fact_ids = {fact.fact_id for fact in skill_input.facts}
    seen: set[tuple[str, str]] = set()
    kept: list[ObservationDraft] = []
    for draft in drafts:
        title, body = " ".join(draft.title.split()), " ".join(draft.text.split())
        key = (draft.kind, title.lower())
        if not title or not body or key in seen:
            continue
        seen.add(key)
        kept.append(
            draft.model_copy(
                update={
                    "title": title,
                    "text": body,
                    "supporting_event_ids": [i for i in dict.fromkeys(draft.supporting_event_ids) if i in event_ids],
                    "supporting_fact_ids": [i for i in dict.fromkeys(draft.supporting_fact_ids) if i in fact_ids],
                }
            )
        )
    return kept[:MAX_OBSERVATIONS]


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Tag the window's events and consolidate it into observations (see the module docstring).

    Result: the seeds' ``events_processed``, ``observations_created``, ``observations_reinforced``,
    ``skipped`` and ``skip_reason``, plus ``observations_unchanged`` (found again without new
    evidence), ``events_tagged`` and ``skill_fallbacks`` (LLM answers replaced by rules).
    """
    now = context.now()
    since = now - timedelta(days=config.consolidation_lookback_days)
    tagged, fallbacks = _tag_emotions(context, agent_id, since, now)
    result: dict[str, Any] = {
        "events_processed": 0,
        "observations_created": 0,
        "observations_reinforced": 0,
        "observations_unchanged": 0,
        "events_tagged": tagged,
        "skill_fallbacks": fallbacks,
        "skipped": False,
        "skip_reason": None,
    }
    with context.sessions.begin() as session:
        in_window = int(
            session.execute(_COUNT_EVENTS_SQL, {"agent": agent_id, "since": since, "now": now}).scalar_one()
        )
    if in_window < config.consolidation_min_events:
        result["skipped"] = True
        result["skip_reason"] = (
            f"{in_window} events in the last {config.consolidation_lookback_days} days; "
            f"consolidation needs {config.consolidation_min_events}"
        )
        return result
    skill_input = _skill_input(context, agent_id, since, now)
    outcome = context.skills.consolidate.run(skill_input)
    result["skill_fallbacks"] = fallbacks + int(outcome.used_fallback)
    drafts = _clean(outcome.output.observations, skill_input)
    tally = _Tally()
    newest = skill_input.events[-1].occurred_at if skill_input.events else None
    _store(context, agent_id, drafts, newest_event=newest, now=now, tally=tally)
    result.update(
        events_processed=len(skill_input.events),
        observations_created=tally.created,
        observations_reinforced=tally.reinforced,
        observations_unchanged=tally.unchanged,
    )
    return result
