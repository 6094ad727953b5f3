"""Emotional trends (seeds B7) on the real database: one observation per agent, updated in place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from memory_core.maintenance.registry import run_job
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.context import build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.settings import Settings
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, count
from tests.memory_core.read.conftest import NOW


def _tagged(memory: JobMemory, days_ago: float, emotion: str, intensity: float, message: str = "ok") -> str:
    event_id = memory.event(message, occurred_at=NOW - timedelta(days=days_ago))
    memory.execute(
        "UPDATE memory_events SET emotion_primary = :emotion, emotion_intensity = :intensity, energy_level = :energy "
        "WHERE agent_id = :agent AND id = :id",
        id=event_id,
        emotion=emotion,
        intensity=intensity,
        energy="low" if emotion in ("sadness", "tiredness") else "high",
    )
    return event_id


def _seed(memory: JobMemory, plan: Sequence[tuple[float, str, float, str]]) -> list[str]:
    return [_tagged(memory, days, emotion, intensity, message) for days, emotion, intensity, message in plan]


def _trends(memory: JobMemory) -> list[object]:
    return memory.rows(
        "SELECT id, title, text, supporting_event_ids, times_reinforced, last_reinforced_at, is_active "
        "FROM memory_meta_observations WHERE agent_id = :agent AND observation_type = 'emotional_trend'"
    )


def test_trend_created_once_then_updated_in_place(make_context: ContextFactory, memory: JobMemory) -> None:
    # Older half of the window: mostly stressed about the thesis; newer half: joy takes over.
    sad = _seed(
        memory,
        [
            (25, "sadness", 0.8, "Estou triste com a tese atrasada"),
            (22, "sadness", 0.9, "A tese não anda, que tristeza"),
            (20, "anxiety", 0.7, "Ansioso com a banca da tese"),
            (18, "neutral", 0.1, "Almocei agora"),
        ],
    )
    joy = _seed(
        memory,
        [
            (10, "joy", 0.8, "Passei na qualificação!"),
            (6, "joy", 0.9, "Que alegria, artigo aceito"),
            (3, "joy", 0.7, "Feliz com a viagem"),
            (1, "joy", 0.6, "Dia ótimo"),
        ],
    )
    _tagged(memory, 45, "anger", 1.0, "outside the window")
    memory.event("untagged message", occurred_at=NOW - timedelta(days=2))
    context = make_context(now=NOW)

    first = run_job(context, memory.agent_id, "emotional_trends")

    assert first["observation_created"] is True
    assert first["created"] is True
    assert first["events_analyzed"] == 8
    assert first["emotion_counts"] == {"joy": 4, "sadness": 2, "anxiety": 1, "neutral": 1}
    assert first["dominant_emotion"] == "joy"
    assert first["trend_direction"] == "increasing"
    assert first["mood_direction"] == "improving"
    assert first["dominant_energy"] == "high"
    assert 0.0 < first["avg_intensity"] < first["dominant_intensity"] <= 1.0
    assert "tese" in first["trigger_keywords"]
    [trend] = _trends(memory)
    assert str(trend.id) == first["observation_id"]
    assert "mostly joy (4 of 8" in trend.text
    assert "improving" in trend.text
    assert sorted(trend.supporting_event_ids) == sorted(joy)
    assert not set(sad) & set(trend.supporting_event_ids)

    # More messages arrive: the same observation is rewritten, never duplicated.
    _seed(memory, [(0.5, "sadness", 0.9, "Saudade de casa"), (0.2, "sadness", 0.9, "Triste hoje")])
    second = run_job(context, memory.agent_id, "emotional_trends")

    assert second["created"] is False
    assert second["observation_id"] == first["observation_id"]
    assert second["events_analyzed"] == 10
    [trend] = _trends(memory)
    assert trend.times_reinforced == 1
    assert "(4 of 10" in trend.text
    assert count(memory, "SELECT count(*) FROM memory_meta_observations WHERE agent_id = :agent") == 1


def test_worsening_mood_and_too_few_events(make_context: ContextFactory, memory: JobMemory) -> None:
    _seed(memory, [(20, "joy", 0.8, "bom"), (18, "joy", 0.7, "legal"), (2, "sadness", 0.9, "ruim")])
    context = make_context(now=NOW)

    skipped = run_job(context, memory.agent_id, "emotional_trends")

    assert skipped["skipped"] is True
    assert skipped["observation_created"] is False
    assert "fewer than 5" in skipped["skip_reason"]
    assert _trends(memory) == []

    _seed(memory, [(3, "sadness", 0.8, "cansado"), (1, "anger", 0.9, "irritado")])
    result = run_job(context, memory.agent_id, "emotional_trends")

    assert result["dominant_emotion"] in ("joy", "sadness")
    assert result["mood_direction"] == "worsening"


def test_the_trend_reaches_the_retrieval_context_and_other_agents_are_untouched(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory], settings: Settings
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    for builder in (mine, theirs):
        _seed(builder, [(days, "joy", 0.8, "feliz") for days in (9, 7, 5, 3, 1)])
        builder.fact("Rafael mora em Recife", builder.entity("Rafael"))
    context = make_context()

    run_job(context, mine.agent_id, "emotional_trends")

    assert _trends(theirs) == []
    read_ctx = build_read_context(settings, embedder=HashingEmbedder(384), llm=None, pool_size=2)
    try:
        result = retrieve(read_ctx, agent_id=mine.agent_id, query="onde o Rafael mora?")
    finally:
        read_ctx.close()
    assert "mostly joy (5 of 5" in result.context
