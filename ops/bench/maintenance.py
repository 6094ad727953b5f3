"""The maintenance benchmark: ``python -m ops.bench maintenance [--quick]`` (or ``./ops/bench/maintenance``).

On the real stack (:class:`~ops.bench.common.BenchStack`: API, worker pools, Beat, Flower,
embedded PostgreSQL 18 + pgvector and Redis in a fresh temporary home), offline skills and
384-dimension hashing embeddings:

1. **Memory.** 100 agents x 1,000 active-or-superseded facts each, as the write path would have
   left them: per agent a speaker and ~40 people, places and organisations (entities with
   aliases-free canonical keys), one event per fact over the last 60 days (untagged emotions),
   facts about the entities from varied templates with attribute keys, a tenth superseded, a
   few near-duplicates, retrieval counts and reinforcements with a long tail, primary and
   mention links, and a relationship graph with evidence facts and varied strengths. Loaded
   with ``COPY``; embeddings from the real hashing embedder.
2. **One full cycle**, job by job in the order Beat runs them (``memory_core.maintenance.registry
   .JOB_NAMES``: importance first): each job triggered for every agent through
   ``POST /v1/agents/{agent}/jobs/{job}`` and waited for in ``maintenance_job_runs`` before the
   next job starts, so each job's wall time is its own. Reported: the cycle's wall time, each
   job's wall time, per-run p50/p95 and its result counts, failures, CPU by process and the
   stack's peak memory.

``--quick`` runs 10 agents x 200 facts.
"""

from __future__ import annotations

import multiprocessing
import random
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from memory_core.maintenance.registry import JOB_NAMES
from memory_core.providers.hashing_embedder import HashingEmbedder
from ops.bench.common import (
    BenchStack,
    MemorySampler,
    append_results,
    libpq_url,
    machine_info,
    markdown_table,
    mib,
    ms,
    percentile,
    secs,
    stack_cpu_label,
    text_table,
)
from ops.bench.ingest import Row, Window

DIMENSIONS = 384
SEED = 20_261_130
RUN_TIMEOUT_S = 3_600.0
SEED_WORKERS = 2
MEMORY_IDLE_LIMIT = 1_536 * 1024 * 1024
MEMORY_PEAK_LIMIT = 2_560 * 1024 * 1024


def _words(text: str) -> tuple[str, ...]:
    return tuple(word.strip() for word in text.split(",") if word.strip())


FIRST_NAMES = _words(
    "Ana, Bruno, Carla, Diego, Elisa, Fernanda, Gustavo, Helena, Igor, Julia, Kaio, Laura, Marcos, Nina, Otavio, "
    "Paula, Rafael, Sofia, Tiago, Ursula, Vitor, Wagner, Xenia, Yara, Zeca, Alice, Bernardo, Cecilia, Davi, Estela"
)
LAST_NAMES = _words(
    "Almeida, Barros, Costa, Duarte, Esteves, Freitas, Gomes, Lima, Moura, Nunes, Pereira, Rocha, Silva, Tavares"
)
PLACES = _words("Lisboa, Porto, Recife, Curitiba, Salvador, Belém, Manaus, Natal, Campinas, Santos, Niterói, Olinda")
ORGS = _words("Vertix, Orion, Tech, Solaris, Nimbus, Atlas, Quanta, Boreal, Lumen, Vortex, Helix, Prisma")
HOBBIES = _words(
    "corrida, xadrez, violão, fotografia, ciclismo, natação, cerâmica, escalada, jardinagem, leitura, yoga, surf"
)
FOODS = _words("café, sushi, feijoada, pizza, tapioca, açaí, moqueca, lasanha, pão de queijo, ramen")
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("location.residence", "{name} mora em {place}"),
    ("employment.employer", "{name} trabalha na {org}"),
    ("preference.hobby", "{name} gosta de {hobby}"),
    ("preference.food", "{name} adora {food}"),
    ("event.trip", "{name} viajou para {place} em {month}"),
    ("event.meeting", "{name} encontrou {other} na {org}"),
    ("relationship.friend", "{name} é amigo de {other}"),
    ("event.course", "{name} começou um curso de {hobby}"),
    ("health.mood", "{name} anda cansado por causa do trabalho na {org}"),
    ("event.dinner", "{name} jantou {food} com {other}"),
)
MONTHS = _words("janeiro, fevereiro, março, abril, maio, junho, julho, agosto, setembro, outubro, novembro, dezembro")
REL_TYPES = ("friend_of", "works_with", "lives_in", "works_at", "sibling_of", "knows")


@dataclass
class Scale:
    """How big the seeded memory is."""

    agents: int
    facts_per_agent: int
    entities_per_agent: int

    @classmethod
    def for_run(cls, quick: bool) -> Scale:
        """The full size (100 x 1,000) or the quick smoke size."""
        return cls(agents=10, facts_per_agent=200, entities_per_agent=15) if quick else cls(100, 1_000, 40)


@dataclass
class JobWave:
    """One job run for every agent."""

    job: str
    wall_s: float = 0.0
    durations_ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    result_totals: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    peak_bytes: int = 0
    cpu_note: str = ""
    cpu_cell: str = ""


# ---------------------------------------------------------------------------------------
# Seeding
# ---------------------------------------------------------------------------------------


# One format string for a whole vector: three times faster than formatting floats one by one.
_VECTOR_FORMAT = "[" + ",".join(["%.6g"] * DIMENSIONS) + "]"


def _vector_text(vector: Sequence[float]) -> str:
    return _VECTOR_FORMAT % tuple(vector)


def seed_memory(database_url: str, scale: Scale, now: datetime) -> dict[str, int]:
    """Load the agents' memory with COPY; return row counts by table.

    Rows and embeddings are computed in two worker processes (pure Python, CPU-bound) while
    this process streams finished agents into PostgreSQL.
    """
    counts: Counter[str] = Counter()
    with (
        psycopg.connect(libpq_url(database_url)) as conn,
        # Not fork: this process runs threads (the memory sampler), and a child forked while one of
        # them holds a lock waits on that lock forever.
        ProcessPoolExecutor(max_workers=SEED_WORKERS, mp_context=multiprocessing.get_context("forkserver")) as pool,
    ):
        futures = [pool.submit(_agent_rows_with_vectors, index, scale, now) for index in range(scale.agents)]
        for future in futures:
            rows = future.result()
            with conn.cursor() as cur:
                # Insertion order follows the foreign keys: events before facts, facts before links and edges.
                for table, table_rows in rows.items():
                    _copy(cur, table, table_rows)
            conn.commit()
            for table, table_rows in rows.items():
                counts[table] += len(table_rows)
        with conn.cursor() as cur:
            cur.execute("ANALYZE")
    return dict(counts)


def _agent_rows_with_vectors(index: int, scale: Scale, now: datetime) -> dict[str, list[dict[str, Any]]]:
    # One generator per agent: the data does not depend on which worker built it.
    rng = random.Random(SEED + index)  # noqa: S311 - reproducible benchmark data, not secrets
    rows = _agent_rows(f"maint-{index:03d}", scale, rng, now)
    vectors = HashingEmbedder(DIMENSIONS).embed([fact["fact_text"] for fact in rows["memory_facts"]])
    for fact, vector in zip(rows["memory_facts"], vectors, strict=True):
        fact["embedding_vec"] = _vector_text(vector)
    return rows


def _copy(cur: psycopg.Cursor[Any], table: str, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    columns = list(rows[0])
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[column] for column in columns])


def _agent_rows(agent: str, scale: Scale, rng: random.Random, now: datetime) -> dict[str, list[dict[str, Any]]]:
    speaker = rng.choice(FIRST_NAMES)
    people = rng.sample([f"{first} {last}" for first in FIRST_NAMES for last in LAST_NAMES], scale.entities_per_agent)
    entities: list[tuple[str, str, str]] = [("person", f"person:{speaker.lower()}", speaker)]
    for name in people[: scale.entities_per_agent * 2 // 3]:
        entities.append(("person", "person:" + name.lower().replace(" ", "-"), name))
    for place in rng.sample(PLACES, min(len(PLACES), scale.entities_per_agent // 6 + 1)):
        entities.append(("place", f"place:{place.lower()}", place))
    for org in rng.sample(ORGS, min(len(ORGS), scale.entities_per_agent // 6 + 1)):
        entities.append(("organization", f"organization:{org.lower()}", org))
    people_only = [entity for entity in entities if entity[0] == "person"]
    places = [entity[2] for entity in entities if entity[0] == "place"]
    orgs = [entity[2] for entity in entities if entity[0] == "organization"]
    # A long tail: a few people carry most facts, as in real conversations.
    weights = [1.0 / (rank + 1) for rank in range(len(people_only))]

    entity_rows = [
        {
            "id": uuid.uuid4(),
            "agent_id": agent,
            "canonical_key": key,
            "display_name": name,
            "entity_type": kind,
            "fact_count": 0,
            "first_seen_at": now - timedelta(days=60),
            "last_seen_at": now - timedelta(days=rng.uniform(0, 60)),
        }
        for kind, key, name in entities
    ]
    events: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    usage: list[dict[str, Any]] = []
    fact_counts: Counter[str] = Counter()
    for position in range(scale.facts_per_agent):
        kind, key, name = rng.choices(people_only, weights)[0]
        other = rng.choice(people_only)[2]
        attribute, template = rng.choice(TEMPLATES)
        place, org = rng.choice(places), rng.choice(orgs)
        text = template.format(
            name=name,
            place=place,
            org=org,
            other=other,
            hobby=rng.choice(HOBBIES),
            food=rng.choice(FOODS),
            month=rng.choice(MONTHS),
        )
        if position and rng.random() < 0.02:
            text = facts[rng.randrange(len(facts))]["fact_text"]  # a near-duplicate said again
        occurred = now - timedelta(days=60) + timedelta(seconds=position * 60 * 86_400 / scale.facts_per_agent)
        event_id = uuid.uuid4()
        events.append(
            {
                "id": event_id,
                "agent_id": agent,
                "text": f"{text}.",
                "speaker": speaker,
                "session_id": f"s{position // 40}",
                "message_id": f"{agent}-m{position}",
                "source": "import",
                "occurred_at": occurred,
                "created_at": occurred,
            }
        )
        retrieved = int(rng.paretovariate(1.5)) - 1
        fact_id = uuid.uuid4()
        superseded = rng.random() < 0.1
        facts.append(
            {
                "id": fact_id,
                "agent_id": agent,
                "entity_type": kind,
                "entity_key": key,
                "entity_name": name,
                "attribute_key": attribute,
                "fact_text": text,
                "speaker": speaker,
                "confidence": round(rng.uniform(0.5, 1.0), 2),
                "importance": round(rng.uniform(0.2, 0.9), 2),
                "valid_from": occurred,
                "valid_to": occurred + timedelta(days=1) if superseded else None,
                "source_event_id": event_id,
                "reinforcement_count": int(rng.paretovariate(2.0)) - 1,
                "created_at": occurred,
                "ingested_at": occurred,
            }
        )
        if retrieved:
            # Retrieval counters live apart from the fact (migration 0009); never retrieved = no row.
            usage.append(
                {
                    "fact_id": fact_id,
                    "agent_id": agent,
                    "times_retrieved": retrieved,
                    "last_retrieved_at": now - timedelta(days=rng.uniform(0, 90)),
                }
            )
        fact_counts[key] += 0 if superseded else 1
        links.append({"agent_id": agent, "fact_id": fact_id, "entity_key": key, "is_primary": True})
        mentioned = next((e for e in entities if e[2] in (other, place, org) and e[1] != key), None)
        if mentioned is not None and rng.random() < 0.5:
            links.append({"agent_id": agent, "fact_id": fact_id, "entity_key": mentioned[1], "is_primary": False})
    for row in entity_rows:
        row["fact_count"] = fact_counts[row["canonical_key"]]
    edges: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for _ in range(len(entities)):
        source, target = rng.sample(entities, 2)
        rel_type = rng.choice(REL_TYPES)
        if (source[1], target[1], rel_type) in seen:
            continue
        seen.add((source[1], target[1], rel_type))
        edges.append(
            {
                "agent_id": agent,
                "source_entity_key": source[1],
                "target_entity_key": target[1],
                "rel_type": rel_type,
                "strength": round(rng.uniform(0.1, 1.0), 2),
                "evidence_fact_id": rng.choice(facts)["id"],
                "provenance": "llm",
                "valid_from": now - timedelta(days=rng.uniform(0, 60)),
            }
        )
    return {
        "memory_entities": entity_rows,
        "memory_events": events,
        "memory_facts": facts,
        "memory_fact_usage": usage,
        "memory_fact_entity_links": links,
        "memory_entity_relationships": edges,
    }


# ---------------------------------------------------------------------------------------
# The cycle
# ---------------------------------------------------------------------------------------


def run_wave(
    stack: BenchStack, sampler: MemorySampler, client: httpx.Client, job: str, agents: Sequence[str]
) -> JobWave:
    """Trigger ``job`` for every agent through the API and wait until all its runs ended."""
    wave = JobWave(job=job)
    window = Window(stack).open()
    started = time.monotonic()
    run_ids: list[str] = []
    for agent in agents:
        response = client.post(f"/v1/agents/{agent}/jobs/{job}")
        if response.status_code != 202:
            raise RuntimeError(f"POST jobs/{job} for {agent}: {response.status_code} {response.text}")
        run_ids.append(str(response.json()["job_run_id"]))
    rows = _wait_for_job_runs(stack.database_url, run_ids)
    wave.wall_s = time.monotonic() - started
    wave.peak_bytes = sampler.peak(since=started)
    wave.cpu_note = window.notes(job)[0]
    assert window.cpu is not None
    wave.cpu_cell = window.close().stack_cpu_cell(window.cpu, len(run_ids), "job run")
    for status, duration_ms, result, error in rows:
        wave.statuses[status] += 1
        if duration_ms is not None:
            wave.durations_ms.append(float(duration_ms))
        for name, value in (result or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                wave.result_totals[name] += value
        if error:
            wave.errors[str(error).splitlines()[0][:160]] += 1
    return wave


def _wait_for_job_runs(database_url: str, run_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        while True:
            rows = conn.execute(
                "SELECT status, duration_ms, result, error FROM maintenance_job_runs WHERE id::text = ANY(%s)",
                (list(run_ids),),
            ).fetchall()
            if len(rows) == len(run_ids) and all(row[0] not in ("queued", "running") for row in rows):
                return rows
            if time.monotonic() > deadline:
                raise TimeoutError(f"job runs still pending after {RUN_TIMEOUT_S:.0f} s")
            time.sleep(0.5)


def _wave_rows(wave: JobWave) -> list[Row]:
    durations = wave.durations_ms
    p50 = ms(percentile(durations, 50) / 1000) if durations else "n/a"
    p95 = ms(percentile(durations, 95) / 1000) if durations else "n/a"
    statuses = ", ".join(f"{count} {status}" for status, count in sorted(wave.statuses.items()))
    totals = ", ".join(f"{name} {value:,.0f}" for name, value in sorted(wave.result_totals.items()) if value)
    return [
        Row(wave.job, "wall time (all agents) / run p50 / p95", f"{secs(wave.wall_s)} / {p50} / {p95}"),
        Row(wave.job, "runs / result totals", f"{statuses}; {totals or 'no counts'}"),
        Row(wave.job, stack_cpu_label("job run"), wave.cpu_cell or "n/a"),
    ]


def run_maintenance_benchmark(*, quick: bool, keep_home: bool, record: bool, argv: Sequence[str]) -> int:
    """Seed, run one full cycle job by job, print the table and (unless ``record`` is off) append it."""
    scale = Scale.for_run(quick)
    machine = machine_info()
    rows: list[Row] = []
    notes: list[str] = []
    waves: list[JobWave] = []
    failed = False
    with BenchStack(keep_home=keep_home, label="maint") as stack:
        ready_s = stack.start()
        with MemorySampler(stack) as sampler:
            idle = sampler.settled()
            rows.append(Row("start-up", "ready / idle stack memory (PSS)", f"{secs(ready_s)} / {mib(idle)}"))
            now = datetime.now(UTC)
            seeding = time.monotonic()
            counts = seed_memory(stack.database_url, scale, now)
            rows.append(
                Row(
                    "memory",
                    "seeded (COPY, hashing embeddings)",
                    f"{scale.agents} agents x {scale.facts_per_agent:,} facts; "
                    + ", ".join(f"{table} {count:,}" for table, count in counts.items())
                    + f" in {secs(time.monotonic() - seeding)}",
                )
            )
            agents = [f"maint-{index:03d}" for index in range(scale.agents)]
            cycle_started = time.monotonic()
            headers = {"Authorization": f"Bearer {stack.api_key}"}
            with httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as client:
                try:
                    for job in JOB_NAMES:
                        print(f"  {job}: {len(agents)} runs ...", flush=True)
                        wave = run_wave(stack, sampler, client, job, agents)
                        waves.append(wave)
                        print(f"  {job}: {secs(wave.wall_s)}", flush=True)
                except Exception:
                    failed = True
                    notes.append("FAILED: " + traceback.format_exc().splitlines()[-1])
                    notes.append(stack.log_tails())
            cycle_s = time.monotonic() - cycle_started
            for wave in waves:
                rows.extend(_wave_rows(wave))
                notes.append(wave.cpu_note)
                notes.extend(f"{wave.job}: {count} x {error}" for error, count in wave.errors.items())
            total_runs = sum(sum(wave.statuses.values()) for wave in waves)
            failures = sum(wave.statuses.get("failed", 0) for wave in waves)
            peak = sampler.peak()
            rows.append(
                Row("whole cycle", "wall time / job runs / failed", f"{secs(cycle_s)} / {total_runs} / {failures}")
            )
            rows.append(
                Row(
                    "whole run",
                    "peak stack memory (PSS)",
                    mib(peak),
                    "< 2,560 MiB: " + ("met" if peak < MEMORY_PEAK_LIMIT else "MISSED"),
                )
            )
    section = _section(machine.describe(), argv, rows, notes, scale)
    print(
        text_table(["phase", "measure", "result", "target"], [[r.phase, r.measure, r.result, r.target] for r in rows])
    )
    for note in notes:
        print(f"- {note}")
    if record and not failed:
        append_results(section)
    return 1 if failed else 0


def _section(machine: str, argv: Sequence[str], rows: Sequence[Row], notes: Sequence[str], scale: Scale) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["./ops/bench/maintenance", *argv])
    table = markdown_table(
        ["phase", "measure", "result", "target"], [[r.phase, r.measure, r.result, r.target] for r in rows]
    )
    lines = [
        f"## Maintenance — {stamp}" + (" — quick" if "--quick" in argv else ""),
        "",
        f"- command: `{command}`",
        f"- machine: {machine}",
        "- stack: API, worker-ingest, worker-apply, worker-maintenance (prefork, ARANDU_MAINTENANCE_CONCURRENCY "
        "default), Beat, Flower; offline skills, hashing embeddings (384)",
        f"- cycle: every job of `JOB_NAMES` in order, each for all {scale.agents} agents through "
        "`POST /v1/agents/{agent}/jobs/{job}`, the next job starting when every run of the previous one ended",
        "",
        table,
        "",
        *[f"- {note}" for note in notes if note],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_maintenance_benchmark(quick="--quick" in sys.argv, keep_home=False, record=False, argv=sys.argv[1:]))
