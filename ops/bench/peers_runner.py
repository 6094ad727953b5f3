"""Drives one peer library (``arandu`` 0.14.3 or ``mem0ai`` 2.2.x) for ``ops.bench.peers``.

Run by the peers' own virtual environment, never by the project's: it imports only the standard
library and the peer's public API (``python peers_runner.py JOB.json``). It calls the library the
way its documentation shows; none of the peer's code is copied here.

Protocol with the benchmark process: every line this script means for it starts with
:data:`PREFIX` and is JSON (the libraries print notices of their own on stdout, which the
benchmark ignores). At each phase boundary it says which phase ended (with its figures) and which
begins, then waits for a line on stdin: the benchmark reads the stub's counters in between, so
the calls of a phase are counted exactly.

Phases: ``sequential`` (one writer, one turn after the other), ``concurrent`` (one writer per
conversation, side by side: asyncio tasks for arandu, threads for mem0), then the retrieval
passes with ``clients`` concurrent callers: ``retrieve_formula`` (the LLM reranker off, where
the library has one) and ``retrieve_default`` (the library's defaults).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

PREFIX = "@@peers "
STUB_MODEL = "gpt-stub"
ERRORS_KEPT = 5


def say(payload: dict[str, Any]) -> None:
    """One protocol line to the benchmark process."""
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


def boundary(ended: str | None, results: dict[str, Any] | None, begins: str | None) -> None:
    """Report the end of a phase and the start of the next; wait until the benchmark says go."""
    say({"event": "boundary", "ended": ended, "results": results or {}, "begins": begins})
    line = sys.stdin.readline()
    if not line or line.strip() != "go":
        raise SystemExit("the benchmark process went away")


PROGRESS_EVERY_S = 15.0


class Progress:
    """Tells the benchmark how many turns a phase has written, every PROGRESS_EVERY_S."""

    def __init__(self) -> None:
        self.done = 0
        self.started = self.last = time.perf_counter()
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.done += 1
            now = time.perf_counter()
            if now - self.last < PROGRESS_EVERY_S:
                return
            self.last = now
            done, seconds = self.done, now - self.started
        say({"event": "progress", "done": done, "seconds": seconds})


class Errors:
    """A count of failures and the first few messages."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[str] = []
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            self.count += 1
            if len(self.first) < ERRORS_KEPT:
                self.first.append(text[:300])


def write_results(messages: int, wall_s: float, latencies: list[float], errors: Errors) -> dict[str, Any]:
    return {
        "messages": messages,
        "wall_s": wall_s,
        "latencies": latencies,
        "failed": errors.count,
        "errors": errors.first,
    }


def retrieve_results(
    wall_s: float, latencies: list[float], ranked: dict[str, list[str]], errors: Errors, note: str = ""
) -> dict[str, Any]:
    return {
        "wall_s": wall_s,
        "latencies": latencies,
        "ranked": ranked,
        "failed": errors.count,
        "errors": errors.first,
        "note": note,
    }


def distinct(ids: list[str | None]) -> list[str]:
    out: list[str] = []
    for item in ids:
        if item and item not in out:
            out.append(item)
    return out


# ---- arandu (the reference SDK): asyncio -----------------------------------------------


async def run_arandu(job: dict[str, Any], data: dict[str, Any]) -> None:
    import psycopg
    from arandu import MemoryClient
    from arandu.providers.openai import OpenAIProvider

    # The SDK's OpenAI provider builds AsyncOpenAI(api_key=...): the base URL comes from
    # OPENAI_BASE_URL, set by the benchmark to the local stub.
    provider = OpenAIProvider(api_key="bench", model=STUB_MODEL, timeout=120.0)
    client = MemoryClient(database_url=job["sqlalchemy_url"], llm=provider, embeddings=provider)
    await client.initialize()
    event_turn: dict[str, str] = {}

    async def write(agent: str, turn: dict[str, Any], errors: Errors) -> float:
        started = time.perf_counter()
        try:
            result = await client.write(
                agent_id=agent,
                message=turn["message"],
                speaker_name=turn["speaker_name"],
                session_id=turn["session_id"],
                occurred_at=datetime.fromisoformat(turn["occurred_at"]),
            )
            if result.event_id:
                event_turn[result.event_id] = turn["message_id"]
            if not result.success:
                errors.add(f"{agent} {turn['message_id']}: {result.error}")
        except Exception as error:
            errors.add(f"{agent} {turn['message_id']}: {type(error).__name__}: {error}")
        return time.perf_counter() - started

    async def writer(
        agent: str, turns: list[dict[str, Any]], errors: Errors, latencies: list[float], progress: Progress
    ) -> None:
        for turn in turns:
            latencies.append(await write(agent, turn, errors))
            progress.add()

    boundary(None, None, "sequential")
    seq = data["sequential"]
    errors, latencies = Errors(), []
    started = time.perf_counter()
    await writer(seq["agent"], seq["turns"], errors, latencies, Progress())
    results = write_results(len(seq["turns"]), time.perf_counter() - started, latencies, errors)

    boundary("sequential", results, "concurrent")
    errors, latencies = Errors(), []
    conversations: dict[str, list[dict[str, Any]]] = data["concurrent"]
    started = time.perf_counter()
    progress = Progress()
    await asyncio.gather(*(writer(agent, turns, errors, latencies, progress) for agent, turns in conversations.items()))
    results = write_results(sum(map(len, conversations.values())), time.perf_counter() - started, latencies, errors)

    # Which turn each fact came from: the fact's source event, written by one client.write.
    with psycopg.connect(job["database_url"], autocommit=True) as conn:
        rows = conn.execute("SELECT id::text, source_event_id::text FROM memory_facts").fetchall()
    fact_turn = {fact_id: event_turn.get(event_id or "") for fact_id, event_id in rows}

    async def retrieve_pass(overrides: dict[str, Any] | None, *, warm_up: bool = False) -> dict[str, Any]:
        # The warm-up (untimed) asks the first questions once: pools, caches and plans filled.
        questions = data["questions"][: job["clients"]] if warm_up else data["questions"]
        queue = iter(questions)
        ranked: dict[str, list[str]] = {}
        latencies: list[float] = []
        errors = Errors()

        async def caller() -> None:
            for question in queue:
                moment = time.perf_counter()
                try:
                    answer = await client.retrieve(question["agent"], question["text"], config_overrides=overrides)
                    latencies.append(time.perf_counter() - moment)
                    ranked[question["id"]] = distinct([fact_turn.get(fact.fact_id) for fact in answer.facts])
                except Exception as error:
                    errors.add(f"{question['id']}: {type(error).__name__}: {error}")

        moment = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(job["clients"])))
        return retrieve_results(time.perf_counter() - moment, latencies, ranked, errors)

    # The warm-up is a phase of its own, so that the passes' CPU figures leave it out.
    boundary("concurrent", results, "warm_up")
    await retrieve_pass({"enable_reranker": False}, warm_up=True)
    boundary("warm_up", None, "retrieve_formula")
    results = await retrieve_pass({"enable_reranker": False})
    boundary("retrieve_formula", results, "retrieve_default")
    results = await retrieve_pass(None)
    boundary("retrieve_default", results, None)
    await client.close()


# ---- mem0 OSS: threads -----------------------------------------------------------------


def run_mem0(job: dict[str, Any], data: dict[str, Any]) -> None:
    from mem0 import Memory

    dimensions = int(job["dimensions"])
    config = {
        "llm": {
            "provider": "openai",
            "config": {"model": STUB_MODEL, "api_key": "bench", "openai_base_url": job["base_url"]},
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "text-embedding-3-small",
                "api_key": "bench",
                "openai_base_url": job["base_url"],
                "embedding_dims": dimensions,
            },
        },
        "vector_store": {
            "provider": "pgvector",
            "config": {
                "connection_string": job["database_url"],
                "collection_name": "mem0_bench",
                "embedding_model_dims": dimensions,
                # Its default pool of 5 connections would make 16 callers queue for a connection.
                "maxconn": max(int(job["clients"]), 5) + 4,
            },
        },
        "history_db_path": os.path.join(job["home"], "mem0-history.db"),
    }
    memory = Memory.from_config(config)

    def write(agent: str, turn: dict[str, Any], errors: Errors) -> float:
        started = time.perf_counter()
        try:
            # mem0's message format carries no speaker: the name goes in the text, as LoCoMo
            # evaluations of mem0 do. mem0 OSS refuses ``timestamp`` (platform only): the session
            # date is kept as metadata, which its extraction and search do not read.
            memory.add(
                [{"role": "user", "content": f"{turn['speaker_name']}: {turn['message']}"}],
                user_id=agent,
                metadata={
                    "dia_id": turn["message_id"],
                    "session_id": turn["session_id"],
                    "occurred_at": turn["occurred_at"],
                },
            )
        except Exception as error:
            errors.add(f"{agent} {turn['message_id']}: {type(error).__name__}: {error}")
        return time.perf_counter() - started

    def writer(
        agent: str, turns: list[dict[str, Any]], errors: Errors, latencies: list[float], progress: Progress
    ) -> None:
        for turn in turns:
            latencies.append(write(agent, turn, errors))
            progress.add()

    boundary(None, None, "sequential")
    seq = data["sequential"]
    errors, latencies = Errors(), []
    started = time.perf_counter()
    writer(seq["agent"], seq["turns"], errors, latencies, Progress())
    results = write_results(len(seq["turns"]), time.perf_counter() - started, latencies, errors)

    boundary("sequential", results, "concurrent")
    errors, latencies = Errors(), []
    conversations: dict[str, list[dict[str, Any]]] = data["concurrent"]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(conversations)) as pool:
        progress = Progress()
        jobs = [
            pool.submit(writer, agent, turns, errors, latencies, progress) for agent, turns in conversations.items()
        ]
        for future in jobs:
            future.result()
    results = write_results(sum(map(len, conversations.values())), time.perf_counter() - started, latencies, errors)

    def retrieve_pass(*, warm_up: bool = False) -> dict[str, Any]:
        # The warm-up (untimed) asks the first questions once: pools, caches and plans filled.
        questions = data["questions"][: job["clients"]] if warm_up else data["questions"]
        ranked: dict[str, list[str]] = {}
        latencies: list[float] = []
        errors = Errors()
        lock = threading.Lock()
        queue = iter(questions)

        def caller() -> None:
            while True:
                with lock:
                    question = next(queue, None)
                if question is None:
                    return
                moment = time.perf_counter()
                try:
                    answer = memory.search(question["text"], filters={"user_id": question["agent"]})
                    latencies.append(time.perf_counter() - moment)
                    ranked[question["id"]] = distinct(
                        [(item.get("metadata") or {}).get("dia_id") for item in answer.get("results", [])]
                    )
                except Exception as error:
                    errors.add(f"{question['id']}: {type(error).__name__}: {error}")

        moment = time.perf_counter()
        with ThreadPoolExecutor(max_workers=job["clients"]) as pool:
            for future in [pool.submit(caller) for _ in range(job["clients"])]:
                future.result()
        return retrieve_results(time.perf_counter() - moment, latencies, ranked, errors)

    boundary("concurrent", results, "warm_up")
    retrieve_pass(warm_up=True)
    boundary("warm_up", None, "retrieve_formula")
    # mem0's search calls no LLM by default (its reranker is opt-in): one pass serves both rows.
    results = retrieve_pass()
    boundary("retrieve_formula", results, "retrieve_default")
    results["note"] = "mem0's search calls no LLM by default (its reranker is opt-in): one pass gives both rows"
    results["figures_of"] = "retrieve_formula"
    boundary("retrieve_default", results, None)


# ---- entry point -------------------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str] = {}
    for name in ("arandu", "mem0ai", "openai", "psycopg", "sqlalchemy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found


RUNNERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], Any]] = {
    "arandu": lambda job, data: asyncio.run(run_arandu(job, data)),
    "mem0": run_mem0,
}


def main() -> int:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    with open(sys.argv[1], encoding="utf-8") as handle:
        job = json.load(handle)
    with open(job["data"], encoding="utf-8") as handle:
        data = json.load(handle)
    started = time.perf_counter()
    say({"event": "hello", "system": job["system"], "versions": versions()})
    try:
        RUNNERS[job["system"]](job, data)
    except SystemExit:
        raise
    except BaseException as error:
        say(
            {
                "event": "failed",
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc()[-3000:],
            }
        )
        return 1
    say({"event": "done", "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    sys.exit(main())
