"""The explorer's reads stay one page of rows on an agent with 100,000 facts (seeded by SQL, not the pipeline)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from memory_core.read.explorer import (
    Cursor,
    entity_facts,
    fact_histories,
    list_agent_events,
    list_agents,
    list_entity_rows,
    recent_facts,
)

FACTS = 100_000


@pytest.fixture(scope="module")
def big_agent(migrated_database_url: str) -> Iterator[tuple[sessionmaker[Session], str]]:
    engine = create_engine(migrated_database_url)
    agent = f"ui-big-{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO memory_events (agent_id, text, speaker, occurred_at) "
                "SELECT :agent, 'message ' || n, 'Ana', now() - n * interval '1 minute' FROM generate_series(1, 2000) n"
            ),
            {"agent": agent},
        )
        conn.execute(
            text(
                "INSERT INTO pipeline_runs (event_id, agent_id, status) SELECT id, agent_id, 'done' FROM memory_events "
                "WHERE agent_id = :agent"
            ),
            {"agent": agent},
        )
        conn.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, last_seen_at) "
                "SELECT :agent, 'person:p' || n, 'Person ' || n, 'person', now() FROM generate_series(1, 500) n"
            ),
            {"agent": agent},
        )
        conn.execute(
            text(
                "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, created_at, valid_from) "
                "SELECT :agent, 'person', 'person:p' || (n % 500 + 1), 'fact number ' || n, "
                "now() - n * interval '1 second', now() - n * interval '1 second' FROM generate_series(1, :facts) n"
            ),
            {"agent": agent, "facts": FACTS},
        )
        conn.execute(text("ANALYZE memory_facts; ANALYZE memory_events; ANALYZE pipeline_runs"))
    try:
        yield sessionmaker(engine), agent
    finally:
        with engine.begin() as conn:
            for table in ("memory_facts", "memory_entities", "pipeline_runs", "memory_events"):
                conn.execute(text(f"DELETE FROM {table} WHERE agent_id = :agent"), {"agent": agent})
        engine.dispose()


def timed(read: Callable[[], object]) -> float:
    read()  # warm the cache and the plan
    started = time.perf_counter()
    read()
    return (time.perf_counter() - started) * 1000


def test_every_page_query_is_fast_on_100k_facts(big_agent: tuple[sessionmaker[Session], str]) -> None:
    sessions, agent = big_agent
    with sessions() as session:
        first = recent_facts(session, agent, limit=25)
        assert len(first.items) == 25
        assert first.next_cursor is not None
        second = recent_facts(session, agent, before=Cursor.decode(first.next_cursor), limit=25)
        assert {fact.fact_id for fact in first.items}.isdisjoint(fact.fact_id for fact in second.items)
        costs = {
            "agents (tenant list)": timed(lambda: list_agents(session, agent_ids=[agent])),
            "agents (operator)": timed(lambda: list_agents(session)),
            "recent facts": timed(lambda: recent_facts(session, agent, limit=25)),
            "next facts": timed(
                lambda: recent_facts(session, agent, before=Cursor.decode(first.next_cursor), limit=25)
            ),
            "entities": timed(lambda: list_entity_rows(session, agent, limit=25)),
            "entity facts": timed(lambda: entity_facts(session, agent, "person:p1", limit=50)),
            "history": timed(lambda: fact_histories(session, agent, [fact.fact_id for fact in first.items])),
            "events": timed(lambda: list_agent_events(session, agent, limit=25)),
        }
    print(costs)
    # Generous bounds (the CI machine is shared): reading the whole agent takes far longer.
    assert all(cost < 500 for cost in costs.values()), costs
