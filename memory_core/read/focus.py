"""How much "this fact is about an entity the query names" says: entity specificity (ours).

The graph signal (R5) and spreading activation (R7) reward facts for their entity, not for
their content: every fact of a query entity gets the same graph score, and the facts they bring
in beyond the other signals' candidates are chosen by importance and recency, not by the query.
That is the right evidence when the entity is small: "Onde o Marcos mora?" over a memory where
Marcos has a handful of facts, all of which fit in the answer. It stops being evidence when the
entity owns far more facts than the signal can bring: the person the agent talks to every day,
the two speakers of a long conversation. Then every one of their hundreds of facts is "about the
query entity", the graph signal cannot tell which matter, and the few it brings flood the top of
the ranking ahead of the facts that match the question (on the LoCoMo sample, where every
question names a speaker, turning graph and spreading off raised recall@10 from 34 to 53).

So an entity's contribution is scaled by its specificity, ``min(1, budget / fact_count)``:
``budget`` is how many facts the signal takes from one entity (``graph_max_facts`` for the graph
signal, ``spreading_facts_per_entity`` for spreading). An entity that fits in that budget keeps
its full weight (1.0, the seeds' behaviour); one with ten times more facts gives each a tenth,
roughly the chance that a fact picked without looking at the query is one the query is about.
The query's other signals still rank the entity's facts by content: a fact that matches the
question semantically or by keyword keeps that score whatever its entity.

``fact_count`` is the entity's count of active facts that the write path maintains
(``memory_entities.fact_count``); an entity without a count (0, or no entity row) keeps the full
weight. The counts come with the statements that find the graph's entities: the resolution
statement for the entities the query names or filters by, the 1-hop expansion for their
neighbours (memory_core.read.entities). A statement of their own cost a small agent's retrieve a
round trip (~0.15 ms of client and server time on the retrieve benchmark's 1,000-fact agent).

An entity whose specificity falls under :data:`MIN_SPECIFICITY` is left out altogether (its facts
are not read): with 30 facts taken, one of more than 600 (spreading, 3 taken: more than 60). Its
facts would enter the ranking with a graph score of at most a twentieth of its edge's, and
reading them was most of the graph signal's and spreading's time on large agents, for no loss
of recall (docs/performance.md, "Read statements").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from memory_core.read.signals import GraphNode

__all__ = ["MIN_SPECIFICITY", "specificity", "weigh_graph_nodes"]

# Below this share of weight an entity's facts say nothing about the query: they are not read.
MIN_SPECIFICITY = 0.05


def specificity(fact_count: int | None, budget: int) -> float:
    """``min(1, budget / fact_count)``: 1.0 for entities that fit in ``budget`` (or have no count)."""
    if fact_count is None or fact_count <= max(budget, 0) or fact_count <= 0:
        return 1.0
    return max(budget, 1) / float(fact_count)


def weigh_graph_nodes(nodes: Sequence[GraphNode], fact_counts: Mapping[str, int], budget: int) -> list[GraphNode]:
    """``nodes`` with each strength scaled by its entity's specificity; too broad ones left out (module docstring).

    ``fact_counts``: the entities' active-fact counts by key (an entity absent keeps its weight).
    """
    weighed: list[GraphNode] = []
    for node in nodes:
        weight = specificity(fact_counts.get(node.key), budget)
        if weight < MIN_SPECIFICITY:
            continue
        weighed.append(node if weight >= 1.0 else replace(node, strength=node.strength * weight))
    return weighed
