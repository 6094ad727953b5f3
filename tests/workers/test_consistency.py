"""Correct under concurrency, redelivery and shuffled history."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from memory_core.write.context import build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert
from tests.workers.conftest import WritePath

START = datetime(2023, 1, 5, 10, 0, tzinfo=UTC)
HISTORY: list[str] = [
    "I live in Lisbon.",
    "I work at Acme Corp.",
    "I love jazz.",
    "My sister Julia is a doctor.",
    "I have a dog named Rex.",
    "I moved to Porto.",
    "I work at Globex now.",
    "I like hiking on weekends.",
    "My brother Tomas lives in Madrid.",
    "I am a software engineer.",
    "I moved to Berlin.",
    "I love jazz.",
    "I work at Initech.",
    "Eu gosto de café.",
    "My mother Helena lives in Coimbra.",
    "I went to a concert with Julia.",
    "I adopted a cat named Luna.",
    "I am a product manager.",
    "I moved to Amsterdam.",
    "I enjoy cooking Italian food.",
    "My friend Pedro works at Globex.",
    "I visited Paris in the summer.",
    "I love jazz.",
    "Julia moved to London.",
    "Julia works at Saint Mary Hospital.",
    "I am learning to play the piano.",
    "I work at Hooli.",
    "Tomas got married last spring.",
    "I like hiking on weekends.",
    "I ran a half marathon in April.",
    "I live in Amsterdam.",
    "Thanks!",
]


def _ingest(path: WritePath, agent: str, order: list[int]) -> None:
    ids: list[str] = []
    # Sent concurrently as a user importing history would: arrival order is not occurrence order.
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [
            pool.submit(path.post, HISTORY[i], "Marina", agent=agent, occurred_at=START + timedelta(days=17 * i))
            for i in order
        ]
        ids = [future.result() for future in futures]
    statuses = path.wait(ids, timeout_s=180)
    assert set(statuses.values()) == {"done"}


def _final_state(path: WritePath, agent: str) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
    facts = {(f["entity_key"], f["fact_text"]) for f in path.memory.active_facts(agent)}
    edges = {
        (r["source_entity_key"], r["rel_type"], r["target_entity_key"])
        for r in path.memory.relationships(agent)
        if r["valid_to"] is None
    }
    return facts, edges


def test_shuffled_history_ends_in_the_same_active_memory(write_path: WritePath) -> None:
    in_order = list(range(len(HISTORY)))
    shuffled_a = in_order[:]
    random.Random(7).shuffle(shuffled_a)
    shuffled_b = in_order[::-1]
    agents = [f"{write_path.agent_id}-{name}" for name in ("ordered", "shuffled", "reversed")]
    # The ordered run goes one message at a time, the others all at once.
    for i in in_order:
        event = write_path.post(HISTORY[i], "Marina", agent=agents[0], occurred_at=START + timedelta(days=17 * i))
        assert write_path.wait([event]) == {event: "done"}
    _ingest(write_path, agents[1], shuffled_a)
    _ingest(write_path, agents[2], shuffled_b)

    expected_facts, expected_edges = _final_state(write_path, agents[0])
    residence = [text for key, text in expected_facts if key == "person:marina" and "Amsterdam" in text]
    assert residence == ["Marina lives in Amsterdam."]
    assert ("person:marina", "Marina works at Hooli.") in expected_facts
    assert ("person:marina", "Marina works at Acme Corp.") not in expected_facts
    assert sum(1 for _, text in expected_facts if text == "Marina loves jazz.") == 1
    for agent in agents[1:]:
        facts, edges = _final_state(write_path, agent)
        assert facts == expected_facts, f"{agent}: {facts ^ expected_facts}"
        assert edges == expected_edges, f"{agent}: {edges ^ expected_edges}"


def test_fifty_simultaneous_messages_about_one_person_make_one_entity_and_one_fact(write_path: WritePath) -> None:
    message = "A Ana Souza trabalha na Vertix."
    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = list(pool.map(lambda _: write_path.post(message, "Rafael"), range(50)))
    statuses = write_path.wait(ids, timeout_s=180)
    assert set(statuses.values()) == {"done"}
    memory, agent = write_path.memory, write_path.agent_id
    people = [key for key in memory.entities(agent) if "ana" in key]
    assert people == ["person:ana_souza"]
    active = [f for f in memory.active_facts(agent) if f["fact_text"] == message]
    assert len(active) == 1
    assert active[0]["reinforcement_count"] == 49
    works_at = [r for r in memory.relationships(agent) if r["rel_type"] == "works_at"]
    assert len(works_at) == 1


def test_running_every_stage_twice_leaves_the_same_database(write_path: WritePath) -> None:
    messages = [
        "Eu moro em São Paulo.",
        "Me mudei para o Rio de Janeiro.",
        "Meu amigo Guili (Guilherme Maturana) trabalha na Vertix.",
        "I have a dog named Rex.",
    ]
    context = build_write_context(write_path.settings)
    agent = f"{write_path.agent_id}-twice"
    try:
        # Accepted without enqueueing, then every stage run by hand twice, as a redelivery would run it.
        with context.sessions.begin() as session:
            accepted = accept_messages(
                session,
                agent,
                [
                    IncomingMessage(message=m, speaker_name="Rafael", occurred_at=START + timedelta(days=i))
                    for i, m in enumerate(messages)
                ],
            )
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            for item in accepted:
                assert stage(context, item.event_id) == "completed"
            once = write_path.memory.snapshot(agent)
            once_runs = write_path.memory.rows(
                "SELECT r.event_id, r.status, r.result, o.stage, o.output FROM pipeline_runs r "
                "LEFT JOIN pipeline_stage_outputs o ON o.event_id = r.event_id WHERE r.agent_id = :a "
                "ORDER BY r.event_id, o.stage",
                a=agent,
            )
            for item in accepted:
                assert stage(context, item.event_id) == "skipped"
            assert write_path.memory.snapshot(agent) == once
            assert (
                write_path.memory.rows(
                    "SELECT r.event_id, r.status, r.result, o.stage, o.output FROM pipeline_runs r "
                    "LEFT JOIN pipeline_stage_outputs o ON o.event_id = r.event_id WHERE r.agent_id = :a "
                    "ORDER BY r.event_id, o.stage",
                    a=agent,
                )
                == once_runs
            )
        # Four facts written once each; the move to Rio superseded São Paulo.
        assert len(write_path.memory.all_facts(agent)) == 4
        assert len(write_path.memory.active_facts(agent)) == 3
    finally:
        context.close()
