"""Entity specificity (memory_core.read.focus): pure weights, and what they do to a real ranking."""

from __future__ import annotations

import pytest

from memory_core.read.context import ReadContext
from memory_core.read.focus import specificity
from memory_core.read.pipeline import retrieve
from tests.memory_core.read.conftest import MemoryBuilder


@pytest.mark.parametrize(
    ("fact_count", "budget", "expected"),
    [(None, 30, 1.0), (0, 30, 1.0), (3, 30, 1.0), (30, 30, 1.0), (60, 30, 0.5), (600, 30, 0.05), (9, 3, 1 / 3)],
)
def test_specificity_is_budget_over_fact_count_capped_at_one(
    fact_count: int | None, budget: int, expected: float
) -> None:
    assert specificity(fact_count, budget) == pytest.approx(expected)


def _speaker_with_many_facts(memory: MemoryBuilder) -> tuple[str, str]:
    """Caroline, with 40 everyday facts (important ones) and one low-importance fact that answers the question."""
    caroline = memory.entity("Caroline")
    for number in range(40):
        memory.fact(f"Caroline cooked pasta number {number} for dinner with friends", caroline, importance=0.9)
    answer = memory.fact("Caroline went to an LGBTQ support group meeting", caroline, importance=0.3)
    memory.refresh_fact_counts()
    return caroline, answer


def test_a_question_about_a_busy_entity_gets_the_matching_fact_first(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    _, answer = _speaker_with_many_facts(memory)
    query = "When did Caroline go to the support group?"
    overrides = {"graph_max_facts": 10, "spreading_facts_per_entity": 3}

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, config_overrides=overrides)

    assert result.facts[0].fact_id == answer
    # Caroline's 41 facts are far more than the 10 the graph signal brings: each gets a quarter of it.
    top = result.facts[0]
    others = [fact for fact in result.facts[1:] if fact.scores["graph"] > 0]
    assert others, "the graph signal still contributes"
    assert all(fact.scores["graph"] <= 1.5 * 10 / 41 + 1e-6 for fact in others)
    assert top.score > max(fact.score for fact in result.facts[1:])

    # Without the weighting (the seeds' behaviour) the graph signal's picks, chosen by importance,
    # push the answer down the list.
    flat = retrieve(
        read_ctx,
        agent_id=memory.agent_id,
        query=query,
        config_overrides={**overrides, "entity_specificity": False},
    )
    assert flat.facts[0].fact_id != answer


def test_small_entities_keep_the_full_graph_signal(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    fact = memory.fact("Ana mora em Recife", ana)
    memory.refresh_fact_counts()
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Onde a Ana mora?")
    assert result.facts[0].fact_id == fact
    assert result.facts[0].scores["graph"] == pytest.approx(1.0)


def test_an_entity_too_broad_for_the_graph_budget_is_left_out_of_the_graph(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    """The counts come with the statements that find the entities: the resolution (named) and the
    expansion (neighbours); no statement of their own."""
    from memory_core.read.entities import expand_query, resolve_query_context
    from memory_core.read.focus import MIN_SPECIFICITY, weigh_graph_nodes
    from memory_core.read.signals import GraphNode

    broad = memory.entity("Caroline")
    narrow = memory.entity("Melanie")
    neighbour = memory.entity("Lucas")
    memory.relationship(narrow, neighbour, "friend_of")
    for number in range(101):
        memory.fact(f"Caroline painted picture number {number}", broad)
    for number in range(20):
        memory.fact(f"Melanie ran lap number {number}", narrow)
    for number in range(40):
        memory.fact(f"Lucas swam lap number {number}", neighbour)
    memory.refresh_fact_counts()
    budget = 2
    assert budget / 101 < MIN_SPECIFICITY <= budget / 40 < budget / 20

    with read_ctx.sessions() as session:
        context = resolve_query_context(session, memory.agent_id, "Did Caroline and Melanie paint together?")
        expansion = expand_query(session, memory.agent_id, [narrow])

    assert context.fact_counts == {broad: 101, narrow: 20}
    assert [(n.key, n.fact_count) for n in expansion.neighbours] == [(neighbour, 40)]
    counts = {**context.fact_counts, neighbour: 40}
    nodes = weigh_graph_nodes(
        [GraphNode(key=broad, depth=0), GraphNode(key=narrow, depth=0), GraphNode(key=neighbour, depth=1)],
        counts,
        budget,
    )

    assert [node.key for node in nodes] == [narrow, neighbour]
    assert nodes[0].strength == pytest.approx(budget / 20)
    assert nodes[1].strength == pytest.approx(budget / 40)
