"""The graph signal's BFS: a deeper level is read only while the shallower ones left room under the limit."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event

from memory_core.config import MemoryConfig
from memory_core.read.context import ReadContext
from memory_core.read.signals import GraphNode, SignalRequest, run_signals
from tests.memory_core.read.conftest import MemoryBuilder


def _three_levels(memory: MemoryBuilder) -> tuple[list[str], list[str], list[str]]:
    """Ana (asked about) with 3 facts; Bruno (a primed neighbour) with 1; Carla, Bruno's friend, with 2."""
    ana, bruno, carla = memory.entity("Ana Lima"), memory.entity("Bruno Reis"), memory.entity("Carla Dias")
    assert (ana, bruno) == ("person:ana_lima", "person:bruno_reis")
    ana_facts = [memory.fact(f"Ana Lima plays chess on day {day}", ana) for day in range(3)]
    bruno_facts = [memory.fact("Bruno Reis works as a baker", bruno)]
    carla_facts = [memory.fact("Carla Dias lives in Recife", carla), memory.fact("Carla Dias sings", carla)]
    memory.relationship(bruno, carla, "friend_of", strength=0.9)
    return ana_facts, bruno_facts, carla_facts


def _graph_signal(read_ctx: ReadContext, memory: MemoryBuilder, limit: int) -> tuple[set[str], list[str]]:
    """The facts the graph signal found, and the EXPLAIN ANALYZE lines of the statement that found them."""
    request = SignalRequest(
        agent_id=memory.agent_id,
        config=MemoryConfig(graph_max_facts=limit, graph_max_hops=2),
        now=datetime.now(UTC),
        graph_nodes=[
            GraphNode(key="person:ana_lima", depth=0),
            GraphNode(key="person:bruno_reis", depth=1, strength=0.9),
        ],
    )
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        sent.append((statement, parameters))

    event.listen(read_ctx.engine, "before_cursor_execute", record)
    try:
        with read_ctx.sessions() as session:
            result = run_signals(session, request)
    finally:
        event.remove(read_ctx.engine, "before_cursor_execute", record)
    (statement, parameters) = next((s, p) for s, p in sent if "graph_lvl2" in s)
    with read_ctx.engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert driver is not None
        plan = [str(row[0]) for row in driver.execute("EXPLAIN (ANALYZE, COSTS OFF) " + statement, parameters)]
    return {candidate.fact_id for candidate in result.candidates if candidate.graph > 0}, plan


def _relationship_scans(plan: list[str]) -> list[str]:
    return [line for line in plan if "memory_entity_relationships" in line]


def test_a_full_first_level_leaves_the_second_hop_unread(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana_facts, _, _ = _three_levels(memory)

    found, plan = _graph_signal(read_ctx, memory, limit=3)

    assert found == set(ana_facts)
    # Ana's three facts fill the limit: Bruno's relationships (the hop to Carla) are never read.
    scans = _relationship_scans(plan)
    assert scans, "\n".join(plan)
    assert all("never executed" in line for line in scans), "\n".join(plan)


def test_room_left_under_the_limit_reads_the_second_hop(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana_facts, bruno_facts, carla_facts = _three_levels(memory)

    found, plan = _graph_signal(read_ctx, memory, limit=10)

    assert found == {*ana_facts, *bruno_facts, *carla_facts}
    assert not all("never executed" in line for line in _relationship_scans(plan)), "\n".join(plan)
