"""POST /v1/agents/{agent_id}/imports (JSON and NDJSON) and GET /v1/imports/{id}, over real HTTP.

No worker runs: an import's messages stay ``received``, so its progress shows them all pending.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import Engine, text

from memory_core.settings import Settings
from tests.support.api_server import (
    auth_headers,
    queued_task_names,
    serve_api,
    settled,
    stored_counts,
)

NDJSON = {"Content-Type": "application/x-ndjson"}
START = datetime(2023, 1, 10, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def client(api_config: Settings) -> Iterator[httpx.Client]:
    with (
        serve_api(api_config) as base_url,
        httpx.Client(base_url=base_url, headers=auth_headers(), timeout=120) as http,
    ):
        yield http


def history(count: int, *, prefix: str = "m", with_ids: bool = True) -> list[dict[str, Any]]:
    """``count`` dated messages, a minute apart."""
    return [
        {
            "message": f"Mensagem {index} do histórico",
            "speaker_name": "Ana" if index % 2 == 0 else "Bruno",
            "occurred_at": (START + timedelta(minutes=index)).isoformat(),
            **({"message_id": f"{prefix}-{index}"} if with_ids else {}),
        }
        for index in range(count)
    ]


def ndjson(messages: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(message) + "\n" for message in messages).encode()


def _nothing_stored(db: Engine, agent_id: str) -> None:
    counts = stored_counts(db, agent_id)
    assert counts == dict.fromkeys(counts, 0)


def _assert_error(response: httpx.Response, status: int, field: str, named: str | None = None) -> dict[str, Any]:
    """The error shape, ``field`` in the details and ``named`` (default: the field) in the sentence."""
    assert response.status_code == status, response.text
    body = response.json()
    assert (named or field) in body["error"], body
    assert any(item["field"] == field for item in body["detail"]), body
    return body


# ---- Accepted imports ----------------------------------------------------------------------------


def test_a_json_import_stores_dated_events_under_one_import(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    before = settled(lambda: queued_task_names(broker))
    response = client.post(f"/v1/agents/{agent}/imports", json={"messages": history(3)})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["total"] == 3
    assert body["duplicates"] == 0
    assert body["status"] == "running"
    import_id = uuid.UUID(body["import_id"])

    with db.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT e.message_id, e.occurred_at, e.import_id, e.source, r.status, r.import_id AS run_import "
                "FROM memory_events e JOIN pipeline_runs r ON r.event_id = e.id "
                "WHERE e.agent_id = :agent ORDER BY e.occurred_at"
            ),
            {"agent": agent},
        ).all()
        recorded = connection.execute(
            text("SELECT agent_id, total, duplicates FROM imports WHERE id = :id"), {"id": import_id}
        ).one()
    assert [row.message_id for row in rows] == ["m-0", "m-1", "m-2"]
    assert [row.occurred_at for row in rows] == [START + timedelta(minutes=index) for index in range(3)]
    assert {(row.import_id, row.run_import, row.status, row.source) for row in rows} == {
        (import_id, import_id, "received", "import")
    }
    assert tuple(recorded) == (agent, 3, 0)
    # A small import is published directly as one chunk of its three events.
    assert settled(lambda: queued_task_names(broker))[len(before) :] == ["ingest.extract"]

    progress = client.get(f"/v1/imports/{import_id}")
    assert progress.status_code == 200
    assert progress.json() | {"created_at": None} == {
        "import_id": str(import_id),
        "agent_id": agent,
        "total": 3,
        "duplicates": 0,
        "done": 0,
        "failed": 0,
        "pending": 3,
        "status": "running",
        "created_at": None,
    }


@pytest.mark.parametrize("encoding", ["json", "ndjson"])
def test_an_import_sharing_one_occurred_at_is_listed_in_send_order(
    client: httpx.Client, db: Engine, agent: str, encoding: str
) -> None:
    turns = [
        {
            "message": f"Turn {index}",
            "speaker_name": "Ana" if index % 2 else "Bruno",
            "occurred_at": START.isoformat(),
            "message_id": f"t-{index}",
        }
        for index in range(30)
    ]
    if encoding == "json":
        response = client.post(f"/v1/agents/{agent}/imports", json={"messages": turns})
    else:
        response = client.post(f"/v1/agents/{agent}/imports", content=ndjson(turns), headers=NDJSON)
    assert response.status_code == 202, response.text
    with db.connect() as connection:
        listed = connection.execute(
            text(
                "SELECT message_id FROM memory_events WHERE agent_id = :agent ORDER BY occurred_at, seq NULLS FIRST, id"
            ),
            {"agent": agent},
        ).scalars()
        assert list(listed) == [turn["message_id"] for turn in turns]


def test_re_sending_an_import_creates_no_new_events(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    messages = history(4)
    first = client.post(f"/v1/agents/{agent}/imports", json={"messages": messages})
    assert first.status_code == 202
    queued = settled(lambda: broker.llen("ingest"))

    again = client.post(f"/v1/agents/{agent}/imports", content=ndjson(messages), headers=NDJSON)
    assert again.status_code == 202, again.text
    body = again.json()
    assert (body["total"], body["duplicates"], body["status"]) == (0, 4, "done")
    assert stored_counts(db, agent)["memory_events"] == 4
    assert settled(lambda: broker.llen("ingest")) == queued
    progress = client.get(f"/v1/imports/{body['import_id']}").json()
    assert (progress["total"], progress["duplicates"], progress["pending"], progress["status"]) == (0, 4, 0, "done")

    # Half known, half new: only the new ones become events.
    mixed = client.post(f"/v1/agents/{agent}/imports", json={"messages": history(6)})
    assert (mixed.json()["total"], mixed.json()["duplicates"]) == (2, 4)
    assert stored_counts(db, agent)["memory_events"] == 6


def test_an_ndjson_import_ignores_blank_lines(client: httpx.Client, db: Engine, agent: str) -> None:
    lines = [json.dumps(message) for message in history(3, with_ids=False)]
    body = ("\n" + lines[0] + "\r\n\n   \n" + lines[1] + "\n" + lines[2]).encode()
    response = client.post(f"/v1/agents/{agent}/imports", content=body, headers=NDJSON)
    assert response.status_code == 202, response.text
    assert response.json()["total"] == 3
    counts = stored_counts(db, agent)
    assert (counts["memory_events"], counts["pipeline_runs"], counts["imports"]) == (3, 3, 1)


def test_a_large_import_is_published_through_dispatch_tasks(
    client: httpx.Client, broker: redis.Redis, agent: str
) -> None:
    before = settled(lambda: queued_task_names(broker))
    response = client.post(f"/v1/agents/{agent}/imports", json={"messages": history(20)})
    assert response.status_code == 202
    assert settled(lambda: queued_task_names(broker))[len(before) :] == ["ingest.dispatch"]


def test_an_import_of_10000_messages_is_stored_in_one_go(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(f"/v1/agents/{agent}/imports", content=ndjson(history(10_000)), headers=NDJSON)
    assert response.status_code == 202, response.text
    assert response.json()["total"] == 10_000
    assert stored_counts(db, agent)["pipeline_runs"] == 10_000
    progress = client.get(f"/v1/imports/{response.json()['import_id']}").json()
    assert (progress["pending"], progress["status"]) == (10_000, "running")


# ---- Refused imports -----------------------------------------------------------------------------


def test_a_json_item_without_occurred_at_is_422_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    messages = history(3)
    del messages[1]["occurred_at"]
    response = client.post(f"/v1/agents/{agent}/imports", json={"messages": messages})
    _assert_error(response, 422, "body.messages[1].occurred_at")
    _nothing_stored(db, agent)


def test_an_ndjson_line_that_is_not_json_is_422_naming_the_line(client: httpx.Client, db: Engine, agent: str) -> None:
    lines = [json.dumps(message) for message in history(4)]
    lines[2] = '{"message": "quebrado", "speaker_name": '
    body = ("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n").encode()  # the bad one is line 4
    response = client.post(f"/v1/agents/{agent}/imports", content=body, headers=NDJSON)
    result = _assert_error(response, 422, "body.line[4]", "line 4: invalid JSON")
    assert result["error"].startswith("NDJSON body: ")
    _nothing_stored(db, agent)


def test_an_ndjson_line_missing_a_field_is_422_naming_line_and_field(
    client: httpx.Client, db: Engine, agent: str
) -> None:
    messages = history(3)
    del messages[1]["occurred_at"]
    del messages[2]["speaker_name"]
    response = client.post(f"/v1/agents/{agent}/imports", content=ndjson(messages), headers=NDJSON)
    result = _assert_error(response, 422, "body.line[2].occurred_at", "line 2 occurred_at: field required")
    assert any(item["field"] == "body.line[3].speaker_name" for item in result["detail"])
    _nothing_stored(db, agent)


def test_an_ndjson_line_said_in_the_future_is_422_naming_the_line(client: httpx.Client, db: Engine, agent: str) -> None:
    messages = history(3)
    messages[1]["occurred_at"] = "2031-05-01T14:30:00+02:00"
    response = client.post(f"/v1/agents/{agent}/imports", content=ndjson(messages), headers=NDJSON)
    _assert_error(response, 422, "body.line[2].occurred_at", "line 2 occurred_at: must not be more than 24 hours ahead")
    _nothing_stored(db, agent)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"[1, 2]\n", ("body.line[1]", "line 1: must be a JSON object")),
        (b'\n{"message": "Oi"}', ("body.line[2].speaker_name", "line 2 speaker_name")),
        (b"\n\n  \n", ("body", "no messages")),
        (b"", ("body", "no messages")),
    ],
    ids=["not an object", "missing fields", "only blank lines", "empty"],
)
def test_a_bad_ndjson_body_is_422(
    client: httpx.Client, db: Engine, agent: str, body: bytes, expected: tuple[str, str]
) -> None:
    response = client.post(f"/v1/agents/{agent}/imports", content=body, headers=NDJSON)
    _assert_error(response, 422, *expected)
    _nothing_stored(db, agent)


def test_an_ndjson_import_over_10000_lines_is_422(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(f"/v1/agents/{agent}/imports", content=ndjson(history(10_001)), headers=NDJSON)
    _assert_error(response, 422, "body")
    _nothing_stored(db, agent)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"messages": []}, "body.messages"),
        ({"messages": history(10_001)}, "body.messages"),
        ({"messages": [{**history(1)[0], "occurred_at": "ontem"}]}, "body.messages[0].occurred_at"),
        ({"messages": [{**history(1)[0], "message": "  "}]}, "body.messages[0].message"),
        ({"messages": history(1), "source": "x"}, "body.source"),
    ],
    ids=["empty", "over 10000", "malformed occurred_at", "blank message", "unknown field"],
)
def test_a_bad_json_import_is_422_and_stores_nothing(
    client: httpx.Client, db: Engine, agent: str, payload: dict[str, Any], field: str
) -> None:
    response = client.post(f"/v1/agents/{agent}/imports", json=payload)
    _assert_error(response, 422, field)
    _nothing_stored(db, agent)


def test_an_import_with_an_oversized_message_is_413(client: httpx.Client, db: Engine, agent: str) -> None:
    messages = history(2)
    messages[1]["message"] = "a" * (256 * 1024 + 1)
    response = client.post(f"/v1/agents/{agent}/imports", content=ndjson(messages), headers=NDJSON)
    _assert_error(response, 413, "body.line[2].message")
    _nothing_stored(db, agent)


def test_an_import_of_another_content_type_is_415(client: httpx.Client, db: Engine, agent: str) -> None:
    response = client.post(
        f"/v1/agents/{agent}/imports", content=ndjson(history(2)), headers={"Content-Type": "text/csv"}
    )
    _assert_error(response, 415, "header.content-type")
    _nothing_stored(db, agent)


def test_an_import_without_a_key_is_401(client: httpx.Client, db: Engine, agent: str) -> None:
    response = httpx.post(f"{client.base_url}/v1/agents/{agent}/imports", json={"messages": history(1)})
    assert response.status_code == 401
    _nothing_stored(db, agent)


# ---- Progress ------------------------------------------------------------------------------------


def test_an_unknown_import_is_404_and_a_malformed_id_422(client: httpx.Client) -> None:
    missing = client.get(f"/v1/imports/{uuid.uuid4()}")
    assert missing.status_code == 404
    assert set(missing.json()) == {"error", "detail"}
    _assert_error(client.get("/v1/imports/not-a-uuid"), 422, "path.import_id")
    assert httpx.get(f"{client.base_url}/v1/imports/{uuid.uuid4()}").status_code == 401


def test_the_agent_scoped_progress_hides_other_agents_imports(client: httpx.Client, agent: str) -> None:
    import_id = client.post(f"/v1/agents/{agent}/imports", json={"messages": history(1)}).json()["import_id"]
    assert client.get(f"/v1/agents/{agent}/imports/{import_id}").status_code == 200
    assert client.get(f"/v1/agents/{agent}-other/imports/{import_id}").status_code == 404
    # Keys are service-wide: the global path shows it to any key holder.
    assert client.get(f"/v1/imports/{import_id}").json()["agent_id"] == agent
