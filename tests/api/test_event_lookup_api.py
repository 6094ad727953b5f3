"""POST /v1/agents/{agent_id}/events/lookup over real HTTP: events by message id, scoped to the agent.

No worker runs: a failed run is simulated by setting its row, which is what the pipeline leaves behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.support.api_server import api_settings, auth_headers, serve_api
from tests.support.services import TestServices


@pytest.fixture(scope="module")
def stack(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, str]]:
    # Own key prefix: the tasks this API enqueues land in queues no other test consumes.
    home: Path = tmp_path_factory.mktemp("lookup-home")
    settings = api_settings(
        migrated_database_url, services.broker_url, home, broker_key_prefix=f"tl{uuid.uuid4().hex[:8]}:"
    )
    with serve_api(settings) as base_url, httpx.Client(base_url=base_url, headers=auth_headers(), timeout=60) as http:
        yield http, migrated_database_url


def _send(http: httpx.Client, agent: str, message_id: str) -> str:
    body = {"message": "Eu moro em Lisboa.", "speaker_name": "Ana", "message_id": message_id}
    response = http.post(f"/v1/agents/{agent}/messages", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["event_id"])


def test_lookup_finds_the_agents_events_by_message_id_and_filters_by_status(stack: tuple[httpx.Client, str]) -> None:
    http, database_url = stack
    agent, other = f"lk-{uuid.uuid4().hex[:8]}", f"lk-{uuid.uuid4().hex[:8]}"
    first, second = _send(http, agent, "m-1"), _send(http, agent, "m-2")
    _send(http, other, "m-1")
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE pipeline_runs SET status = 'failed', stage = 'extract', error = 'boom' WHERE event_id = :id"),
            {"id": second},
        )
    engine.dispose()

    found = http.post(f"/v1/agents/{agent}/events/lookup", json={"message_ids": ["m-1", "m-2", "m-unknown"]})

    assert found.status_code == 200, found.text
    events = {item["message_id"]: item for item in found.json()["events"]}
    assert set(events) == {"m-1", "m-2"}
    assert events["m-1"]["event_id"] == first
    assert events["m-1"]["status"] == "received"
    assert events["m-2"] == {
        "event_id": second, "message_id": "m-2", "status": "failed", "stage": "extract", "error": "boom",
        "import_id": None,
    }  # fmt: skip

    failed = http.post(f"/v1/agents/{agent}/events/lookup", json={"message_ids": ["m-1", "m-2"], "status": ["failed"]})
    assert [item["event_id"] for item in failed.json()["events"]] == [second]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message_ids": []}, "body.message_ids"),
        ({"message_ids": ["a"], "status": ["finished"]}, "body.status[0]"),
        ({"message_ids": [""]}, "body.message_ids[0]"),
        ({"message_ids": ["a"], "extra": 1}, "body.extra"),
    ],
)
def test_bad_lookups_are_422_naming_the_field(
    stack: tuple[httpx.Client, str], body: dict[str, object], field: str
) -> None:
    http, _ = stack
    response = http.post("/v1/agents/lk-agent/events/lookup", json=body)
    assert response.status_code == 422, response.text
    assert field in [item["field"] for item in response.json()["detail"]]


def test_lookup_needs_a_key(stack: tuple[httpx.Client, str]) -> None:
    http, _ = stack
    url = str(http.base_url.join("/v1/agents/lk-agent/events/lookup"))
    response = httpx.post(url, json={"message_ids": ["a"]}, timeout=30)
    assert response.status_code == 401


def test_a_status_filter_longer_than_the_statuses_is_422_naming_the_field(stack: tuple[httpx.Client, str]) -> None:
    http, _ = stack
    agent = f"lk-{uuid.uuid4().hex[:8]}"
    _send(http, agent, "m-1")

    # 100,000 bound parameters were a 500 (the driver's limit is 65,535).
    response = http.post(
        f"/v1/agents/{agent}/events/lookup", json={"message_ids": ["m-1"], "status": ["failed"] * 100_000}
    )

    assert response.status_code == 422, response.text
    assert [item["field"] for item in response.json()["detail"]] == ["body.status"]
    every = ["received", "extracted", "resolved", "reconciled", "done", "failed"]
    fine = http.post(f"/v1/agents/{agent}/events/lookup", json={"message_ids": ["m-1"], "status": every})
    assert fine.status_code == 200, fine.text
    assert [item["message_id"] for item in fine.json()["events"]] == ["m-1"]


DATABASE_ERROR = (
    'IntegrityError: (psycopg.errors.UniqueViolation) duplicate key value violates unique constraint "uq"\n'
    "DETAIL:  Key (agent_id, message_id)=(secret-agent, secret-message) already exists.\n"
    "[SQL: INSERT INTO memory_facts (agent_id, fact_text) VALUES (%(agent_id)s, %(fact_text)s)]\n"
    "[parameters: {'agent_id': 'secret-agent', 'fact_text': 'my card number is 4111 1111 1111 1111'}]\n"
    "(Background on this error at: https://sqlalche.me/e/20/gkpj)"
)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        (DATABASE_ERROR, "IntegrityError: a database error"),
        (
            "ProviderRequestError: the model refused the request\n" + "x" * 3_900,
            "ProviderRequestError: the model refused",
        ),
    ],
)
def test_clients_see_a_run_errors_class_and_a_short_message_operators_the_full_text(
    stack: tuple[httpx.Client, str], stored: str, shown: str
) -> None:
    http, database_url = stack
    agent = f"lk-{uuid.uuid4().hex[:8]}"
    event_id = _send(http, agent, "m-err")
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE pipeline_runs SET status = 'failed', stage = 'upsert', error = :e WHERE event_id = :id"),
            {"id": event_id, "e": stored},
        )

    looked_up = http.post(f"/v1/agents/{agent}/events/lookup", json={"message_ids": ["m-err"]}).json()["events"][0]
    event = http.get(f"/v1/agents/{agent}/events/{event_id}").json()

    for error in (looked_up["error"], event["error"]):
        assert error.startswith(shown), error
        assert len(error) <= 200, error
        assert "\n" not in error
        for secret in ("[SQL", "parameters", "secret", "4111", "INSERT"):
            assert secret not in error, error
    # The full text stays where operators read it.
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT error FROM pipeline_runs WHERE event_id = :id"), {"id": event_id}).scalar()
    engine.dispose()
    assert kept == stored
