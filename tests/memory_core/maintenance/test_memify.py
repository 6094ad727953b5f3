"""Memify (seeds B5) on the real database: vitality, stale marking, merges, distillation."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from memory_core.cognition.maintenance_models import DistillInput, DistillOutput
from memory_core.cognition.offline.distill import OfflineDistillSkill
from memory_core.maintenance.memify import compute_vitality
from memory_core.maintenance.registry import run_job
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, count, skills_bundle
from tests.memory_core.read.conftest import NOW
from tests.support.scripted_skills import RecordingSkill

Distiller = RecordingSkill[DistillInput, DistillOutput]


@dataclass
class Fact:
    times_retrieved: int = 0
    last_retrieved_at: datetime | None = None
    confidence: float = 0.8
    reinforcement_count: int = 0
    user_correction_count: int = 0
    valid_to: datetime | None = None
    created_at: datetime | None = None


def test_compute_vitality_follows_the_seeds_formula() -> None:
    now = datetime(2025, 6, 1, tzinfo=UTC)
    best = Fact(times_retrieved=20, last_retrieved_at=now, confidence=1.0, reinforcement_count=9)
    assert compute_vitality(best, now) == pytest.approx(0.90)
    # Half-life 30 days since last retrieval; retrieval on a log scale; reinforcement capped at 5.
    month_old = Fact(
        times_retrieved=20, last_retrieved_at=now - timedelta(days=30), confidence=1.0, reinforcement_count=5
    )
    assert compute_vitality(month_old, now) == pytest.approx(0.30 + 0.125 + 0.20 + 0.15)
    assert compute_vitality(Fact(times_retrieved=1, last_retrieved_at=now, confidence=0.0), now) == pytest.approx(
        0.30 * math.log(2) / math.log(21) + 0.25
    )
    corrected = Fact(
        times_retrieved=20, last_retrieved_at=now, confidence=1.0, reinforcement_count=5, user_correction_count=2
    )
    assert compute_vitality(corrected, now) == pytest.approx(0.90 * 0.64)
    assert compute_vitality(Fact(valid_to=now, times_retrieved=50, last_retrieved_at=now), now) == 0.0
    # Never retrieved: recency runs from its arrival, so a new fact is not born stale.
    assert compute_vitality(Fact(created_at=now), now) == pytest.approx(0.25 + 0.16)
    assert compute_vitality(Fact(created_at=now - timedelta(days=120)), now) < 0.2


def test_vitality_marks_stale_facts_and_unmarks_them_when_they_recover(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    ana = memory.entity("Ana")
    fresh = memory.fact("Ana likes tea", ana)
    forgotten = memory.fact("Ana once visited Lima", ana, confidence=0.6)
    memory.update_fact(forgotten, created_at=NOW - timedelta(days=200))
    popular = memory.fact("Ana is a pilot", ana)
    memory.update_fact(popular, times_retrieved=12, last_retrieved_at=NOW - timedelta(days=2), reinforcement_count=3)
    corrected = memory.fact("Ana has two cats", ana)
    memory.update_fact(corrected, user_correction_count=6)
    replaced = memory.fact("Ana lived in Quito", ana, valid_to=NOW - timedelta(days=5))
    context = make_context(skills_bundle(distill=OfflineDistillSkill()), now=NOW)

    first = run_job(context, memory.agent_id, "memify")

    assert first["facts_scored"] == 4
    assert first["facts_marked_stale"] == 2
    assert first["stale_facts"] == 2
    rows = {fact_id: memory.fact_row(fact_id) for fact_id in (fresh, forgotten, popular, corrected, replaced)}
    assert [rows[f].is_stale for f in (fresh, forgotten, popular, corrected)] == [False, True, False, True]
    assert rows[replaced].vitality_score == 0.0
    # The stored score is compute_vitality's, fact by fact.
    for fact_id in (fresh, forgotten, popular, corrected):
        assert rows[fact_id].vitality_score == pytest.approx(compute_vitality(rows[fact_id], NOW), abs=1e-9)

    # The forgotten fact is asked for again: it is alive once more.
    memory.update_fact(forgotten, times_retrieved=3, last_retrieved_at=NOW)
    second = run_job(context, memory.agent_id, "memify")

    assert second["facts_unmarked_stale"] == 1
    assert second["facts_marked_stale"] == 0
    assert memory.fact_row(forgotten).is_stale is False
    assert memory.fact_row(corrected).is_stale is True


def test_near_duplicates_are_merged_into_the_strongest_keeping_the_data(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    ana = memory.entity("Ana")
    bia = memory.entity("Bia")
    cafe = memory.entity("Café Central", "place")
    strong = memory.fact("Ana loves strong black coffee", ana, attribute_key="preference.drink")
    memory.update_fact(strong, times_retrieved=6, last_retrieved_at=NOW, reinforcement_count=1)
    weak = memory.fact(
        "ana LOVES strong black coffee!",
        ana,
        attribute_key="preference.drink",
        links=[cafe],
        valid_from=NOW - timedelta(days=3),
        confidence=0.99,
    )
    memory.update_fact(weak, times_retrieved=2, reinforcement_count=2)
    memory.relationship(ana, cafe, "frequents", evidence_fact_id=weak)
    # Same words, other attribute key, other entity: none of these is a duplicate of the pair.
    other_key = memory.fact("Ana loves strong black coffee", ana, attribute_key="work.product")
    other_entity = memory.fact("Bia loves strong black coffee", bia, attribute_key="preference.drink")
    context = make_context(skills_bundle(distill=OfflineDistillSkill()))

    first = run_job(context, memory.agent_id, "memify")

    assert first["merges_executed"] == 1
    assert first["merges"] == [[strong, weak]]
    kept, closed = memory.fact_row(strong), memory.fact_row(weak)
    assert closed.valid_to is not None
    assert closed.invalidated_at is not None
    assert closed.fact_text == "ana LOVES strong black coffee!"
    assert kept.valid_to is None
    assert kept.supersedes_fact_id is not None
    assert str(kept.supersedes_fact_id) == weak
    assert kept.reinforcement_count == 1 + 2 + 1
    assert kept.times_retrieved == 8
    assert kept.last_retrieved_at == NOW
    assert kept.confidence == pytest.approx(0.99)
    # The duplicate's mention of the café and the edge it backed now rest on the kept fact.
    links = memory.rows(
        "SELECT entity_key FROM memory_fact_entity_links WHERE agent_id = :agent AND fact_id = :id", id=strong
    )
    assert {row.entity_key for row in links} == {ana, cafe}
    [edge] = memory.rows("SELECT evidence_fact_id, valid_to FROM memory_entity_relationships WHERE agent_id = :agent")
    assert str(edge.evidence_fact_id) == strong
    assert edge.valid_to is None
    assert memory.fact_row(other_key).valid_to is None
    assert memory.fact_row(other_entity).valid_to is None

    second = run_job(context, memory.agent_id, "memify")
    assert second["merges_executed"] == 0


def test_a_kept_fact_never_retrieved_takes_over_its_duplicates_retrieval_counts(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    ana = memory.entity("Ana")
    kept = memory.fact("Ana loves strong black coffee", ana, attribute_key="preference.drink")
    duplicate = memory.fact("ana LOVES strong black coffee!", ana, attribute_key="preference.drink")
    # Retrieved once, a year ago: its vitality falls below the never-retrieved, fresh fact's.
    long_ago = NOW - timedelta(days=365)
    memory.update_fact(duplicate, times_retrieved=1, last_retrieved_at=long_ago)
    assert count(memory, "SELECT count(*) FROM memory_fact_usage WHERE fact_id = :id", id=kept) == 0
    context = make_context(skills_bundle(distill=OfflineDistillSkill()), now=NOW)

    result = run_job(context, memory.agent_id, "memify")

    assert result["merges"] == [[kept, duplicate]]
    row = memory.fact_row(kept)
    assert (row.times_retrieved, row.last_retrieved_at) == (1, long_ago)
    # The closed duplicate keeps its own counts (as it kept its other columns).
    assert memory.fact_row(duplicate).times_retrieved == 1


def test_facts_that_differ_in_their_informative_word_are_never_merged(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    ana = memory.entity("Ana")
    chess = memory.fact("Ana gosta de xadrez", ana, attribute_key="preference.hobby")
    running = memory.fact("Ana gosta de corrida", ana, attribute_key="preference.hobby")
    restated = memory.fact("Ana gosta muito de xadrez", ana, attribute_key="preference.hobby")
    # A model that finds all three the same statement (real models score such pairs above 0.9).
    memory.execute(
        "UPDATE memory_facts SET embedding_vec = (SELECT embedding_vec FROM memory_facts WHERE id = :chess) "
        "WHERE agent_id = :agent",
        chess=chess,
    )
    context = make_context(skills_bundle(distill=OfflineDistillSkill()))

    result = run_job(context, memory.agent_id, "memify")

    # "corrida" is another hobby, not a restatement: it stays, whatever the embeddings say.
    assert memory.fact_row(running).valid_to is None
    assert result["merges_executed"] == 1
    [merge] = result["merges"]
    assert sorted(merge) == sorted([chess, restated])
    assert [memory.fact_row(chess).valid_to is None, memory.fact_row(restated).valid_to is None].count(True) == 1


def _meetups(memory: JobMemory, key: str, count_: int, start: int = 0) -> list[str]:
    topics = ["Python", "data", "JavaScript", "Rust", "cloud"]
    return [
        memory.fact(
            f"Rafael went to a {topics[i]} meetup",
            key,
            attribute_key="activity.meetup",
            valid_from=NOW - timedelta(days=60 - 10 * i),
        )
        for i in range(start, start + count_)
    ]


def _distilled(memory: JobMemory) -> list[object]:
    return memory.rows(
        "SELECT id, title, text, supporting_fact_ids, is_active, embedding_vec IS NOT NULL AS embedded "
        "FROM memory_meta_observations WHERE agent_id = :agent AND observation_type = 'semantic'"
    )


def test_episodic_facts_are_distilled_into_one_semantic_observation_updated_in_place(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    rafael = memory.entity("Rafael")
    first_three = _meetups(memory, rafael, 3)
    memory.fact("Rafael likes tea", rafael, attribute_key="preference.drink")
    distiller: Distiller = RecordingSkill(OfflineDistillSkill())
    context = make_context(skills_bundle(distill=distiller))

    created = run_job(context, memory.agent_id, "memify")

    assert created["observations_created"] == 1
    [observation] = _distilled(memory)
    assert observation.text.startswith("Rafael went to a meetup (3x, ")
    assert sorted(observation.supporting_fact_ids) == sorted(first_three)
    assert observation.is_active
    assert observation.embedded
    assert distiller.calls[0].facts[0].text == "Rafael went to a JavaScript meetup"

    unchanged = run_job(context, memory.agent_id, "memify")
    assert unchanged["observations_created"] == 0
    assert unchanged["observations_updated"] == 0
    assert len(distiller.calls) == 1

    fourth = _meetups(memory, rafael, 1, start=3)
    grown = run_job(context, memory.agent_id, "memify")
    assert grown["observations_updated"] == 1
    [observation] = _distilled(memory)
    assert observation.text.startswith("Rafael went to a meetup (4x, ")
    assert sorted(observation.supporting_fact_ids) == sorted(first_three + fourth)

    memory.execute(
        "UPDATE memory_facts SET valid_to = now() WHERE agent_id = :agent AND id = ANY(CAST(:ids AS uuid[]))",
        ids=first_three[:2],
    )
    shrunk = run_job(context, memory.agent_id, "memify")
    assert shrunk["observations_retired"] == 1
    [observation] = _distilled(memory)
    assert not observation.is_active


def test_memify_of_one_agent_never_touches_another(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    for builder in (mine, theirs):
        ana = builder.entity("Ana")
        builder.fact("Ana loves strong black coffee", ana)
        builder.fact("Ana loves strong black coffee!", ana)
        _meetups(builder, builder.entity("Rafael"), 3)
    context = make_context(skills_bundle(distill=OfflineDistillSkill()))

    result = run_job(context, mine.agent_id, "memify")

    assert result["merges_executed"] == 1
    assert (
        count(theirs, "SELECT count(*) FROM memory_facts WHERE agent_id = :agent AND vitality_score IS NOT NULL") == 0
    )
    assert count(theirs, "SELECT count(*) FROM memory_facts WHERE agent_id = :agent AND valid_to IS NOT NULL") == 0
    assert count(theirs, "SELECT count(*) FROM memory_meta_observations WHERE agent_id = :agent") == 0
