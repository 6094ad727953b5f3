"""Health probes of the real API process over real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.processes import running_api, service_env
from tests.support.services import TestServices, free_port


def test_healthz_and_readyz_answer_without_auth_when_everything_is_up(
    migrated_database_url: str, services: TestServices, tmp_path: Path
) -> None:
    port = free_port()
    env = service_env(
        database_url=migrated_database_url,
        broker_url=services.broker_url,
        api_port=port,
        api_keys="secret-key",
        home=tmp_path,
    )
    with running_api(env, port) as base_url:
        assert httpx.get(f"{base_url}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"{base_url}/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_readyz_is_503_and_names_the_broker_when_the_broker_does_not_answer(
    migrated_database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = service_env(
        database_url=migrated_database_url,
        broker_url=f"redis+socket://{tmp_path / 'nobody-listens.sock'}",
        api_port=port,
        home=tmp_path,
    )
    with running_api(env, port) as base_url:
        assert httpx.get(f"{base_url}/healthz").status_code == 200
        ready = httpx.get(f"{base_url}/readyz", timeout=15)
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks == {"database": "ok", "broker": "unavailable"}


def test_readyz_names_the_failing_dependency_and_its_state_but_never_its_address(
    migrated_database_url: str, tmp_path: Path
) -> None:
    port, broker_port = free_port(), free_port()
    env = service_env(
        database_url=migrated_database_url,
        broker_url=f"redis://:hunter2@127.0.0.1:{broker_port}/0",
        api_port=port,
        home=tmp_path,
    )
    with running_api(env, port) as base_url:
        ready = httpx.get(f"{base_url}/readyz", timeout=15)
    assert ready.status_code == 503
    assert ready.json() == {"status": "not ready", "checks": {"database": "ok", "broker": "unavailable"}}
    for detail in ("127.0.0.1", str(broker_port), "hunter2", "Error", "refused"):
        assert detail not in ready.text
