"""Agent ids that look like SQL placeholders (``x-:agent``, ``user-:sem_limit``, ``50%``, ``$1``...).

The large-agent search paths write the agent id into their statements as a literal (a partial
index of the agent's own is usable only then). Those statements also carry ``:name`` and ``%``
placeholders; a literal that is scanned for them again gets rewritten, fails, or (for
``user-:sem_limit``) names another agent. Each id here has a small agent (searched exactly) and
a large one (its own indexes, keyword counts through them), next to decoy agents whose ids are
what a wrong substitution would produce; every agent must see exactly its own facts and count
exactly its own keyword matches.

A database of its own with 16-dimensional embeddings; large agents have just over
:data:`memory_core.read.keywords.SCAN_MAX_FACTS` facts so that their keywords are counted
through their own index, and the index threshold is lowered to 1,000 facts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from memory_core.db.migrate import upgrade
from memory_core.read.agent_index import agent_index_name, agent_indexes, agent_text_index_name, build_agent_index
from memory_core.read.context import ReadContext, build_read_context
from memory_core.read.keywords import SCAN_MAX_FACTS, document_frequencies, document_frequency_cache
from memory_core.read.pipeline import retrieve
from memory_core.settings import load_settings
from tests.support.fixed_embedder import FixedEmbedder
from tests.support.services import TestServices

DIMENSIONS = 16
THRESHOLD = 1_000
LARGE = SCAN_MAX_FACTS + 100
SMALL = 60
K = 20
# Every shape of id the issue names: colons (natural: acme:alice), casts, parameter look-alikes,
# LIKE and psycopg wildcards, a PostgreSQL positional parameter.
IDS = ("acme:alice", "x::y", "x-:agent", "x.:cap", "user-:sem_limit", "user-:ann_limit", "50%", "a_b", "$1")
# The keyword: in every 50th fact of every agent (rare in the table, so a large agent counts it
# through its own keyword index rather than estimating it).
WORD = "zebra"
VALID_FROM = datetime.now(UTC) - timedelta(days=1)


@dataclass
class World:
    ctx: ReadContext
    sizes: dict[str, int]
    owners: dict[str, str]  # fact id -> agent


def _large(agent: str) -> str:
    return agent


def _small(agent: str) -> str:
    return f"{agent}/small"


@pytest.fixture(scope="module")
def world(services: TestServices, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    url = services.new_database("arandu_agent_ids")
    settings = load_settings(
        database_url=url,
        broker_url=services.broker_url,
        home=Path(tmp_path_factory.mktemp("agent-ids")),
        embedding_dimensions=DIMENSIONS,
        llm_provider="offline",
        retrieval_agent_index_min_facts=THRESHOLD,
        retrieval_bookkeeping_flush_s=0.2,
    )
    upgrade(settings)
    ctx = build_read_context(settings, embedder=FixedEmbedder([1.0] * DIMENSIONS), llm=None, pool_size=4)
    config = ctx.base_config
    sem_limit = max(config.signal_max_facts, config.reranker_candidate_multiplier * K)
    sizes = {_large(agent): LARGE for agent in IDS} | {_small(agent): SMALL for agent in IDS}
    # Decoys: what `user-:sem_limit` and `user-:ann_limit` become when their literal is rewritten
    # (the walk's LIMITs, written into a generic plan), and what `$1` is bound to in the count.
    for limit in (sem_limit, sem_limit * 2, 2_000):
        sizes[f"user-{limit}"] = SMALL
    sizes["x-"] = SMALL
    random_vector = (
        "(SELECT CAST(array_agg(random() + d.i * 0 + g * 0) AS vector) FROM generate_series(1, :dims) AS d(i))"
    )
    with ctx.engine.begin() as connection:
        connection.execute(text("SELECT setseed(0.29)"))
        for agent, size in sizes.items():
            connection.execute(
                text(
                    "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, confidence, valid_from, "
                    "embedding_vec) SELECT :agent, 'concept', 'concept:item', "
                    f"'item ' || g || CASE WHEN g % 50 = 0 THEN ' {WORD}' ELSE '' END, 0.9, :valid_from, "
                    f"{random_vector} FROM generate_series(1, :n) AS g"
                ),
                {"agent": agent, "n": size, "dims": DIMENSIONS, "valid_from": VALID_FROM},
            )
        connection.execute(text("ANALYZE memory_facts"))
        owners = {
            str(row.id): str(row.agent_id) for row in connection.execute(text("SELECT id, agent_id FROM memory_facts"))
        }
    agent_indexes.clear()
    document_frequency_cache.clear()
    try:
        yield World(ctx, sizes, owners)
    finally:
        agent_indexes.clear()
        document_frequency_cache.clear()
        ctx.close()


def _retrieve(world: World, agent_id: str, seed: int) -> tuple[list[str], str]:
    rng = random.Random(seed)
    vector = [rng.random() for _ in range(DIMENSIONS)]
    result = retrieve(
        replace(world.ctx, embedder=FixedEmbedder(vector)),
        agent_id=agent_id,
        query=f"{WORD} item",
        config_overrides={"topk_facts": K, "spreading_activation_hops": 0},
        verbose=True,
    )
    assert result.trace is not None
    return [fact.fact_id for fact in result.facts], str(result.trace["retrieval"]["vector_strategy"])


def _index_predicate(ctx: ReadContext, name: str) -> str | None:
    with ctx.engine.connect() as connection:
        value = connection.execute(
            text(
                "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_class c JOIN pg_index i "
                "ON i.indexrelid = c.oid WHERE c.relname = :n AND i.indisvalid"
            ),
            {"n": name},
        ).scalar()
    return None if value is None else str(value)


@pytest.mark.parametrize("agent", IDS)
def test_a_small_agent_with_a_placeholder_like_id_sees_exactly_its_own_facts(world: World, agent: str) -> None:
    found, strategy = _retrieve(world, _small(agent), seed=3)
    assert strategy == "exact"
    assert len(found) == K
    assert {world.owners[fact_id] for fact_id in found} == {_small(agent)}


@pytest.mark.parametrize("agent", IDS)
def test_a_large_agent_with_a_placeholder_like_id_gets_its_indexes_and_sees_exactly_its_own_facts(
    world: World, agent: str
) -> None:
    # Searched exactly until its indexes exist (a 500 here was `x-:agent` on a large agent).
    found, strategy = _retrieve(world, _large(agent), seed=5)
    assert strategy == "exact"
    assert {world.owners[fact_id] for fact_id in found} == {_large(agent)}

    # That search started a build of the agent's indexes in the background: it must succeed.
    deadline = time.monotonic() + 120
    while agent_indexes.building(world.ctx.engine, _large(agent)):
        assert time.monotonic() < deadline, "the background build did not finish"
        time.sleep(0.1)
    outcome = build_agent_index(world.ctx.engine, _large(agent), wait_for_slot=True)
    assert outcome.reason == "exists", outcome
    # Each index covers this agent's rows, named as it is (not rewritten into another id).
    literal = "'" + agent.replace("'", "''") + "'"
    for name in (agent_index_name(_large(agent)), agent_text_index_name(_large(agent))):
        assert _index_predicate(world.ctx, name) == f"(agent_id = {literal}::text)"
    agent_indexes.forget(world.ctx.engine, _large(agent))

    # Through its own indexes, every path that writes the agent in as a literal: the walk on a
    # side connection with one generic plan (several runs), the keyword statement, the counts.
    for seed in range(7):
        found, strategy = _retrieve(world, _large(agent), seed=10 + seed)
        assert strategy == "agent_index"
        assert len(found) == K
        assert {world.owners[fact_id] for fact_id in found} == {_large(agent)}


@pytest.mark.parametrize("agent", IDS)
def test_keyword_counts_of_an_agent_with_a_placeholder_like_id_are_its_own(world: World, agent: str) -> None:
    outcome = build_agent_index(world.ctx.engine, _large(agent), wait_for_slot=True)
    assert outcome.created or outcome.reason == "exists", outcome
    document_frequency_cache.clear()
    for name, size in ((_large(agent), LARGE), (_small(agent), SMALL)):
        with world.ctx.sessions() as session:
            total, counts = document_frequencies(session, name, [f"{WORD}:*"], size)
        # Large: counted through the agent's own keyword index; small: by a pass over its facts.
        assert (total, counts) == (size, [size // 50]), name
