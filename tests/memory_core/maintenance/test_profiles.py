"""Entity profile consolidation L3 (seeds B4 "Job 3") on the real database."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from memory_core.cognition.maintenance_models import ProfileInput, ProfileOutput, SummaryInput, SummaryOutput
from memory_core.cognition.offline.profile import OfflineProfileSkill
from memory_core.cognition.offline.summary import OfflineSummarySkill
from memory_core.cognition.skill import SkillOutcome
from memory_core.config import MemoryConfig
from memory_core.maintenance.registry import run_job
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.management import list_entities
from memory_core.settings import Settings
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, skills_bundle
from tests.memory_core.maintenance.pipeline_writes import write_messages
from tests.memory_core.read.conftest import NOW
from tests.support.scripted_skills import RecordingSkill

Profiler = RecordingSkill[ProfileInput, ProfileOutput]


def _profiler() -> Profiler:
    return RecordingSkill(OfflineProfileSkill())


class SlowFor:
    """The offline profile skill, but ``delay_s`` slow for the entities named in ``slow``."""

    def __init__(self, slow: set[str], delay_s: float) -> None:
        self.slow = slow
        self.delay_s = delay_s
        self.inner = OfflineProfileSkill()

    @property
    def name(self) -> str:
        """Skill name."""
        return self.inner.name

    def run(self, skill_input: ProfileInput, /) -> SkillOutcome[ProfileOutput]:
        """Sleep for slow entities, then answer like the offline skill."""
        if skill_input.entity_name in self.slow:
            time.sleep(self.delay_s)
        return self.inner.run(skill_input)


def _with_facts(memory: JobMemory, name: str, count: int, entity_type: str = "person") -> str:
    key = memory.entity(name, entity_type)
    for index in range(count):
        memory.fact(
            f"{name} detail {index}",
            key,
            attribute_key="work.role" if index % 2 else "preference.hobby",
            valid_from=NOW - timedelta(days=count - index),
        )
    return key


def _profiles(memory: JobMemory) -> dict[str, str | None]:
    rows = memory.rows("SELECT canonical_key, profile_text FROM memory_entities WHERE agent_id = :agent")
    return {str(row.canonical_key): row.profile_text for row in rows}


def test_profiles_densest_first_bounded_per_run_and_per_entity(make_context: ContextFactory, memory: JobMemory) -> None:
    sizes = {"Ana": 60, "Bia": 12, "Caio": 7, "Duda": 3, "Enzo": 1}
    keys = {name: _with_facts(memory, name, size) for name, size in sizes.items()}
    profiler = _profiler()
    context = make_context(skills_bundle(build_profile=profiler))
    config = MemoryConfig(embedding_dimensions=384, profile_consolidation_max_entities=3)

    first = run_job(context, memory.agent_id, "profiles", config=config)

    assert first["updated_entities"] == [keys["Ana"], keys["Bia"], keys["Caio"]]
    assert first["profiles_updated"] == 3
    # At most profile_consolidation_max_facts (50) facts per entity, the newest.
    assert len(profiler.calls[0].facts) == 50
    assert "Ana detail 59" in {fact.text for fact in profiler.calls[0].facts}
    assert "Ana detail 0" not in {fact.text for fact in profiler.calls[0].facts}
    profiles = _profiles(memory)
    assert profiles[keys["Duda"]] is None
    ana = profiles[keys["Ana"]]
    assert ana is not None
    assert ana.startswith("Ana (person)\n")
    assert "Ana detail 59." in ana
    assert "- work: " in ana
    assert "- preference: " in ana

    second = run_job(context, memory.agent_id, "profiles", config=config)
    third = run_job(context, memory.agent_id, "profiles", config=config)

    assert second["updated_entities"] == [keys["Duda"], keys["Enzo"]]
    assert third["profiles_updated"] == 0
    assert third["entities_considered"] == 0
    assert len(profiler.calls) == 5


def test_a_slow_entity_is_skipped_and_counted_never_blocking_the_run(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    slow = _with_facts(memory, "Slow Person", 5)
    fast = _with_facts(memory, "Fast Person", 2)
    context = make_context(skills_bundle(build_profile=SlowFor({"Slow Person"}, delay_s=3.0)))
    config = MemoryConfig(embedding_dimensions=384, profile_consolidation_timeout_sec=0.3)

    started = time.perf_counter()
    result = run_job(context, memory.agent_id, "profiles", config=config)
    elapsed = time.perf_counter() - started

    assert result["timed_out_entities"] == [slow]
    assert result["profiles_timed_out"] == 1
    assert result["updated_entities"] == [fast]
    assert elapsed < 2.5
    profiles = _profiles(memory)
    assert profiles[slow] is None
    assert profiles[fast] is not None


def test_the_job_overwrites_the_profile_the_write_path_seeded(make_context: ContextFactory, memory: JobMemory) -> None:
    ana = memory.entity("Ana")
    memory.fact("Ana is a nurse", ana, attribute_key="work.role")
    # What the write path leaves after the first message: a short seeded profile, stamped now.
    memory.execute(
        "UPDATE memory_entities SET profile_text = 'Ana, a nurse.', profile_refreshed_at = now() "
        "WHERE agent_id = :agent AND canonical_key = :key",
        key=ana,
    )
    context = make_context(skills_bundle(build_profile=_profiler()))

    untouched = run_job(context, memory.agent_id, "profiles")
    assert untouched["profiles_updated"] == 0
    assert memory.entity_row(ana).profile_text == "Ana, a nurse."

    # Later messages add facts; the write path leaves the profile alone, the job rewrites it.
    memory.fact("Ana lives in Recife", ana, attribute_key="location.residence")
    memory.fact("Ana plays volleyball", ana, attribute_key="preference.hobby")
    result = run_job(context, memory.agent_id, "profiles")

    assert result["updated_entities"] == [ana]
    profile = memory.entity_row(ana).profile_text
    assert "Ana is a nurse." in profile
    assert "Ana lives in Recife." in profile
    assert "Ana plays volleyball." in profile


def test_profiles_of_one_agent_never_touch_another(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    _with_facts(mine, "Ana", 2)
    their_ana = _with_facts(theirs, "Ana", 40)
    profiler = _profiler()
    context = make_context(skills_bundle(build_profile=profiler))

    result = run_job(context, mine.agent_id, "profiles")

    assert result["profiles_updated"] == 1
    assert [len(call.facts) for call in profiler.calls] == [2]
    assert theirs.entity_row(their_ana).profile_text is None


def test_written_memory_shows_importance_summary_and_profile_in_the_entities_listing(
    make_context: ContextFactory, memory: JobMemory, settings: Settings
) -> None:
    write_messages(
        settings,
        HashingEmbedder(384),
        memory.agent_id,
        [
            "A Fernanda trabalha na Orion Tech.",
            "A Fernanda mora em Campinas.",
            "A Fernanda gosta de escalada.",
            "O Marcos mora em Santos.",
        ],
        start=NOW - timedelta(days=2),
    )
    summariser: RecordingSkill[SummaryInput, SummaryOutput] = RecordingSkill(OfflineSummarySkill("summarize_entity"))
    context = make_context(skills_bundle(summarize_entity=summariser, build_profile=OfflineProfileSkill()))

    for job in ("importance", "summaries", "profiles"):
        run_job(context, memory.agent_id, job)

    with context.sessions.begin() as session:
        entities, total = list_entities(session, memory.agent_id)
    by_key = {entity.canonical_key: entity for entity in entities}
    assert total == len(entities) >= 2
    fernanda = by_key["person:fernanda"]
    marcos = by_key["person:marcos"]
    assert fernanda.importance_score is not None
    assert marcos.importance_score is not None
    assert fernanda.importance_score > marcos.importance_score
    assert fernanda.summary_text
    assert "Campinas" in fernanda.summary_text
    assert fernanda.profile_text
    assert "Orion Tech" in fernanda.profile_text
    assert "escalada" in fernanda.profile_text
    assert marcos.profile_text
    assert "Santos" in marcos.profile_text
