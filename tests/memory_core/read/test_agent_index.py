"""Large agents get partial HNSW and GIN indexes of their own; retrieval through them stays exact enough and isolated.

A database of its own with 16-dimensional embeddings (so the table and its indexes build in
seconds): two large agents (one whose id needs SQL quoting) and a few small ones. The threshold
is lowered to 3,000 facts.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from memory_core.config import MemoryConfig
from memory_core.db.driver_reads import AGENT_LITERAL, quoted_literal
from memory_core.db.migrate import upgrade
from memory_core.read import agent_index as agent_index_module
from memory_core.read import pipeline as pipeline_module
from memory_core.read.agent_index import (
    BUSY_REASON,
    BuildOutcome,
    agent_index_name,
    agent_indexes,
    agent_text_index_name,
    agents_needing_index,
    build_agent_index,
    build_memory,
    drop_agent_index,
)
from memory_core.read.context import ReadContext, build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.read.read_transaction import begin_read
from memory_core.read.side_reads import SideReads
from memory_core.read.signals import SignalRequest, run_signals
from memory_core.settings import load_settings
from tests.support.fixed_embedder import FixedEmbedder
from tests.support.services import TestServices

DIMENSIONS = 16
THRESHOLD = 3_000
BIG, QUOTED, GROWING, SMALL = "big-agent", "o'brien; drop", "growing-agent", "small-agent"
SIZES = {BIG: 6_000, QUOTED: 4_000, GROWING: 3_500, SMALL: 200}
K = 20
VALID_FROM = datetime.now(UTC) - timedelta(days=1)


@dataclass
class Table:
    ctx: ReadContext
    vectors: dict[str, dict[str, list[float]]]
    superseded: set[str]


def _parse(value: Any) -> list[float]:
    return [float(x) for x in str(value).strip("[]").split(",")]


@pytest.fixture(scope="module")
def table(services: TestServices, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Table]:
    url = services.new_database("arandu_agent_index")
    settings = load_settings(
        database_url=url,
        broker_url=services.broker_url,
        home=Path(tmp_path_factory.mktemp("agent-index")),
        embedding_dimensions=DIMENSIONS,
        llm_provider="offline",
        retrieval_agent_index_min_facts=THRESHOLD,
        retrieval_bookkeeping_flush_s=0.2,
    )
    upgrade(settings)
    ctx = build_read_context(settings, embedder=FixedEmbedder([1.0] * DIMENSIONS), llm=None, pool_size=4)
    random_vector = (
        "(SELECT CAST(array_agg(random() + d.i * 0 + g * 0) AS vector) FROM generate_series(1, :dims) AS d(i))"
    )
    with ctx.engine.begin() as connection:
        connection.execute(text("SELECT setseed(0.17)"))
        for agent, size in SIZES.items():
            connection.execute(
                text(
                    "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, confidence, valid_from, "
                    f"embedding_vec) SELECT :agent, 'concept', 'concept:item', 'item ' || g, 0.9, :valid_from, "
                    f"{random_vector} FROM generate_series(1, :n) AS g"
                ),
                {"agent": agent, "n": size, "dims": DIMENSIONS, "valid_from": VALID_FROM},
            )
        # Superseded versions of the big agent: in its index, but never returned for "now".
        connection.execute(
            text(
                "UPDATE memory_facts SET valid_to = now() - interval '1 hour' "
                "WHERE id IN (SELECT id FROM memory_facts WHERE agent_id = :agent ORDER BY id LIMIT 300)"
            ),
            {"agent": BIG},
        )
        connection.execute(text("ANALYZE memory_facts"))
        vectors: dict[str, dict[str, list[float]]] = {agent: {} for agent in SIZES}
        superseded: set[str] = set()
        for row in connection.execute(text("SELECT id, agent_id, embedding_vec, valid_to FROM memory_facts")):
            if row.valid_to is not None:
                superseded.add(str(row.id))
            else:
                vectors[row.agent_id][str(row.id)] = _parse(row.embedding_vec)
    agent_indexes.clear()
    try:
        yield Table(ctx, vectors, superseded)
    finally:
        agent_indexes.clear()
        ctx.close()


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _exact_top(vectors: dict[str, list[float]], query: list[float], k: int) -> list[str]:
    return sorted(vectors, key=lambda fact_id: -_cosine(vectors[fact_id], query))[:k]


def _query(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.random() for _ in range(DIMENSIONS)]


def _retrieve(ctx: ReadContext, agent_id: str, query: list[float]) -> tuple[list[str], dict[str, Any]]:
    result = retrieve(
        replace(ctx, embedder=FixedEmbedder(query)),
        agent_id=agent_id,
        query="zzqx",
        config_overrides={"topk_facts": K, "spreading_activation_hops": 0},
        verbose=True,
    )
    assert result.trace is not None
    return [fact.fact_id for fact in result.facts], result.trace


def _index_exists(ctx: ReadContext, agent_id: str) -> bool:
    with ctx.engine.connect() as connection:
        return bool(
            connection.execute(
                text(
                    "SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid WHERE c.relname = :n"
                ),
                {"n": agent_index_name(agent_id)},
            ).scalar()
        )


def test_maintenance_lists_and_builds_the_large_agents_indexes(table: Table) -> None:
    with table.ctx.sessions() as session:
        needing = agents_needing_index(session, THRESHOLD)
    assert [agent for agent, _ in needing] == [BIG, QUOTED, GROWING]
    assert dict(needing)[BIG] == SIZES[BIG]  # every version counts: the index holds them all

    for agent in (BIG, QUOTED):
        outcome = build_agent_index(table.ctx.engine, agent, maintenance_work_mem="128MB")
        assert outcome.created, outcome
        assert _index_exists(table.ctx, agent)
    again = build_agent_index(table.ctx.engine, BIG)
    assert (again.created, again.reason) == (False, "exists")
    with table.ctx.sessions() as session:
        assert [agent for agent, _ in agents_needing_index(session, THRESHOLD)] == [GROWING]
    # The table survived the quoted agent id, and its index covers exactly that agent's rows.
    with table.ctx.engine.connect() as connection:
        predicate = connection.execute(
            text(
                "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_class c JOIN pg_index i "
                "ON i.indexrelid = c.oid WHERE c.relname = :n"
            ),
            {"n": agent_index_name(QUOTED)},
        ).scalar()
        assert predicate == "(agent_id = 'o''brien; drop'::text)"
        assert connection.execute(text("SELECT count(*) FROM memory_facts")).scalar() == sum(SIZES.values())


def test_a_build_gets_the_memory_its_graph_needs_not_a_fixed_gigabyte() -> None:
    # A parallel build reserves all of it in /dev/shm at once: a small agent must not take 1GB.
    assert build_memory(10_000, 384) == "64MB"
    # Measured: a 100,000-fact agent's graph (384 dimensions) outgrew 128MB after 58,625 facts.
    assert int(build_memory(58_625, 384).removesuffix("MB")) > 128
    assert int(build_memory(100_000, 384).removesuffix("MB")) >= 100_000 * 2_290 / 2**20
    assert build_memory(100_000, 384) < build_memory(100_000, 1_536)
    assert build_memory(5_000_000, 1_536) == "1024MB"


def test_a_build_sets_the_sized_memory_for_itself_and_restores_the_sessions(table: Table) -> None:
    drop_agent_index(table.ctx.engine, QUOTED)
    settings: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if "maintenance_work_mem" in statement and isinstance(parameters, dict) and "value" in parameters:
            settings.append(str(parameters["value"]))

    event.listen(table.ctx.engine, "before_cursor_execute", record)
    try:
        with table.ctx.engine.connect() as connection:
            before = str(connection.execute(text("SHOW maintenance_work_mem")).scalar())
        outcome = build_agent_index(table.ctx.engine, QUOTED)
    finally:
        event.remove(table.ctx.engine, "before_cursor_execute", record)
    assert outcome.created, outcome
    # 4,000 facts of 16 dimensions: the floor, then the session's own value back.
    assert settings == [build_memory(SIZES[QUOTED], DIMENSIONS), before]
    assert settings[0] == "64MB"


def test_the_planner_uses_the_agent_index_for_the_semantic_signal(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    statements: list[str] = []
    with table.ctx.sessions() as session:
        request = SignalRequest(
            agent_id=BIG,
            config=MemoryConfig(embedding_dimensions=DIMENSIONS, min_similarity=0.0),
            now=datetime.now(UTC),
            query_vector=_query(1),
            agent_index_min_facts=THRESHOLD,
        )
        result = run_signals(session, request)
        assert result.vector_strategy == "agent_index"
        # The same statement, explained: the partial index serves it (six times: psycopg prepares
        # a statement from its fifth run, and PostgreSQL may then plan it generically).
        from memory_core.read.signals import _statement

        sql, params = _statement(request, "agent_index")
        sql = sql.replace(AGENT_LITERAL, quoted_literal(BIG))  # as fetch_all writes it in
        session.execute(text("SET LOCAL hnsw.ef_search = 200"))
        for _ in range(7):
            statements.append("\n".join(str(row[0]) for row in session.execute(text("EXPLAIN " + sql), params).all()))
    for plan in statements:
        assert agent_index_name(BIG) in plan, plan


def test_retrieval_through_the_agent_index_has_high_recall_and_stays_isolated(table: Table) -> None:
    for agent in (BIG, QUOTED):
        build_agent_index(table.ctx.engine, agent)
    recalls: list[float] = []
    for agent in (BIG, QUOTED):
        for seed in range(10):
            query = _query(100 + seed)
            found, trace = _retrieve(table.ctx, agent, query)
            assert trace["retrieval"]["vector_strategy"] == "agent_index"
            assert len(found) == K
            assert set(found) <= set(table.vectors[agent])  # never another agent's, never a superseded one
            assert not set(found) & table.superseded
            exact = _exact_top(table.vectors[agent], query, K)
            recalls.append(len(set(found) & set(exact)) / K)
    assert sum(recalls) / len(recalls) >= 0.95, recalls
    assert min(recalls) >= 0.85, recalls
    # A small agent is still searched exactly, and gets its exact top k.
    query = _query(7)
    found, trace = _retrieve(table.ctx, SMALL, query)
    assert trace["retrieval"]["vector_strategy"] == "exact"
    assert found == _exact_top(table.vectors[SMALL], query, K)


def test_the_deployments_ef_search_is_the_walks_candidate_list(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    query = _query(120)
    wider = replace(table.ctx, settings=table.ctx.settings.model_copy(update={"retrieval_ef_search": 700}))
    found_default, trace_default = _retrieve(table.ctx, BIG, query)
    found_wider, trace_wider = _retrieve(wider, BIG, query)
    assert (trace_default["retrieval"]["ef_search"], trace_wider["retrieval"]["ef_search"]) == (300, 700)
    assert len(found_default) == len(found_wider) == K
    # Never fewer candidates than the walk asks for (twice the semantic candidates wanted): a
    # smaller setting is raised to that, and the search still fills its top k.
    config = table.ctx.base_config
    narrow = replace(table.ctx, settings=table.ctx.settings.model_copy(update={"retrieval_ef_search": 40}))
    found_narrow, trace_narrow = _retrieve(narrow, BIG, query)
    assert trace_narrow["retrieval"]["ef_search"] == 2 * max(
        config.signal_max_facts, config.reranker_candidate_multiplier * K
    )
    assert len(found_narrow) == K


def test_a_large_agent_without_an_index_gets_one_in_the_background(table: Table) -> None:
    drop_agent_index(table.ctx.engine, GROWING)
    query = _query(55)
    found, trace = _retrieve(table.ctx, GROWING, query)
    # Served exactly while its index is built behind the request.
    assert trace["retrieval"]["vector_strategy"] == "exact"
    assert found == _exact_top(table.vectors[GROWING], query, K)
    deadline = time.monotonic() + 120
    while not _index_exists(table.ctx, GROWING) or agent_indexes.building(table.ctx.engine, GROWING):
        assert time.monotonic() < deadline, "the background build did not finish"
        time.sleep(0.2)
    found, trace = _retrieve(table.ctx, GROWING, query)
    assert trace["retrieval"]["vector_strategy"] == "agent_index"
    assert len(set(found) & set(_exact_top(table.vectors[GROWING], query, K))) >= K - 2


def test_time_travel_through_the_agent_index_sees_superseded_versions(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    with table.ctx.engine.connect() as connection:
        old_id, old_vector = connection.execute(
            text(
                "SELECT CAST(id AS text), embedding_vec FROM memory_facts WHERE agent_id = :a AND valid_to IS NOT NULL"
            ),
            {"a": BIG},
        ).first() or (None, None)
    assert old_id is not None
    vector = _parse(old_vector)
    now, _ = _retrieve(table.ctx, BIG, vector)
    assert old_id not in now
    result = retrieve(
        replace(table.ctx, embedder=FixedEmbedder(vector)),
        agent_id=BIG,
        query="zzqx",
        as_of=datetime.now(UTC) - timedelta(hours=2),
        config_overrides={"topk_facts": K, "spreading_activation_hops": 0},
    )
    assert result.facts[0].fact_id == old_id


def _counts(ctx: ReadContext, agent_id: str) -> dict[str, tuple[int, datetime | None]]:
    with ctx.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT CAST(f.id AS text) AS id, COALESCE(u.times_retrieved, 0) AS times_retrieved, "
                "u.last_retrieved_at FROM memory_facts f LEFT JOIN memory_fact_usage u ON u.fact_id = f.id "
                "WHERE f.agent_id = :a"
            ),
            {"a": agent_id},
        ).all()
    return {row.id: (row.times_retrieved, row.last_retrieved_at) for row in rows}


def test_counts_are_queued_and_written_in_the_background(table: Table) -> None:
    table.ctx.flush_bookkeeping()  # what earlier tests queued
    before = _counts(table.ctx, SMALL)
    query = _query(3)
    returned: list[str] = []
    for _ in range(3):
        found, trace = _retrieve(table.ctx, SMALL, query)
        assert trace["bookkeeping"] == {"recorded": True}
        returned = found
    assert len(returned) == K
    expected = {fact_id: count + (3 if fact_id in returned else 0) for fact_id, (count, _) in before.items()}
    # No explicit flush: the background thread writes them (every 0.2 s in this test).
    deadline = time.monotonic() + 30
    while (after := _counts(table.ctx, SMALL)) and {k: v[0] for k, v in after.items()} != expected:
        assert time.monotonic() < deadline, "the queued counts were not written"
        time.sleep(0.2)
    recent = datetime.now(UTC) - timedelta(minutes=5)
    for fact_id in returned:
        stamp = after[fact_id][1]
        assert stamp is not None
        assert stamp >= recent
    assert table.ctx.bookkeeper is not None
    assert table.ctx.bookkeeper.pending() == 0


def _index_oid(ctx: ReadContext, name: str) -> int | None:
    with ctx.engine.connect() as connection:
        value = connection.execute(
            text(
                "SELECT c.oid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
                "WHERE c.relname = :n AND i.indisvalid"
            ),
            {"n": name},
        ).scalar()
    return None if value is None else int(value)


def test_the_keyword_signal_reads_the_agents_own_keyword_index(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    assert _index_oid(table.ctx, agent_text_index_name(BIG)) is not None
    with table.ctx.engine.connect() as connection:
        # A current fact of the big agent whose number the other large agents' facts also carry
        # (1000-3500: no other number starts with it, so the prefix search finds that one only).
        wanted_id, wanted_text = connection.execute(
            text(
                "SELECT CAST(id AS text), fact_text FROM memory_facts WHERE agent_id = :a AND valid_to IS NULL "
                "AND CAST(split_part(fact_text, ' ', 2) AS int) BETWEEN 1000 AND 3500 ORDER BY fact_text LIMIT 1"
            ),
            {"a": BIG},
        ).one()
        others = connection.execute(
            text("SELECT count(*) FROM memory_facts WHERE fact_text = :t AND agent_id <> :a"),
            {"t": wanted_text, "a": BIG},
        ).scalar()
    assert others == 2  # the quoted and the growing agent have one too
    with table.ctx.sessions() as session:
        request = SignalRequest(
            agent_id=BIG,
            config=MemoryConfig(embedding_dimensions=DIMENSIONS, min_similarity=0.99),
            now=datetime.now(UTC),
            query_vector=_query(2),
            keywords=[wanted_text.split()[1]],
            agent_index_min_facts=THRESHOLD,
        )
        result = run_signals(session, request)
        assert result.vector_strategy == "agent_index"
        assert [c.fact_id for c in result.candidates if "keyword" in c.sources] == [wanted_id]
        from memory_core.read.signals import _statement

        sql, params = _statement(request, "agent_index")
        sql = sql.replace(AGENT_LITERAL, quoted_literal(BIG))  # as fetch_all writes it in
        session.execute(text("SET LOCAL hnsw.ef_search = 200"))
        plan = "\n".join(str(row[0]) for row in session.execute(text("EXPLAIN " + sql), params).all())
    assert agent_text_index_name(BIG) in plan, plan


def test_an_agent_indexed_before_keyword_indexes_existed_gets_only_the_keyword_one(table: Table) -> None:
    build_agent_index(table.ctx.engine, QUOTED)
    vector_oid = _index_oid(table.ctx, agent_index_name(QUOTED))
    assert vector_oid is not None
    with table.ctx.engine.connect() as connection:
        connection.execute(text(f'DROP INDEX "{agent_text_index_name(QUOTED)}"'))
        connection.commit()
    agent_indexes.clear()
    with table.ctx.sessions() as session:
        # Half-indexed: searched as an agent without indexes, and listed for maintenance.
        assert not agent_indexes.has_index(session, QUOTED)
        assert QUOTED in [agent for agent, _ in agents_needing_index(session, THRESHOLD)]
    outcome = build_agent_index(table.ctx.engine, QUOTED)
    assert (outcome.created, outcome.reason) == (True, "built (keyword)")
    assert _index_oid(table.ctx, agent_index_name(QUOTED)) == vector_oid  # the vector index was kept
    assert _index_oid(table.ctx, agent_text_index_name(QUOTED)) is not None
    with table.ctx.sessions() as session:
        assert agent_indexes.has_index(session, QUOTED)


def _one_connection(ctx: ReadContext) -> ReadContext:
    return replace(ctx, side_reads=SideReads(ctx.engine, 0))


def _signal_view(result: Any) -> dict[str, tuple[tuple[str, ...], float, float]]:
    return {c.fact_id: (tuple(sorted(c.sources)), round(c.semantic, 9), round(c.keyword, 9)) for c in result.candidates}


def test_a_large_agents_semantic_search_runs_beside_the_other_signals_and_finds_the_same(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    with table.ctx.engine.connect() as connection:
        number = connection.execute(
            text(
                "SELECT split_part(fact_text, ' ', 2) FROM memory_facts WHERE agent_id = :a AND valid_to IS NULL "
                "AND CAST(split_part(fact_text, ' ', 2) AS int) BETWEEN 1000 AND 3500 ORDER BY fact_text LIMIT 1"
            ),
            {"a": BIG},
        ).scalar_one()
    side = table.ctx.side_reads
    assert side is not None
    assert side.connections > 0

    def submit(work: Any, *, ef_search: int | None = None, generic_plans: bool = False) -> Any:
        # ``begin`` makes it a read transaction and sets ef_search, as the read pipeline's does.
        return side.submit(work, begin=partial(begin_read, ef_search=ef_search, generic_plans=generic_plans))

    for seed in range(5):
        request = SignalRequest(
            agent_id=BIG,
            config=MemoryConfig(embedding_dimensions=DIMENSIONS, min_similarity=0.0),
            now=datetime.now(UTC),
            query_vector=_query(300 + seed),
            keywords=[number],
            agent_index_min_facts=THRESHOLD,
        )
        with table.ctx.sessions() as session:
            together = run_signals(session, replace(request), side=submit)
        with table.ctx.sessions() as session:
            alone = run_signals(session, replace(request))
        assert (together.statements, alone.statements) == (2, 1)
        assert together.vector_strategy == alone.vector_strategy == "agent_index"
        assert _signal_view(together) == _signal_view(alone)
        # The fact holding the number is a keyword candidate, whichever half found it first.
        assert any("keyword" in sources for sources, _, _ in _signal_view(together).values())

    # Through retrieve(): the same facts, scores and context with and without side connections.
    for seed in range(5):
        query = _query(400 + seed)
        beside = retrieve(replace(table.ctx, embedder=FixedEmbedder(query)), agent_id=BIG, query="zzqx", verbose=True)
        single = retrieve(
            replace(_one_connection(table.ctx), embedder=FixedEmbedder(query)), agent_id=BIG, query="zzqx", verbose=True
        )
        assert beside.trace is not None
        assert single.trace is not None
        assert (beside.trace["retrieval"]["statements"], single.trace["retrieval"]["statements"]) == (2, 1)
        # The walk of the agent's index began with the read, before the query's entities.
        assert beside.trace["retrieval"]["semantic_started_early"] is True
        assert single.trace["retrieval"]["semantic_started_early"] is False
        # Beside the walk, the keyword and graph statement names the agent and keeps a generic
        # plan; alone, the statement holding the walk is planned for its values. Same answer.
        assert (beside.trace["retrieval"]["generic_plans"], single.trace["retrieval"]["generic_plans"]) == (
            True,
            False,
        )
        assert [f.fact_id for f in beside.facts] == [f.fact_id for f in single.facts]
        # Recency is computed from each call's own clock: the scores agree to a few microseconds' decay.
        assert [f.score for f in beside.facts] == pytest.approx([f.score for f in single.facts], abs=1e-4)
        assert beside.context == single.context
        assert "events" in beside.trace["timings_ms"]
        assert not beside.warnings


def _walk_plans(side: SideReads) -> list[tuple[int, int]]:
    """(generic, custom) plan counts of the prepared statements holding an HNSW walk, on ``side``'s one connection."""
    engine = side._engine
    assert engine is not None
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%sem_ann AS%'")
        ).all()
        connection.commit()
    return [(int(generic), int(custom)) for generic, custom in rows]


def test_a_large_agents_walk_is_prepared_once_with_one_generic_plan_and_finds_the_same(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    side = SideReads(table.ctx.engine, 1)
    try:
        beside_ctx = replace(table.ctx, side_reads=side)
        for seed in range(4):
            query = _query(460 + seed)
            beside = retrieve(replace(beside_ctx, embedder=FixedEmbedder(query)), agent_id=BIG, query="zzqx")
            single = retrieve(
                replace(_one_connection(table.ctx), embedder=FixedEmbedder(query)), agent_id=BIG, query="zzqx"
            )
            assert beside.facts
            assert [f.fact_id for f in beside.facts] == [f.fact_id for f in single.facts]
            assert [f.scores["semantic"] for f in beside.facts] == [f.scores["semantic"] for f in single.facts]
        # One statement text for the four questions (the agent and its LIMITs written in, the
        # vector bound), prepared at its first run and never planned for its values.
        assert _walk_plans(side) == [(4, 0)]
        # Time travel keeps its walk planned for its values: nothing more is prepared.
        moment = datetime.now(UTC)
        retrieve(replace(beside_ctx, embedder=FixedEmbedder(_query(470))), agent_id=BIG, query="zzqx", as_of=moment)
        assert _walk_plans(side) == [(4, 0)]
    finally:
        side.close()


def test_a_large_agents_conversations_are_read_beside_spreading_and_are_the_same(table: Table) -> None:
    build_agent_index(table.ctx.engine, BIG)
    random_vector = (
        "(SELECT CAST(array_agg(random() + d.i * 0 + g * 0) AS vector) FROM generate_series(1, :dims) AS d(i))"
    )
    with table.ctx.engine.begin() as connection:
        connection.execute(text("SELECT setseed(0.31)"))
        connection.execute(
            text(
                "INSERT INTO memory_events (agent_id, text, speaker, session_id, occurred_at, embedding_vec) "
                "SELECT :a, 'message ' || g || CASE WHEN g % 3 = 0 THEN '?' ELSE '.' END, "
                "CASE WHEN g % 2 = 0 THEN 'Ana' ELSE 'Bruno' END, 's-' || (g / 20), "
                f"now() - make_interval(mins => 400 - g), {random_vector} FROM generate_series(1, 200) AS g"
            ),
            {"a": BIG, "dims": DIMENSIONS},
        )
        # Facts extracted from messages: their relevance supports the messages they came from.
        connection.execute(
            text(
                "UPDATE memory_facts f SET source_event_id = e.id FROM ("
                "  SELECT id, row_number() OVER (ORDER BY id) AS n FROM memory_events WHERE agent_id = :a) e "
                "WHERE f.id IN (SELECT id FROM memory_facts WHERE agent_id = :a AND valid_to IS NULL "
                "ORDER BY id LIMIT 400) AND e.n = 1 + abs(hashtext(CAST(f.id AS text))) % 200"
            ),
            {"a": BIG},
        )
    try:
        for seed in range(4):
            query = _query(480 + seed)
            overrides = {"min_similarity": 0.0}
            beside = retrieve(
                replace(table.ctx, embedder=FixedEmbedder(query)),
                agent_id=BIG,
                query="zzqx",
                config_overrides=overrides,
                verbose=True,
            )
            single = retrieve(
                replace(_one_connection(table.ctx), embedder=FixedEmbedder(query)),
                agent_id=BIG,
                query="zzqx",
                config_overrides=overrides,
                verbose=True,
            )
            assert beside.trace is not None
            assert single.trace is not None
            assert (beside.trace["events"]["beside_spreading"], single.trace["events"]["beside_spreading"]) == (
                True,
                False,
            )
            assert beside.events
            assert [e.event_id for e in beside.events] == [e.event_id for e in single.events]
            assert [e.reply_to for e in beside.events] == [e.reply_to for e in single.events]
            assert [e.score for e in beside.events] == pytest.approx([e.score for e in single.events], abs=1e-4)
            assert beside.context == single.context
            assert "Relevant conversations" in beside.context
            assert not beside.warnings
    finally:
        with table.ctx.engine.begin() as connection:
            connection.execute(text("UPDATE memory_facts SET source_event_id = NULL WHERE agent_id = :a"), {"a": BIG})
            connection.execute(text("DELETE FROM memory_events WHERE agent_id = :a"), {"a": BIG})


def test_conversations_that_fail_beside_spreading_degrade_to_a_warning(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_agent_index(table.ctx.engine, BIG)
    threads: list[str] = []

    def failing_conversations(*_args: Any, **_kwargs: Any) -> list[Any]:
        threads.append(threading.current_thread().name)
        raise RuntimeError("the conversations statement failed")

    monkeypatch.setattr(pipeline_module, "relevant_conversations", failing_conversations)
    result = retrieve(replace(table.ctx, embedder=FixedEmbedder(_query(510))), agent_id=BIG, query="zzqx", verbose=True)
    assert result.trace is not None
    assert result.trace["events"]["beside_spreading"] is True
    assert threads
    assert threads[0].startswith("arandu-side-read")  # it ran on a side connection's thread
    assert result.facts  # the facts are still returned
    assert result.events == []
    assert "events" in result.trace["degraded"]
    assert any(warning.startswith("events failed (RuntimeError)") for warning in result.warnings)


def test_a_search_narrowed_by_entity_keys_is_not_started_before_its_entities(table: Table) -> None:
    # entity_keys narrow the semantic search to the named entities' facts (an exact scan): it
    # cannot begin before they are resolved.
    with table.ctx.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, fact_count) "
                "VALUES (:a, 'concept:item', 'Item', 'concept', :n)"
            ),
            {"a": BIG, "n": SIZES[BIG]},
        )
    try:
        query = _query(450)
        narrowed = retrieve(
            replace(table.ctx, embedder=FixedEmbedder(query)),
            agent_id=BIG,
            query="zzqx",
            entity_keys=["concept:item"],
            verbose=True,
        )
        assert narrowed.trace is not None
        assert narrowed.trace["retrieval"]["semantic_started_early"] is False
        assert not narrowed.warnings
        assert narrowed.facts
        assert {fact.entity_key for fact in narrowed.facts} == {"concept:item"}
    finally:
        with table.ctx.engine.begin() as connection:
            connection.execute(text("DELETE FROM memory_entities WHERE agent_id = :a"), {"a": BIG})


def _side_connections(ctx: ReadContext) -> int:
    with ctx.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE application_name = 'arandu-side-read' AND datname = current_database()"
                )
            ).scalar_one()
        )


def test_side_reads_never_wait_for_a_connection_and_report_their_errors(table: Table) -> None:
    others = _side_connections(table.ctx)  # the shared context's own side pool, from earlier tests
    side = SideReads(table.ctx.engine, 2, max_busy=1)
    release = threading.Event()

    def hold(session: Any) -> int:
        value = int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
        release.wait(30)
        return value

    try:
        # A process serving more reads than max_busy has no idle core to split one over.
        with side.serving(), side.serving():
            assert side.submit(hold, begin=lambda session: None) is None
        with side.serving():
            first = side.submit(hold, begin=lambda session: None)
        second = side.submit(hold, begin=lambda session: None)
        assert first is not None
        assert second is not None
        # Both connections busy: a third read is refused at once, for the caller to run in line.
        started = time.monotonic()
        assert side.submit(hold, begin=lambda session: None) is None
        assert time.monotonic() - started < 0.5
        deadline = time.monotonic() + 10
        while _side_connections(table.ctx) < others + 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # A retrieve that finds every side connection busy runs in line, with the same answer.
        query = _query(500)
        busy = retrieve(
            replace(table.ctx, embedder=FixedEmbedder(query), side_reads=side), agent_id=BIG, query="zzqx", verbose=True
        )
        single = retrieve(
            replace(_one_connection(table.ctx), embedder=FixedEmbedder(query)), agent_id=BIG, query="zzqx"
        )
        assert busy.trace is not None
        assert busy.trace["retrieval"]["statements"] == 1
        assert [f.fact_id for f in busy.facts] == [f.fact_id for f in single.facts]
        release.set()
        assert first.result(10) != second.result(10)  # two connections, two backends
        assert _side_connections(table.ctx) == others + 2
        # A failing read hands its error to the caller and gives its connection back.
        failing = side.submit(lambda session: session.execute(text("SELECT 1 / 0")).all(), begin=lambda session: None)
        assert failing is not None
        with pytest.raises(DBAPIError, match="division by zero"):
            failing.result(10)
        again = [side.submit(lambda session: 1, begin=lambda session: None) for _ in range(2)]
        assert all(future is not None for future in again)
        assert [future.result(10) for future in again if future is not None] == [1, 1]
    finally:
        release.set()
        side.close()


def test_one_index_build_at_a_time_and_maintenance_waits_its_turn(table: Table) -> None:
    # Two CREATE INDEX CONCURRENTLY on one table wait for each other; PostgreSQL fails one of
    # them as a deadlock. So builds take turns: a search's build gives up, maintenance waits.
    drop_agent_index(table.ctx.engine, GROWING)
    holder = table.ctx.engine.execution_options(isolation_level="AUTOCOMMIT").connect()
    try:
        holder.execute(text("SELECT pg_advisory_lock(:ns, 0)"), {"ns": agent_index_module._BUILD_SLOT_NAMESPACE})
        refused = build_agent_index(table.ctx.engine, GROWING)
        assert (refused.created, refused.reason) == (False, BUSY_REASON)
        assert not _index_exists(table.ctx, GROWING)

        built: list[BuildOutcome] = []
        waiting = threading.Thread(
            target=lambda: built.append(build_agent_index(table.ctx.engine, GROWING, wait_for_slot=True))
        )
        waiting.start()
        time.sleep(0.5)
        assert built == []  # still waiting for the slot
        holder.execute(text("SELECT pg_advisory_unlock(:ns, 0)"), {"ns": agent_index_module._BUILD_SLOT_NAMESPACE})
        waiting.join(timeout=120)
        assert [outcome.created for outcome in built] == [True]
        assert _index_exists(table.ctx, GROWING)
    finally:
        holder.close()


def test_a_build_waiting_for_its_turn_never_deadlocks_the_concurrent_build_that_holds_it(table: Table) -> None:
    # CREATE INDEX CONCURRENTLY waits for every older snapshot; a build blocked in
    # pg_advisory_lock on the slot kept one, so the two waited for each other until PostgreSQL
    # failed one of them as a deadlock. The waiting build must hold no snapshot while it waits.
    drop_agent_index(table.ctx.engine, GROWING)
    holder = table.ctx.engine.execution_options(isolation_level="AUTOCOMMIT").connect()
    try:
        holder.execute(text("CREATE TABLE IF NOT EXISTS slot_holders_build (x int)"))
        holder.execute(text("SELECT pg_advisory_lock(:ns, 0)"), {"ns": agent_index_module._BUILD_SLOT_NAMESPACE})
        built: list[BuildOutcome] = []
        failures: list[BaseException] = []

        def wait_and_build() -> None:
            try:
                built.append(build_agent_index(table.ctx.engine, GROWING, wait_for_slot=True))
            except BaseException as error:
                failures.append(error)

        waiting = threading.Thread(target=wait_and_build)
        waiting.start()
        time.sleep(0.5)
        # The slot holder's own concurrent build, while the other waits for its turn (PostgreSQL
        # looks for deadlocks after deadlock_timeout, 1 s).
        holder.execute(text("CREATE INDEX CONCURRENTLY slot_holders_build_x ON slot_holders_build (x)"))
        time.sleep(1.5)
        holder.execute(text("SELECT pg_advisory_unlock(:ns, 0)"), {"ns": agent_index_module._BUILD_SLOT_NAMESPACE})
        waiting.join(timeout=120)
        assert failures == []
        assert [outcome.created for outcome in built] == [True]
        assert _index_exists(table.ctx, GROWING)
    finally:
        holder.execute(text("DROP TABLE IF EXISTS slot_holders_build"))
        holder.close()


def test_a_large_agents_keyword_counts_use_its_own_index_under_a_generic_plan(table: Table) -> None:
    # The counts run after the keyword and graph statement, which leaves the read transaction on
    # generic plans: a plan made without the values must still reach the agent's keyword index.
    from memory_core.read.entities import fact_validity_sql
    from memory_core.read.keywords import _INDEX_DF_SQL

    build_agent_index(table.ctx.engine, BIG)
    statement = _INDEX_DF_SQL.format(validity=fact_validity_sql("f", None)).replace(AGENT_LITERAL, quoted_literal(BIG))
    prepared = statement.replace(":term_queries", "$1").replace(":cap", "$2")
    assert ":" not in prepared.replace("::", ""), prepared
    with table.ctx.engine.connect() as connection:
        connection.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        connection.exec_driver_sql(f"PREPARE counts(text[], int) AS {prepared}")
        plan = "\n".join(
            str(row[0]) for row in connection.exec_driver_sql("EXPLAIN EXECUTE counts(ARRAY['zzqx:*'], 1000)").all()
        )
        connection.exec_driver_sql("DEALLOCATE counts")
        connection.rollback()
    assert agent_text_index_name(BIG) in plan, plan
