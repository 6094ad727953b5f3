"""Entity summary refresh (seeds B4 "Job 2"): 2-3 sentences per entity, most important entities first.

An entity's summary is stale when it has none (``summary_text`` NULL) or it was written more
than ``summary_refresh_interval_days`` (7) ago. Each run refreshes at most
``summary_refresh_max_entities`` (10) stale entities, highest ``importance_score`` first
(entities the importance job has not scored yet come last, densest first), so a peripheral
entity may never get a summary, as the seeds intend. Entities without any active fact are
not candidates: there is nothing to summarise.

The summary comes from ``skills.summarize_entity`` over the entity's active facts (about it,
then mentioning it, newest first, at most :data:`SUMMARY_MAX_FACTS`). No transaction stays
open during a skill call: candidates are read, then each entity is read, summarised and
written in short transactions of its own, so a run that fails half-way keeps what it wrote
and the next run continues with the entities still stale. A second run right after the
first finds nothing stale and calls no skill.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from memory_core.cognition.maintenance_models import SummaryInput
from memory_core.config import MemoryConfig
from memory_core.maintenance.context import MaintenanceContext
from memory_core.maintenance.entity_facts import SkillTally, entity_fact_lines, stale_before

__all__ = ["SUMMARY_MAX_FACTS", "run"]

# Active facts shown to the summariser per entity (ours; the seeds give no number).
SUMMARY_MAX_FACTS = 50

_STALE_SQL = text(
    """
    SELECT e.canonical_key, COALESCE(e.display_name, e.canonical_key) AS name
    FROM memory_entities e
    WHERE e.agent_id = :agent AND e.is_active
      AND (e.summary_text IS NULL OR e.summary_refreshed_at IS NULL OR e.summary_refreshed_at < :stale_before)
      AND EXISTS (
          SELECT 1 FROM memory_fact_entity_links l JOIN memory_facts f ON f.id = l.fact_id AND f.agent_id = :agent
          WHERE l.agent_id = :agent AND l.entity_key = e.canonical_key AND f.valid_to IS NULL
      )
    ORDER BY e.importance_score DESC NULLS LAST, e.fact_count DESC, e.canonical_key
    LIMIT :limit
    """
)

_COUNT_STALE_SQL = text(
    """
    SELECT count(*) FROM memory_entities e
    WHERE e.agent_id = :agent AND e.is_active
      AND (e.summary_text IS NULL OR e.summary_refreshed_at IS NULL OR e.summary_refreshed_at < :stale_before)
      AND EXISTS (
          SELECT 1 FROM memory_fact_entity_links l JOIN memory_facts f ON f.id = l.fact_id AND f.agent_id = :agent
          WHERE l.agent_id = :agent AND l.entity_key = e.canonical_key AND f.valid_to IS NULL
      )
    """
)

_WRITE_SQL = text(
    "UPDATE memory_entities SET summary_text = :summary, summary_refreshed_at = :now "
    "WHERE agent_id = :agent AND canonical_key = :key"
)


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Refresh up to ``summary_refresh_max_entities`` stale summaries of ``agent_id``.

    Result: ``summaries_refreshed``, ``summaries_skipped`` (the skill gave an empty summary),
    ``refreshed_entities`` (keys, in refresh order), ``stale_remaining`` (for the next runs),
    and the skill accounting (``skill_calls``, ``skill_fallbacks``, ``tokens``).
    """
    now = context.now()
    params = {"agent": agent_id, "stale_before": stale_before(now, config.summary_refresh_interval_days)}
    with context.sessions.begin() as session:
        candidates = session.execute(_STALE_SQL, {**params, "limit": config.summary_refresh_max_entities}).all()
    tally = SkillTally()
    refreshed: list[str] = []
    skipped = 0
    for candidate in candidates:
        key = str(candidate.canonical_key)
        with context.sessions.begin() as session:
            facts = entity_fact_lines(session, agent_id, key, SUMMARY_MAX_FACTS)
        if not facts:
            # Its facts were closed since the candidates were read.
            skipped += 1
            continue
        outcome = context.skills.summarize_entity.run(SummaryInput(subject=str(candidate.name), facts=facts))
        tally.add(outcome)
        summary = " ".join(outcome.output.summary.split())
        if not summary:
            skipped += 1
            continue
        with context.sessions.begin() as session:
            session.execute(_WRITE_SQL, {"summary": summary, "now": context.now(), "agent": agent_id, "key": key})
        refreshed.append(key)
    with context.sessions.begin() as session:
        remaining = int(session.execute(_COUNT_STALE_SQL, params).scalar_one())
    return {
        "summaries_refreshed": len(refreshed),
        "summaries_skipped": skipped,
        "refreshed_entities": refreshed,
        "stale_remaining": remaining,
        **tally.as_result(),
    }
