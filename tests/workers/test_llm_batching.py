"""Batched informed extraction end to end: real API, worker, PostgreSQL, Redis, and the real ``openai``
client against the local OpenAI-compatible stub."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from memory_core.cognition.llm import build_llm_write_skills
from memory_core.cognition.llm.batch_extraction import BATCH_EXTRACTION_SKILL
from memory_core.providers.openai_embeddings import OpenAIEmbeddingProvider
from memory_core.providers.openai_llm import OpenAIChatProvider
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.pipeline import run_stage_chunk
from tests.support.openai_stub import EMBEDDINGS, OpenAIStub, StubReply, stub_vector
from tests.workers.conftest import WritePath, start_write_path

SENTENCES = [
    "I adopted a grey kitten called Pipoca",
    "My sister Ana moved to Porto last winter",
    "I work as a nurse at the Santa Maria hospital",
    "Yesterday I finished reading Dune again",
    "I play volleyball every Thursday evening",
    "My favourite dish is bacalhau with potatoes",
    "I am learning the cello since January",
    "Our family trip to Japan is planned for October",
    "I run a small bakery in Braga on weekends",
    "My grandfather Joaquim was a fisherman in Nazare",
    "I speak fluent German after living in Berlin",
    "My daughter Clara starts school in September",
    "I broke my left wrist skiing in Andorra",
    "I volunteer at the animal shelter on Sundays",
    "My car is an old blue Volkswagen Beetle",
    "I grow tomatoes and basil on my balcony",
]

_SECTION = re.compile(r"^### Message (\d+)$", re.MULTILINE)
_SPEAKER = re.compile(r"^Speaker: (.+)$", re.MULTILINE)
_BLOCK = re.compile(r"<message>\n(.*?)\n</message>", re.DOTALL)


def fact_of(speaker: str, message: str) -> str:
    """The one fact the stub model finds in a message: traceable to it word for word."""
    return f"{speaker} said: {message}"


@dataclass
class BatchAwareModel:
    """A ``chat_handler`` that answers single and batched extraction from each message's own text.

    ``malformed`` / ``misattribute`` name words of messages whose part of a batched answer is
    broken: facts not a list, or a fact taken from the next message of the batch.
    """

    malformed: set[str] = field(default_factory=set)
    misattribute: set[str] = field(default_factory=set)
    calls: Counter[str] = field(default_factory=Counter)
    batches: list[list[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> StubReply:
        messages = body.get("messages") or []
        system = next((str(m["content"]) for m in messages if m.get("role") == "system"), "")
        user = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
        if system.startswith("You turn several consecutive"):
            answer = self._batch(user)
            kind = "batch"
        elif system.startswith("You turn one chat message"):
            answer = self._one(user)
            kind = "informed"
        else:
            answer = {"action": "ADD", "target_fact_id": None, "reason": "new", "match": None}
            kind = "other"
        with self.lock:
            self.calls[kind] += 1
        return StubReply.text(json.dumps(answer))

    @staticmethod
    def _parts(user: str) -> tuple[str, str]:
        speaker = _SPEAKER.search(user)
        block = _BLOCK.search(user)
        assert speaker, user
        assert block, user
        return speaker.group(1).strip(), block.group(1).strip()

    def _answer(self, speaker: str, message: str) -> dict[str, Any]:
        return {
            "entities": [{"name": speaker, "type": "person"}],
            "facts": [{"subject": speaker, "text": fact_of(speaker, message), "action": "NEW"}],
            "relations": [],
            "updated_profiles": {},
            "emotion": {"emotion": "neutral", "intensity": 0.1, "energy": "medium"},
        }

    def _one(self, user: str) -> dict[str, Any]:
        return self._answer(*self._parts(user))

    def _batch(self, user: str) -> dict[str, Any]:
        pieces = _SECTION.split(user)[1:]
        parts = [(int(number), self._parts(body)) for number, body in zip(pieces[::2], pieces[1::2], strict=True)]
        with self.lock:
            self.batches.append([message for _, (_, message) in parts])
        items = []
        for position, (number, (speaker, message)) in enumerate(parts):
            item = {"index": number, **self._answer(speaker, message)}
            if any(word in message for word in self.malformed):
                item["facts"] = "a list was expected here"
            if any(word in message for word in self.misattribute):
                _, neighbour = parts[(position + 1) % len(parts)][1]
                item["facts"] = [{"subject": speaker, "text": fact_of(speaker, neighbour), "action": "NEW"}]
            items.append(item)
        return {"messages": items}


@dataclass
class BatchPath:
    """The write path over the stub, with the model's call counts."""

    path: WritePath
    model: BatchAwareModel
    stub: OpenAIStub

    def post_batch(self, texts: list[str], *, sessions: list[str] | None = None, same_time: bool = False) -> list[str]:
        """POST messages of the path's agent in one batch request; their event ids, in order.

        ``same_time``: every message said at the same instant (an import dating turns by their session).
        """
        when = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
        body = [
            {
                "message": message,
                "speaker_name": "Rafael",
                "occurred_at": (when + timedelta(minutes=0 if same_time else i)).isoformat(),
                "message_id": f"m-{uuid.uuid4().hex[:8]}",
                "session_id": sessions[i] if sessions else "s1",
            }
            for i, message in enumerate(texts)
        ]
        response = self.path.client.post(f"/v1/agents/{self.path.agent_id}/messages/batch", json={"messages": body})
        assert response.status_code == 202, response.text
        return [str(event_id) for event_id in response.json()["event_ids"]]

    def facts_by_event(self) -> dict[str, list[str]]:
        """Active facts of the agent by the event they came from."""
        rows = self.path.memory.rows(
            "SELECT f.fact_text, f.source_event_id::text AS event FROM memory_facts f "
            "WHERE f.agent_id = :a AND f.valid_to IS NULL",
            a=self.path.agent_id,
        )
        found: dict[str, list[str]] = {}
        for row in rows:
            found.setdefault(row["event"], []).append(row["fact_text"])
        return found

    def texts(self, event_ids: list[str]) -> dict[str, str]:
        """Each event's message."""
        rows = self.path.memory.rows(
            "SELECT id::text AS id, text FROM memory_events WHERE id::text = ANY(:ids)", ids=event_ids
        )
        return {row["id"]: row["text"] for row in rows}


def provider_for(stub: OpenAIStub) -> OpenAIChatProvider:
    """The real OpenAI client against the stub."""
    return OpenAIChatProvider(api_key="sk-test", model="stub-model", base_url=stub.base_url, timeout_s=5.0)


@pytest.fixture
def batch_path(write_settings: Settings) -> Iterator[BatchPath]:
    model = BatchAwareModel()
    settings = write_settings.model_copy(update={"pipeline_max_attempts": 4, "pipeline_intake_wait_ms": 100})
    with OpenAIStub(chat_handler=model) as stub:

        def context(own: Settings) -> WriteContext:
            return build_write_context(own, skills=build_llm_write_skills(provider_for(stub)))

        for path in start_write_path(settings, context):
            yield BatchPath(path=path, model=model, stub=stub)


@pytest.fixture
def remote_embeddings_path(write_settings: Settings) -> Iterator[BatchPath]:
    """The batch path with its embeddings served by the stub too, as an embeddings endpoint would."""
    model = BatchAwareModel()
    settings = write_settings.model_copy(update={"pipeline_max_attempts": 4, "pipeline_intake_wait_ms": 100})
    with OpenAIStub(chat_handler=model, default_dimensions=384) as stub:

        def context(own: Settings) -> WriteContext:
            embedder = OpenAIEmbeddingProvider(
                api_key="sk-test", model="stub-embedding", dimensions=384, base_url=stub.base_url
            )
            return build_write_context(own, skills=build_llm_write_skills(provider_for(stub)), embedder=embedder)

        for path in start_write_path(settings, context):
            yield BatchPath(path=path, model=model, stub=stub)


def assert_each_fact_on_its_message(batch: BatchPath, event_ids: list[str]) -> None:
    texts = batch.texts(event_ids)
    facts = batch.facts_by_event()
    for event_id in event_ids:
        assert facts.get(event_id) == [fact_of("Rafael", texts[event_id])], (event_id, facts.get(event_id))
    assert set(facts) == set(event_ids), "no fact lands on a message it does not come from"


def test_eight_messages_of_one_session_are_extracted_in_one_call_each_fact_on_its_message(
    batch_path: BatchPath,
) -> None:
    ids = batch_path.post_batch(SENTENCES[:8])
    assert batch_path.path.wait(ids) == dict.fromkeys(ids, "done")
    assert batch_path.model.calls["batch"] == 1
    assert batch_path.model.calls["informed"] == 0
    assert_each_fact_on_its_message(batch_path, ids)
    outputs = batch_path.path.memory.rows(
        "SELECT event_id::text AS event, output->'batch' AS batch, output->'tokens' AS tokens "
        "FROM pipeline_stage_outputs WHERE stage = 'extract' AND event_id::text = ANY(:ids)",
        ids=ids,
    )
    assert len({row["batch"]["id"] for row in outputs}) == 1
    assert sorted(row["batch"]["index"] for row in outputs) == list(range(1, 9))
    assert all(row["tokens"]["total_tokens"] > 0 for row in outputs)
    # The usage accounting counts the batch as the one call it was, with all of its tokens.
    usage = batch_path.path.memory.rows(
        "SELECT sum(calls) AS calls, sum(input_tokens + output_tokens) AS tokens FROM llm_usage "
        "WHERE agent_id = :a AND skill = :skill",
        a=batch_path.path.agent_id,
        skill=BATCH_EXTRACTION_SKILL,
    )
    assert usage[0]["calls"] == 1
    assert usage[0]["tokens"] == sum(row["tokens"]["total_tokens"] for row in outputs)


def test_a_repeated_fact_keeps_the_message_its_wording_comes_from(batch_path: BatchPath) -> None:
    # Turns of one session share their date. Repeats that differ only in case are one fact (a NOOP
    # of the first); the wording kept is the lowest, and it must keep its own message as the source.
    # Both orders are sent, so whichever the database's collation ranks lower, one pair swaps wordings.
    texts = [
        "Pipoca sleeps on my bed every night",
        "pipoca sleeps on my bed every night",
        "my cello teacher is called Beatriz",
        "My cello teacher is called Beatriz",
    ]
    ids = batch_path.post_batch(texts, same_time=True)
    assert batch_path.path.wait(ids) == dict.fromkeys(ids, "done")
    assert batch_path.model.calls["batch"] == 1
    own = batch_path.texts(ids)
    rows = batch_path.path.memory.rows(
        "SELECT fact_text, source_event_id::text AS event, reinforcement_count FROM memory_facts "
        "WHERE agent_id = :a AND valid_to IS NULL",
        a=batch_path.path.agent_id,
    )
    assert len(rows) == 2, rows
    for row in rows:
        assert row["fact_text"] == fact_of("Rafael", own[row["event"]]), row
        assert row["reinforcement_count"] >= 1


def test_a_broken_part_is_retried_alone_and_its_batch_mates_are_kept(batch_path: BatchPath) -> None:
    batch_path.model.malformed.add("kitten")
    batch_path.model.misattribute.add("cello")
    ids = batch_path.post_batch(SENTENCES[:8])
    assert batch_path.path.wait(ids) == dict.fromkeys(ids, "done")
    # One batch, then the two messages whose parts were unusable on their own.
    assert batch_path.model.calls["batch"] == 1
    assert batch_path.model.calls["informed"] == 2
    assert_each_fact_on_its_message(batch_path, ids)
    attempts = batch_path.path.memory.rows(
        "SELECT sum(attempts) AS n FROM pipeline_runs WHERE event_id::text = ANY(:ids)", ids=ids
    )
    assert attempts[0]["n"] == 0


def test_a_rate_limit_mid_batch_is_retried_after_its_wait_with_the_batch_kept_together(batch_path: BatchPath) -> None:
    batch_path.stub.enqueue_chat(StubReply.error(429, "slow down", headers={"Retry-After": "1"}))
    ids = batch_path.post_batch(SENTENCES[:16])  # one chunk of 16: two batches of 8
    assert batch_path.path.wait(ids, timeout_s=60) == dict.fromkeys(ids, "done")
    requests = batch_path.stub.chat_requests
    extraction = [r for r in requests if str(r.body["messages"][0]["content"]).startswith("You turn several")]
    # The throttled batch, its batch-mate, and the throttled one again: three calls, no single ones.
    assert len(extraction) == 3
    assert batch_path.model.calls["informed"] == 0
    assert extraction[2].received_at - extraction[0].received_at >= 1.0
    # A rate limit with Retry-After is a throttled retry, not a failed attempt.
    retries = batch_path.path.memory.rows(
        "SELECT attempts, throttled_retries FROM pipeline_runs WHERE event_id::text = ANY(:ids)", ids=ids
    )
    assert sorted(row["attempts"] for row in retries) == [0] * 16
    assert sorted(row["throttled_retries"] for row in retries) == [0] * 8 + [1] * 8
    assert_each_fact_on_its_message(batch_path, ids)


def test_a_redelivered_batch_asks_the_model_nothing(batch_path: BatchPath) -> None:
    ids = batch_path.post_batch(SENTENCES[:6])
    assert batch_path.path.wait(ids) == dict.fromkeys(ids, "done")
    assert batch_path.model.calls["batch"] == 1
    before = batch_path.stub.call_count
    # As a redelivery after a crash between the batch's answer and the stage's completion.
    with batch_path.path.memory.engine.begin() as connection:
        connection.execute(
            text("UPDATE pipeline_runs SET status = 'received' WHERE event_id::text = ANY(:ids)"), {"ids": ids}
        )
    ctx = build_write_context(batch_path.path.settings, skills=build_llm_write_skills(provider_for(batch_path.stub)))
    try:
        outcomes = run_stage_chunk(ctx, "extract", [uuid.UUID(event_id) for event_id in ids])
    finally:
        ctx.close()
    assert set(outcomes.values()) == {"completed"}
    assert batch_path.stub.call_count == before
    rows = batch_path.path.memory.rows(
        "SELECT output->'batch'->>'index' AS index FROM pipeline_stage_outputs "
        "WHERE stage = 'extract' AND event_id::text = ANY(:ids)",
        ids=ids,
    )
    assert sorted(int(row["index"]) for row in rows) == list(range(1, 7))


def test_two_sessions_are_never_batched_together(batch_path: BatchPath) -> None:
    sessions = ["a", "b"] * 4
    ids = batch_path.post_batch(SENTENCES[:8], sessions=sessions)
    assert batch_path.path.wait(ids) == dict.fromkeys(ids, "done")
    assert batch_path.model.calls["batch"] == 2
    assert sorted(map(sorted, batch_path.model.batches)) == sorted([sorted(SENTENCES[0:8:2]), sorted(SENTENCES[1:8:2])])
    assert_each_fact_on_its_message(batch_path, ids)


def test_a_single_message_goes_alone_in_one_call_without_waiting(batch_path: BatchPath) -> None:
    started = time.monotonic()
    event = batch_path.path.post(SENTENCES[0], "Rafael")
    assert batch_path.path.wait([event]) == {event: "done"}
    elapsed = time.monotonic() - started
    assert batch_path.model.calls == Counter({"informed": 1})
    # The intake window (100 ms here) plus the pipeline's own time, nothing more.
    assert elapsed < 3.0
    assert_each_fact_on_its_message(batch_path, [event])


def _vector(value: str) -> list[float]:
    return [float(number) for number in value.strip("[]").split(",")]


def _close(stored: list[float], expected: list[float]) -> bool:
    return len(stored) == len(expected) and max(abs(a - b) for a, b in zip(stored, expected, strict=True)) < 1e-5


def test_a_chunk_asks_for_its_embeddings_together_and_each_row_keeps_the_vector_of_its_own_text(
    remote_embeddings_path: BatchPath,
) -> None:
    batch = remote_embeddings_path
    ids = batch.post_batch(SENTENCES[:8])
    assert batch.path.wait(ids) == dict.fromkeys(ids, "done")
    assert batch.model.calls["batch"] == 1
    assert_each_fact_on_its_message(batch, ids)

    # Two messages' worth of requests for eight messages: their texts in one, their facts in one
    # (asked one by one, they were sixteen).
    inputs = [request.body["input"] for request in batch.stub.requests_to(EMBEDDINGS)]
    texts = batch.texts(ids)
    facts = [fact_of("Rafael", message) for message in texts.values()]
    with_messages = [group for group in inputs if set(group) & set(texts.values())]
    with_facts = [group for group in inputs if set(group) & set(facts)]
    assert len(with_messages) == 1, inputs
    assert set(with_messages[0]) >= set(texts.values()), inputs
    assert len(with_facts) == 1, inputs
    assert set(with_facts[0]) >= set(facts), inputs

    # Every stored vector is the one of its own text, not a batch-mate's.
    events = batch.path.memory.rows(
        "SELECT text, embedding_vec::text AS vec FROM memory_events WHERE id::text = ANY(:ids)", ids=ids
    )
    assert len(events) == 8
    assert all(_close(_vector(row["vec"]), stub_vector(row["text"], 384)) for row in events)
    stored_facts = batch.path.memory.rows(
        "SELECT fact_text, embedding_vec::text AS vec FROM memory_facts WHERE agent_id = :a", a=batch.path.agent_id
    )
    assert sorted(row["fact_text"] for row in stored_facts) == sorted(facts)
    assert all(_close(_vector(row["vec"]), stub_vector(row["fact_text"], 384)) for row in stored_facts)
