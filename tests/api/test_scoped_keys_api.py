"""Tenant API keys over real HTTP: scope per agent and permission, revocation, expiry, rate limit.

Two API processes' worth of apps serve the same database (revocation must reach both), a real
worker processes the messages, and every endpoint is tried with a key of another tenant.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from memory_core.db.engine import create_db_engine
from memory_core.settings import Settings
from tests.support.api_server import api_settings, auth_headers, serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker


@dataclass(frozen=True)
class Stack:
    """Two API servers on one database, a worker, and the database."""

    url: str
    other_url: str
    db: Engine


@pytest.fixture(scope="module")
def stack(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    base = api_settings(migrated_database_url, services.broker_url, tmp_path_factory.mktemp("keys-home"))
    app = isolated_app(base)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    engine = create_db_engine(own, pool_size=2)
    try:
        with running_worker(app, concurrency=2), serve_api(own) as url, serve_api(own) as other_url:
            yield Stack(url, other_url, engine)
    finally:
        engine.dispose()


def operator(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, headers=auth_headers(), timeout=60)


def as_key(stack: Stack, key: str, *, other: bool = False) -> httpx.Client:
    return httpx.Client(base_url=stack.other_url if other else stack.url, headers=auth_headers(key), timeout=60)


def create_key(stack: Stack, **fields: Any) -> dict[str, Any]:
    with operator(stack) as http:
        response = http.post("/v1/keys", json={"name": f"k-{uuid.uuid4().hex[:8]}", **fields})
    assert response.status_code == 201, response.text
    return dict(response.json())


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:8]}:"


def wait_done(http: httpx.Client, event_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        body = http.get(f"/v1/events/{event_id}").json()
        if body["status"] in ("done", "failed"):
            return dict(body)
        time.sleep(0.1)
    raise AssertionError(f"event {event_id} not processed in time")


def test_a_key_is_shown_once_and_stored_as_a_hash(stack: Stack) -> None:
    prefix = tenant()
    created = create_key(stack, agent_prefix=prefix, permissions=["read"])
    key = created["key"]
    assert key.startswith("ak_")
    assert len(key) > 40
    assert key.startswith(created["key_hint"])
    assert created["tenant"] == prefix.rstrip(":")
    assert created["status"] == "active"
    with stack.db.connect() as conn:
        stored = conn.execute(
            text("SELECT row_to_json(k)::text FROM api_keys k WHERE name = :n"), {"n": created["name"]}
        )
        row_text = stored.scalar_one()
    assert key not in row_text
    assert key[len(created["key_hint"]) :] not in row_text
    with operator(stack) as http:
        listed = http.get("/v1/keys").json()["keys"]
        mine = next(item for item in listed if item["name"] == created["name"])
        assert "key" not in mine
        assert mine["key_hint"] == created["key_hint"]
        taken = http.post("/v1/keys", json={"name": created["name"], "agent_prefix": prefix})
        assert taken.status_code == 409
        assert taken.json()["detail"][0]["field"] == "body.name"
        both = http.post("/v1/keys", json={"name": "x", "agent_prefix": prefix, "agent_ids": ["a"]})
        assert both.status_code == 422
        assert "agent_prefix" in both.json()["error"]
        bad_permission = http.post("/v1/keys", json={"name": "y", "agent_prefix": prefix, "permissions": ["root"]})
        assert bad_permission.status_code == 422
        assert bad_permission.json()["detail"][0]["field"].startswith("body.permissions")
        past = http.post("/v1/keys", json={"name": "z", "agent_prefix": prefix, "expires_at": "2020-01-01T00:00:00Z"})
        assert past.status_code == 422
        assert past.json()["detail"][0]["field"] == "body.expires_at"
    # A tenant key manages no keys, not even its own.
    with as_key(stack, key) as http:
        assert http.get("/v1/keys").status_code == 403
        assert http.delete(f"/v1/keys/{created['name']}").status_code == 403
        assert http.post("/v1/keys", json={"name": "mine", "agent_prefix": prefix}).status_code == 403


@pytest.fixture(scope="module")
def acme(stack: Stack) -> dict[str, Any]:
    """An agent of tenant acme with a processed message, a fact, an import and a failed-free history."""
    prefix = tenant()
    agent = f"{prefix}ana"
    writer = create_key(stack, agent_prefix=prefix, permissions=["read", "write"])
    with as_key(stack, writer["key"]) as http:
        sent = http.post(f"/v1/agents/{agent}/messages", json={"message": "I live in Lisbon.", "speaker_name": "Ana"})
        assert sent.status_code == 202, sent.text
        event_id = sent.json()["event_id"]
        assert wait_done(http, event_id)["status"] == "done"
        imported = http.post(
            f"/v1/agents/{agent}/imports",
            json={
                "messages": [{"message": "I have a cat.", "speaker_name": "Ana", "occurred_at": "2024-01-01T00:00:00Z"}]
            },
        )
        assert imported.status_code == 202, imported.text
        facts = http.get(f"/v1/agents/{agent}/facts").json()["facts"]
    return {
        "prefix": prefix,
        "agent": agent,
        "writer": writer["key"],
        "event_id": event_id,
        "import_id": imported.json()["import_id"],
        "fact_id": facts[0]["fact_id"],
    }


def agent_endpoints(agent: str, fact_id: str, event_id: str, import_id: str) -> list[tuple[str, str, Any]]:
    base = f"/v1/agents/{agent}"
    message = {"message": "hello", "speaker_name": "Eve"}
    return [
        ("POST", f"{base}/messages", message),
        ("POST", f"{base}/messages/batch", {"messages": [message]}),
        ("POST", f"{base}/imports", {"messages": [{**message, "occurred_at": "2024-01-01T00:00:00Z"}]}),
        ("POST", f"{base}/events/lookup", {"message_ids": ["x"]}),
        ("GET", f"{base}/events/{event_id}", None),
        ("GET", f"{base}/imports/{import_id}", None),
        ("POST", f"{base}/retrieve", {"query": "Where does Ana live?"}),
        ("GET", f"{base}/facts", None),
        ("GET", f"{base}/facts/{fact_id}", None),
        ("DELETE", f"{base}/facts/{fact_id}", None),
        ("DELETE", f"{base}/facts", None),
        ("GET", f"{base}/entities", None),
        ("GET", f"{base}/entities/person:ana", None),
        ("POST", f"{base}/jobs/importance", None),
        ("GET", f"{base}/jobs", None),
        ("GET", f"{base}/config", None),
        ("PUT", f"{base}/config", {"overrides": {"topk_facts": 4}}),
        ("DELETE", f"{base}/config", None),
        ("DELETE", f"{base}?confirm=true", None),
    ]


def assert_refused_everywhere(http: httpx.Client, acme: dict[str, Any], status: int) -> None:
    """Every endpoint of the agent, and the id-only ones, answer ``status`` to this client's key."""
    endpoints = agent_endpoints(acme["agent"], acme["fact_id"], acme["event_id"], acme["import_id"])
    endpoints += [
        ("GET", f"/v1/events/{acme['event_id']}", None),
        ("GET", f"/v1/imports/{acme['import_id']}", None),
        ("POST", f"/v1/events/{acme['event_id']}/retry", {}),
    ]
    for method, path, body in endpoints:
        assert http.request(method, path, json=body).status_code == status, (method, path)


def test_another_tenants_key_is_refused_on_every_endpoint(stack: Stack, acme: dict[str, Any]) -> None:
    other = create_key(stack, agent_prefix=tenant(), permissions=["read", "write", "admin"])
    with as_key(stack, other["key"]) as http:
        for method, path, body in agent_endpoints(acme["agent"], acme["fact_id"], acme["event_id"], acme["import_id"]):
            response = http.request(method, path, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert acme["agent"] in response.json()["error"]
            assert response.json()["detail"][0]["field"] == "path.agent_id"
        # Rows addressed by id alone: exactly the answer of an id that does not exist.
        unknown = str(uuid.uuid4())
        for template in ("/v1/events/{}", "/v1/imports/{}"):
            hidden = http.get(template.format(acme["event_id"] if "events" in template else acme["import_id"]))
            missing = http.get(template.format(unknown))
            assert hidden.status_code == missing.status_code == 404
            assert hidden.json()["detail"] == missing.json()["detail"]
            assert acme["agent"] not in hidden.text
        hidden_retry = http.post(f"/v1/events/{acme['event_id']}/retry", json={})
        missing_retry = http.post(f"/v1/events/{unknown}/retry", json={})
        assert hidden_retry.status_code == missing_retry.status_code == 404
        assert hidden_retry.json()["detail"] == missing_retry.json()["detail"]
    # Nothing of acme's was touched: the fact is still there.
    with as_key(stack, acme["writer"]) as http:
        assert http.get(f"/v1/agents/{acme['agent']}/facts/{acme['fact_id']}").status_code == 200
        assert http.get(f"/v1/events/{acme['event_id']}").status_code == 200
        assert http.get(f"/v1/imports/{acme['import_id']}").status_code == 200


def test_a_list_key_acts_only_for_its_agents(stack: Stack, acme: dict[str, Any]) -> None:
    listed = create_key(stack, agent_ids=[acme["agent"]], permissions=["read"])
    with as_key(stack, listed["key"]) as http:
        assert http.get(f"/v1/agents/{acme['agent']}/facts").status_code == 200
        assert http.get(f"/v1/agents/{acme['agent']}x/facts").status_code == 403
        assert http.get(f"/v1/agents/{acme['prefix']}bob/facts").status_code == 403


def test_permissions_read_write_admin(stack: Stack, acme: dict[str, Any]) -> None:
    reader = create_key(stack, agent_prefix=acme["prefix"], permissions=["read"])
    agent = acme["agent"]
    with as_key(stack, reader["key"]) as http:
        writes = [
            (method, path, body)
            for method, path, body in agent_endpoints(agent, acme["fact_id"], acme["event_id"], acme["import_id"])
            if method in ("DELETE", "PUT") or path.endswith(("/messages", "/batch", "/imports", "/jobs/importance"))
        ]
        assert len(writes) == 9
        for method, path, body in writes:
            assert http.request(method, path, json=body).status_code == 403, (method, path)
        assert http.post(f"/v1/agents/{agent}/retrieve", json={"query": "Where does Ana live?"}).status_code == 200
        assert http.get(f"/v1/agents/{agent}/jobs").status_code == 200
        assert http.get(f"/v1/agents/{agent}/config").status_code == 200
        refused = http.post(f"/v1/agents/{agent}/messages", json={"message": "hi", "speaker_name": "Ana"})
        assert refused.status_code == 403
        assert "'write'" in refused.json()["error"]
        assert http.delete(f"/v1/agents/{agent}/facts/{acme['fact_id']}").status_code == 403
        assert http.post(f"/v1/agents/{agent}/imports", json={"messages": []}).status_code == 403
    with as_key(stack, acme["writer"]) as http:
        refused = http.post(f"/v1/agents/{agent}/jobs/importance")
        assert refused.status_code == 403
        assert "'admin'" in refused.json()["error"]
        assert http.post(f"/v1/events/{acme['event_id']}/retry", json={"from_scratch": True}).status_code == 403
    admin = create_key(stack, agent_prefix=acme["prefix"], permissions=["read", "admin"])
    with as_key(stack, admin["key"]) as http:
        assert http.post(f"/v1/agents/{agent}/jobs/importance").status_code == 202
        assert http.post(f"/v1/events/{acme['event_id']}/retry", json={"from_scratch": True}).status_code == 202


def test_a_revoked_key_is_refused_by_every_api_process_within_seconds(stack: Stack, acme: dict[str, Any]) -> None:
    created = create_key(stack, agent_prefix=acme["prefix"], permissions=["read"])
    path = f"/v1/agents/{acme['agent']}/facts"
    with as_key(stack, created["key"]) as first, as_key(stack, created["key"], other=True) as second:
        assert first.get(path).status_code == 200
        assert second.get(path).status_code == 200
        with operator(stack) as http:
            revoked = http.delete(f"/v1/keys/{created['name']}")
            assert revoked.status_code == 200
            assert revoked.json()["status"] == "revoked"
            assert http.delete(f"/v1/keys/{created['name']}").status_code == 404
        revoked_at = time.monotonic()
        for client in (first, second):
            while client.get(path).status_code == 200:
                assert time.monotonic() - revoked_at < 5, "still accepted 5 s after the revocation"
                time.sleep(0.1)
            assert client.get(path).status_code == 401
    with as_key(stack, created["key"]) as client:
        assert_refused_everywhere(client, acme, 401)
    # The name is free again, for a new key.
    again = create_key(stack, name=created["name"], agent_prefix=acme["prefix"], permissions=["read"])
    with as_key(stack, again["key"]) as http:
        assert http.get(path).status_code == 200


def test_an_expired_key_is_refused(stack: Stack, acme: dict[str, Any]) -> None:
    expires = datetime.now(UTC) + timedelta(seconds=3)
    created = create_key(stack, agent_prefix=acme["prefix"], permissions=["read"], expires_at=expires.isoformat())
    path = f"/v1/agents/{acme['agent']}/facts"
    with as_key(stack, created["key"]) as http:
        assert http.get(path).status_code == 200
        time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.2)
        refused = http.get(path)
        assert refused.status_code == 401
        assert "expired" in refused.json()["error"]
        assert_refused_everywhere(http, acme, 401)
    with operator(stack) as http:
        listed = {key["name"]: key for key in http.get("/v1/keys").json()["keys"]}
        assert listed[created["name"]]["status"] == "expired"


def test_a_key_past_its_rate_gets_429_with_retry_after(stack: Stack, acme: dict[str, Any]) -> None:
    slow = create_key(stack, agent_prefix=acme["prefix"], permissions=["read"], rate_limit_per_s=0.5)
    path = f"/v1/agents/{acme['agent']}/facts"
    with as_key(stack, slow["key"]) as http:
        answers = [http.get(path) for _ in range(4)]
    statuses = [answer.status_code for answer in answers]
    # A bucket of 1 token (twice the rate, at least 1): the first passes, the next ones wait.
    assert statuses[0] == 200
    limited = [answer for answer in answers if answer.status_code == 429]
    assert limited, statuses
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert "rate limit" in limited[0].json()["error"]
    # The operator's keys are not limited.
    with operator(stack) as http:
        assert all(http.get(path).status_code == 200 for _ in range(10))


def test_mcp_needs_a_key_that_covers_the_agent_header(stack: Stack, acme: dict[str, Any]) -> None:
    reader = create_key(stack, agent_prefix=acme["prefix"], permissions=["read"])
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {**auth_headers(reader["key"]), "Accept": "application/json, text/event-stream"}
    outside = httpx.post(f"{stack.url}/mcp", json=initialize, headers={**headers, "X-Arandu-Agent-Id": "elsewhere"})
    assert outside.status_code == 403
    inside = httpx.post(f"{stack.url}/mcp", json=initialize, headers={**headers, "X-Arandu-Agent-Id": acme["agent"]})
    assert inside.status_code == 200


def test_every_v1_route_declares_the_permission_it_needs(stack: Stack, tmp_path: Path) -> None:
    from fastapi.routing import APIRoute

    from api.app import create_app

    app = create_app(api_settings(str(stack.db.url.render_as_string(hide_password=False)), "redis://unused", tmp_path))
    checks = {"require_read", "require_write", "require_admin", "_operator_only"}
    for route in app.routes:
        if isinstance(route, APIRoute) and route.path.startswith("/v1/"):
            declared = {getattr(dependency.dependency, "__name__", "") for dependency in route.dependencies}
            assert len(declared & checks) == 1, (route.path, route.methods, declared)
