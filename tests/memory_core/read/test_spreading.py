"""Spreading activation (R7) and the context extras, against the real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_core.read.context import ReadContext
from memory_core.read.rank import compute_dynamic_importance
from memory_core.read.spreading import context_extras, spread_activation
from tests.memory_core.read.conftest import MemoryBuilder


def _graph(memory: MemoryBuilder) -> dict[str, str]:
    marcos = memory.entity("Marcos Tavares")
    carolina = memory.entity("Carolina")
    vertix = memory.entity("Vertix", "organization")
    lucia = memory.entity("Lúcia")
    ids = {
        "seed": memory.fact("Marcos Tavares mora em Porto Alegre", marcos),
        "married": memory.fact("Marcos Tavares é casado com a Carolina", marcos, links=[carolina], importance=0.9),
        "architect": memory.fact("Carolina é arquiteta", carolina, importance=0.8),
        "carolina_2": memory.fact("Carolina nasceu em Pelotas", carolina, importance=0.7),
        "carolina_3": memory.fact("Carolina gosta de escalada", carolina, importance=0.6),
        "carolina_4": memory.fact("Carolina tem um gato", carolina, importance=0.1),
        "vertix": memory.fact("A Vertix é uma fintech", vertix),
        "lucia": memory.fact("Lúcia é mãe da Carolina", lucia),
    }
    memory.relationship(marcos, carolina, "partner_of", strength=0.9)
    memory.relationship(marcos, vertix, "works_at", strength=0.8)
    memory.relationship(lucia, carolina, "parent_of", strength=0.9)
    return ids


def test_hops_decay_and_facts_per_entity(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ids = _graph(memory)
    config = read_ctx.base_config
    now = datetime.now(UTC)
    with read_ctx.sessions() as session:
        result = spread_activation(session, memory.agent_id, [(ids["seed"], 0.8)], config, now=now)
    by_id = {candidate.fact_id: candidate for candidate in result.candidates}
    assert ids["seed"] not in by_id
    # Hop 1: the seed's own entity (0.8 x 0.5).
    assert by_id[ids["married"]].graph == pytest.approx(0.4)
    # Hop 2: entities related to it, at most 3 facts each, strongest by dynamic importance (0.8 x 0.25).
    assert by_id[ids["architect"]].graph == pytest.approx(0.2)
    assert by_id[ids["vertix"]].graph == pytest.approx(0.2)
    # Carolina's three strongest: the marriage fact (linked to her too, kept at its hop-1 activation),
    # then the architect and birthplace facts; the weaker ones stay out.
    assert {ids["architect"], ids["carolina_2"]} <= set(by_id)
    assert ids["carolina_3"] not in by_id
    assert ids["carolina_4"] not in by_id
    # Lúcia is two relationships away from Marcos: a third hop, beyond the default 2.
    assert ids["lucia"] not in by_id
    assert all("spreading" in candidate.sources for candidate in result.candidates)
    assert result.hop_counts == {1: 1, 2: 3}
    assert "person:carolina" in result.entities_explored

    deeper = config.model_copy(update={"spreading_activation_hops": 3})
    with read_ctx.sessions() as session:
        three = spread_activation(session, memory.agent_id, [(ids["seed"], 0.8)], deeper, now=now)
    assert {c.fact_id: c.graph for c in three.candidates}[ids["lucia"]] == pytest.approx(0.1)

    for hops, expected in ((0, set()), (1, {ids["married"]})):
        limited = config.model_copy(update={"spreading_activation_hops": hops})
        with read_ctx.sessions() as session:
            got = spread_activation(session, memory.agent_id, [(ids["seed"], 0.8)], limited, now=now)
        assert {c.fact_id for c in got.candidates} == expected


def test_cluster_mates_are_hop_one(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    bia = memory.entity("Bia")
    seed = memory.fact("Ana corre todo sábado", ana)
    mate = memory.fact("Bia treina para a maratona", bia)
    memory.cluster("Running", "Ana and Bia run.", [seed, mate])
    with read_ctx.sessions() as session:
        result = spread_activation(session, memory.agent_id, [(seed, 0.6)], read_ctx.base_config, now=datetime.now(UTC))
    assert {c.fact_id: c.graph for c in result.candidates} == {mate: pytest.approx(0.3)}
    assert len(result.clusters_explored) == 1


def test_context_extras_patterns_and_clusters(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    fact = memory.fact("Ana corre todo sábado", ana)
    other = memory.fact("Ana tem um cachorro", ana)
    cluster = memory.cluster("Running", "Ana runs every week.", [fact])
    memory.observation("Ana exercises on weekends", supporting_fact_ids=[fact])
    memory.observation("Feeling more anxious this month", observation_type="trend")
    memory.observation("Old trend", observation_type="trend", last_reinforced_at=datetime(2020, 1, 1, tzinfo=UTC))
    memory.observation("Something unrelated about taxes", supporting_fact_ids=[other])
    with read_ctx.sessions() as session:
        extras = context_extras(
            session,
            memory.agent_id,
            read_ctx.base_config,
            fact_ids=[fact],
            cluster_ids=[cluster],
            now=datetime.now(UTC),
        )
    assert [c.label for c in extras.clusters] == ["Running"]
    assert [p.text for p in extras.patterns] == ["Ana exercises on weekends", "Feeling more anxious this month"]


def test_an_entity_too_broad_to_carry_activation_is_not_spread_into(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    ids = _graph(memory)
    carolina = "person:carolina"
    for number in range(160):
        memory.fact(f"Carolina visitou o museu número {number}", carolina, importance=0.95)
    memory.refresh_fact_counts()
    now = datetime.now(UTC)
    config = read_ctx.base_config
    assert config.entity_specificity

    with read_ctx.sessions() as session:
        result = spread_activation(session, memory.agent_id, [(ids["seed"], 0.8)], config, now=now)
    # 3 of Carolina's 161 facts would each get under 2% of the activation: her facts are not read.
    assert carolina not in result.entities_explored
    assert "organization:vertix" in result.entities_explored
    assert ids["vertix"] in {candidate.fact_id for candidate in result.candidates}

    flat = config.model_copy(update={"entity_specificity": False})
    with read_ctx.sessions() as session:
        seeds_behaviour = spread_activation(session, memory.agent_id, [(ids["seed"], 0.8)], flat, now=now)
    assert carolina in seeds_behaviour.entities_explored


def _ana_with_eight_facts(memory: MemoryBuilder) -> tuple[str, str, list[str]]:
    """Marcos's seed fact linked to Ana, and Ana's eight facts, least important first (0.1 ... 0.8)."""
    marcos = memory.entity("Marcos Tavares")
    ana = memory.entity("Ana")
    seed = memory.fact("Marcos Tavares é amigo da Ana", marcos, links=[ana], importance=0.9)
    facts = [memory.fact(f"Ana visitou a cidade número {n}", ana, importance=n / 10) for n in range(1, 9)]
    return seed, ana, facts


def _change_facts(memory: MemoryBuilder, facts: list[str]) -> None:
    # After their links were written, as the write path and the maintenance jobs change facts:
    # the least important becomes the most, the most important is superseded, the next is doubted.
    memory.execute("UPDATE memory_facts SET importance = 0.99 WHERE id = CAST(:id AS uuid)", id=facts[0])
    memory.execute("UPDATE memory_facts SET valid_to = now() WHERE id = CAST(:id AS uuid)", id=facts[7])
    memory.execute("UPDATE memory_facts SET confidence = 0.2 WHERE id = CAST(:id AS uuid)", id=facts[6])


def test_an_entitys_facts_are_spread_to_by_their_current_importance_validity_and_confidence(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    seed, ana, facts = _ana_with_eight_facts(memory)
    _change_facts(memory, facts)
    with read_ctx.sessions() as session:
        result = spread_activation(session, memory.agent_id, [(seed, 0.8)], read_ctx.base_config, now=datetime.now(UTC))
    # Ana's three strongest facts now: the one raised to 0.99, then 0.6 and 0.5 (0.8 closed, 0.7 doubted).
    reached = [candidate.fact_id for candidate in result.candidates if candidate.fact_id in facts]
    assert set(reached) == {facts[0], facts[5], facts[4]}
    assert ana in result.entities_explored


def test_the_graph_signal_takes_an_entitys_facts_by_their_current_importance_validity_and_confidence(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    from memory_core.read.signals import GraphNode, SignalRequest, run_signals

    seed, ana, facts = _ana_with_eight_facts(memory)
    _change_facts(memory, facts)
    config = read_ctx.base_config.model_copy(update={"graph_max_facts": 3})
    with read_ctx.sessions() as session:
        result = run_signals(
            session,
            SignalRequest(
                agent_id=memory.agent_id,
                config=config,
                now=datetime.now(UTC),
                graph_nodes=[GraphNode(key=ana, depth=0)],
                agent_facts=10,
            ),
        )
    graph = {candidate.fact_id for candidate in result.candidates if "graph" in candidate.sources}
    # Ana's three strongest facts now: the one raised to 0.99, Marcos's (0.9, linked to her), then 0.6.
    assert graph == {facts[0], seed, facts[5]}


def test_an_entitys_facts_are_spread_to_by_dynamic_importance_as_the_formula_computes_it(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    """Use, corrections and patterns reorder an entity's facts (seeds R13); the statement ranks them as
    rank.compute_dynamic_importance does."""
    carolina = memory.entity("Carolina")
    seed = memory.fact("Carolina mora em Pelotas", carolina, importance=0.9)
    bases = {"corrected": 0.7, "plain_high": 0.6, "plain_low": 0.5, "in_pattern": 0.45, "used": 0.4}
    ids = {name: memory.fact(f"Carolina: fato {name}", carolina, importance=value) for name, value in bases.items()}
    now = datetime.now(UTC)
    used_at = now - timedelta(days=2)
    memory.execute(
        "INSERT INTO memory_fact_usage (fact_id, agent_id, times_retrieved, last_retrieved_at) "
        "VALUES (CAST(:id AS uuid), :agent, 50, :at)",
        id=ids["used"],
        agent=memory.agent_id,
        at=used_at,
    )
    memory.execute(
        "UPDATE memory_facts SET user_correction_count = 3 WHERE id = CAST(:id AS uuid)", id=ids["corrected"]
    )
    memory.observation("Carolina fala de fatos", supporting_fact_ids=[ids["in_pattern"]])
    config = read_ctx.base_config

    with read_ctx.sessions() as session:
        result = spread_activation(session, memory.agent_id, [(seed, 0.8)], config, now=now)

    def dynamic(name: str) -> float:
        return compute_dynamic_importance(
            bases[name],
            50 if name == "used" else 0,
            used_at if name == "used" else None,
            3 if name == "corrected" else 0,
            name == "in_pattern",
            now,
            recency_half_life_days=float(config.dynamic_importance_recency_halflife_days),
            correction_penalty=config.dynamic_importance_correction_penalty,
            pattern_boost=config.dynamic_importance_pattern_boost,
            minimum=config.dynamic_importance_min,
            maximum=config.dynamic_importance_max,
        )

    strongest = sorted(bases, key=dynamic, reverse=True)[: config.spreading_facts_per_entity]
    assert strongest == ["used", "plain_high", "in_pattern"]  # not the base order: 0.7 and 0.5 stay out
    reached = {candidate.fact_id: candidate.graph for candidate in result.candidates}
    assert set(reached) == {ids[name] for name in strongest}
    assert all(graph == pytest.approx(0.8 * config.spreading_decay_factor) for graph in reached.values())
