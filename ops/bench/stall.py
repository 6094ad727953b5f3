"""Can one client stall the API? Normal retrieves, alone and beside clients that send maximal queries.

Issue 46: a retrieve whose query was 256 KiB of short words took 14.9 s and left an API process
235 MiB larger; six at once took 36-48 s each, and a normal retrieve sent meanwhile 33 s
instead of 0.21 s. Queries now have their own cap (``ARANDU_MAX_QUERY_BYTES``), the work on a
query's words is bounded by their number, and long requests take turns per API process
(:mod:`api.heavy_work`).

The run, on the real stack of ``./ops/dev`` in a temporary home (offline skills, hashing
embeddings, the default two API processes):

1. one agent's memory written by the pipeline (a few hundred messages through the batch route);
2. **quiet**: one client sends normal retrieves (short questions) one after the other;
3. **loaded**: the same, while six clients send retrieves whose query is as large as the cap
   allows, of short words (the most entity grams per byte), each sending its next one as soon
   as it is answered and ignoring ``Retry-After`` (the worst a client can do).

Target: the loaded p95 of the normal retrieves is at most twice the quiet p95. Also recorded:
what the maximal queries got (served or told to come back), the API processes' resident memory
before and after the load, and the stack's peak memory (PSS).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import httpx
import psutil
import psycopg

from ops.bench.common import (
    BenchStack,
    MemorySampler,
    append_results,
    machine_info,
    markdown_table,
    mib,
    ms,
    percentile,
    stack_cpu_label,
    text_table,
    verdict,
)
from ops.bench.http_load import LoadOutcome, send_all

AGENT = "stall-bench"
HEAVY_CLIENTS = 6
NAMES = ["Ana", "Bruno", "Carla", "Diego", "Elisa", "Fabio", "Gabi", "Hugo", "Iris", "Joao"]
CITIES = ["Lisbon", "Porto", "Braga", "Recife", "Natal", "Belem", "Cusco", "Quito", "Lima", "Bogota"]
ORGS = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell", "Cyberdyne", "Soylent"]
NORMAL_QUERIES = [
    "Where does Ana live?",
    "Who works at Globex?",
    "What does Carla like?",
    "Where did Hugo move to?",
    "Who is Elisa's sister?",
]


def _messages(count: int) -> list[dict[str, str]]:
    templates = [
        "{name} lives in {city}.",
        "{name} works at {org}.",
        "{name} moved to {city} last year.",
        "{name} loves jazz and long walks in {city}.",
        "My friend {name} is a doctor at {org}.",
    ]
    messages = []
    for index in range(count):
        name, city, org = NAMES[index % 10], CITIES[(index // 10) % 10], ORGS[(index // 3) % 10]
        text = templates[index % len(templates)].format(name=name, city=city, org=org)
        messages.append({"message": text, "speaker_name": name, "message_id": f"s-{index}"})
    return messages


def _seed(stack: BenchStack, count: int) -> float:
    """Send ``count`` messages through the batch route and wait until the pipeline processed them all."""
    started = time.monotonic()
    with httpx.Client(base_url=stack.api_url, headers=stack.json_headers, timeout=120) as client:
        messages = _messages(count)
        for first in range(0, count, 500):
            response = client.post(
                f"/v1/agents/{AGENT}/messages/batch", json={"messages": messages[first : first + 500]}
            )
            response.raise_for_status()
    deadline = time.monotonic() + 600
    with psycopg.connect(stack.database_url, autocommit=True) as connection:
        while True:
            finished = connection.execute(
                "SELECT count(*) FROM pipeline_runs WHERE agent_id = %s AND status IN ('done', 'failed')", (AGENT,)
            ).fetchone()
            if finished is not None and int(finished[0]) >= count:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pipeline did not process {count} messages in time")
            time.sleep(0.5)
    return time.monotonic() - started


def _maximal_query(size: int) -> str:
    words = " ".join(f"w{index % 997}" for index in range(size))
    return ("Where does Ana live? " + words)[:size].rstrip()


def _body(query: str) -> bytes:
    return json.dumps({"query": query}).encode()


def _api_rss(stack: BenchStack) -> int:
    total = 0
    devstack = stack.devstack
    if devstack is None:
        return 0
    for child in devstack.children:
        if child.name.startswith("api") and child.popen is not None:
            try:
                process = psutil.Process(child.popen.pid)
                total += process.memory_info().rss + sum(c.memory_info().rss for c in process.children(recursive=True))
            except psutil.Error:
                continue
    return total


async def _normal(stack: BenchStack, count: int) -> LoadOutcome:
    path = f"/v1/agents/{AGENT}/retrieve"
    requests = [(path, _body(NORMAL_QUERIES[index % len(NORMAL_QUERIES)])) for index in range(count)]
    return await send_all(stack.api_url, stack.json_headers, requests, concurrency=1, expect=200)


async def _loaded(stack: BenchStack, count: int, query_bytes: int) -> tuple[LoadOutcome, LoadOutcome, float]:
    stop = asyncio.Event()
    path = f"/v1/agents/{AGENT}/retrieve"
    heavy_body = _body(_maximal_query(query_bytes))
    # Far more than the run can send: the heavy clients stop when the normal ones are done.
    heavy = asyncio.create_task(
        send_all(
            stack.api_url,
            stack.json_headers,
            [(path, heavy_body)] * 1_000_000,
            concurrency=HEAVY_CLIENTS,
            expect=200,
            stop=stop,
        )
    )
    await asyncio.sleep(2.0)  # the heavy clients are at full speed before the normal ones start
    started = time.monotonic()
    normal = await _normal(stack, count)
    seconds = time.monotonic() - started
    stop.set()
    return normal, await heavy, seconds


def run_stall_benchmark(*, quick: bool, keep_home: bool, record: bool, argv: Sequence[str]) -> int:
    """Run the benchmark; print its table and append it to RESULTS.md when ``record``."""
    machine = machine_info()
    count = 60 if quick else 300
    rows: list[list[str]] = []
    notes: list[str] = []
    held = False
    with BenchStack(label="stall", keep_home=keep_home) as stack:
        ready_s = stack.start()
        with MemorySampler(stack) as sampler:
            seed_s = _seed(stack, 60 if quick else 300)
            query_bytes = int(stack.setting("max_query_bytes"))
            asyncio.run(_normal(stack, 20))  # warm caches and pools
            cpu = stack.cpu_snapshot()
            quiet = asyncio.run(_normal(stack, count))
            quiet_cpu = stack.cpu_snapshot().stack_cpu_cell(cpu, len(quiet.latencies), "retrieve")
            rss_before = _api_rss(stack)
            loaded_started, cpu = time.monotonic(), stack.cpu_snapshot()
            loaded, heavy, loaded_s = asyncio.run(_loaded(stack, count, query_bytes))
            loaded_cpu = stack.cpu_snapshot().stack_cpu_cell(
                cpu, len(loaded.latencies) + len(heavy.latencies), "answered request"
            )
            rss_after = _api_rss(stack)
            peak = sampler.peak()
            peak_loaded = sampler.peak(since=loaded_started)
        quiet_p95 = percentile(quiet.latencies, 95)
        loaded_p95 = percentile(loaded.latencies, 95)
        held = not quiet.errors and not loaded.errors and loaded_p95 <= 2 * quiet_p95
        refused = heavy.statuses.count(503)
        other_errors = [error for error in heavy.errors if not error.startswith("503")]
        served = heavy.statuses.count(200)
        rows = [
            ["start-up", "stack ready / memory seeded", f"{ready_s:.1f} s / {seed_s:.1f} s", ""],
            [
                "quiet",
                f"normal retrieves ({count}, one client) p50 / p95 / max",
                f"{ms(percentile(quiet.latencies, 50))} / {ms(quiet_p95)} / {ms(max(quiet.latencies))}",
                "",
            ],
            [
                "loaded",
                f"normal retrieves ({count}, one client) p50 / p95 / max beside {HEAVY_CLIENTS} maximal-query clients",
                f"{ms(percentile(loaded.latencies, 50))} / {ms(loaded_p95)} / {ms(max(loaded.latencies))}",
                f"p95 <= 2 x quiet ({ms(2 * quiet_p95)}): {verdict(held)}",
            ],
            [
                "loaded",
                f"maximal queries ({query_bytes:,} bytes of short words) in {loaded_s:.1f} s: served / told to retry",
                f"{served} / {refused}" + (f" / {len(other_errors)} other errors" if other_errors else ""),
                "",
            ],
            [
                "loaded",
                "served maximal queries p50 / p95",
                _served_latencies(heavy),
                "",
            ],
            ["quiet", stack_cpu_label("retrieve"), quiet_cpu, ""],
            ["loaded", f"{stack_cpu_label('request')}, normal and maximal together", loaded_cpu, ""],
            ["memory", "API processes' RSS before / after the load", f"{mib(rss_before)} / {mib(rss_after)}", ""],
            ["memory", "peak stack memory (PSS): whole run / loaded phase", f"{mib(peak)} / {mib(peak_loaded)}", ""],
        ]
        if other_errors:
            notes.append(f"maximal queries' other errors (first 3): {other_errors[:3]}")
        if quiet.errors or loaded.errors:
            notes.append(f"normal retrieves' errors (first 3): {(quiet.errors + loaded.errors)[:3]}")
    print(text_table(["phase", "measure", "result", "target"], rows))
    for note in notes:
        print(note)
    if record:
        append_results(_section(machine.describe(), argv, rows, notes))
    return 0 if held else 1


def _served_latencies(outcome: LoadOutcome) -> str:
    served = [seconds for seconds, status in zip(outcome.latencies, outcome.statuses, strict=True) if status == 200]
    return f"{ms(percentile(served, 50))} / {ms(percentile(served, 95))}" if served else "n/a"


def _section(machine: str, argv: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["./ops/bench/stall", *argv])
    lines = [
        f"## Stall — {stamp}" + (" — quick" if "--quick" in argv else ""),
        "",
        f"- command: `{command}`",
        f"- machine: {machine}",
        "- stack: the default `./ops/dev` stack (2 API processes, offline skills, hashing embeddings); one agent "
        "whose memory the pipeline wrote; normal retrieves are short questions, maximal queries are "
        "`ARANDU_MAX_QUERY_BYTES` of short words sent by clients that ignore `Retry-After`",
        "",
        markdown_table(["phase", "measure", "result", "target"], rows),
        "",
        *[f"- {note}" for note in notes],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_stall_benchmark(quick="--quick" in sys.argv, keep_home=False, record=False, argv=sys.argv[1:]))
