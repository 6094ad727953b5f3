"""Chunks of one agent's events (batches, imports, sweeps): same memory, same guarantees, per event."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memory_core.cognition.models import ExtractionInput, ExtractionOutput
from memory_core.cognition.offline import build_offline_write_skills
from memory_core.cognition.skill import Skill, SkillOutcome
from memory_core.providers.errors import RetryableProviderError
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_stage_chunk, run_upsert
from memory_core.write.runs import plan_chunks
from memory_core.write.schemas import STAGES
from tests.workers.conftest import WritePath, start_write_path
from tests.workers.memory_queries import MemoryInspector
from tests.workers.test_consistency import HISTORY, START

RUNS_AND_OUTPUTS = (
    "SELECT r.event_id, r.status, r.attempts, r.result, o.stage, o.output FROM pipeline_runs r "
    "LEFT JOIN pipeline_stage_outputs o ON o.event_id = r.event_id WHERE r.agent_id = :a ORDER BY r.event_id, o.stage"
)


@pytest.fixture
def memory(write_settings: Settings) -> Iterator[MemoryInspector]:
    inspector = MemoryInspector(write_settings.database_url)
    try:
        yield inspector
    finally:
        inspector.close()


def _accept(context: WriteContext, agent: str, texts: list[str], days: list[int]) -> list[uuid.UUID]:
    with context.sessions.begin() as session:
        accepted = accept_messages(
            session,
            agent,
            [
                IncomingMessage(message=text, speaker_name="Marina", occurred_at=START + timedelta(days=17 * day))
                for text, day in zip(texts, days, strict=True)
            ],
        )
    return [item.event_id for item in accepted]


def _one_message_at_a_time(context: WriteContext, event_ids: list[uuid.UUID]) -> None:
    """Every stage of each event in turn, as chains of one message would."""
    for event_id in event_ids:
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            assert stage(context, event_id) == "completed"


def _counters(memory: MemoryInspector, agent: str) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
    """Entities' fact counts and the attribute registry: sums a chunk writes once for all its messages."""
    counts = {key: entity["fact_count"] for key, entity in memory.entities(agent).items()}
    registry = {
        row["key"]: (row["seen_count"], row["status"])
        for row in memory.rows(
            "SELECT key, seen_count, status FROM memory_attribute_registry WHERE agent_id = :a", a=agent
        )
    }
    return counts, registry


def _final_state(memory: MemoryInspector, agent: str) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
    facts = {(f["entity_key"], f["fact_text"]) for f in memory.active_facts(agent)}
    edges = {
        (r["source_entity_key"], r["rel_type"], r["target_entity_key"])
        for r in memory.relationships(agent)
        if r["valid_to"] is None
    }
    return facts, edges


def test_history_in_random_chunks_ends_in_the_same_memory_as_one_message_at_a_time(
    context: WriteContext, memory: MemoryInspector
) -> None:
    base = f"agent-{uuid.uuid4().hex[:8]}"
    order = list(range(len(HISTORY)))
    one_by_one = _accept(context, f"{base}-single", HISTORY, order)
    _one_message_at_a_time(context, one_by_one)
    expected = _final_state(memory, f"{base}-single")
    expected_counters = _counters(memory, f"{base}-single")
    assert expected_counters[0]["person:marina"] > 5
    # Marina moved away from Lisbon and Porto: no active fact names them any more.
    assert (expected_counters[0]["place:lisbon"], expected_counters[0]["place:porto"]) == (0, 0)
    assert sum(seen for seen, _ in expected_counters[1].values()) >= 10
    assert [t for k, t in expected[0] if k == "person:marina" and "Amsterdam" in t] == ["Marina lives in Amsterdam."]
    assert ("person:marina", "Marina works at Hooli.") in expected[0]

    for seed in (3, 11):
        rng = random.Random(seed)
        agent = f"{base}-chunks{seed}"
        ids = _accept(context, agent, HISTORY, order)
        # Chunks that mix old and new statements, processed in an order unrelated to time.
        rng.shuffle(ids)
        chunks: list[list[uuid.UUID]] = []
        while ids:
            size = rng.randint(1, 9)
            chunks.append(ids[:size])
            ids = ids[size:]
        rng.shuffle(chunks)
        for chunk in chunks:
            for stage in STAGES:
                outcomes = run_stage_chunk(context, stage, chunk)
                assert set(outcomes.values()) == {"completed"}, outcomes
        facts, edges = _final_state(memory, agent)
        assert facts == expected[0], f"seed {seed}: {facts ^ expected[0]}"
        assert edges == expected[1], f"seed {seed}: {edges ^ expected[1]}"
        assert _counters(memory, agent) == expected_counters
        assert {r["status"] for r in memory.rows("SELECT status FROM pipeline_runs WHERE agent_id = :a", a=agent)} == {
            "done"
        }


def test_running_every_chunk_stage_twice_leaves_the_same_database(
    context: WriteContext, memory: MemoryInspector
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:8]}-twice"
    texts = [
        "Eu moro em São Paulo.",
        "Me mudei para o Rio de Janeiro.",
        "Meu amigo Guili (Guilherme Maturana) trabalha na Vertix.",
        "I have a dog named Rex.",
    ]
    chunk = _accept(context, agent, texts, [0, 1, 2, 3])
    for stage in STAGES:
        assert run_stage_chunk(context, stage, chunk) == dict.fromkeys(chunk, "completed")
        once, once_runs = memory.snapshot(agent), memory.rows(RUNS_AND_OUTPUTS, a=agent)
        # A redelivered chunk, then a chain of one for an event of it: nothing happens twice.
        assert run_stage_chunk(context, stage, list(reversed(chunk))) == dict.fromkeys(chunk, "skipped")
        assert run_stage_chunk(context, stage, chunk[1:2]) == {chunk[1]: "skipped"}
        assert memory.snapshot(agent) == once
        assert memory.rows(RUNS_AND_OUTPUTS, a=agent) == once_runs
    assert len(memory.all_facts(agent)) == 4
    assert len(memory.active_facts(agent)) == 3
    results = memory.rows("SELECT result FROM pipeline_runs WHERE agent_id = :a", a=agent)
    assert all(row["result"]["success"] for row in results)


def test_a_chunk_stage_reports_unknown_and_out_of_turn_events_without_touching_them(
    context: WriteContext, memory: MemoryInspector
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:8]}-turns"
    first, second = _accept(context, agent, ["I live in Lisbon.", "I work at Acme Corp."], [0, 1])
    unknown = uuid.uuid4()
    assert run_stage_chunk(context, "extract", [first]) == {first: "completed"}
    # ``second`` has not been extracted: resolve skips it and does the other.
    assert run_stage_chunk(context, "resolve", [first, second, unknown]) == {
        first: "completed",
        second: "skipped",
        unknown: "missing",
    }
    statuses = {r["event_id"]: r["status"] for r in memory.rows(RUNS_AND_OUTPUTS, a=agent)}
    assert statuses == {first: "resolved", second: "received"}


def test_events_are_planned_in_chunks_of_one_agent_in_time_order(context: WriteContext) -> None:
    base = f"agent-{uuid.uuid4().hex[:8]}"
    days = list(range(40))
    random.Random(5).shuffle(days)
    busy = _accept(context, f"{base}-busy", [f"Message {day}." for day in days], days)
    quiet = _accept(context, f"{base}-quiet", [f"Note {day}." for day in range(5)], list(range(5)))
    by_day = dict(zip(busy, days, strict=True))
    with context.sessions() as session:
        chunks = plan_chunks(session, [*quiet, uuid.uuid4(), *busy], 16)
    assert sorted(len(chunk) for chunk in chunks) == [5, 13, 13, 14]
    busy_chunks = [chunk for chunk in chunks if chunk[0] in by_day]
    assert [by_day[event_id] for chunk in busy_chunks for event_id in chunk] == list(range(40))
    assert [chunk for chunk in chunks if chunk[0] not in by_day] == [quiet]


class FlakyExtraction:
    """The offline extraction, rate limited on a message containing ``flaky`` for its first ``failures`` calls."""

    def __init__(self, inner: Skill[ExtractionInput, ExtractionOutput], failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.refused = 0

    @property
    def name(self) -> str:
        """The wrapped skill's name."""
        return self.inner.name

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        """Refuse with a 429 while failures are left, else answer as the offline rules do."""
        if "flaky" in skill_input.message and self.refused < self.failures:
            self.refused += 1
            raise RetryableProviderError("rate limited", provider="test", status_code=429, retry_after_s=0.2)
        return self.inner.run(skill_input)


@pytest.fixture
def flaky_path(write_settings: Settings) -> Iterator[tuple[WritePath, FlakyExtraction]]:
    offline = build_offline_write_skills()
    flaky = FlakyExtraction(offline.extract_informed, failures=2)
    skills = replace(offline, extract_informed=flaky)

    def factory(own: Settings) -> WriteContext:
        return build_write_context(own, skills=skills)

    for path in start_write_path(write_settings, factory):
        yield path, flaky


def test_an_event_that_fails_in_a_batch_retries_alone_while_its_chunk_goes_on(
    flaky_path: tuple[WritePath, FlakyExtraction],
) -> None:
    path, flaky = flaky_path
    texts = [f"My colleague Person{i} works at Company{i}." for i in range(11)]
    texts.insert(5, "My flaky friend Bruno lives in Recife.")
    when = datetime(2024, 3, 1, tzinfo=UTC)
    batch = [
        {"message": text, "speaker_name": "Rafael", "occurred_at": (when + timedelta(minutes=i)).isoformat()}
        for i, text in enumerate(texts)
    ]
    # Twelve messages: published through ingest.dispatch as one chunk of this agent.
    response = path.client.post(f"/v1/agents/{path.agent_id}/messages/batch", json={"messages": batch})
    assert response.status_code == 202, response.text
    ids = response.json()["event_ids"]
    assert path.wait(ids, timeout_s=120) == dict.fromkeys(ids, "done")
    assert flaky.refused == 2
    tries = {
        str(row["event_id"]): (row["attempts"], row["throttled_retries"])
        for row in path.memory.rows(
            "SELECT event_id, attempts, throttled_retries FROM pipeline_runs WHERE agent_id = :a", a=path.agent_id
        )
    }
    # Refused with a Retry-After (429): retries of their own, no failed attempt spent.
    assert tries == {event_id: (0, 2 if event_id == ids[5] else 0) for event_id in ids}
    texts_written = [f["fact_text"] for f in path.memory.all_facts(path.agent_id)]
    assert len(texts_written) == len(set(texts_written)) == 12
    assert any("Recife" in text for text in texts_written)


def test_a_fact_failing_in_a_chunk_is_applied_again_guarded_and_only_that_fact_is_lost(
    context: WriteContext, memory: MemoryInspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upsert applies a chunk without savepoints first; a failure there rolls it all back and redoes it guarded."""
    from memory_core.write import upsert

    agent = f"agent-{uuid.uuid4().hex[:8]}-guarded"
    texts = ["I live in Lisbon.", "I work at Acme Corp.", "I have a dog named Rex."]
    chunk = _accept(context, agent, texts, [0, 1, 2])
    for stage in ("extract", "resolve", "reconcile"):
        assert run_stage_chunk(context, stage, chunk) == dict.fromkeys(chunk, "completed")
    original = upsert.Applier.apply_decision
    attempts: list[str] = []

    def failing(self: upsert.Applier, decision: upsert.FactDecision) -> None:
        attempts.append(decision.text)
        if "Acme" in decision.text:
            raise RuntimeError("injected")
        original(self, decision)

    monkeypatch.setattr(upsert.Applier, "apply_decision", failing)
    assert run_stage_chunk(context, "upsert", chunk) == dict.fromkeys(chunk, "completed")
    # The optimistic pass stopped at the failing fact; the guarded pass went through all of them.
    assert sum("Acme" in text for text in attempts) == 2
    facts = [f["fact_text"] for f in memory.all_facts(agent)]
    # Nothing of the rolled-back pass remains: each fact once, the failing one not at all.
    assert sorted(facts) == sorted(set(facts))
    assert any("Lisbon" in text for text in facts)
    assert any("Rex" in text for text in facts)
    assert not any("Acme" in text for text in facts)
    results = {
        r["event_id"]: r["result"]
        for r in memory.rows("SELECT event_id, result FROM pipeline_runs WHERE agent_id = :a", a=agent)
    }
    assert any("not written: RuntimeError: injected" in w for w in results[chunk[1]]["warnings"])
    assert results[chunk[0]]["warnings"] == []
    assert results[chunk[2]]["warnings"] == []
    links = memory.rows("SELECT fact_id, entity_key FROM memory_fact_entity_links WHERE agent_id = :a", a=agent)
    assert len(links) == len({(row["fact_id"], row["entity_key"]) for row in links}) >= len(facts)


def test_a_message_failing_in_a_chunk_fails_alone_after_the_chunk_is_applied_again(
    context: WriteContext, memory: MemoryInspector, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_core.write import upsert

    agent = f"agent-{uuid.uuid4().hex[:8]}-message"
    chunk = _accept(context, agent, ["I live in Lisbon.", "I work at Acme Corp.", "I have a dog named Rex."], [0, 1, 2])
    for stage in ("extract", "resolve", "reconcile"):
        assert run_stage_chunk(context, stage, chunk) == dict.fromkeys(chunk, "completed")
    original = upsert.Applier.link_facts

    def failing(self: upsert.Applier, decisions: Any, entities: Any) -> None:
        original(self, decisions, entities)
        if self.run.event_id == chunk[1]:
            raise RuntimeError("injected")

    monkeypatch.setattr(upsert.Applier, "link_facts", failing)
    outcomes = run_stage_chunk(context, "upsert", chunk)
    assert outcomes[chunk[0]] == outcomes[chunk[2]] == "completed"
    assert isinstance(outcomes[chunk[1]], RuntimeError)
    facts = [f["fact_text"] for f in memory.all_facts(agent)]
    assert sorted(facts) == sorted(set(facts))
    assert not any("Acme" in text for text in facts)
    statuses = {
        r["event_id"]: r["status"]
        for r in memory.rows("SELECT event_id, status FROM pipeline_runs WHERE agent_id = :a", a=agent)
    }
    assert statuses == {chunk[0]: "done", chunk[1]: "reconciled", chunk[2]: "done"}


def test_messages_sharing_a_timestamp_are_applied_in_the_order_they_were_sent(
    context: WriteContext, memory: MemoryInspector
) -> None:
    # An import stamps a whole session with its date: arrival order (seq) says which came first.
    for first, second, expected in (
        ("Lisbon", "Porto", "Marina moved to Porto."),
        ("Porto", "Lisbon", "Marina moved to Lisbon."),
    ):
        agent = f"agent-{uuid.uuid4().hex[:8]}"
        with context.sessions.begin() as session:
            accepted = accept_messages(
                session,
                agent,
                [
                    IncomingMessage(message=f"I live in {first}.", speaker_name="Marina", occurred_at=START),
                    IncomingMessage(message=f"I moved to {second}.", speaker_name="Marina", occurred_at=START),
                ],
            )
        ids = [item.event_id for item in accepted]
        with context.sessions() as session:
            assert plan_chunks(session, list(reversed(ids)), 16) == [ids]
        for stage in STAGES:
            assert set(run_stage_chunk(context, stage, list(reversed(ids))).values()) == {"completed"}
        homes = [f["fact_text"] for f in memory.active_facts(agent) if f["attribute_key"] == "location.residence"]
        assert homes == [expected]


def test_a_retraction_ends_what_it_retracts_in_a_chunk_and_in_any_order(
    context: WriteContext, memory: MemoryInspector
) -> None:
    """Later messages of a chunk are reconciled before its earlier ones are applied: the apply settles them."""
    base = f"agent-{uuid.uuid4().hex[:8]}"
    texts = [
        "I like jazz.",
        "I work at Acme Corp.",
        "Eu gosto de café.",
        "I no longer work at Acme Corp.",
        "I no longer like jazz.",
        "Não gosto mais de café.",
    ]
    days = [0, 1, 2, 3, 4, 5]
    one_by_one = _accept(context, f"{base}-single", texts, days)
    _one_message_at_a_time(context, one_by_one)
    expected = _final_state(memory, f"{base}-single")
    # Processed one message at a time, each retraction replaces the fact it retracts.
    assert {text for _, text in expected[0]} == {
        "Marina no longer works at Acme Corp.",
        "Marina no longer likes jazz.",
        "Marina não gosta mais de café.",
    }

    chunk = _accept(context, f"{base}-chunk", texts, days)
    for stage in STAGES:
        assert set(run_stage_chunk(context, stage, chunk).values()) == {"completed"}
    assert _final_state(memory, f"{base}-chunk") == expected
    superseded = [f for f in memory.all_facts(f"{base}-chunk") if f["valid_to"] is not None]
    assert [f["fact_text"] for f in superseded] == [
        f["fact_text"] for f in memory.all_facts(f"{base}-single") if f["valid_to"] is not None
    ]

    # History arriving newest first: each statement is found to be older than its retraction.
    backwards = _accept(context, f"{base}-backwards", texts, days)
    _one_message_at_a_time(context, list(reversed(backwards)))
    assert _final_state(memory, f"{base}-backwards") == expected
    reversed_chunk = _accept(context, f"{base}-reversed-chunk", texts, days)
    for stage in STAGES:
        assert set(run_stage_chunk(context, stage, reversed_chunk[3:]).values()) == {"completed"}
    for stage in STAGES:
        assert set(run_stage_chunk(context, stage, reversed_chunk[:3]).values()) == {"completed"}
    assert _final_state(memory, f"{base}-reversed-chunk") == expected
    history = [(f["fact_text"], f["valid_to"]) for f in memory.all_facts(f"{base}-backwards")]
    assert ("Marina gosta de café.", START + timedelta(days=17 * 5)) in history


def _entity_rows(memory: MemoryInspector, agent: str) -> dict[str, tuple[Any, ...]]:
    """What naming an entity writes on its row: seen times, name, embedding, active flag, fact count."""
    return {
        row["canonical_key"]: (
            row["first_seen_at"],
            row["last_seen_at"],
            row["display_name"],
            row["has_embedding"],
            row["is_active"],
            row["fact_count"],
        )
        for row in memory.rows(
            "SELECT canonical_key, first_seen_at, last_seen_at, display_name, "
            "embedding_vec IS NOT NULL AS has_embedding, is_active, fact_count "
            "FROM memory_entities WHERE agent_id = :a",
            a=agent,
        )
    }


def test_a_chunk_writes_each_named_entity_as_message_by_message_would(
    context: WriteContext, memory: MemoryInspector
) -> None:
    base = f"agent-{uuid.uuid4().hex[:8]}-seen"
    texts = ["I live in Lisbon.", "My sister Julia is a doctor.", "I went to a concert with Julia.", "I love jazz."]
    # Out of order in time: first and last seen are the extremes, not the first and last applied.
    days = [3, 0, 5, 1]
    one_by_one = _accept(context, f"{base}-single", texts, days)
    _one_message_at_a_time(context, one_by_one)
    expected = _entity_rows(memory, f"{base}-single")
    marina = expected["person:marina"]
    assert (marina[0], marina[1]) == (START, START + timedelta(days=17 * 5))
    assert expected["person:julia"][:2] == (START, START + timedelta(days=17 * 5))

    chunked = f"{base}-chunk"
    chunk = _accept(context, chunked, texts, days)
    for stage in STAGES:
        assert run_stage_chunk(context, stage, chunk) == dict.fromkeys(chunk, "completed")
    assert _entity_rows(memory, chunked) == expected

    # An entity set aside (inactive) and named again by a later chunk is active again, seen until
    # the latest of that chunk's messages.
    with memory.engine.begin() as connection:
        connection.execute(
            text("UPDATE memory_entities SET is_active = false WHERE agent_id = :a AND canonical_key = :k"),
            {"a": chunked, "k": "person:julia"},
        )
    later = _accept(context, chunked, ["Julia called me yesterday.", "I had lunch with Julia."], [9, 8])
    for stage in STAGES:
        assert run_stage_chunk(context, stage, later) == dict.fromkeys(later, "completed")
    julia = _entity_rows(memory, chunked)["person:julia"]
    assert julia[:5] == (START, START + timedelta(days=17 * 9), "Julia", True, True)
    assert _entity_rows(memory, chunked)["person:marina"][:2] == (START, START + timedelta(days=17 * 9))
