"""Re-processing an agent (``/v1/agents/{agent_id}/reprocess``) and failed events in bulk, over real HTTP.

A real worker runs the pipeline with the offline skills. Two knobs stand in for "a new model":
an *old model* mode of the extraction (every fact also comes out a second time, worded by the
old model) and an embedder that *holds* texts naming a marker until the test lets them go, so
a re-process can be caught while it runs; a *poison* marker makes the embedder refuse a text
(a request error: the run fails at once), for the failed-events endpoints.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from memory_core.cognition.models import ExtractedFact, ExtractionInput, ExtractionOutput
from memory_core.cognition.skill import Skill, SkillOutcome
from memory_core.maintenance.runs import agents_with_new_events
from memory_core.providers.errors import ProviderRequestError
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.explorer import list_agents
from memory_core.settings import Settings
from memory_core.shadow import shadow_agent_id
from memory_core.write.context import WriteContext, build_write_context
from tests.support.api_server import api_settings, auth_headers, poll, serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker

START = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)
HOLD = "Lisbon"
POISON = "POISONED"
OLD_WORDING = " (as the old model put it)"


class ControlledEmbedder(HashingEmbedder):
    """The hashing embedder; texts naming HOLD wait while ``holding`` is set, POISON ones are refused."""

    def __init__(self) -> None:
        super().__init__(384)
        self.holding = threading.Event()
        self.released = threading.Event()
        self.poisoned = threading.Event()

    def _check(self, texts: list[str]) -> None:
        if self.poisoned.is_set() and any(POISON in item for item in texts):
            raise ProviderRequestError("the embedding provider refused the text", provider="test", status_code=400)
        if self.holding.is_set() and any(HOLD in item for item in texts):
            self.released.wait(timeout=60)

    def embed(self, texts: list[str]) -> list[list[float]]:
        self._check(texts)
        return super().embed(texts)

    def embed_one(self, text_: str) -> list[float] | None:
        self._check([text_])
        return super().embed_one(text_)


class OldOrNewModel:
    """An extraction skill that answers as the offline rules do, plus (old model) a reworded copy of each fact."""

    def __init__(self, inner: Skill[ExtractionInput, ExtractionOutput], old: threading.Event) -> None:
        self.inner = inner
        self.old = old

    @property
    def name(self) -> str:
        return self.inner.name

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        outcome = self.inner.run(skill_input)
        if not self.old.is_set():
            return outcome
        extra = [
            ExtractedFact(subject=fact.subject, text=fact.text.rstrip(".") + OLD_WORDING, attribute_key=None)
            for fact in outcome.output.facts
        ]
        output = outcome.output.model_copy(update={"facts": [*outcome.output.facts, *extra]})
        return dataclasses.replace(outcome, output=output)


@dataclass
class Stack:
    http: httpx.Client
    base_url: str
    settings: Settings
    engine: Engine
    embedder: ControlledEmbedder
    old_model: threading.Event


@pytest.fixture(scope="module")
def stack(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    settings = api_settings(migrated_database_url, services.broker_url, tmp_path_factory.mktemp("reprocess-home"))
    embedder = ControlledEmbedder()
    old_model = threading.Event()

    def write_context(worker_settings: Settings) -> WriteContext:
        context = build_write_context(worker_settings, embedder=embedder)
        skills = dataclasses.replace(
            context.skills,
            extract_informed=OldOrNewModel(context.skills.extract_informed, old_model),
            extract_blind=OldOrNewModel(context.skills.extract_blind, old_model),
        )
        return dataclasses.replace(context, skills=skills)

    app = isolated_app(settings, context_factory=write_context)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    engine = create_engine(migrated_database_url)
    try:
        with (
            running_worker(app, concurrency=4),
            serve_api(own) as base_url,
            httpx.Client(base_url=base_url, headers=auth_headers(), timeout=60) as http,
        ):
            yield Stack(http, base_url, own, engine, embedder, old_model)
    finally:
        embedder.released.set()
        engine.dispose()
        # The worker's pool would keep its connections open for the rest of the session.
        worker_context = getattr(app, "_arandu_write_context", None)
        if worker_context is not None:
            worker_context.engine.dispose()
        app.close()


def new_agent(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def run_statuses(stack: Stack, agent: str) -> Counter[str]:
    with stack.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT status FROM pipeline_runs WHERE agent_id = :agent"), {"agent": agent}
        ).scalars()
        return Counter(rows)


def settled(stack: Stack, agent: str, expected: int) -> bool:
    statuses = run_statuses(stack, agent)
    return sum(statuses.values()) == expected and set(statuses) <= {"done", "failed"}


def import_messages(stack: Stack, agent: str, messages: list[dict[str, Any]]) -> None:
    response = stack.http.post(f"/v1/agents/{agent}/imports", json={"messages": messages})
    assert response.status_code == 202, response.text
    poll(lambda: settled(stack, agent, len(messages)), f"the import of {agent} did not finish")


def memory_of(stack: Stack, agent: str) -> dict[str, Any]:
    """What a fresh import and a re-process must agree on: active facts, entities, relationships."""
    with stack.engine.connect() as connection:
        facts = connection.execute(
            text(
                "SELECT f.fact_text, f.entity_key, f.attribute_key, f.reinforcement_count, f.valid_from, "
                "e.text AS said FROM memory_facts f LEFT JOIN memory_events e ON e.id = f.source_event_id "
                "WHERE f.agent_id = :agent AND f.valid_to IS NULL"
            ),
            {"agent": agent},
        ).all()
        entities = connection.execute(
            text("SELECT canonical_key, display_name, fact_count FROM memory_entities WHERE agent_id = :agent"),
            {"agent": agent},
        ).all()
        edges = connection.execute(
            text(
                "SELECT source_entity_key, target_entity_key, rel_type, strength, valid_to IS NULL AS active "
                "FROM memory_entity_relationships WHERE agent_id = :agent"
            ),
            {"agent": agent},
        ).all()
        closed = connection.execute(
            text("SELECT count(*) FROM memory_facts WHERE agent_id = :agent AND valid_to IS NOT NULL"),
            {"agent": agent},
        ).scalar_one()
    return {
        "facts": Counter(tuple(row) for row in facts),
        "entities": sorted(tuple(row) for row in entities),
        "edges": sorted(tuple(row) for row in edges),
        "closed": closed,
    }


def conversation(agent_tag: str) -> list[dict[str, Any]]:
    lines = [
        ("Ana", "I live in Porto."),
        ("Ana", "My brother Tiago works at Orion Tech."),
        ("Ana", f"Last summer I visited {HOLD} with Tiago."),
        ("Ana", "I live in Porto."),
    ]
    return [
        {
            "message": message,
            "speaker_name": speaker,
            "occurred_at": (START + timedelta(hours=index)).isoformat(),
            "message_id": f"{agent_tag}-{index}",
        }
        for index, (speaker, message) in enumerate(lines)
    ]


def reprocess_status(stack: Stack, agent: str) -> dict[str, Any]:
    response = stack.http.get(f"/v1/agents/{agent}/reprocess")
    assert response.status_code == 200, response.text
    return dict(response.json())


# ---- Re-processing -------------------------------------------------------------------------------


def test_reprocess_rederives_the_memory_of_a_fresh_import_while_the_old_one_answers(stack: Stack) -> None:
    agent, fresh = new_agent("reprocessed"), new_agent("fresh")
    messages = conversation(agent)
    stack.old_model.set()
    try:
        import_messages(stack, agent, messages)
    finally:
        stack.old_model.clear()
    old_texts = {fact[0] for fact in memory_of(stack, agent)["facts"]}
    assert any(OLD_WORDING in fact for fact in old_texts), old_texts

    stack.embedder.released.clear()
    stack.embedder.holding.set()
    try:
        started = stack.http.post(f"/v1/agents/{agent}/reprocess")
        assert started.status_code == 202, started.text
        body = started.json()
        assert (body["agent_id"], body["status"], body["total"]) == (agent, "running", len(messages))
        # One at a time.
        again = stack.http.post(f"/v1/agents/{agent}/reprocess")
        assert again.status_code == 409, again.text
        assert body["reprocess_id"] in again.json()["error"]
        assert again.json()["detail"][0]["field"] == "path.agent_id"

        # Meanwhile retrieval answers from the old memory, and a new message is applied to it.
        answer = stack.http.post(f"/v1/agents/{agent}/retrieve", json={"query": "Where does Ana live?"})
        assert answer.status_code == 200, answer.text
        assert any(OLD_WORDING in fact["fact_text"] for fact in answer.json()["facts"]), answer.json()["facts"]
        late = {
            "message": "Tiago moved to Braga.",
            "speaker_name": "Ana",
            "occurred_at": (START + timedelta(days=1)).isoformat(),
            "message_id": f"{agent}-late",
        }
        sent = stack.http.post(f"/v1/agents/{agent}/messages", json=late)
        assert sent.status_code == 202, sent.text
        poll(lambda: settled(stack, agent, len(messages) + 1), "the message sent during the re-process was not applied")
        assert any("Braga" in fact[0] for fact in memory_of(stack, agent)["facts"])
        progress = reprocess_status(stack, agent)
        assert progress["status"] == "running"
        assert progress["pending"] >= 1
        with stack.engine.connect() as connection:
            listed = connection.execute(
                text("SELECT count(*) FROM memory_events WHERE agent_id = :shadow"),
                {"shadow": shadow_agent_id(body["reprocess_id"])},
            ).scalar_one()
        assert listed >= len(messages)
        # The shadow is no agent anyone sees: not listed, not given maintenance jobs.
        with Session(stack.engine) as session:
            seen = [summary.agent_id for summary in list_agents(session, limit=1000).items]
            scheduled = agents_with_new_events(session, "importance")
        assert not [agent_id for agent_id in [*seen, *scheduled] if agent_id.startswith("~")]
        assert agent in scheduled
        assert stack.http.get(f"/v1/agents/{agent}/reprocess/{body['reprocess_id']}").json()["status"] == "running"
    finally:
        stack.embedder.holding.clear()
        stack.embedder.released.set()

    finished = poll(
        lambda: (status := reprocess_status(stack, agent))["status"] == "done" and status,
        "the re-process never switched",
    )
    assert finished["done"] == len(messages) + 1
    assert (finished["failed"], finished["pending"]) == (0, 0)
    assert finished["finished_at"] is not None

    # The same messages imported afresh by the current model give the same memory: no old
    # wording left, nothing reinforced twice, the late message in.
    import_messages(stack, fresh, [*messages, late])
    reprocessed, expected = memory_of(stack, agent), memory_of(stack, fresh)
    assert not any(OLD_WORDING in fact[0] for fact in reprocessed["facts"])
    assert any("Braga" in fact[0] for fact in reprocessed["facts"])
    assert reprocessed == expected
    assert max(fact[3] for fact in reprocessed["facts"]) == 1  # "I live in Porto." said twice
    # Facts point at the live events; every live run is done with its own id in its result.
    with stack.engine.connect() as connection:
        runs = connection.execute(
            text(
                "SELECT r.status, r.result ->> 'event_id' = CAST(r.event_id AS text) AS own "
                "FROM pipeline_runs r WHERE r.agent_id = :agent"
            ),
            {"agent": agent},
        ).all()
        leftovers = {
            table: connection.execute(
                text(f'SELECT count(*) FROM "{table}" WHERE agent_id = :shadow'),
                {"shadow": shadow_agent_id(body["reprocess_id"])},
            ).scalar_one()
            for table in connection.execute(
                text(
                    "SELECT table_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND column_name = 'agent_id'"
                )
            ).scalars()
        }
    assert sorted(tuple(run) for run in runs) == [("done", True)] * (len(messages) + 1)
    assert set(leftovers.values()) == {0}, leftovers
    assert finished["catch_up_rounds"] == 1  # the late message was copied before the switch
    assert stack.http.post(f"/v1/agents/{agent}/reprocess").status_code == 202
    poll(lambda: reprocess_status(stack, agent)["status"] == "done", "the second re-process never switched")
    assert memory_of(stack, agent) == expected


def test_reprocess_derives_under_the_agents_own_config(stack: Stack) -> None:
    tuned, plain = new_agent("tuned"), new_agent("plain")
    overrides = {"max_facts_per_event": 1}
    for agent in (tuned, plain):
        if agent == tuned:
            put = stack.http.put(f"/v1/agents/{agent}/config", json={"overrides": overrides})
            assert put.status_code == 200, put.text
        said = [
            ("I work as a nurse. I play the violin. I live in Porto.", 0),
            ("My sister Rita lives in Faro. She loves jazz.", 1),
        ]
        import_messages(
            stack,
            agent,
            [
                {
                    "message": message,
                    "speaker_name": "Ana",
                    "occurred_at": (START + timedelta(hours=hour)).isoformat(),
                    "message_id": f"{agent}-{hour}",
                }
                for message, hour in said
            ],
        )
    expected = memory_of(stack, tuned)
    assert len(expected["facts"]) < len(memory_of(stack, plain)["facts"])  # the config matters here

    started = stack.http.post(f"/v1/agents/{tuned}/reprocess")
    assert started.status_code == 202, started.text
    poll(lambda: reprocess_status(stack, tuned)["status"] == "done", "the re-process never switched")
    assert memory_of(stack, tuned) == expected
    assert stack.http.get(f"/v1/agents/{tuned}/config").json()["overrides"] == overrides


def test_cancel_discards_the_new_memory_and_keeps_the_live_one(stack: Stack) -> None:
    agent = new_agent("cancelled")
    stack.old_model.set()
    try:
        import_messages(stack, agent, conversation(agent)[:3])
    finally:
        stack.old_model.clear()
    before = memory_of(stack, agent)
    stack.embedder.released.clear()
    stack.embedder.holding.set()
    try:
        started = stack.http.post(f"/v1/agents/{agent}/reprocess")
        assert started.status_code == 202, started.text
        shadow = shadow_agent_id(started.json()["reprocess_id"])
        cancelled = stack.http.delete(f"/v1/agents/{agent}/reprocess")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
    finally:
        stack.embedder.holding.clear()
        stack.embedder.released.set()
    with stack.engine.connect() as connection:
        shadow_rows = connection.execute(
            text("SELECT count(*) FROM memory_events WHERE agent_id = :shadow"), {"shadow": shadow}
        ).scalar_one()
    assert shadow_rows == 0
    nothing_running = stack.http.delete(f"/v1/agents/{agent}/reprocess")
    assert nothing_running.status_code == 409
    assert nothing_running.json()["detail"][0]["field"] == "path.agent_id"
    time.sleep(1.5)  # a look of the watcher after the cancel changes nothing
    assert reprocess_status(stack, agent)["status"] == "cancelled"
    assert memory_of(stack, agent) == before
    assert any(OLD_WORDING in fact[0] for fact in before["facts"])


def test_a_message_too_late_for_every_catch_up_round_is_applied_again_to_the_new_memory(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, fresh = new_agent("late"), new_agent("late-fresh")
    messages = conversation(agent)[1:3]
    import_messages(stack, agent, messages)
    late = {
        "message": "Tiago lives in Braga.",
        "speaker_name": "Ana",
        "occurred_at": (START + timedelta(days=2)).isoformat(),
    }
    stack.embedder.released.clear()
    stack.embedder.holding.set()
    try:
        assert stack.http.post(f"/v1/agents/{agent}/reprocess").status_code == 202
        # No catch-up round: whatever was not copied at the start is re-driven at the switch.
        monkeypatch.setattr("memory_core.maintenance.reprocess.MAX_CATCH_UP_ROUNDS", 0)
        assert stack.http.post(f"/v1/agents/{agent}/messages", json=late).status_code == 202
        poll(lambda: settled(stack, agent, len(messages) + 1), "the late message was not applied to the live memory")
    finally:
        stack.embedder.holding.clear()
        stack.embedder.released.set()

    def switched() -> dict[str, Any] | None:
        status = reprocess_status(stack, agent)
        return status if status["status"] == "done" else None

    finished = poll(switched, "the re-process never switched")
    assert (finished["done"], finished["requeued"], finished["catch_up_rounds"]) == (len(messages), 1, 0)
    poll(lambda: settled(stack, agent, len(messages) + 1), "the re-driven late message did not finish")
    import_messages(stack, fresh, [*messages, late])
    assert memory_of(stack, agent) == memory_of(stack, fresh)


# ---- Failed events: listing, paging, bulk re-drive --------------------------------------------------


def test_failed_events_are_listed_by_page_and_re_driven_in_bulk(stack: Stack) -> None:
    agent = new_agent("failing")
    messages = [
        {
            "message": f"{POISON} note {index}: Ana plays the cello." if index < 2 else "Ana lives in Faro.",
            "speaker_name": "Ana",
            "occurred_at": (START + timedelta(minutes=index)).isoformat(),
        }
        for index in range(3)
    ]
    import_messages(stack, agent, messages)
    assert run_statuses(stack, agent) == {"done": 3}
    # A re-process with a model that refuses two of the messages: they end failed in the live log,
    # and the new memory (as a fresh import with that model) lacks their facts.
    stack.embedder.poisoned.set()
    try:
        assert stack.http.post(f"/v1/agents/{agent}/reprocess").status_code == 202

        def switched() -> dict[str, Any] | None:
            status = reprocess_status(stack, agent)
            return status if status["status"] == "done" else None

        finished = poll(switched, "the re-process never switched")
        assert (finished["done"], finished["failed"]) == (1, 2)
        assert run_statuses(stack, agent) == {"done": 1, "failed": 2}
        assert not any("cello" in fact[0] for fact in memory_of(stack, agent)["facts"])

        first = stack.http.get(f"/v1/agents/{agent}/events", params={"status": "failed", "limit": 1})
        assert first.status_code == 200, first.text
        page = first.json()
        assert len(page["events"]) == 1
        assert page["next_cursor"]
        second = stack.http.get(
            f"/v1/agents/{agent}/events", params={"status": "failed", "limit": 1, "cursor": page["next_cursor"]}
        )
        assert second.status_code == 200, second.text
        assert second.json()["next_cursor"] is None
        failed = [*page["events"], *second.json()["events"]]
        assert len({event["event_id"] for event in failed}) == 2
        assert all(event["status"] == "failed" and event["stage"] == "extract" for event in failed)
        assert all(POISON in event["text"] and "refused" in (event["error"] or "") for event in failed)
        everything = stack.http.get(f"/v1/agents/{agent}/events").json()["events"]
        done_id = next(event["event_id"] for event in everything if event["status"] == "done")

        for params, field in (
            ({"status": "bogus"}, "query.status"),
            ({"cursor": "not-a-cursor"}, "query.cursor"),
            ({"limit": 0}, "query.limit"),
        ):
            refused = stack.http.get(f"/v1/agents/{agent}/events", params=params)
            assert refused.status_code == 422, (params, refused.text)
            assert refused.json()["detail"][0]["field"] == field
        for body in ({}, {"all": True, "event_ids": [done_id]}, {"all": False}, {"event_ids": ["nope"]}):
            refused = stack.http.post(f"/v1/agents/{agent}/events/retry", json=body)
            assert refused.status_code == 422, (body, refused.text)
            assert refused.json()["detail"][0]["field"].startswith("body"), refused.json()
        nothing = stack.http.post(f"/v1/agents/{agent}/events/retry", json={"event_ids": [done_id]})
        assert nothing.status_code == 202, nothing.text
        assert (nothing.json()["retried"], nothing.json()["not_retried"], nothing.json()["remaining"]) == (
            0,
            [done_id],
            2,
        )
    finally:
        stack.embedder.poisoned.clear()

    retried = stack.http.post(f"/v1/agents/{agent}/events/retry", json={"all": True})
    assert retried.status_code == 202, retried.text
    assert retried.json() | {"event_ids": None} == {
        "retried": 2,
        "by_stage": {"extract": 2},
        "event_ids": None,
        "not_retried": [],
        "remaining": 0,
    }
    assert sorted(retried.json()["event_ids"]) == sorted(event["event_id"] for event in failed)
    poll(lambda: run_statuses(stack, agent) == {"done": 3}, "the re-driven events did not finish")
    assert any("cello" in fact[0] for fact in memory_of(stack, agent)["facts"])
    assert stack.http.get(f"/v1/agents/{agent}/events", params={"status": "failed"}).json()["events"] == []


# ---- Scopes ------------------------------------------------------------------------------------------


def test_reprocess_needs_admin_and_listing_needs_read(stack: Stack) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    agent = f"{prefix}ana"

    def key(permissions: list[str], agent_prefix: str = prefix) -> httpx.Client:
        created = stack.http.post(
            "/v1/keys",
            json={"name": f"k-{uuid.uuid4().hex[:8]}", "agent_prefix": agent_prefix, "permissions": permissions},
        )
        assert created.status_code == 201, created.text
        return httpx.Client(base_url=stack.base_url, headers=auth_headers(created.json()["key"]), timeout=60)

    base = f"/v1/agents/{agent}"
    with key(["read"]) as reader, key(["read", "write"]) as writer, key(["read", "admin"]) as admin:
        assert reader.get(f"{base}/events", params={"status": "failed"}).status_code == 200
        assert reader.get(f"{base}/reprocess").status_code == 404  # allowed; never re-processed
        for client in (reader, writer):
            for method, path, body in (
                ("POST", f"{base}/reprocess", None),
                ("DELETE", f"{base}/reprocess", None),
                ("POST", f"{base}/events/retry", {"all": True}),
            ):
                refused = client.request(method, path, json=body)
                assert refused.status_code == 403, (method, path, refused.text)
                assert "'admin'" in refused.json()["error"]
        assert admin.post(f"{base}/events/retry", json={"all": True}).json()["retried"] == 0
        started = admin.post(f"{base}/reprocess")
        assert started.status_code == 202, started.text
        # An agent without messages switches to an empty memory at once.
        poll(lambda: reader.get(f"{base}/reprocess").json()["status"] == "done", "the empty re-process never ended")
    with key(["read", "write", "admin"], agent_prefix=f"t{uuid.uuid4().hex[:8]}:") as other:
        for method, path in (("POST", "reprocess"), ("GET", "reprocess"), ("GET", "events"), ("POST", "events/retry")):
            refused = other.request(method, f"{base}/{path}", json={"all": True} if path.endswith("retry") else None)
            assert refused.status_code == 403, (method, path, refused.text)
            assert refused.json()["detail"][0]["field"] == "path.agent_id"
    assert stack.http.post("/v1/agents/not%20valid!/reprocess").status_code == 422


# ---- One event re-processed from scratch ----------------------------------------------------------------


def test_an_event_re_processed_from_scratch_leaves_no_old_fact_and_no_extra_repetition(stack: Stack) -> None:
    agent, fresh = new_agent("one-event"), new_agent("one-event-fresh")
    messages = [
        {"message": "I live in Porto.", "speaker_name": "Ana", "occurred_at": (START + timedelta(hours=i)).isoformat()}
        for i in range(2)
    ]
    stack.old_model.set()
    try:
        import_messages(stack, agent, messages)
    finally:
        stack.old_model.clear()
    import_messages(stack, fresh, messages)
    old = memory_of(stack, agent)
    assert {(fact[0], fact[3]) for fact in old["facts"]} == {
        ("Ana lives in Porto.", 1),
        ("Ana lives in Porto" + OLD_WORDING, 1),
    }
    with stack.engine.connect() as connection:
        first, second = connection.execute(
            text("SELECT id FROM memory_events WHERE agent_id = :agent ORDER BY occurred_at"), {"agent": agent}
        ).scalars()
    # The later message first: its repetitions are withdrawn, then counted again by the new model.
    for event_id in (second, first):
        redriven = stack.http.post(f"/v1/events/{event_id}/retry", json={"from_scratch": True})
        assert redriven.status_code == 202, redriven.text
        poll(lambda: settled(stack, agent, 2), f"the re-processed event {event_id} did not finish")
    assert memory_of(stack, agent) == memory_of(stack, fresh)
