"""GET /v1/events/{id} and POST /v1/events/{id}/retry over real HTTP, on real PostgreSQL and Redis.

No worker runs: failed and done runs are simulated by setting their row directly, which is
exactly what the pipeline leaves behind.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import Engine, text

from tests.support.api_server import queued_task_names, settled


def send(client: httpx.Client, agent_id: str, **fields: Any) -> str:
    payload = {"message": "Minha irmã se chama Carla.", "speaker_name": "Ana", **fields}
    response = client.post(f"/v1/agents/{agent_id}/messages", json=payload)
    assert response.status_code == 202, response.text
    return str(response.json()["event_id"])


def set_run(db: Engine, event_id: str, **values: Any) -> None:
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    with db.begin() as connection:
        connection.execute(
            text(f"UPDATE pipeline_runs SET {assignments} WHERE event_id = :event_id"),  # test-chosen column names
            {**values, "event_id": event_id},
        )


def run_row(db: Engine, event_id: str) -> Any:
    with db.connect() as connection:
        return connection.execute(
            text("SELECT status, stage, attempts, error, finished_at FROM pipeline_runs WHERE event_id = :id"),
            {"id": event_id},
        ).one()


def _assert_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body["error"], str)
    assert body["error"]
    assert isinstance(body["detail"], list)
    return body


# ---- Reading an event ----------------------------------------------------------------------------


def test_a_fresh_event_is_received(client: httpx.Client, agent: str) -> None:
    event_id = send(client, agent, occurred_at="2024-02-01T08:00:00Z", message_id="e-1")
    response = client.get(f"/v1/events/{event_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["event_id"] == event_id
    assert body["agent_id"] == agent
    assert body["status"] == "received"
    assert body["stage"] is None
    assert body["attempts"] == 0
    assert body["error"] is None
    assert body["result"] is None
    assert body["occurred_at"].startswith("2024-02-01T08:00:00")
    assert body["message_id"] == "e-1"


def test_a_done_event_shows_its_result(client: httpx.Client, db: Engine, agent: str) -> None:
    event_id = send(client, agent)
    set_run(db, event_id, status="done", stage="upsert", finished_at="2024-02-01T08:00:05Z")
    with db.begin() as connection:
        connection.execute(
            text("UPDATE pipeline_runs SET result = CAST(:r AS jsonb) WHERE event_id = :id"),
            {"r": '{"event_id": "x", "facts_added": [], "success": true}', "id": event_id},
        )
    body = client.get(f"/v1/events/{event_id}").json()
    assert body["status"] == "done"
    assert body["result"]["success"] is True
    assert body["finished_at"] is not None


def test_an_unknown_event_is_404_and_a_malformed_id_422(client: httpx.Client) -> None:
    missing = _assert_error(client.get(f"/v1/events/{uuid.uuid4()}"), 404)
    assert "not found" in missing["error"]
    malformed = _assert_error(client.get("/v1/events/not-a-uuid"), 422)
    assert malformed["detail"][0]["field"] == "path.event_id"
    assert "path.event_id" in malformed["error"]
    retry = _assert_error(client.post("/v1/events/12345/retry"), 422)
    assert retry["detail"][0]["field"] == "path.event_id"


def test_events_need_a_key(client: httpx.Client, agent: str) -> None:
    event_id = send(client, agent)
    response = httpx.get(f"{client.base_url}/v1/events/{event_id}")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert httpx.post(f"{client.base_url}/v1/events/{event_id}/retry").status_code == 401


def test_agent_scoped_paths_do_not_show_another_agents_events(client: httpx.Client, agent: str) -> None:
    event_id = send(client, agent)
    other = f"{agent}-b"
    assert client.get(f"/v1/agents/{agent}/events/{event_id}").status_code == 200
    hidden = client.get(f"/v1/agents/{other}/events/{event_id}")
    assert hidden.status_code == 404
    assert agent not in hidden.text
    # The global path is service-wide, like the keys.
    assert client.get(f"/v1/events/{event_id}").json()["agent_id"] == agent


# ---- Retrying --------------------------------------------------------------------------------------


def test_retrying_a_failed_event_resumes_at_the_failed_stage(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    event_id = send(client, agent)
    set_run(db, event_id, status="failed", stage="extract", attempts=6, error="RuntimeError: boom")
    assert client.get(f"/v1/events/{event_id}").json()["status"] == "failed"
    before = settled(lambda: queued_task_names(broker))  # the send's publish has landed

    response = client.post(f"/v1/events/{event_id}/retry")
    assert response.status_code == 202, response.text
    assert response.json() == {"event_id": event_id, "status": "received", "start_stage": "extract"}
    row = run_row(db, event_id)
    assert (row.status, row.attempts, row.error, row.finished_at) == ("received", 0, None, None)
    assert queued_task_names(broker)[len(before) :] == ["ingest.extract"]
    assert client.get(f"/v1/events/{event_id}").json()["status"] == "received"


def test_retrying_a_run_that_failed_later_keeps_earlier_stages(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    event_id = send(client, agent)
    set_run(db, event_id, status="failed", stage="reconcile", attempts=6, error="TimeoutError")
    before = settled(lambda: queued_task_names(broker))  # the send's publish has landed
    response = client.post(f"/v1/events/{event_id}/retry", json={"from_scratch": False})
    assert response.status_code == 202, response.text
    assert response.json()["start_stage"] == "reconcile"
    assert response.json()["status"] == "resolved"
    assert run_row(db, event_id).status == "resolved"
    # The chain starts at reconcile, on the apply queue.
    assert queued_task_names(broker) == before
    assert broker.llen("apply") >= 1


def test_retrying_an_event_that_is_not_failed_is_409(client: httpx.Client, db: Engine, agent: str) -> None:
    event_id = send(client, agent)
    conflict = _assert_error(client.post(f"/v1/events/{event_id}/retry"), 409)
    assert "received" in conflict["error"]
    _assert_error(client.post(f"/v1/events/{event_id}/retry", json={"from_scratch": True}), 409)
    assert run_row(db, event_id).status == "received"


def test_a_done_event_is_re_processed_only_from_scratch(
    client: httpx.Client, db: Engine, broker: redis.Redis, agent: str
) -> None:
    event_id = send(client, agent)
    set_run(db, event_id, status="done", stage="upsert", finished_at="2024-02-01T08:00:05Z")
    conflict = _assert_error(client.post(f"/v1/events/{event_id}/retry"), 409)
    assert "from_scratch" in conflict["error"]
    assert run_row(db, event_id).status == "done"

    before = settled(lambda: queued_task_names(broker))  # the send's publish has landed
    response = client.post(f"/v1/events/{event_id}/retry", json={"from_scratch": True})
    assert response.status_code == 202, response.text
    assert response.json() == {"event_id": event_id, "status": "received", "start_stage": "extract"}
    assert run_row(db, event_id).status == "received"
    assert queued_task_names(broker)[len(before) :] == ["ingest.extract"]


def test_retrying_an_unknown_event_is_404(client: httpx.Client) -> None:
    _assert_error(client.post(f"/v1/events/{uuid.uuid4()}/retry"), 404)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"from_scratch": "yes"}, "body.from_scratch"),
        ({"from_scratch": 1}, "body.from_scratch"),
        ({"from_start": True}, "body.from_start"),
    ],
    ids=["string", "number", "unknown field"],
)
def test_a_bad_retry_body_is_422_and_changes_nothing(
    client: httpx.Client, db: Engine, agent: str, payload: dict[str, Any], field: str
) -> None:
    event_id = send(client, agent)
    set_run(db, event_id, status="failed", stage="extract")
    body = _assert_error(client.post(f"/v1/events/{event_id}/retry", json=payload), 422)
    assert body["detail"][0]["field"] == field
    assert field in body["error"]
    assert run_row(db, event_id).status == "failed"


def test_a_malformed_retry_body_is_422(client: httpx.Client, db: Engine, agent: str) -> None:
    event_id = send(client, agent)
    set_run(db, event_id, status="failed", stage="extract")
    response = client.post(
        f"/v1/events/{event_id}/retry", content=b"{from_scratch", headers={"Content-Type": "application/json"}
    )
    _assert_error(response, 422)
    assert run_row(db, event_id).status == "failed"
