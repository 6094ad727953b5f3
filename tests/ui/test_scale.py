"""The explorer's reads stay one page of rows on an agent with 100,000 facts (seeded by SQL, not the pipeline).

Half the facts belong to one entity (``person:hot``, 50,000 facts: 10,000 valid now, 40,000
superseded), the other half to 500 others; the agent has an import of 10,000 messages. Every
page is timed (printed: ``pytest -s`` shows the numbers), and the plans of the page queries are
read with ``EXPLAIN (ANALYZE, BUFFERS)``: no node of them handles more than a page of rows, which
is what "reads a page" means, however many rows the entity or the agent has.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from memory_core.read.explorer import (
    Cursor,
    EntityOrder,
    EntityRow,
    Page,
    entity_facts,
    fact_histories,
    list_agent_events,
    list_agent_imports,
    list_agents,
    list_entity_rows,
    recent_facts,
)

FACTS = 100_000
HOT = "person:hot"
HOT_FACTS = FACTS // 2
HOT_OPEN = HOT_FACTS // 5
IMPORT_RUNS = 10_000
PAGE = 25


@pytest.fixture(scope="module")
def big_agent(migrated_database_url: str) -> Iterator[tuple[sessionmaker[Session], str, datetime]]:
    """The agent, and the time its facts are counted back from (fact ``n`` starts ``n`` seconds before it)."""
    engine = create_engine(migrated_database_url)
    agent = f"ui-big-{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        base = conn.execute(text("SELECT date_trunc('second', now())")).scalar_one()
        params = {"agent": agent, "facts": FACTS, "base": base, "runs": IMPORT_RUNS}
        conn.execute(
            text(
                "INSERT INTO memory_events (agent_id, text, speaker, occurred_at) "
                "SELECT :agent, 'message ' || n, 'Ana', now() - n * interval '1 minute' FROM generate_series(1, 2000) n"
            ),
            params,
        )
        conn.execute(
            text(
                "INSERT INTO pipeline_runs (event_id, agent_id, status) SELECT id, agent_id, 'done' FROM memory_events "
                "WHERE agent_id = :agent"
            ),
            params,
        )
        # An import of 10,000 messages, 95% finished: 9,000 done, 500 failed, 500 still pending.
        import_id = conn.execute(
            text("INSERT INTO imports (agent_id, total, source) VALUES (:agent, :runs, 'api') RETURNING id"), params
        ).scalar_one()
        conn.execute(
            text(
                "WITH events AS (INSERT INTO memory_events (agent_id, text, speaker, occurred_at, import_id) "
                "  SELECT :agent, 'imported ' || n, 'Ana', now() - n * interval '1 second', :import "
                "  FROM generate_series(1, :runs) n RETURNING id, text) "
                "INSERT INTO pipeline_runs (event_id, agent_id, import_id, status) "
                "SELECT id, :agent, :import, CASE split_part(text, ' ', 2)::int % 20 WHEN 0 THEN 'failed' "
                "  WHEN 1 THEN 'received' ELSE 'done' END FROM events"
            ),
            {**params, "import": import_id},
        )
        conn.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, last_seen_at) "
                "SELECT :agent, 'person:p' || n, 'Person ' || n, 'person', now() - n * interval '1 second' "
                "FROM generate_series(1, 500) n "
                "UNION ALL SELECT :agent, :hot, 'Hot', 'person', now()"
            ),
            {**params, "hot": HOT},
        )
        # Odd facts are the hot entity's; one in five of those is valid now, the others were
        # superseded 30 seconds after they started.
        conn.execute(
            text(
                "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, created_at, valid_from, "
                "  valid_to, invalidated_at) "
                "SELECT :agent, 'person', "
                "  CASE WHEN n % 2 = 1 THEN :hot ELSE 'person:p' || ((n / 2) % 500 + 1) END, 'fact number ' || n, "
                "  :base - n * interval '1 second', :base - n * interval '1 second', closed, closed "
                "FROM generate_series(1, :facts) n, "
                "LATERAL (SELECT CASE WHEN n % 2 = 1 AND n % 10 <> 1 "
                "  THEN :base - n * interval '1 second' + interval '30 seconds' END AS closed) c"
            ),
            {**params, "hot": HOT},
        )
        # Every fact has a link to its subject, as the write path writes it (its trigger copies
        # the fact's validity window into the link).
        conn.execute(
            text(
                "INSERT INTO memory_fact_entity_links (fact_id, entity_key, is_primary, agent_id) "
                "SELECT id, entity_key, true, agent_id FROM memory_facts WHERE agent_id = :agent"
            ),
            params,
        )
        conn.execute(
            text(
                "ANALYZE memory_facts; ANALYZE memory_events; ANALYZE pipeline_runs; "
                "ANALYZE memory_fact_entity_links; ANALYZE memory_entities; ANALYZE imports"
            )
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # As autovacuum would have by then (the links of old facts); the runs of the import are
        # left as a running import's are, without a visibility map: counting them reads the heap.
        conn.execute(text("VACUUM memory_fact_entity_links"))
    try:
        yield sessionmaker(engine), agent, base
    finally:
        with engine.begin() as conn:
            for table in (
                "memory_fact_entity_links",
                "memory_facts",
                "memory_entities",
                "pipeline_runs",
                "memory_events",
                "imports",
            ):
                conn.execute(text(f"DELETE FROM {table} WHERE agent_id = :agent"), {"agent": agent})
        engine.dispose()


def timed(read: Callable[[], object]) -> float:
    """Milliseconds of the best of three runs, after a warm-up (the machine is shared)."""
    read()  # warm the cache and the plan
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        read()
        best = min(best, (time.perf_counter() - started) * 1000)
    return best


def plans(session: Session, read: Callable[[], object]) -> list[dict[str, Any]]:
    """The ``EXPLAIN (ANALYZE, BUFFERS)`` plan of every statement ``read`` runs, with its parameters."""
    statements: list[tuple[str, Any]] = []
    engine = session.get_bind()
    assert isinstance(engine, Engine)

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if not statement.startswith("EXPLAIN"):
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        read()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    connection = session.connection()
    return [
        connection.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters).scalar_one()[0][
            "Plan"
        ]
        for statement, parameters in statements
    ]


def widest(plan: dict[str, Any]) -> tuple[int, str]:
    """The most rows any node of the plan produced or threw away (per loop), and which node."""
    handled = int(plan["Actual Rows"]) + int(plan.get("Rows Removed by Filter", 0))
    best = (handled, str(plan["Node Type"]) + " " + str(plan.get("Index Name", plan.get("Relation Name", ""))))
    for child in plan.get("Plans", []):
        best = max(best, widest(child))
    return best


def test_entity_facts_read_one_page_of_a_50k_fact_entity(
    big_agent: tuple[sessionmaker[Session], str, datetime],
) -> None:
    sessions, agent, base = big_agent
    with sessions() as session:
        first = entity_facts(session, agent, HOT, limit=PAGE)
        assert len(first.items) == PAGE
        assert [fact.fact_text for fact in first.items[:2]] == ["fact number 1", "fact number 11"]
        assert first.next_cursor is not None
        after = Cursor.decode(first.next_cursor)
        second = entity_facts(session, agent, HOT, before=after, limit=PAGE)
        assert second.items[0].fact_text == f"fact number {PAGE * 10 + 1}"
        assert {fact.fact_id for fact in first.items}.isdisjoint(fact.fact_id for fact in second.items)
        # The last page: walk there by cursor from a point near the end.
        deep_fact = HOT_FACTS * 2 - 10 * 3 - 9  # the fourth open fact from the end
        deep = Cursor(base - timedelta(seconds=deep_fact), str(uuid.UUID(int=0)))
        last = entity_facts(session, agent, HOT, before=deep, limit=PAGE)
        assert len(last.items) == 3
        assert last.next_cursor is None

        past = entity_facts(session, agent, HOT, which="past", limit=PAGE)
        assert [fact.fact_text for fact in past.items[:2]] == ["fact number 3", "fact number 5"]
        assert all(fact.valid_to is not None for fact in past.items)
        past_next = entity_facts(session, agent, HOT, which="past", before=Cursor.decode(past.next_cursor), limit=PAGE)
        # Closed facts are the odd ones not ending in 1: 3, 5, 7, 9, 13, ... the 26th is 65.
        assert past_next.items[0].fact_text == "fact number 65"
        assert {fact.fact_id for fact in past.items}.isdisjoint(fact.fact_id for fact in past_next.items)

        # At an instant in the middle of the history: the facts open then, newest first.
        instant = base - timedelta(seconds=HOT_FACTS)
        at = entity_facts(session, agent, HOT, as_of=instant, limit=PAGE)
        assert len(at.items) == PAGE
        assert all(
            fact.valid_from <= instant and (fact.valid_to is None or fact.valid_to > instant) for fact in at.items
        )
        assert any(fact.valid_to is not None for fact in at.items)  # superseded later, valid then

        costs = {
            "first page": timed(lambda: entity_facts(session, agent, HOT, limit=PAGE)),
            "next page": timed(lambda: entity_facts(session, agent, HOT, before=after, limit=PAGE)),
            "past": timed(lambda: entity_facts(session, agent, HOT, which="past", limit=PAGE)),
            "past next": timed(
                lambda: entity_facts(
                    session, agent, HOT, which="past", before=Cursor.decode(past.next_cursor), limit=PAGE
                )
            ),
            "as_of (mid-history)": timed(lambda: entity_facts(session, agent, HOT, as_of=instant, limit=PAGE)),
        }
        print(f"entity of {HOT_FACTS} facts, ms: {costs}")
        assert all(cost < 250 for cost in costs.values()), costs

        # The plans: no node handles more than a page (+1) of rows per loop, nowhere a sort of
        # the entity's 50,000 facts. (The as_of page is left out: facts closed before the instant
        # are skipped in the index, as many as there are.)
        for name, read in {
            "first page": lambda: entity_facts(session, agent, HOT, limit=PAGE),
            "next page": lambda: entity_facts(session, agent, HOT, before=after, limit=PAGE),
            "past": lambda: entity_facts(session, agent, HOT, which="past", limit=PAGE),
        }.items():
            (plan,) = plans(session, read)
            rows, node = widest(plan)
            print(f"{name}: at most {rows} rows in a node ({node}), buffers {plan['Shared Hit Blocks']}")
            assert rows <= PAGE + 1, (name, rows, node)


def test_entity_list_pages_by_keyset(big_agent: tuple[sessionmaker[Session], str, datetime]) -> None:
    sessions, agent, _ = big_agent
    orders: tuple[EntityOrder, ...] = ("recent", "importance", "name")
    with sessions() as session:
        for order in orders:

            def page(after: str | None, limit: int = PAGE, order: EntityOrder = order) -> Page[EntityRow]:
                return list_entity_rows(session, agent, order=order, limit=limit, after=after)

            seen: list[str] = []
            cursor: str | None = None
            deepest: str | None = None
            while True:
                rows = page(cursor, PAGE * 4)
                seen.extend(row.canonical_key for row in rows.items)
                if rows.next_cursor is None:
                    break
                deepest, cursor = cursor, rows.next_cursor
            assert len(seen) == len(set(seen)) == 501, order
            if order != "importance":  # no score computed: importance falls back to recency
                assert seen[0] == HOT, order
            first_ms = timed(lambda: page(None))
            deep_page = functools.partial(page, deepest)
            deep_ms = timed(deep_page)
            (plan,) = plans(session, deep_page)
            handled, node = widest(plan)
            print(f"entities by {order}: first {first_ms:.2f} ms, deep {deep_ms:.2f} ms, widest {handled} ({node})")
            assert handled <= 2 * (PAGE + 1), (order, handled, node)
        # A cursor of another order, or garbage, is the first page.
        recent = list_entity_rows(session, agent, order="recent", limit=1)
        assert list_entity_rows(session, agent, order="name", after=recent.next_cursor).items[0].canonical_key == HOT
        assert list_entity_rows(session, agent, order="name", after="bm9wZQ==").items[0].canonical_key == HOT


def test_imports_page_counts_only_its_imports(big_agent: tuple[sessionmaker[Session], str, datetime]) -> None:
    sessions, agent, _ = big_agent
    with sessions() as session:
        (item,) = list_agent_imports(session, agent).items
        assert (item.total, item.done, item.failed, item.pending) == (IMPORT_RUNS, 9000, 500, 500)
        assert item.status == "running"
        cost = timed(lambda: list_agent_imports(session, agent))
        (plan,) = plans(session, lambda: list_agent_imports(session, agent))
        print(f"imports page with an import of {IMPORT_RUNS} runs: {cost:.2f} ms, buffers {plan['Shared Hit Blocks']}")
        # Counting is one index range per listed import, over its finished runs only.
        assert cost < 250


def test_every_page_query_is_fast_on_100k_facts(big_agent: tuple[sessionmaker[Session], str, datetime]) -> None:
    sessions, agent, _ = big_agent
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
