"""Consolidation L2 (seeds B3) on the real database: observations, reinforcement, emotion tags, retrieval."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from memory_core.cognition.maintenance_models import (
    ConsolidationInput,
    ConsolidationOutput,
    ObservationDraft,
)
from memory_core.cognition.models import EmotionInput, EmotionOutput
from memory_core.cognition.offline.consolidation import OfflineConsolidationSkill
from memory_core.cognition.offline.emotion import OfflineEmotionSkill
from memory_core.maintenance.registry import run_job
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.context import build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.settings import Settings
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, count, skills_bundle
from tests.memory_core.maintenance.pipeline_writes import write_messages
from tests.memory_core.read.conftest import NOW
from tests.support.scripted_skills import RecordingSkill, ScriptedSkill

Consolidator = RecordingSkill[ConsolidationInput, ConsolidationOutput]
Tagger = RecordingSkill[EmotionInput, EmotionOutput]

# A week of Rafael: running comes up three times on three days, and his mood turns from low to high.
WEEK = (
    (6.0, "Estou triste, a corrida de hoje foi ruim."),
    (5.0, "Ando muito cansado com o trabalho."),
    (4.0, "Fiquei chateado, perdi a corrida de domingo."),
    (2.0, "Hoje estou feliz, voltei a treinar."),
    (1.0, "Que alegria, a corrida de ontem foi incrível!"),
    (0.5, "Estou animado com a maratona!"),
)


def _skills() -> tuple[Consolidator, Tagger]:
    return RecordingSkill(OfflineConsolidationSkill()), RecordingSkill(OfflineEmotionSkill())


def _observations(memory: JobMemory) -> dict[str, Any]:
    rows = memory.rows(
        "SELECT id, observation_type, title, text, supporting_event_ids, supporting_fact_ids, times_reinforced, "
        "last_reinforced_at, embedding_vec IS NOT NULL AS embedded FROM memory_meta_observations "
        "WHERE agent_id = :agent AND is_active"
    )
    return {str(row.title): row for row in rows}


def _seed_week(memory: JobMemory) -> dict[str, Any]:
    events = [memory.event(message, occurred_at=NOW - timedelta(days=days)) for days, message in WEEK]
    rafael = memory.entity("Rafael")
    sao_paulo = memory.fact(
        "Rafael mora em São Paulo", rafael, attribute_key="location.residence", valid_from=NOW - timedelta(days=40)
    )
    rio = memory.fact(
        "Rafael mora no Rio de Janeiro", rafael, attribute_key="location.residence", valid_from=NOW - timedelta(days=3)
    )
    # Two things Rafael likes at once are not a contradiction: preference.like is multi-valued.
    memory.fact("Rafael gosta de jazz", rafael, attribute_key="preference.like", valid_from=NOW - timedelta(days=3))
    memory.fact("Rafael gosta de samba", rafael, attribute_key="preference.like", valid_from=NOW - timedelta(days=2))
    return {"events": events, "sao_paulo": sao_paulo, "rio": rio}


def test_consolidation_tags_events_and_writes_patterns_contradictions_and_trends(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    seeded = _seed_week(memory)
    old_event = memory.event("Estou triste.", occurred_at=NOW - timedelta(days=30))  # outside the window
    consolidator, tagger = _skills()
    context = make_context(skills_bundle(consolidate=consolidator, tag_emotion=tagger), now=NOW)

    result = run_job(context, memory.agent_id, "consolidation")

    assert result["skipped"] is False
    assert result["events_processed"] == len(WEEK)
    assert result["events_tagged"] == len(WEEK)
    assert result["observations_created"] == 3
    tags = {
        str(row.id): row
        for row in memory.rows(
            "SELECT id, emotion_primary, emotion_intensity, energy_level FROM memory_events WHERE agent_id = :agent"
        )
    }
    assert [tags[event].emotion_primary for event in seeded["events"]] == [
        "sadness",
        "tiredness",
        "sadness",
        "joy",
        "joy",
        "joy",
    ]
    assert all(0.0 < tags[event].emotion_intensity <= 1.0 for event in seeded["events"])
    assert tags[seeded["events"][1]].energy_level == "low"
    assert tags[old_event].emotion_primary is None
    observations = _observations(memory)
    assert set(observations) == {
        "Rafael often mentions corrida",
        "Rafael's mood is improving",
        "Conflicting facts: location.residence of person:rafael",
    }
    pattern = observations["Rafael often mentions corrida"]
    assert pattern.observation_type == "pattern"
    assert pattern.supporting_event_ids == [seeded["events"][0], seeded["events"][2], seeded["events"][4]]
    trend = observations["Rafael's mood is improving"]
    assert trend.observation_type == "trend"
    # A Portuguese conversation, English observations (W20).
    assert "moved from mostly sadness to mostly joy" in trend.text
    contradiction = observations["Conflicting facts: location.residence of person:rafael"]
    assert contradiction.observation_type == "contradiction"
    # The 40-day-old fact is outside the window but shares the key with a new one, so it is compared.
    assert contradiction.supporting_fact_ids == [seeded["sao_paulo"], seeded["rio"]]
    assert all(row.embedded for row in observations.values())
    # The skill saw the window's events in time order, with the tags just written.
    [call] = consolidator.calls
    assert [event.event_id for event in call.events] == seeded["events"]
    assert call.events[0].emotion == "sadness"


def test_rerun_changes_nothing_and_new_evidence_reinforces_without_duplicates(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    seeded = _seed_week(memory)
    consolidator, tagger = _skills()
    context = make_context(skills_bundle(consolidate=consolidator, tag_emotion=tagger), now=NOW)
    run_job(context, memory.agent_id, "consolidation")
    first = _observations(memory)

    again = run_job(context, memory.agent_id, "consolidation")

    assert len(tagger.calls) == len(WEEK)  # every event was tagged already
    assert again["events_tagged"] == 0
    assert again["observations_created"] == again["observations_reinforced"] == 0
    assert again["observations_unchanged"] == 3
    assert {title: row.times_reinforced for title, row in _observations(memory).items()} == dict.fromkeys(first, 0)

    newer = memory.event("Amanhã tem corrida de novo.", occurred_at=NOW - timedelta(hours=2))
    context.fixed_now = NOW + timedelta(minutes=1)
    later = run_job(context, memory.agent_id, "consolidation")

    assert later["observations_created"] == 0
    assert later["observations_reinforced"] == 2  # the running pattern and the mood trend cite the new message
    after = _observations(memory)
    assert set(after) == set(first)
    pattern = after["Rafael often mentions corrida"]
    assert pattern.id == first["Rafael often mentions corrida"].id
    assert pattern.times_reinforced == 1
    assert pattern.last_reinforced_at > first["Rafael often mentions corrida"].last_reinforced_at
    assert pattern.supporting_event_ids == [*seeded["events"][0:5:2], newer]
    assert "in 4 messages" in pattern.text
    assert after["Conflicting facts: location.residence of person:rafael"].times_reinforced == 0
    assert count(memory, "SELECT count(*) FROM memory_meta_observations WHERE agent_id = :agent") == 3


def test_same_kind_and_title_from_a_skill_reinforces_case_insensitively(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    events = [memory.event(f"Message {index}", occurred_at=NOW - timedelta(days=index + 1)) for index in range(3)]
    first = ObservationDraft(
        kind="insight", title="Rafael  prefers mornings", text="He trains early.", supporting_event_ids=[events[0]]
    )
    second = ObservationDraft(
        kind="insight",
        title="rafael prefers mornings",
        text="He trains and studies early.",
        confidence=0.9,
        supporting_event_ids=[events[1], "not-an-id-the-skill-was-shown"],
    )
    other_kind = ObservationDraft(kind="pattern", title="Rafael prefers mornings", text="Mornings again.")
    scripted: ScriptedSkill[ConsolidationInput, ConsolidationOutput] = ScriptedSkill(
        "consolidate",
        ConsolidationOutput(observations=[first]),
        ConsolidationOutput(observations=[second, other_kind]),
    )
    context = make_context(
        skills_bundle(consolidate=scripted, tag_emotion=RecordingSkill(OfflineEmotionSkill())), now=NOW
    )

    run_job(context, memory.agent_id, "consolidation")
    result = run_job(context, memory.agent_id, "consolidation")

    assert (result["observations_created"], result["observations_reinforced"]) == (1, 1)
    rows = memory.rows(
        "SELECT observation_type, title, text, confidence, times_reinforced, supporting_event_ids "
        "FROM memory_meta_observations WHERE agent_id = :agent ORDER BY observation_type"
    )
    assert [(row.observation_type, row.title) for row in rows] == [
        ("insight", "Rafael prefers mornings"),
        ("pattern", "Rafael prefers mornings"),
    ]
    insight = rows[0]
    assert insight.text == "He trains and studies early."
    assert insight.confidence == 0.9
    assert insight.times_reinforced == 1
    assert insight.supporting_event_ids == [events[0], events[1]]  # the unknown id is dropped


def test_a_quiet_window_is_skipped_with_a_reason_but_its_events_are_tagged(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    memory.event("Estou feliz!", occurred_at=NOW - timedelta(days=1))
    memory.event("Que dia triste.", occurred_at=NOW - timedelta(days=2))
    memory.event("Hello", occurred_at=NOW - timedelta(days=9))  # outside the 7-day window
    consolidator, tagger = _skills()
    context = make_context(skills_bundle(consolidate=consolidator, tag_emotion=tagger), now=NOW)

    result = run_job(context, memory.agent_id, "consolidation")

    assert result["skipped"] is True
    assert result["skip_reason"] == "2 events in the last 7 days; consolidation needs 3"
    assert consolidator.calls == []
    assert result["events_tagged"] == 2
    assert count(memory, "SELECT count(*) FROM memory_meta_observations WHERE agent_id = :agent") == 0


def test_consolidation_touches_only_the_given_agent(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    _seed_week(mine)
    _seed_week(theirs)
    consolidator, tagger = _skills()
    context = make_context(skills_bundle(consolidate=consolidator, tag_emotion=tagger), now=NOW)

    run_job(context, mine.agent_id, "consolidation")

    assert len(_observations(mine)) == 3
    assert _observations(theirs) == {}
    assert (
        count(theirs, "SELECT count(*) FROM memory_events WHERE agent_id = :agent AND emotion_primary IS NOT NULL") == 0
    )
    assert {fact.fact_id for fact in consolidator.calls[0].facts} <= {
        str(row.id) for row in mine.rows("SELECT id FROM memory_facts WHERE agent_id = :agent")
    }


def test_retrieval_after_consolidation_shows_observed_patterns(
    make_context: ContextFactory, memory: JobMemory, settings: Settings
) -> None:
    embedder = HashingEmbedder(384)
    write_messages(
        settings,
        embedder,
        memory.agent_id,
        [message for _, message in WEEK],
        start=NOW - timedelta(days=6),
        step=timedelta(days=1),
    )
    consolidator, tagger = _skills()
    context = make_context(skills_bundle(consolidate=consolidator, tag_emotion=tagger), now=NOW)
    result = run_job(context, memory.agent_id, "consolidation")
    assert result["observations_created"] >= 1
    trend = _observations(memory)["Rafael's mood is improving"]

    read = build_read_context(settings, embedder=embedder, llm=None, pool_size=2)
    try:
        answer = retrieve(read, agent_id=memory.agent_id, query="Como o Rafael tem se sentido?")
    finally:
        read.close()

    assert "Observed patterns:" in answer.context
    patterns = answer.context.split("Observed patterns:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert f"- {trend.text}" in patterns
