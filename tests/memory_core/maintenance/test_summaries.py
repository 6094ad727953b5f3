"""Entity summary refresh (seeds B4 "Job 2") on the real database: staleness, priority, per-run bound."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from memory_core.cognition.maintenance_models import SummaryInput, SummaryOutput
from memory_core.cognition.offline.summary import OfflineSummarySkill
from memory_core.config import MemoryConfig
from memory_core.maintenance.registry import run_job
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, skills_bundle
from tests.memory_core.read.conftest import NOW
from tests.support.scripted_skills import RecordingSkill

Summariser = RecordingSkill[SummaryInput, SummaryOutput]


def _summariser() -> Summariser:
    return RecordingSkill(OfflineSummarySkill("summarize_entity"))


def _people(memory: JobMemory, count: int) -> list[str]:
    """``count`` people with two facts each, importance decreasing with their index."""
    keys = []
    for index in range(count):
        key = memory.entity(f"Person {chr(65 + index)}")
        memory.fact(f"Person {chr(65 + index)} works at company {index}", key, attribute_key="work.employer")
        memory.fact(f"Person {chr(65 + index)} lives in city {index}", key, attribute_key="location.residence")
        memory.update_entity(key, importance_score=round(1.0 - index * 0.05, 2))
        keys.append(key)
    return keys


def _sentences(summary: str | None) -> set[str]:
    assert summary is not None
    return {part.strip() + "." for part in summary.split(".") if part.strip()}


def _summaries(memory: JobMemory) -> dict[str, str | None]:
    rows = memory.rows("SELECT canonical_key, summary_text FROM memory_entities WHERE agent_id = :agent")
    return {str(row.canonical_key): row.summary_text for row in rows}


def test_summaries_refresh_the_most_important_first_ten_a_run(make_context: ContextFactory, memory: JobMemory) -> None:
    keys = _people(memory, 12)
    summariser = _summariser()
    context = make_context(skills_bundle(summarize_entity=summariser), now=NOW)

    first = run_job(context, memory.agent_id, "summaries")

    assert first["summaries_refreshed"] == 10
    assert first["refreshed_entities"] == keys[:10]
    assert first["stale_remaining"] == 2
    summaries = _summaries(memory)
    assert all(summaries[key] for key in keys[:10])
    assert summaries[keys[10]] is None
    assert summaries[keys[11]] is None
    # 2-3 sentences from the entity's own facts, under its display name.
    assert _sentences(summaries[keys[0]]) == {"Person A works at company 0.", "Person A lives in city 0."}
    assert summariser.calls[0].subject == "Person A"
    assert {fact.text for fact in summariser.calls[0].facts} == {
        "Person A works at company 0",
        "Person A lives in city 0",
    }

    second = run_job(context, memory.agent_id, "summaries")
    third = run_job(context, memory.agent_id, "summaries")

    assert second["refreshed_entities"] == keys[10:]
    assert second["stale_remaining"] == 0
    assert third["summaries_refreshed"] == 0
    assert len(summariser.calls) == 12


def test_summaries_older_than_the_interval_are_refreshed(make_context: ContextFactory, memory: JobMemory) -> None:
    old, recent, never = _people(memory, 3)
    memory.update_entity(old, summary_text="stale words", summary_refreshed_at=NOW - timedelta(days=8))
    memory.update_entity(recent, summary_text="recent words", summary_refreshed_at=NOW - timedelta(days=6))
    # An entity with no active fact has nothing to summarise and does not take a slot.
    empty = memory.entity("Nobody Known")
    context = make_context(skills_bundle(summarize_entity=_summariser()), now=NOW)

    result = run_job(context, memory.agent_id, "summaries")

    assert result["refreshed_entities"] == [old, never]
    summaries = _summaries(memory)
    assert _sentences(summaries[old]) == {"Person A works at company 0.", "Person A lives in city 0."}
    assert summaries[recent] == "recent words"
    assert summaries[empty] is None
    refreshed_at = memory.entity_row(old).summary_refreshed_at
    assert refreshed_at == NOW

    weekly = MemoryConfig(embedding_dimensions=384, summary_refresh_interval_days=5)
    again = run_job(context, memory.agent_id, "summaries", config=weekly)
    assert again["refreshed_entities"] == [recent]


def test_summaries_use_mentions_and_ignore_closed_facts(make_context: ContextFactory, memory: JobMemory) -> None:
    vertix = memory.entity("Vertix", "organization")
    fernanda = memory.entity("Fernanda")
    memory.fact("Vertix is a fintech", vertix)
    memory.fact("Vertix was a bakery", vertix, valid_to=NOW - timedelta(days=30))
    memory.fact("Fernanda works at Vertix", fernanda, links=[vertix])
    summariser = _summariser()
    context = make_context(skills_bundle(summarize_entity=summariser), now=NOW)

    run_job(context, memory.agent_id, "summaries", config=MemoryConfig(embedding_dimensions=384))

    [vertix_call] = [call for call in summariser.calls if call.subject == "Vertix"]
    assert [fact.text for fact in vertix_call.facts] == ["Vertix is a fintech", "Fernanda works at Vertix"]


def test_summaries_of_one_agent_never_touch_another(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    _people(mine, 2)
    their_keys = _people(theirs, 2)
    context = make_context(skills_bundle(summarize_entity=_summariser()), now=NOW)

    result = run_job(context, mine.agent_id, "summaries")

    assert result["summaries_refreshed"] == 2
    assert all(value is None for value in _summaries(theirs).values())
    assert set(_summaries(theirs)) == set(their_keys)
