"""Processes refuse to start on a database that does not fit their settings, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import run_module, service_env
from tests.support.services import TestServices, free_port

PLAIN_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@pytest.mark.parametrize("api_workers", [1, 2])
def test_api_refuses_a_database_built_for_another_embedding_dimension(
    migrated_database_url: str, services: TestServices, tmp_path: Path, api_workers: int
) -> None:
    env = service_env(
        database_url=migrated_database_url,
        broker_url=services.broker_url,
        api_port=free_port(),
        api_workers=api_workers,
        embedding_dimensions=1536,
        home=tmp_path,
    )
    result = run_module(["api"], env)
    assert result.returncode != 0
    assert "384" in result.stderr
    assert "1536" in result.stderr


def test_worker_refuses_a_database_built_for_another_embedding_dimension(
    migrated_database_url: str, services: TestServices, tmp_path: Path
) -> None:
    env = service_env(
        database_url=migrated_database_url,
        broker_url=services.broker_url,
        embedding_dimensions=768,
        home=tmp_path,
    )
    result = run_module(["workers", "worker", "--queue", "ingest"], env)
    assert result.returncode == 2
    assert "384" in result.stderr
    assert "768" in result.stderr


def test_migrate_on_a_server_without_pgvector_says_so(tmp_path: Path) -> None:
    # The machine's own PostgreSQL 15 has no pgvector package: exactly the server a user might
    # point the service at by mistake.
    env = service_env(database_url=PLAIN_POSTGRES_URL, home=tmp_path)
    result = run_module(["memory_core.db.migrate", "upgrade"], env)
    assert result.returncode == 2
    assert "no pgvector extension" in result.stderr
    assert "127.0.0.1:5432" in result.stderr


def test_bad_setting_stops_the_api_naming_the_variable(tmp_path: Path) -> None:
    env = service_env(api_port="not-a-port", home=tmp_path)
    result = run_module(["api"], env)
    assert result.returncode == 2
    assert "ARANDU_API_PORT" in result.stderr


def test_a_bad_memory_config_stops_the_api_a_worker_and_beat_naming_the_field_and_its_source(tmp_path: Path) -> None:
    # From the environment: the variable is named.
    env = service_env(home=tmp_path, memory__timezone="Mars/Olympus")
    result = run_module(["api"], env)
    assert result.returncode == 2
    assert "ARANDU_MEMORY__TIMEZONE" in result.stderr
    assert "Mars/Olympus" in result.stderr

    # From the memory file: the file and the field are named, by a worker pool and by Beat alike.
    memory_file = tmp_path / "memory.yaml"
    memory_file.write_text("timezone: UTC\nhot_tier_ratio: 0.9\n", encoding="utf-8")
    env = service_env(home=tmp_path, memory_config=str(memory_file))
    for process in (["workers", "worker", "--queue", "apply"], ["workers", "beat"]):
        result = run_module(process, env)
        assert result.returncode == 2, process
        assert f"ARANDU_MEMORY_CONFIG={memory_file}: hot_tier_ratio" in result.stderr, process
