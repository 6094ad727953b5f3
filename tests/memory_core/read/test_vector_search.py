"""Vector search stays correct when an agent owns a small slice of a large table (pgvector 0.6, no iterative scans).

A database of its own, with 16-dimensional embeddings: 24,000 facts for one big agent, 6,000 for
six others, 50 for the agent under test. No agent gets an index of its own here (the threshold is
0, "never"), so every search is exact; memory_core/read/test_agent_index.py covers the
agents' own indexes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from memory_core.config import MemoryConfig
from memory_core.db.migrate import upgrade
from memory_core.read import signals
from memory_core.read.agent_index import agent_indexes, build_agent_index, drop_agent_index
from memory_core.read.context import ReadContext, build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.read.signals import SignalRequest, run_signals
from memory_core.settings import load_settings
from tests.support.fixed_embedder import FixedEmbedder
from tests.support.services import TestServices

DIMENSIONS = 16
SMALL, BIG = "slice-agent", "big-agent"
K = 20
VALID_FROM = datetime.now(UTC) - timedelta(days=1)


@dataclass
class Slice:
    ctx: ReadContext
    vectors: dict[str, dict[str, list[float]]]


def _parse(value: Any) -> list[float]:
    return [float(x) for x in str(value).strip("[]").split(",")]


@pytest.fixture(scope="module")
def sliced(services: TestServices, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slice]:
    url = services.new_database("arandu_slice")
    settings = load_settings(
        database_url=url,
        broker_url=services.broker_url,
        home=Path(tmp_path_factory.mktemp("slice")),
        embedding_dimensions=DIMENSIONS,
        llm_provider="offline",
        retrieval_agent_index_min_facts=0,
    )
    upgrade(settings)
    ctx = build_read_context(settings, embedder=FixedEmbedder([1.0] * DIMENSIONS), llm=None, pool_size=2)
    # g * 0 correlates the subquery with each row, so every fact gets its own random vector.
    random_vector = (
        "(SELECT CAST(array_agg(random() + d.i * 0 + g * 0) AS vector) FROM generate_series(1, :dims) AS d(i))"
    )
    with ctx.engine.begin() as connection:
        connection.execute(text("SELECT setseed(0.42)"))
        connection.execute(
            text(
                "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, confidence, valid_from, "
                "embedding_vec) "
                "SELECT CASE WHEN g <= 24000 THEN :big WHEN g <= 30000 THEN 'other-' || (g % 6) ELSE :small END, "
                f"'concept', 'concept:item', 'item ' || g, 0.9, :valid_from, {random_vector} "
                "FROM generate_series(1, 30050) AS g"
            ),
            {"big": BIG, "small": SMALL, "dims": DIMENSIONS, "valid_from": VALID_FROM},
        )
        connection.execute(text("ANALYZE memory_facts"))
        vectors: dict[str, dict[str, list[float]]] = {SMALL: {}, BIG: {}}
        for row in connection.execute(
            text("SELECT id, agent_id, embedding_vec FROM memory_facts WHERE agent_id IN (:small, :big)"),
            {"small": SMALL, "big": BIG},
        ):
            vectors[row.agent_id][str(row.id)] = _parse(row.embedding_vec)
    try:
        yield Slice(ctx, vectors)
    finally:
        ctx.close()


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _exact_top(vectors: dict[str, list[float]], query: list[float], k: int) -> list[str]:
    return sorted(vectors, key=lambda fact_id: -_cosine(vectors[fact_id], query))[:k]


def _query(seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.random() for _ in range(DIMENSIONS)]


def _retrieve_ids(ctx: ReadContext, agent_id: str, query: list[float]) -> list[str]:
    result = retrieve(
        replace(ctx, embedder=FixedEmbedder(query)),
        agent_id=agent_id,
        query="zzqx",
        config_overrides={"topk_facts": K, "spreading_activation_hops": 0},
    )
    return [fact.fact_id for fact in result.facts]


def test_small_slice_gets_its_exact_top_k(sliced: Slice) -> None:
    for seed in range(3):
        query = _query(seed)
        assert _retrieve_ids(sliced.ctx, SMALL, query) == _exact_top(sliced.vectors[SMALL], query, K)


def test_no_vector_index_spans_agents(sliced: Slice) -> None:
    # A table-wide HNSW index yields its ef_search nearest tuples of all agents and filters by agent
    # afterwards: a 50-fact slice of a 30,000-row table would get almost none of its own. Migration
    # 0010 dropped it; the vector indexes that exist are partial, one agent's rows each.
    with sliced.ctx.engine.connect() as connection:
        indexes = connection.execute(
            text(
                "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) AS predicate FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
                "WHERE i.indrelid = 'memory_facts'::regclass AND am.amname = 'hnsw'"
            )
        ).all()
    assert all(row.predicate is not None and row.predicate.startswith("(agent_id = ") for row in indexes), indexes


def _signals(
    ctx: ReadContext, agent_id: str, query: list[float], agent_facts: int, *, index_threshold: int = 0
) -> signals.SignalResult:
    with ctx.sessions() as session:
        return run_signals(
            session,
            SignalRequest(
                agent_id=agent_id,
                config=MemoryConfig(embedding_dimensions=DIMENSIONS, min_similarity=0.0, signal_max_facts=60),
                now=datetime.now(UTC),
                query_vector=query,
                agent_facts=agent_facts,
                table_rows=30_050,
                agent_index_min_facts=index_threshold,
            ),
        )


def test_a_large_agent_without_an_index_of_its_own_is_searched_exactly(sliced: Slice) -> None:
    for seed in range(3):
        query = _query(100 + seed)
        result = _signals(sliced.ctx, BIG, query, agent_facts=24_000)
        assert result.vector_strategy == "exact"
        assert _retrieve_ids(sliced.ctx, BIG, query) == _exact_top(sliced.vectors[BIG], query, K)


def test_short_index_answers_fall_back_to_exact(sliced: Slice) -> None:
    # An index of its own for the 50-fact agent: its scan can never yield the 60 rows wanted, the
    # symptom a post-filtered scan shows; the guard redoes the search exactly.
    build_agent_index(sliced.ctx.engine, SMALL)
    agent_indexes.clear()
    try:
        query = _query(7)
        result = _signals(sliced.ctx, SMALL, query, agent_facts=50, index_threshold=1)
        assert result.vector_strategy == "agent_index->exact"
        semantic = {c.fact_id for c in result.candidates if "semantic" in c.sources}
        assert semantic == set(sliced.vectors[SMALL])
    finally:
        drop_agent_index(sliced.ctx.engine, SMALL)
        agent_indexes.clear()
    assert _retrieve_ids(sliced.ctx, SMALL, query) == _exact_top(sliced.vectors[SMALL], query, K)
