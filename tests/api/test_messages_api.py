"""POST /v1/agents/{agent_id}/messages and /messages/batch over real HTTP, on real PostgreSQL and Redis.

No worker runs here: the tests check the answers, what PostgreSQL holds, and what was published
to the broker. Every refused request is checked to have stored nothing for its agent.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import Engine, text

from memory_core.settings import Settings
from tests.support.api_server import (
    api_settings,
    auth_headers,
    eventually_equal,
    queued_task_names,
    serve_api,
    settled,
    stored_counts,
)
from tests.support.services import TestServices
from workers.intake import IntakeQueue

MAX_MESSAGE_BYTES = 256 * 1024


def _nothing_stored(db: Engine, agent_id: str) -> None:
    assert stored_counts(db, agent_id) == dict.fromkeys(stored_counts(db, agent_id), 0)


def _assert_error_shape(response: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) >= {"error", "detail"}
    assert isinstance(body["error"], str)
    assert field in body["error"], body
    assert any(item["field"] == field for item in body["detail"]), body
    return body


# ---- Accepted messages -----------------------------------------------------------------------


def test_a_message_is_stored_as_an_event_with_a_received_run_and_published(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    intake = IntakeQueue(broker)
    before = settled(lambda: queued_task_names(broker))
    broker.delete(intake.pending_key)
    response = client.post(
        f"/v1/agents/{agent}/messages", json={"message": "Eu moro em Recife.", "speaker_name": "Ana"}
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "received"
    assert body["duplicate"] is False
    assert body["warnings"] == []
    event_id = uuid.UUID(body["event_id"])

    with db.connect() as connection:
        event = connection.execute(
            text("SELECT agent_id, text, speaker, session_id, source, message_id FROM memory_events WHERE id = :id"),
            {"id": event_id},
        ).one()
        run = connection.execute(
            text("SELECT status, stage, attempts, options FROM pipeline_runs WHERE event_id = :id"), {"id": event_id}
        ).one()
    assert tuple(event) == (agent, "Eu moro em Recife.", "Ana", "default", "api", None)
    assert run.status == "received"
    assert run.attempts == 0
    assert run.options == {"verbose": False, "config_overrides": {}, "recent_messages": []}
    # The event waits in the intake list for a collector, which is queued on the ingest queue
    # (both published just after the answer).
    eventually_equal(lambda: broker.lrange(intake.list_key, -1, -1), [str(event_id).encode()])
    assert settled(lambda: queued_task_names(broker))[len(before) :] == ["ingest.collect"]


def test_single_messages_share_one_collector_and_wait_for_it_in_order(
    client: httpx.Client, broker: redis.Redis, agent: str
) -> None:
    intake = IntakeQueue(broker)
    before = settled(lambda: queued_task_names(broker))
    broker.delete(intake.list_key, intake.pending_key)
    sent = []
    for number, other in enumerate((agent, f"{agent}-b", agent, f"{agent}-c")):
        response = client.post(
            f"/v1/agents/{other}/messages", json={"message": f"Message {number}.", "speaker_name": "Ana"}
        )
        assert response.status_code == 202, response.text
        sent.append(response.json()["event_id"])
    # Four messages of three agents: one collector task for all of them, ids in the order sent.
    eventually_equal(lambda: [item.decode() for item in broker.lrange(intake.list_key, 0, -1)], sent)
    assert settled(lambda: queued_task_names(broker))[len(before) :] == ["ingest.collect"]
    # Once a collector has taken the list, the next message queues the next collector.
    assert intake.take() == sent
    response = client.post(f"/v1/agents/{agent}/messages", json={"message": "Later.", "speaker_name": "Ana"})
    later = [response.json()["event_id"]]
    eventually_equal(lambda: [item.decode() for item in broker.lrange(intake.list_key, 0, -1)], later)
    assert settled(lambda: queued_task_names(broker))[len(before) :] == ["ingest.collect", "ingest.collect"]


def test_every_optional_field_is_stored(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages",
        json={
            "message": "Comecei a trabalhar na Acme.",
            "speaker_name": "  Rafael ",
            "session_id": "s-42",
            "occurred_at": "2024-03-05T10:30:00",
            "message_id": "msg-1",
            "source": "whatsapp",
            "recent_messages": ["Oi!", "Tudo bem?"],
            "config_overrides": {"topk_facts": 7, "no_such_knob": 1},
            "verbose": True,
        },
    )
    assert response.status_code == 202, response.text
    warnings = response.json()["warnings"]
    assert len(warnings) == 1
    assert "no_such_knob" in warnings[0]
    with db.connect() as connection:
        row = connection.execute(
            text(
                "SELECT e.speaker, e.session_id, e.occurred_at, e.message_id, e.source, r.options "
                "FROM memory_events e JOIN pipeline_runs r ON r.event_id = e.id WHERE e.id = :id"
            ),
            {"id": response.json()["event_id"]},
        ).one()
    assert row.speaker == "Rafael"
    assert row.session_id == "s-42"
    # A naive occurred_at is UTC.
    assert row.occurred_at == datetime(2024, 3, 5, 10, 30, tzinfo=UTC)
    assert row.message_id == "msg-1"
    assert row.source == "whatsapp"
    assert row.options == {
        "verbose": True,
        "config_overrides": {"topk_facts": 7},
        "recent_messages": ["Oi!", "Tudo bem?"],
    }


def test_an_offset_occurred_at_is_stored_as_the_same_instant(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages",
        json={"message": "Oi", "speaker_name": "Ana", "occurred_at": "2024-03-05T10:30:00-03:00"},
    )
    assert response.status_code == 202, response.text
    with db.connect() as connection:
        occurred = connection.execute(
            text("SELECT occurred_at FROM memory_events WHERE id = :id"), {"id": response.json()["event_id"]}
        ).scalar_one()
    assert occurred == datetime(2024, 3, 5, 13, 30, tzinfo=UTC)


def test_the_same_message_id_twice_returns_the_same_event_and_queues_nothing(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    payload = {"message": "Tenho um gato chamado Tom.", "speaker_name": "Ana", "message_id": "m-1"}
    first = client.post(f"/v1/agents/{agent}/messages", json=payload)
    assert first.status_code == 202
    queued = settled(lambda: broker.llen("ingest"))
    second = client.post(f"/v1/agents/{agent}/messages", json=payload)
    assert second.status_code == 200, second.text
    assert second.json()["event_id"] == first.json()["event_id"]
    assert second.json()["duplicate"] is True
    assert second.json()["status"] == "received"
    assert settled(lambda: broker.llen("ingest")) == queued
    counts = stored_counts(db, agent)
    assert counts["memory_events"] == 1
    assert counts["pipeline_runs"] == 1


def _post_at_once(base_url: str, requests: list[tuple[str, dict[str, Any]]]) -> list[httpx.Response]:
    """POST every (path, body) at the same moment, one connection each."""

    async def send() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(requests))
        async with httpx.AsyncClient(base_url=base_url, headers=auth_headers(), timeout=60, limits=limits) as http:
            return list(await asyncio.gather(*(http.post(path, json=body) for path, body in requests)))

    return asyncio.run(send())


def test_concurrent_messages_each_get_the_event_of_their_own_message(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    intake = IntakeQueue(broker)
    agents = [f"{agent}-{index}" for index in range(4)]
    requests = [
        (f"/v1/agents/{agents[i % 4]}/messages", {"message": f"Message number {i}.", "speaker_name": "Ana"})
        for i in range(40)
    ]
    responses = _post_at_once(str(client.base_url), requests)
    assert [response.status_code for response in responses] == [202] * 40, [r.text for r in responses]
    event_ids = [response.json()["event_id"] for response in responses]
    assert len(set(event_ids)) == 40
    with db.connect() as connection:
        stored = {
            str(row.id): (row.agent_id, row.text)
            for row in connection.execute(
                text(
                    "SELECT e.id, e.agent_id, e.text FROM memory_events e JOIN pipeline_runs r ON r.event_id = e.id "
                    "WHERE e.agent_id = ANY(:agents)"
                ),
                {"agents": agents},
            )
        }
    sent = zip(event_ids, requests, strict=True)
    expected = {event_id: (path.split("/")[3], body["message"]) for event_id, (path, body) in sent}
    assert stored == expected
    # Every one of them waits for a collector.
    eventually_equal(lambda: set(event_ids) <= {item.decode() for item in broker.lrange(intake.list_key, 0, -1)}, True)


def test_the_same_message_id_sent_concurrently_is_stored_once(client: httpx.Client, db: Engine, agent: str) -> None:
    payload = {"message": "Tenho um gato chamado Tom.", "speaker_name": "Ana", "message_id": "sent-twice"}
    responses = _post_at_once(str(client.base_url), [(f"/v1/agents/{agent}/messages", payload)] * 10)
    assert sorted(response.status_code for response in responses) == [200] * 9 + [202]
    assert len({response.json()["event_id"] for response in responses}) == 1
    assert sorted(response.json()["duplicate"] for response in responses) == [False] + [True] * 9
    counts = stored_counts(db, agent)
    assert counts["memory_events"] == 1
    assert counts["pipeline_runs"] == 1


def test_message_ids_are_per_agent(client: httpx.Client, agent: str) -> None:
    payload = {"message": "Oi", "speaker_name": "Ana", "message_id": "shared-id"}
    first = client.post(f"/v1/agents/{agent}/messages", json=payload)
    other = client.post(f"/v1/agents/{agent}-other/messages", json=payload)
    assert first.status_code == other.status_code == 202
    assert first.json()["event_id"] != other.json()["event_id"]


@pytest.mark.parametrize("agent_id", ["a", "A.b_c:d-e@f", "x" * 128, "user@example.com"])
def test_agent_ids_of_the_allowed_alphabet_are_accepted(client: httpx.Client, agent_id: str) -> None:
    response = client.post(f"/v1/agents/{agent_id}/messages", json={"message": "Oi", "speaker_name": "Ana"})
    assert response.status_code == 202, response.text


def test_a_message_of_exactly_the_limit_is_accepted(client: httpx.Client, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages", json={"message": "a" * MAX_MESSAGE_BYTES, "speaker_name": "Ana"}
    )
    assert response.status_code == 202, response.text


def test_no_content_type_is_read_as_json(client: httpx.Client, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages",
        content=json.dumps({"message": "Oi", "speaker_name": "Ana"}).encode(),
        headers={"Content-Type": ""},
    )
    assert response.status_code == 202, response.text


# ---- Refused messages: the right status, the field named, nothing stored ------------------------

VALID = {"message": "Eu moro em São Paulo.", "speaker_name": "Rafael"}

_BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("empty message", {**VALID, "message": ""}, "body.message"),
    ("whitespace message", {**VALID, "message": " \n\t "}, "body.message"),
    ("missing message", {"speaker_name": "Rafael"}, "body.message"),
    ("missing speaker", {"message": "Oi"}, "body.speaker_name"),
    ("whitespace speaker", {**VALID, "speaker_name": "   "}, "body.speaker_name"),
    ("speaker too long", {**VALID, "speaker_name": "R" * 257}, "body.speaker_name"),
    ("malformed occurred_at", {**VALID, "occurred_at": "yesterday"}, "body.occurred_at"),
    ("impossible occurred_at", {**VALID, "occurred_at": "2024-13-45T99:00:00"}, "body.occurred_at"),
    ("numeric occurred_at", {**VALID, "occurred_at": 1700000000}, "body.occurred_at"),
    ("occurred_at out of range", {**VALID, "occurred_at": "0001-01-01T00:00:00+05:00"}, "body.occurred_at"),
    ("occurred_at a thousand years ahead", {**VALID, "occurred_at": "3026-01-01T00:00:00Z"}, "body.occurred_at"),
    ("occurred_at in the year 9999", {**VALID, "occurred_at": "9999-12-31T23:59:59"}, "body.occurred_at"),
    ("numeric message", {**VALID, "message": 123}, "body.message"),
    ("string verbose", {**VALID, "verbose": "yes"}, "body.verbose"),
    ("numeric dry_run", {**VALID, "dry_run": 1}, "body.dry_run"),
    ("numeric session_id", {**VALID, "session_id": 5}, "body.session_id"),
    ("empty message_id", {**VALID, "message_id": ""}, "body.message_id"),
    ("recent_messages not a list", {**VALID, "recent_messages": "Oi"}, "body.recent_messages"),
    ("recent_messages item not a string", {**VALID, "recent_messages": ["Oi", 2]}, "body.recent_messages[1]"),
    ("too many recent_messages", {**VALID, "recent_messages": ["Oi"] * 21}, "body.recent_messages"),
    ("unknown field", {**VALID, "colour": "blue"}, "body.colour"),
    ("config_overrides not an object", {**VALID, "config_overrides": "fast"}, "body.config_overrides"),
    (
        "override of a wrong type",
        {**VALID, "config_overrides": {"topk_facts": "5"}},
        "body.config_overrides.topk_facts",
    ),
    (
        "override out of bounds",
        {**VALID, "config_overrides": {"topk_facts": 10**9}},
        "body.config_overrides.topk_facts",
    ),
    (
        "override of a float by a bool",
        {**VALID, "config_overrides": {"min_score": True}},
        "body.config_overrides.min_score",
    ),
    (
        "embedding_dimensions override",
        {**VALID, "config_overrides": {"embedding_dimensions": 384}},
        "body.config_overrides",
    ),
    ("NUL in message", {**VALID, "message": "Oi\u0000"}, "body.message"),
    ("NUL in an override", {**VALID, "config_overrides": {"timezone": "UTC\u0000"}}, "body.config_overrides"),
]


BAD_BODIES = [pytest.param(payload, field, id=case) for case, payload, field in _BAD_BODIES]


@pytest.mark.parametrize(("payload", "field"), BAD_BODIES)
def test_a_bad_message_is_422_naming_the_field_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str, payload: dict[str, Any], field: str
) -> None:
    response = client.post(f"/v1/agents/{agent}/messages", json=payload)
    _assert_error_shape(response, 422, field)
    _nothing_stored(db, agent)


def test_an_occurred_at_days_ahead_is_refused_as_in_the_future(client: httpx.Client, db: Engine, agent: str) -> None:
    said = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    response = client.post(f"/v1/agents/{agent}/messages", json={**VALID, "occurred_at": said})
    result = _assert_error_shape(response, 422, "body.occurred_at")
    assert "ahead of the server's clock" in result["error"]
    assert "in the future" in result["error"]
    _nothing_stored(db, agent)


def test_local_time_sent_without_an_offset_is_accepted_though_hours_ahead_in_utc(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    # Local time east of UTC, sent naive, reads up to 14 hours ahead: a day of slack keeps it.
    said = datetime.now(UTC) + timedelta(hours=14)
    naive = said.replace(tzinfo=None).isoformat(timespec="seconds")
    response = client.post(f"/v1/agents/{agent}/messages", json={**VALID, "occurred_at": naive})
    assert response.status_code == 202, response.text
    with db.connect() as conn:
        stored = conn.execute(
            text("SELECT occurred_at FROM memory_events WHERE id = :id"), {"id": response.json()["event_id"]}
        ).scalar_one()
    assert stored == said.replace(microsecond=0)


def test_a_batch_item_said_in_the_future_is_named_and_nothing_stored(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    messages: list[dict[str, Any]] = [{**VALID, "message": f"m{index}"} for index in range(3)]
    messages[2] = {**VALID, "occurred_at": "2999-01-01T00:00:00Z"}
    response = client.post(f"/v1/agents/{agent}/messages/batch", json={"messages": messages})
    _assert_error_shape(response, 422, "body.messages[2].occurred_at")
    _nothing_stored(db, agent)


def test_an_unknown_field_is_called_unknown(client: httpx.Client, agent: str) -> None:
    response = client.post(f"/v1/agents/{agent}/messages", json={**VALID, "colour": "blue", "size": 3})
    body = _assert_error_shape(response, 422, "body.colour")
    assert {item["field"]: item["message"] for item in body["detail"]} == {
        "body.colour": "unknown field",
        "body.size": "unknown field",
    }


_BAD_RAW_BODIES: list[tuple[str, bytes]] = [
    ("malformed JSON", b'{"message": "Oi", "speaker_name": '),
    ("empty body", b""),
    ("array body", b'[{"message": "Oi", "speaker_name": "Ana"}]'),
    ("null body", b"null"),
    ("string body", b'"Oi"'),
    ("huge integer", b'{"message": "Oi", "speaker_name": "Ana", "message_id": ' + b"9" * 5000 + b"}"),
    ("huge float", b'{"message": "Oi", "speaker_name": "Ana", "verbose": 1e999999}'),
    ("lone surrogate", b'{"message": "Oi \\ud800", "speaker_name": "Ana"}'),
    ("invalid UTF-8", b'{"message": "Oi \xff\xfe", "speaker_name": "Ana"}'),
]


BAD_RAW_BODIES = [pytest.param(raw, id=case) for case, raw in _BAD_RAW_BODIES]


@pytest.mark.parametrize("raw", BAD_RAW_BODIES)
def test_a_body_that_is_not_a_json_object_is_422_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str, raw: bytes
) -> None:
    response = client.post(f"/v1/agents/{agent}/messages", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["field"].startswith("body")
    _nothing_stored(db, agent)


def test_another_content_type_is_415(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages", content=b"message=Oi&speaker_name=Ana", headers={"Content-Type": "text/plain"}
    )
    _assert_error_shape(response, 415, "header.content-type")
    _nothing_stored(db, agent)


@pytest.mark.parametrize("size", [MAX_MESSAGE_BYTES + 1, 2 * MAX_MESSAGE_BYTES])
def test_a_message_over_the_limit_is_413_naming_the_field(
    client: httpx.Client, db: Engine, agent: str, size: int
) -> None:
    response = client.post(f"/v1/agents/{agent}/messages", json={"message": "a" * size, "speaker_name": "Ana"})
    body = _assert_error_shape(response, 413, "body.message")
    assert str(MAX_MESSAGE_BYTES) in body["error"]
    _nothing_stored(db, agent)


def test_the_limit_counts_utf8_bytes_not_characters(client: httpx.Client, db: Engine, agent: str) -> None:
    # "ã" is two bytes: this message has fewer characters than the limit but more bytes.
    response = client.post(
        f"/v1/agents/{agent}/messages", json={"message": "ã" * (MAX_MESSAGE_BYTES // 2 + 1), "speaker_name": "Ana"}
    )
    _assert_error_shape(response, 413, "body.message")
    _nothing_stored(db, agent)


def test_a_body_over_the_request_cap_is_413(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages",
        content=b"x" * (17 * 1024 * 1024),
        headers={"Content-Type": "application/json"},
    )
    _assert_error_shape(response, 413, "body")
    _nothing_stored(db, agent)


@pytest.mark.parametrize(
    "agent_id",
    ["x" * 129, "bad agent", "agent!", "agênt", "a$b", "a,b"],
    ids=["too long", "space", "bang", "non-ascii", "dollar", "comma"],
)
def test_a_bad_agent_id_is_422(client: httpx.Client, db: Engine, agent_id: str) -> None:
    response = client.post(f"/v1/agents/{agent_id}/messages", json=VALID)
    _assert_error_shape(response, 422, "path.agent_id")
    _nothing_stored(db, agent_id)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-key"}, {"Authorization": "Basic dGVzdC1rZXk6"}, {"Authorization": "Bearer"}],
    ids=["missing", "wrong", "basic", "empty"],
)
def test_a_missing_or_wrong_key_is_401_and_stores_nothing(
    api_config: Settings, client: httpx.Client, db: Engine, agent: str, headers: dict[str, str]
) -> None:
    response = httpx.post(f"{client.base_url}/v1/agents/{agent}/messages", json=VALID, headers=headers)
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]
    _nothing_stored(db, agent)


def test_a_non_ascii_key_is_401_not_500(client: httpx.Client, agent: str) -> None:
    response = httpx.post(
        f"{client.base_url}/v1/agents/{agent}/messages",
        json=VALID,
        headers=[(b"Authorization", "Bearer chave-secreta-ç".encode("latin-1"))],
    )
    assert response.status_code == 401


def test_probes_and_docs_need_no_key(client: httpx.Client) -> None:
    for path in ("/healthz", "/openapi.json", "/docs"):
        assert httpx.get(f"{client.base_url}{path}").status_code == 200, path
    spec = httpx.get(f"{client.base_url}/openapi.json").json()
    assert "/v1/agents/{agent_id}/messages" in spec["paths"]
    assert "MessageIn" in spec["components"]["schemas"]


def test_unknown_paths_answer_the_error_shape(client: httpx.Client) -> None:
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert set(response.json()) == {"error", "detail"}
    response = client.get("/v1/agents/a/messages")
    assert response.status_code == 405
    assert set(response.json()) == {"error", "detail"}


# ---- Batches -------------------------------------------------------------------------------------


def test_a_batch_returns_event_ids_in_input_order(client: httpx.Client, db: Engine, agent: str) -> None:
    texts = [f"Mensagem número {index}" for index in range(5)]
    response = client.post(
        f"/v1/agents/{agent}/messages/batch",
        json={"messages": [{"message": message, "speaker_name": "Ana"} for message in texts]},
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["duplicates"] == 0
    with db.connect() as connection:
        stored = dict(
            connection.execute(text("SELECT id, text FROM memory_events WHERE agent_id = :a"), {"a": agent}).all()
        )
    assert [stored[uuid.UUID(event_id)] for event_id in body["event_ids"]] == texts
    assert stored_counts(db, agent)["pipeline_runs"] == 5


def test_a_batch_sharing_one_occurred_at_is_listed_in_send_order(client: httpx.Client, db: Engine, agent: str) -> None:
    # Turns of one session stamped with one date (as an import of a chat log does): only the
    # arrival order (seq) tells them apart; random event ids would shuffle them.
    said = "2023-05-08T13:56:00+00:00"
    turns = [
        {"message": f"Turn {index}", "speaker_name": "Ana" if index % 2 else "Bruno", "occurred_at": said}
        for index in range(20)
    ]
    response = client.post(f"/v1/agents/{agent}/messages/batch", json={"messages": turns})
    assert response.status_code == 202, response.text
    with db.connect() as connection:
        listed = connection.execute(
            text(
                "SELECT id, text, seq FROM memory_events WHERE agent_id = :a ORDER BY occurred_at, seq NULLS FIRST, id"
            ),
            {"a": agent},
        ).all()
    assert [row.text for row in listed] == [turn["message"] for turn in turns]
    assert [str(row.id) for row in listed] == response.json()["event_ids"]
    assert all(row.seq is not None for row in listed)


def test_a_batch_counts_known_message_ids_as_duplicates(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    known = client.post(f"/v1/agents/{agent}/messages", json={**VALID, "message_id": "known"}).json()["event_id"]
    queued = settled(lambda: broker.llen("ingest"))
    response = client.post(
        f"/v1/agents/{agent}/messages/batch",
        json={
            "messages": [
                {**VALID, "message_id": "new-1"},
                {**VALID, "message_id": "known"},
                {**VALID, "message_id": "new-1"},  # the same id twice in one batch: one event
                {**VALID},
            ]
        },
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["duplicates"] == 2
    ids = body["event_ids"]
    assert ids[1] == known
    assert ids[0] == ids[2]
    assert len(set(ids)) == 3
    assert stored_counts(db, agent)["memory_events"] == 3
    # Two new events, one chain of both (small batches are published directly, once answered, as
    # one chunk: with an LLM, messages of one conversation share their extraction calls).
    eventually_equal(lambda: broker.llen("ingest"), queued + 1)
    assert settled(lambda: broker.llen("ingest")) == queued + 1


def test_a_large_batch_is_published_through_one_dispatch_task(
    client: httpx.Client, broker: redis.Redis, agent: str
) -> None:
    before = settled(lambda: queued_task_names(broker))
    response = client.post(
        f"/v1/agents/{agent}/messages/batch",
        json={"messages": [{"message": f"m{index}", "speaker_name": "Ana"} for index in range(20)]},
    )
    assert response.status_code == 202
    assert settled(lambda: queued_task_names(broker))[len(before) :] == ["ingest.dispatch"]


def test_a_batch_with_one_bad_item_stores_nothing_and_names_it(client: httpx.Client, db: Engine, agent: str) -> None:
    messages: list[dict[str, Any]] = [{**VALID, "message": f"m{index}"} for index in range(6)]
    messages[3] = {"message": "sem autor"}
    response = client.post(f"/v1/agents/{agent}/messages/batch", json={"messages": messages})
    _assert_error_shape(response, 422, "body.messages[3].speaker_name")
    _nothing_stored(db, agent)


def test_a_batch_with_a_bad_override_in_one_item_stores_nothing(client: httpx.Client, db: Engine, agent: str) -> None:
    messages: list[dict[str, Any]] = [dict(VALID) for _ in range(4)]
    messages[2] = {**VALID, "config_overrides": {"min_score": "high"}}
    response = client.post(f"/v1/agents/{agent}/messages/batch", json={"messages": messages})
    _assert_error_shape(response, 422, "body.messages[2].config_overrides.min_score")
    _nothing_stored(db, agent)


def test_a_batch_with_one_oversized_item_is_413_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    messages: list[dict[str, Any]] = [dict(VALID) for _ in range(3)]
    messages[1] = {**VALID, "message": "a" * (MAX_MESSAGE_BYTES + 1)}
    response = client.post(f"/v1/agents/{agent}/messages/batch", json={"messages": messages})
    _assert_error_shape(response, 413, "body.messages[1].message")
    _nothing_stored(db, agent)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"messages": []}, "body.messages"),
        ({"messages": [VALID] * 1001}, "body.messages"),
        ({}, "body.messages"),
        ({"messages": VALID}, "body.messages"),
        ({"messages": [VALID], "extra": 1}, "body.extra"),
        ({"messages": [{**VALID, "dry_run": True}]}, "body.messages[0].dry_run"),
    ],
    ids=["empty", "over 1000", "missing", "not a list", "unknown field", "dry_run in a batch"],
)
def test_a_bad_batch_is_422_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str, payload: dict[str, Any], field: str
) -> None:
    response = client.post(f"/v1/agents/{agent}/messages/batch", json=payload)
    _assert_error_shape(response, 422, field)
    _nothing_stored(db, agent)


def test_a_batch_of_1000_is_accepted(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/messages/batch",
        json={"messages": [{"message": f"m{index}", "speaker_name": "Ana"} for index in range(1000)]},
    )
    assert response.status_code == 202, response.text
    assert len(response.json()["event_ids"]) == 1000
    assert stored_counts(db, agent)["pipeline_runs"] == 1000


# ---- Dry run -----------------------------------------------------------------------------------


def test_a_dry_run_answers_the_write_result_and_stores_nothing(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    queued = settled(lambda: broker.llen("ingest"))
    response = client.post(
        f"/v1/agents/{agent}/messages",
        json={"message": "Eu moro em São Paulo.", "speaker_name": "Rafael", "dry_run": True, "verbose": True},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["dry_run"] is True
    result = body["result"]
    assert result["success"] is True
    assert result["facts_added"], result
    assert any("Paulo" in fact["fact_text"] for fact in result["facts_added"])
    assert all(fact["fact_id"] is None for fact in result["facts_added"])
    assert result["pipeline"], "verbose asks for the trace"
    _nothing_stored(db, agent)
    assert settled(lambda: broker.llen("ingest")) == queued


def test_a_dry_run_of_a_long_message_is_422_naming_the_field_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    # A dry run extracts in the API process: 256 KiB took 5.7 s of its CPU. 16 KiB is the preview's cap.
    long_message = "Eu moro em São Paulo. " * 800  # ~18 KiB, under the message cap
    response = client.post(
        f"/v1/agents/{agent}/messages", json={"message": long_message, "speaker_name": "Rafael", "dry_run": True}
    )
    body = _assert_error_shape(response, 422, "body.message")
    assert "16384 bytes" in body["detail"][0]["message"]
    _nothing_stored(db, agent)
    # The same message is still accepted for processing by the workers.
    stored = client.post(f"/v1/agents/{agent}/messages", json={"message": long_message, "speaker_name": "Rafael"})
    assert stored.status_code == 202, stored.text


def test_recent_messages_are_capped_together_with_a_422_naming_the_field(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    # 20 x 256 KiB of context went to the LLM with every extraction; together they are capped at 16 KiB.
    recent = ["Ontem falamos de viagens e de trabalho. " * 100] * 20  # 20 x 4 KiB
    response = client.post(f"/v1/agents/{agent}/messages", json={**VALID, "recent_messages": recent})
    body = _assert_error_shape(response, 422, "body.recent_messages")
    assert "16384" in body["detail"][0]["message"]
    _nothing_stored(db, agent)
    fine = client.post(f"/v1/agents/{agent}/messages", json={**VALID, "recent_messages": recent[:3]})
    assert fine.status_code == 202, fine.text


# ---- Broker outage and configuration -----------------------------------------------------------


def test_a_message_is_accepted_and_stored_while_the_broker_is_down(
    migrated_database_url: str, db: Engine, tmp_path: Path, agent: str
) -> None:
    settings = api_settings(
        migrated_database_url, f"redis+socket://{tmp_path / 'nobody-listens.sock'}", tmp_path / "home"
    )
    with serve_api(settings) as base_url:
        response = httpx.post(f"{base_url}/v1/agents/{agent}/messages", json=VALID, headers=auth_headers(), timeout=30)
    assert response.status_code == 202, response.text
    assert stored_counts(db, agent)["pipeline_runs"] == 1


@pytest.fixture
def hung_broker(tmp_path: Path) -> Iterator[str]:
    """A unix socket that takes connections and never answers: a broker that hangs."""
    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"redis+socket://{path}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        server.close()


def test_a_broker_that_hangs_does_not_hold_up_the_answer(
    migrated_database_url: str, db: Engine, tmp_path: Path, agent: str, hung_broker: str
) -> None:
    # The pipeline is published once the 202 is sent: the caller never waits for the broker
    # (here its client gives up after 2 s), and the stored run is the sweeper's to start.
    settings = api_settings(migrated_database_url, hung_broker, tmp_path / "home")
    with serve_api(settings) as base_url:
        started = time.perf_counter()
        response = httpx.post(f"{base_url}/v1/agents/{agent}/messages", json=VALID, headers=auth_headers(), timeout=30)
        waited = time.perf_counter() - started
    assert response.status_code == 202, response.text
    assert waited < 1.5, f"the answer waited {waited:.2f} s for the broker"
    assert stored_counts(db, agent)["pipeline_runs"] == 1


def test_without_configured_keys_every_v1_request_is_401(
    migrated_database_url: str, services: TestServices, db: Engine, tmp_path: Path, agent: str
) -> None:
    settings = api_settings(migrated_database_url, services.broker_url, tmp_path / "home", api_keys="")
    assert settings.api_keys == ()
    with serve_api(settings) as base_url:
        response = httpx.post(f"{base_url}/v1/agents/{agent}/messages", json=VALID, headers=auth_headers())
        assert httpx.get(f"{base_url}/healthz").status_code == 200
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "ARANDU_API_KEYS" in response.json()["error"]
    _nothing_stored(db, agent)
