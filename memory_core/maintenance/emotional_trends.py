"""Emotional trends (seeds B7): the emotions of recent events, materialised as one meta-observation.

Events tagged by consolidation (``emotion_primary``, ``emotion_intensity``, ``energy_level``)
within the last ``emotional_trend_window_days`` (30) are aggregated once there are at least
``emotional_trend_min_events`` (5) of them:

* ``emotion_counts`` per emotion (``neutral`` included); the **dominant emotion** is the most
  frequent one other than ``neutral`` (``neutral`` only when nothing else was felt);
* ``trend_direction`` (seeds' field): ``increasing`` / ``decreasing`` / ``stable``, whether the
  dominant emotion's share of events grew or shrank from the older half of the window to the
  newer half (by more than :data:`DIRECTION_MARGIN`);
* ``mood_direction``: ``improving`` / ``worsening`` / ``stable``, the same comparison of the
  halves' mood balance (mean of +intensity for pleasant emotions, -intensity for unpleasant
  ones, 0 for neutral or unknown ones);
* mean intensities, the predominant energy level, and ``trigger_keywords``: the most frequent
  content words of high-intensity events.

The observation (``observation_type = "emotional_trend"``) is unique per agent and updated in
place: a second run rewrites its text and bumps ``last_reinforced_at`` (retrieval puts a
trend reinforced in the last ``emotional_summary_max_age_days`` into the context), never
adds a second one; a transaction-scoped advisory lock keeps two concurrent runs from both
inserting. Fewer events than the minimum: nothing is written (``skipped``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from memory_core.config import MemoryConfig
from memory_core.db.vectors import vector_param
from memory_core.maintenance.context import MaintenanceContext
from memory_core.providers.hashing_embedder import content_words

__all__ = ["DIRECTION_MARGIN", "TREND_TYPE", "TrendSummary", "run", "summarize_trend"]

TREND_TYPE = "emotional_trend"
# A change of share (or mood balance) smaller than this between the halves is "stable" (ours).
DIRECTION_MARGIN = 0.15
# Events at least this intense feed trigger_keywords (ours).
TRIGGER_INTENSITY = 0.7
TRIGGER_KEYWORDS = 5
MAX_SUPPORTING_EVENTS = 50
NEUTRAL = "neutral"
# Intensity assumed for an event tagged without one.
DEFAULT_INTENSITY = 0.5

_PLEASANT = frozenset(
    [
        "joy",
        "happiness",
        "love",
        "gratitude",
        "excitement",
        "pride",
        "calm",
        "relief",
        "contentment",
        "hope",
        "amusement",
        "admiration",
        "enthusiasm",
        "satisfaction",
        "serenity",
        "affection",
        "optimism",
    ]
)
_UNPLEASANT = frozenset(
    [
        "sadness",
        "anger",
        "fear",
        "anxiety",
        "frustration",
        "tiredness",
        "disgust",
        "shame",
        "guilt",
        "loneliness",
        "stress",
        "grief",
        "disappointment",
        "irritation",
        "worry",
        "boredom",
        "nervousness",
        "exhaustion",
    ]
)

_EVENTS_SQL = text(
    """
    SELECT id, text, occurred_at, lower(emotion_primary) AS emotion, emotion_intensity, energy_level
    FROM memory_events
    WHERE agent_id = :agent AND emotion_primary IS NOT NULL AND occurred_at >= :since AND occurred_at <= :now
    ORDER BY occurred_at, seq NULLS FIRST, id
    """
)

_LOCK_SQL = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")

_EXISTING_SQL = text(
    "SELECT id FROM memory_meta_observations WHERE agent_id = :agent AND observation_type = :type "
    "ORDER BY first_detected_at, id"
)

_INSERT_SQL = text(
    """
    INSERT INTO memory_meta_observations (id, agent_id, observation_type, title, text, supporting_event_ids,
        confidence, importance, is_active, embedding_vec, first_detected_at, last_reinforced_at)
    VALUES (:id, :agent, :type, :title, :text, CAST(:events AS jsonb), :confidence, :importance, true,
        CAST(:vec AS vector), :now, :now)
    """
)

_UPDATE_SQL = text(
    """
    UPDATE memory_meta_observations SET title = :title, text = :text, supporting_event_ids = CAST(:events AS jsonb),
        confidence = :confidence, importance = :importance, is_active = true, embedding_vec = CAST(:vec AS vector),
        last_reinforced_at = :now, times_reinforced = times_reinforced + 1
    WHERE agent_id = :agent AND id = :id
    """
)

_RETIRE_EXTRA_SQL = text(
    "UPDATE memory_meta_observations SET is_active = false WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[]))"
)


@dataclass(frozen=True)
class TrendEvent:
    """One tagged event as the aggregation reads it."""

    event_id: str
    text: str
    occurred_at: datetime
    emotion: str
    intensity: float
    energy: str | None


@dataclass(frozen=True)
class TrendSummary:
    """The aggregate of a window's tagged events."""

    emotion_counts: dict[str, int]
    dominant_emotion: str
    trend_direction: str
    mood_direction: str
    avg_intensity: float
    dominant_intensity: float
    dominant_energy: str
    trigger_keywords: list[str]
    events_analyzed: int
    supporting_event_ids: list[str]


def _valence(emotion: str) -> int:
    if emotion in _PLEASANT:
        return 1
    if emotion in _UNPLEASANT:
        return -1
    return 0


def _direction(before: float, after: float, up: str, down: str) -> str:
    if after - before > DIRECTION_MARGIN:
        return up
    if before - after > DIRECTION_MARGIN:
        return down
    return "stable"


def _mood(events: list[TrendEvent]) -> float:
    if not events:
        return 0.0
    return sum(_valence(event.emotion) * event.intensity for event in events) / len(events)


def _share(events: list[TrendEvent], emotion: str) -> float:
    if not events:
        return 0.0
    return sum(1 for event in events if event.emotion == emotion) / len(events)


def summarize_trend(events: list[TrendEvent], midpoint: datetime) -> TrendSummary:
    """Aggregate ``events`` (non-empty); halves are split at ``midpoint`` (see the module docstring)."""
    counts = Counter(event.emotion for event in events)
    felt = {emotion: number for emotion, number in counts.items() if emotion != NEUTRAL}
    pool = felt or dict(counts)
    # Most frequent; ties go to the more intense, then alphabetical, so the answer is stable.
    intensity_of = {
        emotion: sum(e.intensity for e in events if e.emotion == emotion) / number for emotion, number in pool.items()
    }
    dominant = min(pool, key=lambda emotion: (-pool[emotion], -intensity_of[emotion], emotion))
    older = [event for event in events if event.occurred_at < midpoint]
    newer = [event for event in events if event.occurred_at >= midpoint]
    energies = Counter(event.energy for event in events if event.energy)
    energy = min(energies, key=lambda level: (-energies[level], level)) if energies else "medium"
    words: Counter[str] = Counter()
    for event in events:
        if event.intensity >= TRIGGER_INTENSITY and event.emotion != NEUTRAL:
            words.update(set(content_words(event.text)))
    keywords = [word for word, _ in sorted(words.items(), key=lambda item: (-item[1], item[0]))][:TRIGGER_KEYWORDS]
    dominant_events = [event for event in events if event.emotion == dominant]
    return TrendSummary(
        emotion_counts=dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
        dominant_emotion=dominant,
        trend_direction=_direction(_share(older, dominant), _share(newer, dominant), "increasing", "decreasing"),
        mood_direction=_direction(_mood(older), _mood(newer), "improving", "worsening"),
        avg_intensity=round(sum(event.intensity for event in events) / len(events), 4),
        dominant_intensity=round(intensity_of[dominant], 4),
        dominant_energy=energy,
        trigger_keywords=keywords,
        events_analyzed=len(events),
        supporting_event_ids=[event.event_id for event in dominant_events[-MAX_SUPPORTING_EVENTS:]],
    )


def _observation_text(summary: TrendSummary, window_days: int) -> str:
    dominant = summary.emotion_counts.get(summary.dominant_emotion, 0)
    others = ", ".join(
        f"{emotion} {number}"
        for emotion, number in summary.emotion_counts.items()
        if emotion != summary.dominant_emotion
    )
    parts = [
        f"Emotional trend over the last {window_days} days ({summary.events_analyzed} tagged messages): "
        f"mostly {summary.dominant_emotion} ({dominant} of {summary.events_analyzed}, mean intensity "
        f"{summary.dominant_intensity:.2f}), {summary.trend_direction}; overall mood {summary.mood_direction}; "
        f"energy mostly {summary.dominant_energy}."
    ]
    if others:
        parts.append(f"Other emotions: {others}.")
    if summary.trigger_keywords:
        parts.append(f"Intense moments mention: {', '.join(summary.trigger_keywords)}.")
    return " ".join(parts)


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Aggregate ``agent_id``'s tagged events of the window into its single emotional-trend observation.

    Result: the seeds' ``emotion_counts``, ``trend_direction``, ``dominant_emotion``,
    ``trigger_keywords``, ``avg_intensity``, ``dominant_intensity``, ``dominant_energy``,
    ``events_analyzed``, ``observation_created`` (created or updated), ``observation_id``, plus
    ``mood_direction``, ``created`` (a new row rather than an update) and ``skipped``/``skip_reason``.
    """
    now = context.now()
    window = timedelta(days=config.emotional_trend_window_days)
    with context.sessions.begin() as session:
        rows = session.execute(_EVENTS_SQL, {"agent": agent_id, "since": now - window, "now": now}).all()
    events = [
        TrendEvent(
            event_id=str(row.id),
            text=str(row.text),
            occurred_at=row.occurred_at,
            emotion=str(row.emotion).strip() or NEUTRAL,
            intensity=min(1.0, max(0.0, float(row.emotion_intensity)))
            if row.emotion_intensity is not None
            else DEFAULT_INTENSITY,
            energy=row.energy_level,
        )
        for row in rows
    ]
    if len(events) < config.emotional_trend_min_events:
        return {
            "events_analyzed": len(events),
            "observation_created": False,
            "observation_id": None,
            "skipped": True,
            "skip_reason": f"{len(events)} tagged events in the window, fewer than {config.emotional_trend_min_events}",
        }
    summary = summarize_trend(events, now - window / 2)
    body = _observation_text(summary, config.emotional_trend_window_days)
    vector = context.embedder.embed_one(body)
    params = {
        "agent": agent_id,
        "type": TREND_TYPE,
        "title": f"Emotional trend: {summary.dominant_emotion}, {summary.mood_direction}"[:256],
        "text": body,
        "events": "[" + ",".join(f'"{event_id}"' for event_id in summary.supporting_event_ids) + "]",
        "confidence": round(min(1.0, 0.5 + 0.5 * len(events) / (4 * config.emotional_trend_min_events)), 4),
        "importance": 0.6,
        "vec": vector_param(vector),
        "now": now,
    }
    with context.sessions.begin() as session:
        session.execute(_LOCK_SQL, {"key": f"{agent_id}:{TREND_TYPE}"})
        existing = [str(row.id) for row in session.execute(_EXISTING_SQL, {"agent": agent_id, "type": TREND_TYPE})]
        if existing:
            observation_id = existing[0]
            session.execute(_UPDATE_SQL, {**params, "id": observation_id})
            if len(existing) > 1:
                session.execute(_RETIRE_EXTRA_SQL, {"agent": agent_id, "ids": existing[1:]})
        else:
            observation_id = str(uuid.uuid4())
            session.execute(_INSERT_SQL, {**params, "id": observation_id})
    return {
        "emotion_counts": summary.emotion_counts,
        "trend_direction": summary.trend_direction,
        "mood_direction": summary.mood_direction,
        "dominant_emotion": summary.dominant_emotion,
        "trigger_keywords": summary.trigger_keywords,
        "avg_intensity": summary.avg_intensity,
        "dominant_intensity": summary.dominant_intensity,
        "dominant_energy": summary.dominant_energy,
        "events_analyzed": summary.events_analyzed,
        "observation_created": True,
        "created": not existing,
        "observation_id": observation_id,
        "skipped": False,
        "skip_reason": None,
    }
