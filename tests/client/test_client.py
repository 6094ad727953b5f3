"""The Python client (sync and asyncio) against a running API with a real Celery worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from arandu_client import (
    ApiError,
    AranduClient,
    AsyncAranduClient,
    AuthenticationError,
    ConflictError,
    EntityPage,
    FactDetail,
    FactPage,
    ImportProgress,
    InvalidRequestError,
    Message,
    NotFoundError,
    PayloadTooLargeError,
    RetrieveResult,
    TransportError,
    WaitTimeoutError,
)
from memory_core.settings import Settings
from tests.support.api_server import TEST_API_KEY, api_settings, serve_api
from tests.support.services import TestServices, free_port
from tests.support.workers import isolated_app, running_worker

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Stack:
    """A served API whose events a real worker processes."""

    base_url: str
    settings: Settings


@pytest.fixture(scope="module")
def base_settings(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    return api_settings(
        migrated_database_url,
        services.broker_url,
        tmp_path_factory.mktemp("client-home"),
        pipeline_retry_base_s=0.2,
        pipeline_retry_max_s=1.0,
    )


@pytest.fixture(scope="module")
def stack(base_settings: Settings) -> Iterator[Stack]:
    app = isolated_app(base_settings)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    with running_worker(app, concurrency=4), serve_api(own) as base_url:
        yield Stack(base_url, own)


@pytest.fixture
def client(stack: Stack) -> Iterator[AranduClient]:
    with AranduClient(stack.base_url, TEST_API_KEY, timeout=60) as http:
        yield http


@pytest.fixture
def agent() -> str:
    return f"client-{uuid.uuid4().hex[:10]}"


# ---- Sync client -----------------------------------------------------------------------------------------


def test_messages_are_processed_and_retrieved(client: AranduClient, agent: str) -> None:
    assert client.health() is True
    assert client.ready().ready is True

    lisbon = client.send_message(agent, "I live in Lisbon.", "Ana", occurred_at=START, message_id="c-1")
    assert lisbon.status == "received"
    assert lisbon.duplicate is False
    again = client.send_message(agent, "I live in Lisbon.", "Ana", occurred_at=START, message_id="c-1")
    assert again.duplicate is True
    assert again.event_id == lisbon.event_id
    # Processed before the move arrives, so the move supersedes it (rather than it arriving late as history).
    done = client.wait_for_event(lisbon.event_id, timeout=90, poll_interval=0.1)
    assert done.status == "done"
    batch = client.send_batch(
        agent,
        [
            {"message": "I work at Acme Corp.", "speaker_name": "Ana", "occurred_at": START + timedelta(days=1)},
            {"message": "I have a cat named Luna.", "speaker_name": "Ana", "occurred_at": START + timedelta(days=2)},
            {"message": "I moved to Porto.", "speaker_name": "Ana", "occurred_at": START + timedelta(days=30)},
        ],
    )
    assert len(batch.event_ids) == 3
    assert batch.duplicates == 0

    assert done.finished
    assert done.agent_id == agent
    assert done.message_id == "c-1"
    assert done.occurred_at == START
    assert done.result is not None
    for event_id in batch.event_ids:
        assert client.wait_for_event(event_id, timeout=90, poll_interval=0.1).status == "done"
    assert client.event(lisbon.event_id, agent_id=agent).event_id == lisbon.event_id

    result = client.retrieve(agent, "Which city does Ana live in?")
    assert isinstance(result, RetrieveResult)
    porto_fact = next(fact for fact in result.facts if fact.fact_text == "Ana moved to Porto.")
    assert porto_fact.entity_key == "person:ana"
    assert porto_fact.source_event_id == batch.event_ids[2]
    assert porto_fact.valid_from == START + timedelta(days=30)
    assert "Ana lives in Lisbon." not in [fact.fact_text for fact in result.facts]
    assert "Porto" in result.context
    cat = client.retrieve(agent, "What is the name of Ana's cat?")
    assert cat.facts[0].fact_text == "Ana has a cat named Luna."
    assert result.trace is None
    assert result.config_effective["topk_facts"] == 20

    then = client.retrieve(agent, "Where does Ana live?", as_of=START + timedelta(days=5), verbose=True)
    assert "Ana lives in Lisbon." in [fact.fact_text for fact in then.facts]
    assert then.trace is not None
    window = client.retrieve(
        agent, "Where does Ana live?", as_of=(START + timedelta(days=3), START + timedelta(days=40))
    )
    assert {"Ana lives in Lisbon.", "Ana moved to Porto."} <= {fact.fact_text for fact in window.facts}
    limited = client.retrieve(agent, "Ana", config_overrides={"topk_facts": 1}, entity_keys=["person:ana"])
    assert len(limited.facts) <= 1
    assert limited.config_effective["topk_facts"] == 1
    ghost = client.retrieve(agent, "Ana", entity_keys="person:ghost")
    assert any("person:ghost" in warning for warning in ghost.warnings)

    page = client.list_facts(agent)
    assert isinstance(page, FactPage)
    assert page.total == 3  # Lisbon was superseded by the move
    by_text = {fact.fact_text: fact for fact in page.facts}
    assert set(by_text) == {"Ana works at Acme Corp.", "Ana has a cat named Luna.", "Ana moved to Porto."}
    porto = by_text["Ana moved to Porto."]
    assert porto.supersedes_fact_id is not None
    superseded = client.get_fact(agent, porto.supersedes_fact_id)
    assert isinstance(superseded, FactDetail)
    assert superseded.fact_text == "Ana lives in Lisbon."
    assert superseded.is_active is False
    assert superseded.valid_to == START + timedelta(days=30)
    second = client.list_facts(agent, limit=1, offset=1)
    assert second.total == 3
    assert [fact.fact_id for fact in second.facts] == [page.facts[1].fact_id]
    assert client.list_facts(agent, entity_keys=["pet:luna"]).facts[0].fact_text == "Ana has a cat named Luna."

    entities = client.list_entities(agent)
    assert isinstance(entities, EntityPage)
    keys = {entity.canonical_key for entity in entities.entities}
    assert {"person:ana", "place:lisbon", "place:porto", "pet:luna"} <= keys
    assert entities.total == len(entities.entities)
    assert client.list_entities(agent, limit=1).total == entities.total

    client.delete_fact(agent, porto.fact_id)
    with pytest.raises(NotFoundError):
        client.get_fact(agent, porto.fact_id)
    with pytest.raises(NotFoundError) as missing:
        client.delete_fact(agent, porto.fact_id)
    assert missing.value.fields == ["path.fact_id"]
    assert client.delete_all_facts(agent) == 3
    assert client.list_facts(agent).total == 0
    assert client.delete_all_facts(agent) == 0


def test_an_import_reports_progress_until_done(client: AranduClient, agent: str, tmp_path: Path) -> None:
    messages: list[Message] = [
        {
            "message": text,
            "speaker_name": "Bruno",
            "occurred_at": (START + timedelta(days=index)).isoformat(),
            "message_id": f"imp-{index}",
        }
        for index, text in enumerate(
            ["I live in Recife.", "I love jazz.", "My brother Caio is a pilot.", "Thanks!", "I work at Initech."]
        )
    ]
    accepted = client.start_import(agent, messages)
    assert accepted.total == 5
    assert accepted.duplicates == 0
    seen: list[ImportProgress] = []
    final = client.wait_for_import(accepted.import_id, timeout=120, poll_interval=0.1, on_progress=seen.append)
    assert final.status == "done"
    assert (final.done, final.failed, final.pending) == (5, 0, 0)
    assert seen
    assert seen[-1] == final
    assert len({(p.done, p.pending, p.status) for p in seen}) == len(seen)  # called on changes only
    assert all(p.import_id == accepted.import_id for p in seen)
    assert client.import_progress(accepted.import_id, agent_id=agent).status == "done"
    with pytest.raises(NotFoundError):
        client.import_progress(accepted.import_id, agent_id=f"{agent}-other")

    # The same history again, as an NDJSON file: every message is a duplicate.
    path = tmp_path / "history.ndjson"
    path.write_text("\n".join(json.dumps(message) for message in messages) + "\n", encoding="utf-8")
    repeated = client.start_import(agent, ndjson=path)
    assert (repeated.total, repeated.duplicates, repeated.status) == (0, 5, "done")
    # New lines, from an iterable.
    lines = [
        json.dumps({"message": "I moved to Natal.", "speaker_name": "Bruno", "occurred_at": "2024-06-01T10:00:00Z"}),
    ]
    fresh = client.start_import(agent, ndjson=lines)
    assert fresh.total == 1
    assert client.wait_for_import(fresh.import_id, timeout=120, poll_interval=0.1).done == 1
    texts = [fact.fact_text for fact in client.list_facts(agent, limit=500).facts]
    assert "Bruno moved to Natal." in texts
    assert "Bruno lives in Recife." not in texts


def test_errors_are_typed(client: AranduClient, stack: Stack, agent: str) -> None:
    with AranduClient(stack.base_url, "wrong-key") as intruder, pytest.raises(AuthenticationError) as denied:
        intruder.list_facts(agent)
    assert denied.value.status == 401
    assert "invalid API key" in denied.value.message
    with AranduClient(stack.base_url, None) as anonymous:
        assert anonymous.health() is True
        with pytest.raises(AuthenticationError):
            anonymous.retrieve(agent, "anything")

    with pytest.raises(NotFoundError) as unknown:
        client.get_fact(agent, str(uuid.uuid4()))
    assert unknown.value.status == 404
    with pytest.raises(NotFoundError):
        client.event(str(uuid.uuid4()))

    with pytest.raises(InvalidRequestError) as malformed:
        client.get_fact(agent, "not-a-uuid")
    assert malformed.value.status == 422
    assert malformed.value.fields == ["path.fact_id"]
    with pytest.raises(InvalidRequestError) as blank:
        client.send_message(agent, "   ", "Ana")
    assert blank.value.fields == ["body.message"]
    with pytest.raises(InvalidRequestError) as override:
        client.retrieve(agent, "Ana", config_overrides={"topk_facts": "many"})
    assert override.value.fields == ["body.config_overrides.topk_facts"]
    assert "config_overrides.topk_facts" in override.value.message
    # The agent's own config: set, refused naming the field, read back, reset.
    tuned = client.set_agent_config(agent, {"topk_facts": 7})
    assert tuned.overrides == {"topk_facts": 7}
    assert tuned.config_effective["topk_facts"] == 7
    with pytest.raises(InvalidRequestError) as bad_config:
        client.set_agent_config(agent, {"topk_facts": 0})
    assert bad_config.value.fields == ["body.overrides.topk_facts"]
    assert client.get_agent_config(agent).overrides == {"topk_facts": 7}
    reset = client.reset_agent_config(agent)
    assert reset.overrides == {}
    assert reset.updated_at is None
    with pytest.raises(InvalidRequestError) as empty:
        client.retrieve(agent, "")
    assert empty.value.fields == ["body.query"]
    with pytest.raises(InvalidRequestError) as page:
        client.list_facts(agent, limit=0)
    assert page.value.fields == ["query.limit"]
    with pytest.raises(InvalidRequestError) as entities_page:
        client.list_entities(agent, offset=-1)
    assert entities_page.value.fields == ["query.offset"]
    with pytest.raises(InvalidRequestError) as window:
        client.retrieve(agent, "Ana", as_of=("2024-02-01T00:00:00Z", "2024-01-01T00:00:00Z"))
    assert window.value.fields == ["body.as_of"]
    with pytest.raises(PayloadTooLargeError) as large:
        client.send_message(agent, "x" * (stack.settings.max_message_bytes + 1), "Ana")
    assert large.value.fields == ["body.message"]

    accepted = client.send_message(agent, "I live in Oslo.", "Ana")
    assert client.wait_for_event(accepted.event_id, timeout=90, poll_interval=0.1).status == "done"
    with pytest.raises(ConflictError) as conflict:
        client.retry_event(accepted.event_id)
    assert conflict.value.status == 409
    assert client.retry_event(accepted.event_id, from_scratch=True).start_stage == "extract"
    assert client.wait_for_event(accepted.event_id, timeout=90, poll_interval=0.1).status == "done"

    for error in (denied.value, unknown.value, malformed.value, large.value, conflict.value):
        assert isinstance(error, ApiError)

    with pytest.raises(ValueError, match="either messages or ndjson"):
        client.start_import(agent)


def test_waiting_gives_up_with_a_timeout_error(base_settings: Settings, agent: str) -> None:
    # An API publishing to queues no worker consumes: the event stays received.
    idle = isolated_app(base_settings).arandu_settings  # type: ignore[attr-defined]
    with serve_api(idle) as base_url, AranduClient(base_url, TEST_API_KEY) as client:
        accepted = client.send_message(agent, "I live in Quito.", "Ana")
        with pytest.raises(WaitTimeoutError) as waited:
            client.wait_for_event(accepted.event_id, timeout=0.3, poll_interval=0.1)
        assert isinstance(waited.value, TimeoutError)
        assert "received" in str(waited.value)
        started = client.start_import(
            agent, [{"message": "I love tea.", "speaker_name": "Ana", "occurred_at": "2024-01-01T00:00:00Z"}]
        )
        with pytest.raises(TimeoutError):
            client.wait_for_import(started.import_id, timeout=0.3, poll_interval=0.1)


def test_an_unreachable_server_is_a_transport_error() -> None:
    with (
        AranduClient(f"http://127.0.0.1:{free_port()}", TEST_API_KEY, timeout=2) as client,
        pytest.raises(TransportError),
    ):
        client.health()


# ---- Async client -----------------------------------------------------------------------------------------


def test_the_async_client_does_the_same(stack: Stack, agent: str) -> None:
    async def scenario() -> None:
        async with AsyncAranduClient(stack.base_url, TEST_API_KEY, timeout=60) as client:
            assert await client.health() is True
            assert (await client.ready()).ready is True
            assert (await client.set_agent_config(agent, {"timezone": "America/Lima"})).overrides
            assert (await client.get_agent_config(agent)).config_effective["timezone"] == "America/Lima"
            assert (await client.reset_agent_config(agent)).config_effective["timezone"] == "UTC"
            first = await client.send_message(agent, "I live in Lima.", "Eva", occurred_at=START)
            assert (await client.wait_for_event(first.event_id, timeout=90, poll_interval=0.1)).status == "done"
            batch = await client.send_batch(
                agent,
                [
                    {"message": "My sister Rosa is a nurse.", "speaker_name": "Eva", "occurred_at": START},
                    {"message": "I moved to Cusco.", "speaker_name": "Eva", "occurred_at": START + timedelta(days=9)},
                ],
            )
            statuses = await asyncio.gather(
                *(client.wait_for_event(e, timeout=90, poll_interval=0.1) for e in [first.event_id, *batch.event_ids])
            )
            assert [status.status for status in statuses] == ["done"] * 3

            progress: list[ImportProgress] = []

            async def record(update: ImportProgress) -> None:
                progress.append(update)

            started = await client.start_import(
                agent,
                [{"message": "I love salsa.", "speaker_name": "Eva", "occurred_at": START + timedelta(days=10)}],
            )
            final = await client.wait_for_import(started.import_id, timeout=90, poll_interval=0.1, on_progress=record)
            assert final.status == "done"
            assert progress[-1] == final

            result = await client.retrieve(agent, "Which city does Eva live in?")
            assert "Eva moved to Cusco." in [fact.fact_text for fact in result.facts]
            assert "Eva lives in Lima." not in [fact.fact_text for fact in result.facts]
            page = await client.list_facts(agent, entity_keys=["person:rosa"])
            assert [fact.fact_text for fact in page.facts] == ["Eva's sister Rosa is a nurse."]
            active = {fact.fact_text: fact for fact in (await client.list_facts(agent)).facts}
            cusco = active["Eva moved to Cusco."]
            assert cusco.supersedes_fact_id is not None
            lima = await client.get_fact(agent, cusco.supersedes_fact_id)
            assert lima.fact_text == "Eva lives in Lima."
            entities = await client.list_entities(agent, limit=500)
            assert {"person:eva", "person:rosa", "place:lima", "place:cusco"} <= {
                entity.canonical_key for entity in entities.entities
            }

            await client.delete_fact(agent, lima.fact_id)
            with pytest.raises(NotFoundError):
                await client.get_fact(agent, lima.fact_id)
            with pytest.raises(InvalidRequestError) as bad:
                await client.retrieve(agent, "Eva", config_overrides={"min_score": 7})
            assert bad.value.fields == ["body.config_overrides.min_score"]
            with pytest.raises(ConflictError):
                await client.retry_event(first.event_id)
            assert await client.delete_all_facts(agent) == 3

            # A re-process derives the memory from the messages again: the facts are back.
            reprocess = await client.reprocess(agent)
            switched = await client.wait_for_reprocess(agent, reprocess.reprocess_id, timeout=90, poll_interval=0.1)
            assert (switched.status, switched.total, switched.failed) == ("done", 4, 0)
            assert "Eva moved to Cusco." in [fact.fact_text for fact in (await client.list_facts(agent)).facts]
            with pytest.raises(ConflictError):
                await client.cancel_reprocess(agent)
            events = await client.list_events(agent, status="all", limit=3)
            assert len(events.events) == 3
            assert events.next_cursor is not None
            rest = await client.list_events(agent, status="all", cursor=events.next_cursor)
            assert [event.status for event in rest.events] == ["done"]
            assert (await client.retry_failed_events(agent)).retried == 0

        async with AsyncAranduClient(stack.base_url, "wrong") as intruder:
            with pytest.raises(AuthenticationError):
                await intruder.list_entities(agent)

    asyncio.run(scenario())


# ---- Packaging ---------------------------------------------------------------------------------------------


def test_the_client_does_not_import_the_server_packages() -> None:
    code = (
        "import sys, arandu_client, arandu_client.sync, arandu_client.aio\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in {'memory_core', 'api', 'workers', 'celery',"
        " 'fastapi', 'sqlalchemy'})\n"
        "print(loaded)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60, cwd=root
    )
    assert done.returncode == 0, done.stdout + done.stderr
