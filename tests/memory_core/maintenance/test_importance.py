"""Entity importance (seeds B6) on the real database: the seeds' example ordering and its signals."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from memory_core.config import MemoryConfig
from memory_core.maintenance.registry import run_job
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.context import build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.settings import Settings
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory
from tests.memory_core.read.conftest import NOW


def seed_seeds_example(memory: JobMemory) -> dict[str, str]:
    """The seeds' example memory: Fernanda central, Vertix well connected, Marcos moderate, XGBoost peripheral."""
    keys = {
        "fernanda": memory.entity("Fernanda", last_seen_at=NOW - timedelta(hours=2)),
        "vertix": memory.entity("Vertix", "organization", last_seen_at=NOW - timedelta(days=3)),
        "marcos": memory.entity("Marcos", last_seen_at=NOW - timedelta(days=20)),
        "xgboost": memory.entity("XGBoost", "product", last_seen_at=NOW - timedelta(days=90)),
        "acme": memory.entity("Acme", "organization", last_seen_at=NOW - timedelta(days=10)),
        "sp": memory.entity("São Paulo", "place", last_seen_at=NOW - timedelta(days=10)),
    }
    # 12 facts about Fernanda (one mentions Vertix), 8 about Vertix (2 of them mentions), 4 about Marcos, 1 XGBoost.
    fernanda_facts = [
        memory.fact(f"Fernanda fact number {i}", keys["fernanda"], valid_from=NOW - timedelta(hours=2 + i))
        for i in range(11)
    ]
    # Mentions count as the mentioned entity's facts too (the write path links them and bumps its last_seen_at).
    fernanda_facts.append(
        memory.fact(
            "Fernanda works at Vertix", keys["fernanda"], links=[keys["vertix"]], valid_from=NOW - timedelta(days=3)
        )
    )
    for index, fact_id in enumerate(fernanda_facts):
        memory.update_fact(fact_id, times_retrieved=5 + index, last_retrieved_at=NOW - timedelta(hours=index))
    vertix_facts = [
        memory.fact(f"Vertix fact number {i}", keys["vertix"], valid_from=NOW - timedelta(days=3 + i)) for i in range(6)
    ]
    for fact_id in vertix_facts[:3]:
        memory.update_fact(fact_id, times_retrieved=2)
    memory.relationship(keys["fernanda"], keys["vertix"], "works_at")
    memory.relationship(keys["marcos"], keys["vertix"], "works_at")
    memory.relationship(keys["vertix"], keys["acme"], "partner_of")
    memory.relationship(keys["vertix"], keys["sp"], "located_in")
    memory.relationship(keys["acme"], keys["vertix"], "client_of")
    marcos_facts = [
        memory.fact(f"Marcos fact number {i}", keys["marcos"], valid_from=NOW - timedelta(days=20 + i))
        for i in range(3)
    ]
    marcos_facts.append(
        memory.fact(
            "Marcos works at Vertix", keys["marcos"], links=[keys["vertix"]], valid_from=NOW - timedelta(days=20)
        )
    )
    memory.update_fact(marcos_facts[0], times_retrieved=1)
    memory.fact("XGBoost is a gradient boosting library", keys["xgboost"], valid_from=NOW - timedelta(days=90))
    return keys


def test_importance_reproduces_the_seeds_example_ordering(make_context: ContextFactory, memory: JobMemory) -> None:
    keys = seed_seeds_example(memory)
    context = make_context()

    result = run_job(context, memory.agent_id, "importance")

    scores = {name: memory.entity_row(key).importance_score for name, key in keys.items()}
    assert scores["fernanda"] > scores["vertix"] > scores["marcos"] > scores["xgboost"]
    assert all(0.0 <= value <= 1.0 for value in scores.values())
    # Vertix gets the most facts' mentions and most edges, but Fernanda's retrievals and recency win.
    assert scores["fernanda"] >= 0.8
    assert scores["xgboost"] <= 0.3
    assert result["entities_scored"] == len(keys)
    assert [pair[0] for pair in result["top_entities"][:2]] == [keys["fernanda"], keys["vertix"]]
    assert result["top_entities"][0][1] == pytest.approx(scores["fernanda"], abs=1e-6)


def test_importance_is_idempotent_and_ignores_closed_facts_and_edges(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    ana = memory.entity("Ana")
    bia = memory.entity("Bia")
    for i in range(3):
        memory.fact(f"Ana likes thing {i}", ana)
    memory.fact("Bia likes tea", bia)
    # History that no longer holds must not make Bia look central.
    for i in range(10):
        memory.fact(f"Bia once liked thing {i}", bia, valid_to=NOW - timedelta(days=1))
    memory.relationship(bia, ana, "friend_of", valid_to=NOW - timedelta(days=1))
    context = make_context()

    first = run_job(context, memory.agent_id, "importance")
    second = run_job(context, memory.agent_id, "importance")

    assert first == second
    assert memory.entity_row(ana).importance_score > memory.entity_row(bia).importance_score


def test_importance_weights_come_from_the_config(make_context: ContextFactory, memory: JobMemory) -> None:
    many = memory.entity("Many Facts")
    linked = memory.entity("Well Linked")
    for i in range(6):
        memory.fact(f"Many Facts detail {i}", many)
    memory.fact("Well Linked detail", linked)
    for other in ("One", "Two", "Three"):
        memory.relationship(linked, memory.entity(other), "knows")
    context = make_context()
    only_degree = MemoryConfig(
        embedding_dimensions=384, entity_importance_weights={"relationship_degree": 1.0, "fact_density": 0.0}
    )

    run_job(context, memory.agent_id, "importance", config=only_degree)

    assert memory.entity_row(linked).importance_score == pytest.approx(1.0)
    assert memory.entity_row(many).importance_score == pytest.approx(0.0)


def test_importance_of_one_agent_never_touches_another(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    keys = seed_seeds_example(mine)
    # The other agent talks about XGBoost all the time: that must not lift it in my memory.
    their_xgboost = theirs.entity("XGBoost", "product")
    for i in range(30):
        fact_id = theirs.fact(f"XGBoost detail {i}", their_xgboost)
        theirs.update_fact(fact_id, times_retrieved=50)
    context = make_context()

    run_job(context, mine.agent_id, "importance")

    assert theirs.entity_row(their_xgboost).importance_score is None
    assert mine.entity_row(keys["xgboost"]).importance_score < mine.entity_row(keys["marcos"]).importance_score


def test_after_importance_the_central_entitys_fact_ranks_first(
    make_context: ContextFactory, memory: JobMemory, settings: Settings
) -> None:
    keys = seed_seeds_example(memory)
    # Two equally relevant facts; the peripheral one is even a day newer.
    central = memory.fact(
        "Fernanda gosta de concertos de jazz", keys["fernanda"], valid_from=NOW - timedelta(days=2), importance=0.5
    )
    peripheral = memory.fact(
        "XGBoost gosta de concertos de jazz", keys["xgboost"], valid_from=NOW - timedelta(days=1), importance=0.5
    )
    read_ctx = build_read_context(settings, embedder=HashingEmbedder(384), llm=None, pool_size=2)
    query = "quem gosta de concertos de jazz?"

    def order() -> tuple[list[str], dict[str, float]]:
        result = retrieve(read_ctx, agent_id=memory.agent_id, query=query)
        ids = [fact.fact_id for fact in result.facts if fact.fact_id in (central, peripheral)]
        importance = {fact.fact_id: fact.scores["importance"] for fact in result.facts}
        return ids, importance

    try:
        before, importance_before = order()
        run_job(make_context(), memory.agent_id, "importance")
        after, importance_after = order()
    finally:
        read_ctx.close()

    assert before == [peripheral, central]
    assert importance_before[central] == importance_before[peripheral] == pytest.approx(0.5)
    assert after == [central, peripheral]
    fernanda = memory.entity_row(keys["fernanda"]).importance_score
    assert importance_after[central] == pytest.approx((0.5 + fernanda) / 2, abs=1e-5)
    assert importance_after[central] > importance_after[peripheral]
