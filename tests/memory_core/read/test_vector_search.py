"""Vector search stays correct when an agent owns a small slice of a large table (pgvector 0.6, no iterative scans).

A database of its own, with 16-dimensional embeddings so 30,000 rows and their HNSW index build
in seconds: 24,000 facts for one big agent, 6,000 for six others, 50 for the agent under test.
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
from memory_core.read.context import ReadContext, build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.read.signals import SignalRequest, choose_vector_strategy, run_signals
from memory_core.settings import load_settings
from tests.support.services import TestServices

DIMENSIONS = 16
SMALL, BIG = "slice-agent", "big-agent"
K = 20
VALID_FROM = datetime.now(UTC) - timedelta(days=1)


class FixedEmbedder:
    """Every text embeds to the vector the test chose."""

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vector for _ in texts]

    def embed_one(self, text: str) -> list[float] | None:
        return self.vector


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
    )
    upgrade(settings)
    ctx = build_read_context(settings, embedder=FixedEmbedder([1.0] * DIMENSIONS), llm=None, pool_size=2)
    # g * 0 correlates the subquery with each row, so every fact gets its own random vector.
    random_vector = (
        "(SELECT CAST(array_agg(random() + d.i * 0 + g * 0) AS vector) FROM generate_series(1, :dims) AS d(i))"
    )
    with ctx.engine.begin() as connection:
        # Bulk load without the index, then build it: much faster than 30,000 index insertions.
        connection.execute(text("DROP INDEX ix_memory_facts_embedding_hnsw"))
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
        # Lighter build parameters than the migration's (m 16, ef_construction 64) keep the setup at a
        # couple of seconds; 16 dimensions need no more for high recall.
        connection.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
        connection.execute(
            text(
                "CREATE INDEX ix_memory_facts_embedding_hnsw ON memory_facts "
                "USING hnsw (embedding_vec vector_cosine_ops) WITH (m = 8, ef_construction = 32)"
            )
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


def test_a_naive_filtered_hnsw_scan_would_miss_the_slice(sliced: Slice) -> None:
    # Why the strategy exists: forced onto the HNSW index, a WHERE agent_id scan finds almost nothing.
    query = _query(0)
    literal = "[" + ",".join(str(x) for x in query) + "]"
    with sliced.ctx.engine.begin() as connection:
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            connection.execute(text(f"SET LOCAL {setting} = off"))
        plan = "\n".join(
            row[0]
            for row in connection.execute(
                text(
                    "EXPLAIN SELECT id FROM memory_facts WHERE agent_id = :agent "
                    "ORDER BY embedding_vec <=> CAST(:vec AS vector) LIMIT :k"
                ),
                {"agent": SMALL, "vec": literal, "k": K},
            )
        )
        assert "ix_memory_facts_embedding_hnsw" in plan
        rows = connection.execute(
            text(
                "SELECT id FROM memory_facts WHERE agent_id = :agent "
                "ORDER BY embedding_vec <=> CAST(:vec AS vector) LIMIT :k"
            ),
            {"agent": SMALL, "vec": literal, "k": K},
        ).all()
    assert len(rows) < K


def test_strategy_rule() -> None:
    assert choose_vector_strategy(50, 30_050, 50) == "exact"
    assert choose_vector_strategy(19_999, 10_000_000, 50) == "exact"
    assert choose_vector_strategy(24_000, 30_050, 50) == "hnsw"
    # Large in absolute terms but a sliver of the table: the index could not find enough rows.
    assert choose_vector_strategy(25_000, 50_000_000, 50) == "exact"
    assert choose_vector_strategy(24_000, 30_050, 50, narrowed=True) == "exact"


def _signals(
    ctx: ReadContext, agent_id: str, query: list[float], agent_facts: int, *, force_index: bool = False
) -> signals.SignalResult:
    with ctx.sessions() as session:
        if force_index:
            # Make the planner take the HNSW path even for a 50-row agent, as it would for a larger one.
            for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
                session.execute(text(f"SET LOCAL {setting} = off"))
        return run_signals(
            session,
            SignalRequest(
                agent_id=agent_id,
                config=MemoryConfig(embedding_dimensions=DIMENSIONS, min_similarity=0.0),
                now=datetime.now(UTC),
                query_vector=query,
                agent_facts=agent_facts,
                table_rows=30_050,
            ),
        )


def test_short_hnsw_answers_fall_back_to_exact(sliced: Slice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signals, "EXACT_SCAN_MAX_FACTS", 10)
    monkeypatch.setattr(signals, "HNSW_MIN_EXPECTED_HITS", 0.0)
    query = _query(7)
    result = _signals(sliced.ctx, SMALL, query, agent_facts=50, force_index=True)
    assert result.vector_strategy == "hnsw->exact"
    semantic = {c.fact_id for c in result.candidates if "semantic" in c.sources}
    assert semantic == set(sliced.vectors[SMALL])  # all 50: the wanted count is 50
    assert _retrieve_ids(sliced.ctx, SMALL, query) == _exact_top(sliced.vectors[SMALL], query, K)


def test_big_agent_uses_hnsw_with_high_recall(sliced: Slice) -> None:
    recalls = []
    for seed in range(3):
        query = _query(100 + seed)
        result = _signals(sliced.ctx, BIG, query, agent_facts=20_001)
        assert result.vector_strategy == "hnsw"
        found = _retrieve_ids(sliced.ctx, BIG, query)
        exact = _exact_top(sliced.vectors[BIG], query, K)
        recalls.append(len(set(found) & set(exact)) / K)
    assert min(recalls) >= 0.9, recalls
