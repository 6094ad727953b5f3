"""Entity profile consolidation L3 (seeds B4 "Job 3"): a comprehensive profile rebuilt from the entity's facts.

The write pipeline only *seeds* a short profile for an entity that has none; this job is the
authoritative source and overwrites it. Candidates are active entities whose profile is
missing, older than ``summary_refresh_interval_days`` (7), or older than a fact linked to
the entity: the seeds' flow is "first message seeds a simple profile, later messages leave
it alone, the background job reads every fact and rewrites it", so an entity that gained
facts since its profile was written is due, even if the seeded profile is a day old.
Densest entities (most active linked facts) come first; at most
``profile_consolidation_max_entities`` (20) per run, each from at most
``profile_consolidation_max_facts`` (50) active facts (about it first, then mentions, newest
first), with the previous profile given to the skill as context.

Each skill call has ``profile_consolidation_timeout_sec`` (15 s): an entity whose call
overruns is skipped and counted in ``profiles_timed_out`` (its profile stays as it was and it
is retried next run), and the run goes on to the next entity. No transaction is open during
a skill call; each profile is written in a short transaction of its own.

Times here are the database's clock (``now()``), not the worker's: staleness compares the
profile's stamp with its facts' ``created_at``, which the database wrote, as the write path's
seeded profiles are stamped.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from memory_core.cognition.maintenance_models import ProfileInput
from memory_core.config import MemoryConfig
from memory_core.maintenance.context import MaintenanceContext
from memory_core.maintenance.entity_facts import SkillTally, call_with_timeout, entity_fact_lines

__all__ = ["run"]

_CANDIDATES_SQL = text(
    """
    WITH density AS (
        SELECT l.entity_key, count(*) AS facts, max(f.created_at) AS newest_fact
        FROM memory_fact_entity_links l JOIN memory_facts f ON f.id = l.fact_id AND f.agent_id = :agent
        WHERE l.agent_id = :agent AND f.valid_to IS NULL
        GROUP BY l.entity_key
    )
    SELECT e.canonical_key, COALESCE(e.display_name, e.canonical_key) AS name, e.entity_type, e.profile_text,
           d.facts
    FROM memory_entities e JOIN density d ON d.entity_key = e.canonical_key
    WHERE e.agent_id = :agent AND e.is_active
      AND (e.profile_text IS NULL OR e.profile_refreshed_at IS NULL
           OR e.profile_refreshed_at < now() - make_interval(days => :interval_days)
           OR e.profile_refreshed_at < d.newest_fact)
    ORDER BY d.facts DESC, e.importance_score DESC NULLS LAST, e.canonical_key
    LIMIT :limit
    """
)

_WRITE_SQL = text(
    "UPDATE memory_entities SET profile_text = :profile, profile_refreshed_at = now() "
    "WHERE agent_id = :agent AND canonical_key = :key"
)


def run(context: MaintenanceContext, agent_id: str, config: MemoryConfig) -> dict[str, Any]:
    """Rebuild up to ``profile_consolidation_max_entities`` due profiles of ``agent_id``.

    Result: ``entities_considered``, ``profiles_updated``, ``profiles_skipped`` (empty skill
    answer or no fact left), ``profiles_timed_out``, ``updated_entities`` and
    ``timed_out_entities`` (keys), and the skill accounting (``skill_calls``,
    ``skill_fallbacks``, ``tokens``; a timed-out call is not counted: its cost is unknown).
    """
    params = {
        "agent": agent_id,
        "interval_days": config.summary_refresh_interval_days,
        "limit": config.profile_consolidation_max_entities,
    }
    with context.sessions.begin() as session:
        candidates = session.execute(_CANDIDATES_SQL, params).all()
    tally = SkillTally()
    updated: list[str] = []
    timed_out: list[str] = []
    skipped = 0
    for candidate in candidates:
        key = str(candidate.canonical_key)
        with context.sessions.begin() as session:
            facts = entity_fact_lines(session, agent_id, key, config.profile_consolidation_max_facts)
        if not facts:
            skipped += 1
            continue
        skill_input = ProfileInput(
            entity_name=str(candidate.name),
            entity_type=str(candidate.entity_type),
            facts=facts,
            previous_profile=candidate.profile_text,
        )
        finished, outcome = call_with_timeout(
            context.skills.build_profile.run, skill_input, config.profile_consolidation_timeout_sec
        )
        if not finished or outcome is None:
            timed_out.append(key)
            continue
        tally.add(outcome)
        profile = outcome.output.profile_text.strip()
        if not profile:
            skipped += 1
            continue
        with context.sessions.begin() as session:
            session.execute(_WRITE_SQL, {"profile": profile, "agent": agent_id, "key": key})
        updated.append(key)
    return {
        "entities_considered": len(candidates),
        "profiles_updated": len(updated),
        "profiles_skipped": skipped,
        "profiles_timed_out": len(timed_out),
        "updated_entities": updated,
        "timed_out_entities": timed_out,
        **tally.as_result(),
    }
