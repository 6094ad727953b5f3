"""The peers benchmark's own parts, without the peers (installing them needs PyPI; no test does).

The stub model is checked over real HTTP as each system calls it; the table as a reader gets it,
including a peer that could not run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx

from memory_core.providers.hashing_embedder import HashingEmbedder
from ops.bench.locomo import Question
from ops.bench.peers import (
    CAPABILITIES,
    PEER_REQUIREMENTS,
    Ingest,
    Pass,
    SystemRun,
    Workload,
    build_rows,
    capability_rows,
    ensure_peers_venv,
)
from ops.bench.peers_stub import ARANDU, ARANDU_KINDS, MEM0, MEM0_MARKER, OUR_RERANK, OURS, PeerModel, Tally
from tests.support.openai_stub import OpenAIStub


def _chat(client: httpx.Client, system: str, user: str) -> dict[str, object]:
    response = client.post(
        "/chat/completions",
        json={"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]},
    )
    assert response.status_code == 200
    return json.loads(response.json()["choices"][0]["message"]["content"])


def _cosine(left: list[float], right: list[float]) -> float:
    return sum(a * b for a, b in zip(left, right, strict=True)) / math.sqrt(
        sum(a * a for a in left) * sum(b * b for b in right)
    )


def test_every_system_gets_the_same_extraction_and_the_same_embedding_geometry() -> None:
    model = PeerModel(latency_s=0.0)
    message = "I adopted a rescue dog named Biscuit last week. Thanks!"
    with (
        OpenAIStub(chat_handler=model.chat, embeddings_handler=model.embeddings) as stub,
        httpx.Client(base_url=stub.base_url, timeout=10) as client,
    ):
        informed = next(prefix for prefix, kind in ARANDU_KINDS if kind == "extract_informed")
        arandu = _chat(
            client,
            f'{informed}.\nThe speaker of this message is "Caroline".',
            f"Current message to extract from:\n{message}",
        )
        mem0 = _chat(
            client,
            f"# ROLE\n\n{MEM0_MARKER}.",
            f"## Existing Memories\n[]\n\n## New Messages\nuser: Caroline: {message}\n\n## Current Date\n2026-01-01",
        )
        ours = _chat(
            client,
            f"{OUR_RERANK} help answer a user's query.",
            "Query: what is the dog called?\nFacts:\n[1] Caroline adopted a dog named Biscuit\n[2] Melanie paints",
        )
        vectors = client.post("/embeddings", json={"input": ["dog named Biscuit", "a rescue dog"]}).json()["data"]
        short = client.post(
            "/embeddings", json={"input": ["dog named Biscuit", "a rescue dog"], "dimensions": 384}
        ).json()["data"]

    expected = "Caroline adopted a rescue dog named Biscuit last week."
    assert [fact["fact"] for fact in arandu["facts"]] == [expected]  # type: ignore[index]
    assert arandu["entities"] == [{"name": "Caroline", "type": "person", "aliases": []}]
    assert [item["text"] for item in mem0["memory"]] == [expected]  # type: ignore[index]
    scores = {item["id"]: item["score"] for item in ours["scores"]}  # type: ignore[index]
    assert scores[1] > scores[2] == 0.0

    # The peers get this service's hashing vectors padded with zeros: the same cosines.
    assert [len(item["embedding"]) for item in vectors] == [1536, 1536]
    assert [len(item["embedding"]) for item in short] == [384, 384]
    local = HashingEmbedder(384).embed(["dog named Biscuit", "a rescue dog"])
    assert math.isclose(_cosine(vectors[0]["embedding"], vectors[1]["embedding"]), _cosine(local[0], local[1]))

    tallies, embedding_requests, texts = model.take()
    assert {name: tally.total_calls for name, tally in tallies.items()} == {ARANDU: 1, MEM0: 1, OURS: 1}
    assert (embedding_requests, texts) == (2, 4)
    assert model.take()[0] == {}


def _run(
    name: str,
    *,
    rate: float,
    calls: int,
    p95_ms: float,
    ranked: dict[str, list[str]],
    cpu_s: float = 0.1,
    busiest: float = 0.05,
) -> SystemRun:
    concurrent = Ingest(messages=100, wall_s=100 / rate, latencies=[1.0, 2.0], tally=Tally())
    concurrent.tally.calls["extract"] = calls
    retrieved = Pass(
        latencies=[p95_ms / 1000.0] * 4, wall_s=1.0, ranked=ranked, cpu_s=cpu_s, busiest_process_cores=busiest
    )
    return SystemRun(name=name, concurrent=concurrent, formula=retrieved, default=retrieved)


def test_the_table_gives_ratios_to_the_better_peer_and_says_why_a_peer_did_not_run() -> None:
    workload = Workload(
        sequential_agent="seq",
        sequential=[],
        conversations={"a": []},
        questions=[Question("a", "q0", 1, ("D1:1",)), Question("a", "q1", 1, ("D1:2", "D1:3"))],
    )
    ours = _run(OURS, rate=50.0, calls=20, p95_ms=40.0, ranked={"0": ["D1:1"], "1": ["D1:2", "D1:3"]}, cpu_s=0.1)
    arandu = _run(
        ARANDU, rate=2.0, calls=250, p95_ms=100.0, ranked={"0": ["D1:1"], "1": ["D1:9"]}, cpu_s=0.2, busiest=0.15
    )
    mem0 = SystemRun(name=MEM0, unavailable="pip install failed: no matching distribution")

    rows, targets, notes = build_rows([ours, arandu, mem0], workload)

    by_name = {row[0]: row for row in rows}
    throughput = by_name["messages/s end to end, natural concurrency"]
    assert throughput[1:5] == ["50.00", "2.00", "could not run", "25.00x"]
    assert throughput[5].endswith("met")
    recall = by_name["evidence recall@5 / @10, defaults (%)"]
    assert recall[1:3] == ["100.0 / 100.0", "50.0 / 50.0"]
    # Four retrieves in each pass: 0.1 s and 0.2 s of CPU are 25 and 50 ms per retrieve.
    cpu = by_name["CPU per retrieve, LLM reranker off (ms; the system's processes + PostgreSQL)"]
    assert cpu[1:5] == ["25.0", "50.0", "could not run", "0.50x"]
    # Over the 1 s pass: all the system's CPU, then its busiest process's, in cores (no ratio).
    cores = by_name["cores busy during that pass: the system's processes + PostgreSQL / its busiest process"]
    assert cores[1:5] == ["0.10 / 0.05", "0.20 / 0.15", "could not run", ""]
    assert capability_rows([ours, arandu, mem0])[0] == list(CAPABILITIES[0])
    assert [len(row) for row in capability_rows([ours])] == [2] * len(CAPABILITIES)
    assert targets == {
        "messages/s end to end, natural concurrency: >= 20x the better peer": True,
        "chat calls per message, natural concurrency: <= the better peer's": True,
        "retrieve p50 / p95, 16 clients, LLM reranker off (ms): p95 <= 0.5x the better peer": True,
        "evidence recall@5 / @10, defaults (%): @10 above both": True,
    }
    assert any(f"{MEM0} could not run here: pip install failed" in note for note in notes)


def test_an_installed_venv_with_the_same_pins_is_reused_without_pip(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / ".peers-installed").write_text("\n".join(PEER_REQUIREMENTS))

    assert ensure_peers_venv(venv) == venv / "bin" / "python"
