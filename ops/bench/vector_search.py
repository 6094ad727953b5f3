"""Vector search design A/B: per-agent partial HNSW indexes against one table-wide index with iterative scans.

``python -m ops.bench vector-search --reuse-home PATH`` (or ``./ops/bench/vector-search``) runs on
the 1M-fact dataset a ``./ops/bench/retrieve --keep-home`` run left (1,000 agents; tested agents
of 1k, 5k, 10k and 100k facts), on the real stack started on that home; with ``--quick``, on the
100k-fact home of ``./ops/bench/retrieve --quick --keep-home`` (100 agents; tested agents of 100,
500, 1k and 10k facts: only the last has an index of its own). Two designs, one run:

* **per-agent** (the service today): agents with at least ``retrieval_agent_index_min_facts``
  facts have a partial HNSW index of their own (``m`` 16, ``ef_construction`` 200, searched at
  ``ef_search`` 300); smaller ones are searched exactly through the ``(agent_id, ...)`` b-tree.
* **table-wide + iterative scans** (pgvector 0.8): one HNSW index over every fact (same build
  parameters), searched with ``SET hnsw.iterative_scan`` (``relaxed_order``, ``strict_order``)
  and the ``agent_id`` filter, so the walk goes on until enough of the agent's rows are found.

Measured for each: recall@10 of the semantic search against an exact scan (ties count as hits),
the semantic statement's p50/p95 and CPU per query (its PostgreSQL backend and the client),
whole ``retrieve()`` p50/p95 in process for the indexed agents (the service's own read path,
told the agent is indexed, with only the table-wide index
left and the setting made the database's default), the database CPU of writing one fact (an
``INSERT`` of a copy of one of the agent's facts, rolled back; small and large agent), the build
time and the size on disk. The dataset is left as it was found (per-agent indexes rebuilt, the
table-wide index dropped). Figures are printed and appended to ops/bench/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ops.bench.common import (
    BENCHMARK_ROLE,
    BenchStack,
    MemorySampler,
    SessionCpu,
    append_results,
    machine_info,
    markdown_table,
    mib,
    percentile,
    secs,
    shielded,
    text_table,
)
from ops.bench.retrieve import (
    RECALL_K,
    SEED,
    Scale,
    TestedAgent,
    build_agent_indexes,
    make_queries,
    recall_at_k,
    reuse_dataset,
)

TABLE_INDEX = "ix_memory_facts_embedding_hnsw_bench"
# The service's default threshold for an agent's own indexes (memory_core.settings).
DEFAULT_AGENT_INDEX_MIN_FACTS = 10_000
QUESTIONS = 100
WARMUP = 20
INSERTS = 150
# pgvector's default build parameters. The per-agent indexes use ef_construction 200
# (memory_core.read.agent_index); a table-wide graph built that way took over an hour on this
# 2-core host (about 12,000 facts a minute): the cheaper build is the table-wide design's best case.
BUILD_M = 16
BUILD_EF_CONSTRUCTION = 64
ITERATIVE_MODES = ("relaxed_order", "strict_order")
# pgvector 0.8's defaults: 40 and 20,000. The service asks for 120 rows (sem_limit 60, overfetched
# twice), so ef_search is raised as the service does (300), and the scan may visit more tuples
# when an agent owns a small share of the table.
ITERATIVE_EF_SEARCH = (300,)
MAX_SCAN_TUPLES = (20_000, 100_000)

_SEMANTIC_SQL = """
SELECT f.embedding_vec <=> CAST(%(vec)s AS vector) AS distance
FROM memory_facts f
WHERE f.agent_id = {agent} AND f.valid_to IS NULL AND f.confidence >= %(min_confidence)s
  AND f.embedding_vec IS NOT NULL
ORDER BY (f.embedding_vec <=> CAST(%(vec)s AS vector)){exact}
LIMIT %(limit)s
"""

# Every stored column but the id and the generated ones (search_vector): a copy of one of the
# agent's facts, as the upsert stage would write a new one (every index of the table maintained).
_COPY_COLUMNS_SQL = """
SELECT column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'memory_facts' AND column_name <> 'id'
  AND is_generated = 'NEVER'
ORDER BY ordinal_position
"""


@dataclass
class Measured:
    """One design's figures for one agent."""

    design: str
    agent: str
    recall: list[float] = field(default_factory=list)
    statement_ms: list[float] = field(default_factory=list)
    retrieve_ms: list[float] = field(default_factory=list)
    # CPU per semantic statement: its PostgreSQL backend's and this thread's (the client).
    statement_cpu_ms: tuple[float, float] = (math.nan, math.nan)
    # CPU of PostgreSQL and this process (where retrieve() runs) per whole retrieve().
    retrieve_cpu_ms: float = math.nan
    plan: str = ""

    def row(self) -> list[str]:
        recall = f"{sum(self.recall) / len(self.recall):.3f}" if self.recall else "-"
        statement = (
            f"{percentile(self.statement_ms, 50):.1f} / {percentile(self.statement_ms, 95):.1f}"
            if self.statement_ms
            else "-"
        )
        retrieve = (
            f"{percentile(self.retrieve_ms, 50):.1f} / {percentile(self.retrieve_ms, 95):.1f}"
            if self.retrieve_ms
            else "-"
        )
        server, client = self.statement_cpu_ms
        statement_cpu = "-" if math.isnan(server) else f"{server + client:.2f} (postgres {server:.2f})"
        cpu = "-" if math.isnan(self.retrieve_cpu_ms) else f"{self.retrieve_cpu_ms:.1f}"
        return [self.agent, self.design, recall, statement, statement_cpu, retrieve, cpu, self.plan]


def _literal(agent_id: str) -> str:
    return sql.Literal(agent_id).as_string(None)


def _vector(values: Sequence[float]) -> str:
    return "[" + ",".join(f"{value:.7g}" for value in values) + "]"


def _plan_name(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> str:
    lines = [str(row[0]) for row in conn.execute("EXPLAIN " + statement, params).fetchall()]
    for line in lines:
        if "Index Scan using" in line:
            return line.strip().split("Index Scan using ")[1].split(" on ")[0]
    return "exact scan" if any("Sort" in line for line in lines) else lines[0].strip()


def measure_statement(
    database_url: str,
    agent: TestedAgent,
    vectors: Sequence[list[float]],
    design: str,
    *,
    setup: Sequence[str],
    exact: bool,
    limit: int,
    min_confidence: float,
    min_similarity: float,
) -> Measured:
    """The semantic statement alone for every question: time and recall@10 against an exact scan."""
    measured = Measured(design=design, agent=f"{agent.size:,}")
    statement = _SEMANTIC_SQL.format(agent=_literal(agent.agent_id), exact=" + 0" if exact else "")
    exact_statement = _SEMANTIC_SQL.format(agent=_literal(agent.agent_id), exact=" + 0")
    with psycopg.connect(database_url, autocommit=True) as conn:
        for line in setup:
            conn.execute(line)
        first = {"vec": _vector(vectors[0]), "min_confidence": min_confidence, "limit": limit}
        measured.plan = _plan_name(conn, statement, first)
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        cpu = SessionCpu(int(backend[0]) if backend else 0)
        warmup = min(WARMUP, len(vectors) // 5)
        answers: list[list[float]] = []
        # The design's statement for every question first (timed, its CPU counted after the
        # warm-up), then the exact reference: the reference's scans stay out of the timed pass.
        for index, vector in enumerate(vectors):
            params = {"vec": _vector(vector), "min_confidence": min_confidence, "limit": limit}
            with cpu.counting() if index >= warmup else contextlib.nullcontext():
                started = time.perf_counter()
                rows = conn.execute(statement, params).fetchall()
                # relaxed_order may return rows slightly out of order: the service re-sorts what the
                # walk returned (its sem CTE), and so does this.
                found = sorted((1.0 - float(row[0]) for row in rows), reverse=True)
                elapsed = (time.perf_counter() - started) * 1000.0
            if index >= warmup:
                measured.statement_ms.append(elapsed)
            answers.append(found)
        measured.statement_cpu_ms = cpu.ms_per(len(vectors) - warmup)
        for vector, found in zip(vectors, answers, strict=True):
            params = {"vec": _vector(vector), "min_confidence": min_confidence, "limit": RECALL_K}
            truth = [1.0 - float(row[0]) for row in conn.execute(exact_statement, params).fetchall()]
            value = recall_at_k(found[:RECALL_K], truth, RECALL_K, min_similarity)
            if value is not None:
                measured.recall.append(value)
    return measured


def measure_retrieve(
    stack: BenchStack,
    sampler: MemorySampler,
    *,
    ctx: Any,
    agent: TestedAgent,
    queries: Sequence[str],
    measured: Measured,
) -> None:
    """Whole ``retrieve()`` in this process (ms per question after a warm-up, CPU per question) into ``measured``."""
    from memory_core.read import retrieve

    times: list[float] = []
    cpu, sampling = stack.cpu_snapshot(), sampler.own_cpu_s
    for index, query in enumerate(queries):
        started = time.perf_counter()
        retrieve(ctx, agent_id=agent.agent_id, query=query)
        if index >= WARMUP:
            times.append((time.perf_counter() - started) * 1000.0)
    spent = stack.cpu_snapshot().since(cpu)
    # The service's read path runs here: its CPU is this process's (less the memory sampler's
    # thread) and PostgreSQL's.
    used = spent.get("postgres", 0.0) + spent.get(BENCHMARK_ROLE, 0.0) - (sampler.own_cpu_s - sampling)
    measured.retrieve_ms = times
    measured.retrieve_cpu_ms = used / len(queries) * 1000.0 if queries else math.nan


def insert_cost_ms(database_url: str, agent_id: str, count: int = INSERTS) -> tuple[float, float]:
    """(mean, p95) ms of writing one fact of ``agent_id`` (a copy of one of its facts), each rolled back.

    The server's time for the statement (index insertions included), from the client's clock on a
    local socket; ``synchronous_commit`` off as the pipeline's stages run.
    """
    times: list[float] = []
    with psycopg.connect(database_url) as conn:
        conn.execute("SET synchronous_commit = off")
        names = [str(row[0]) for row in conn.execute(_COPY_COLUMNS_SQL).fetchall()]
        columns = sql.SQL(", ").join(sql.Identifier(name) for name in names)
        insert = sql.SQL("INSERT INTO memory_facts ({}) SELECT {} FROM memory_facts WHERE id = %(id)s").format(
            columns, columns
        )
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM memory_facts WHERE agent_id = %s AND valid_to IS NULL "
                "AND embedding_vec IS NOT NULL ORDER BY id LIMIT %s",
                (agent_id, count),
            ).fetchall()
        ]
        conn.rollback()
        for fact_id in ids:
            started = time.perf_counter()
            conn.execute(insert, {"id": fact_id})
            times.append((time.perf_counter() - started) * 1000.0)
            conn.rollback()
    times = times[10:]
    return sum(times) / max(len(times), 1), percentile(times, 95)


@contextlib.contextmanager
def forced_index(agent_ids: set[str]) -> Iterator[None]:
    """Tell the service's read path that ``agent_ids`` are indexed (so it takes its indexed statement)."""
    from memory_core.read.agent_index import agent_indexes

    original: Callable[[Any, str], bool] = agent_indexes.has_index

    def has_index(session: Any, agent_id: str) -> bool:
        return agent_id in agent_ids or original(session, agent_id)

    agent_indexes.has_index = has_index  # type: ignore[method-assign]
    try:
        yield
    finally:
        agent_indexes.has_index = original  # type: ignore[method-assign]


def run_vector_search_benchmark(*, reuse_home: Path, record: bool, argv: Sequence[str], quick: bool = False) -> int:
    """Measure both designs on a kept retrieve home; print the table and append it to RESULTS.md."""
    from memory_core.read import build_read_context
    from memory_core.settings import load_settings

    machine = machine_info()
    load = "load average at start {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min)".format(*os.getloadavg())
    # The stack's own processes never build agent indexes here (maintenance's agent indexer would
    # rebuild the ones design B drops, and take the build slot): this process decides which exist.
    stack = BenchStack(
        env={"ARANDU_EMBEDDING_PROVIDER": "hashing", "ARANDU_RETRIEVAL_AGENT_INDEX_MIN_FACTS": "0"},
        keep_home=True,
        label="vector",
        home=reuse_home,
    )
    sampler = MemorySampler(stack)
    ctx: Any = None
    results: list[Measured] = []
    writes: list[list[str]] = []
    notes: list[str] = []
    code = 0
    overall = time.monotonic()
    try:
        print(f"vector search A/B on {machine.describe()}; {load}", flush=True)
        ready_s = stack.start()
        sampler.start()
        print(f"stack ready in {ready_s:.1f} s under {stack.home}", flush=True)
        url = stack.database_url
        dataset = reuse_dataset(url, Scale.quick() if quick else Scale())
        settings = load_settings(retrieval_agent_index_min_facts=DEFAULT_AGENT_INDEX_MIN_FACTS)
        min_facts = settings.retrieval_agent_index_min_facts
        ef_search = settings.retrieval_ef_search
        from memory_core.read.agent_index import agent_index_name

        with psycopg.connect(url, autocommit=True) as conn:
            reused = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE_INDEX,)).fetchone()[0]  # type: ignore[index]
            facts = int(conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0])  # type: ignore[index]
        ctx = build_read_context(settings)
        config = ctx.base_config
        limit = max(config.signal_max_facts, config.reranker_candidate_multiplier * config.topk_facts) * 2
        agents = sorted(dataset.tested, key=lambda agent: agent.size)
        indexed = [agent for agent in agents if agent.size >= min_facts]
        questions = {
            agent.agent_id: make_queries(agent.world, QUESTIONS + WARMUP, SEED + agent.size) for agent in agents
        }
        vectors = {
            agent.agent_id: [v for v in ctx.embedder.embed(questions[agent.agent_id]) if v is not None]
            for agent in agents
        }
        common = {"limit": limit, "min_confidence": config.min_confidence, "min_similarity": config.min_similarity}
        database = conninfo_to_dict(url)["dbname"]
        sizes: dict[str, Any] = {}

        def design_a() -> None:
            nonlocal ctx
            print("design A (per-agent indexes; today): statements, retrieve, writes...", flush=True)
            built = build_agent_indexes(url, min_facts)
            if built:
                notes.append(
                    "Per-agent index builds (CONCURRENTLY, one at a time): "
                    + ", ".join(f"{agent} {count:,} facts {secs(seconds)}" for agent, count, seconds, _ in built)
                    + "."
                )
            ctx.close()
            ctx = build_read_context(settings)
            for agent in agents:
                own = agent.size >= min_facts
                measured = measure_statement(
                    url,
                    agent,
                    vectors[agent.agent_id],
                    "per-agent index" if own else "exact (b-tree)",
                    setup=[f"SET hnsw.ef_search = {ef_search}"],
                    exact=not own,
                    **common,
                )
                if own:
                    measure_retrieve(
                        stack, sampler, ctx=ctx, agent=agent, queries=questions[agent.agent_id], measured=measured
                    )
                results.append(measured)
                print(f"  {agent.size:,}: {measured.row()}", flush=True)
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*), COALESCE(sum(pg_relation_size(c.oid)), 0) FROM pg_class c "
                    "WHERE c.relkind = 'i' AND starts_with(c.relname, 'ix_memory_facts_hnsw_v2_agent_')"
                ).fetchone()
            sizes["per_agent"] = (int(row[0]), int(row[1])) if row else (0, 0)
            for agent in (agents[0], agents[-1]):
                mean, p95 = insert_cost_ms(url, agent.agent_id)
                writes.append([f"{agent.size:,}", "per-agent indexes (today)", f"{mean:.2f}", f"{p95:.2f}"])
                print(f"  write one fact, {agent.size:,}: {mean:.2f} ms mean", flush=True)

        def build_table_index() -> None:
            print(f"building the table-wide HNSW index (m {BUILD_M}, ef_construction {BUILD_EF_CONSTRUCTION})...")
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET maintenance_work_mem = '4GB'")
                conn.execute(f"SET max_parallel_maintenance_workers = {max(1, (machine.cpus or 2) - 1)}")
                started = time.monotonic()
                conn.execute(
                    f"CREATE INDEX {TABLE_INDEX} ON memory_facts USING hnsw (embedding_vec vector_cosine_ops) "
                    f"WITH (m = {BUILD_M}, ef_construction = {BUILD_EF_CONSTRUCTION})"
                )
                sizes["build_s"] = time.monotonic() - started
                sizes["build_peak"] = sampler.peak(overall)
                print(f"  built in {sizes['build_s']:.0f} s", flush=True)

        def design_b() -> None:
            nonlocal ctx
            with psycopg.connect(url, autocommit=True) as conn:
                # Only the table-wide vector index is left for the tested agents.
                for agent in indexed:
                    conn.execute(f'DROP INDEX IF EXISTS "{agent_index_name(agent.agent_id)}"')
                conn.execute("ANALYZE memory_facts")
                sizes["table"] = int(conn.execute(f"SELECT pg_relation_size('{TABLE_INDEX}')").fetchone()[0])  # type: ignore[index]
            print("design B (table-wide index, iterative scans): statements, retrieve, writes...", flush=True)
            for mode in ITERATIVE_MODES:
                for tuples in MAX_SCAN_TUPLES:
                    for agent in agents:
                        measured = measure_statement(
                            url,
                            agent,
                            vectors[agent.agent_id],
                            f"table-wide, {mode}, max_scan_tuples {tuples:,}",
                            setup=[
                                f"SET hnsw.ef_search = {ef_search}",
                                f"SET hnsw.iterative_scan = {mode}",
                                f"SET hnsw.max_scan_tuples = {tuples}",
                            ],
                            exact=False,
                            **common,
                        )
                        results.append(measured)
                        print(f"  {agent.size:,}: {measured.row()}", flush=True)
                # The service's own read path on the table-wide index: the setting as the database's default.
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'ALTER DATABASE "{database}" SET hnsw.iterative_scan = {mode}')
                ctx.close()
                ctx = build_read_context(settings)
                with forced_index({agent.agent_id for agent in indexed}):
                    for agent in indexed:
                        measured = Measured(design=f"table-wide, {mode}: whole retrieve()", agent=f"{agent.size:,}")
                        measure_retrieve(
                            stack, sampler, ctx=ctx, agent=agent, queries=questions[agent.agent_id], measured=measured
                        )
                        results.append(measured)
                        print(f"  {agent.size:,}: {measured.row()}", flush=True)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{database}" RESET hnsw.iterative_scan')
            for agent in (agents[0], agents[-1]):
                mean, p95 = insert_cost_ms(url, agent.agent_id)
                writes.append([f"{agent.size:,}", "table-wide index", f"{mean:.2f}", f"{p95:.2f}"])
                print(f"  write one fact, {agent.size:,}: {mean:.2f} ms mean", flush=True)
            print("table-wide index dropped", flush=True)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"DROP INDEX IF EXISTS {TABLE_INDEX}")

        if reused:
            # A table-wide index an interrupted run built: design B first, then A on the per-agent indexes.
            print(f"{TABLE_INDEX} found (built by an earlier run): design B first", flush=True)
            design_b()
            design_a()
        else:
            design_a()
            build_table_index()
            design_b()
            build_agent_indexes(url, min_facts)  # the dataset as it was found
        build_note = (
            f"built in {secs(sizes['build_s'])} (peak stack memory during the build {mib(sizes['build_peak'])})"
            if "build_s" in sizes
            else "built by an earlier run of this command on the same home"
        )
        per_agent_count, per_agent_bytes = sizes.get("per_agent", (0, 0))
        notes.append(
            f"Table-wide HNSW over {facts:,} facts (m {BUILD_M}, ef_construction {BUILD_EF_CONSTRUCTION}, "
            f"maintenance_work_mem 4GB, parallel): {build_note}, {mib(sizes.get('table', 0))} on disk; "
            f"the {per_agent_count} per-agent HNSW indexes take {mib(per_agent_bytes)}."
        )
        peak = sampler.peak()
        notes.extend(
            [
                f"Peak stack memory of the whole run {mib(peak)}.",
                f"Statements: the semantic search alone (LIMIT {limit}, as the service asks), {QUESTIONS} questions "
                f"per agent after {WARMUP} of warm-up, ef_search {ef_search}; CPU per query: the user + system "
                "time of the connection's PostgreSQL backend and of the client thread over the timed questions "
                f"(nothing else of the stack takes part in a statement); recall@{RECALL_K} against an exact "
                "scan of the agent's active facts (ties count as hits). Whole retrieve(): in process, no reranker, "
                "hashing embeddings; for design B the service's read path is told the agent is indexed and "
                "finds only the table-wide index (the iterative mode set as the database's default).",
                "Writes: one INSERT of a copy of one of the agent's facts, rolled back, synchronous_commit off "
                f"({INSERTS - 10} timed per case); every index of memory_facts is maintained.",
                f"Wall time {secs(time.monotonic() - overall)}.",
            ]
        )
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        code = 130
    except Exception as error:
        print(f"\nbenchmark failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        traceback.print_exc()
        code = 1
    finally:
        with shielded():
            sampler.stop()
            if ctx is not None:
                ctx.close()
            stack.stop()
    headers = (
        "agent facts",
        "design",
        f"recall@{RECALL_K}",
        "statement p50 / p95 ms",
        "CPU per query ms (PostgreSQL backend + client)",
        "retrieve p50 / p95 ms",
        "CPU per retrieve ms (PostgreSQL + this process)",
        "plan",
    )
    table = [result.row() for result in results]
    write_headers = ("agent facts", "indexes", "ms per fact written (mean)", "p95")
    print("\n" + text_table(headers, table))
    print("\n" + text_table(write_headers, writes))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    if code == 0 and record:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = "\n".join(
            [
                f"## Vector search: per-agent indexes vs iterative scans ({stamp}){' — quick' if quick else ''}",
                "",
                f"Machine: {machine.describe()}; {load}. Command: `{' '.join(argv)}`.",
                "",
                markdown_table(headers, table),
                "",
                markdown_table(write_headers, writes),
                "",
                *(f"- {note}" for note in notes),
                "",
            ]
        )
        append_results(section)
        print(f"\nappended to {Path('ops/bench/RESULTS.md')}")
    return code
