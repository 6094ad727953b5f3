"""The embedded servers: idempotent start, Redis that never evicts, pgvector and contrib ready, clean stop."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest
import redis

from ops.embedded import (
    AUTOVACUUM_SETTINGS,
    DEFAULT_SHARED_BUFFERS,
    SHARED_BUFFERS_ENV,
    WAL_WRITER_SETTINGS,
    EmbeddedStack,
    IncompatibleDataDirectoryError,
    bundled_major_version,
)
from ops.rss import stack_processes


def test_start_is_idempotent_and_stop_leaves_nothing_running(tmp_path: Path) -> None:
    first = EmbeddedStack(tmp_path)
    first.start()
    try:
        second = EmbeddedStack(tmp_path)
        second.start()
        assert not second.postgres.owned
        assert not second.redis.owned
        assert second.postgres.admin_uri == first.postgres.admin_uri
        second.stop()  # not the owner: must leave the servers up
        assert first.redis.ping()

        url = first.postgres.ensure_database("arandu_embedded_check")
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
            version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            server = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None
        assert server is not None
        assert int(server[0]) // 10_000 == bundled_major_version() == 18

        client = redis.Redis(unix_socket_path=str(first.redis.socket_path))
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    finally:
        first.stop()
    assert not stack_processes([], [tmp_path / "pg", tmp_path / "redis"])
    assert not first.redis.ping()


def test_deep_home_gets_a_short_redis_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    stack = EmbeddedStack(deep)
    assert len(str(stack.redis.socket_path)) <= 100
    stack.redis.start()
    try:
        assert stack.redis.ping()
    finally:
        stack.redis.stop()


def _setting(stack: EmbeddedStack, name: str) -> str:
    with psycopg.connect(stack.postgres.admin_uri) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def _shared_buffers(stack: EmbeddedStack) -> str:
    return _setting(stack, "shared_buffers")


def _started_with(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> tuple[str, bool]:
    """(shared_buffers, whether start() had to restart the server to apply it)."""
    caplog.clear()
    stack = EmbeddedStack(tmp_path)
    with caplog.at_level(logging.INFO, logger="arandu.embedded"):
        stack.start()
    try:
        return _shared_buffers(stack), any("restarted" in record.getMessage() for record in caplog.records)
    finally:
        stack.stop()


def test_shared_buffers_default_and_override_take_effect_restarting_only_when_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(SHARED_BUFFERS_ENV, raising=False)
    assert _started_with(tmp_path, caplog) == (DEFAULT_SHARED_BUFFERS, True)  # initdb's 128MB changed
    assert _started_with(tmp_path, caplog) == (DEFAULT_SHARED_BUFFERS, False)  # kept: no restart
    monkeypatch.setenv(SHARED_BUFFERS_ENV, "160MB")
    assert _started_with(tmp_path, caplog) == ("160MB", True)


def test_the_wal_writer_flushes_the_pipelines_commits_every_20_ms(tmp_path: Path) -> None:
    # Async stage commits are flushed by the WAL writer; an API commit must not find 200 ms of them.
    stack = EmbeddedStack(tmp_path)
    stack.start()
    try:
        for name, value in WAL_WRITER_SETTINGS.items():
            assert _setting(stack, name) == value
        assert _setting(stack, "wal_writer_delay") == "20ms"
    finally:
        stack.stop()


def test_autovacuum_looks_at_each_database_every_10_seconds(tmp_path: Path) -> None:
    # Retrieves planned on statistics older than an import cost the server ~3x their CPU: they
    # must follow the load within seconds, not within autovacuum's default minute.
    stack = EmbeddedStack(tmp_path)
    stack.start()
    try:
        assert AUTOVACUUM_SETTINGS == {"autovacuum_naptime": "10s"}
        assert _setting(stack, "autovacuum_naptime") == "10s"
        assert _setting(stack, "autovacuum") == "on"
    finally:
        stack.stop()


def test_the_server_has_pgvector_0_8_its_contrib_modules_and_statement_statistics(tmp_path: Path) -> None:
    stack = EmbeddedStack(tmp_path)
    stack.start()
    try:
        url = stack.postgres.ensure_database("arandu_contrib_check").replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(url, autocommit=True) as conn:
            for name in ("vector", "unaccent", "pg_trgm", "btree_gin", "pg_stat_statements"):
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
            vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            folded = conn.execute("SELECT unaccent('São Paulo, Ñandú')").fetchone()
            conn.execute("SET hnsw.iterative_scan = relaxed_order")
            conn.execute("SELECT 42 AS marker_for_statement_statistics")
            seen = conn.execute(
                "SELECT calls FROM pg_stat_statements WHERE query LIKE %s", ("%marker_for_statement_statistics%",)
            ).fetchone()
        assert vector is not None
        assert tuple(int(part) for part in str(vector[0]).split(".")[:2]) >= (0, 8)
        assert folded == ("Sao Paulo, Nandu",)
        assert seen is not None, "pg_stat_statements is not loaded at start (shared_preload_libraries)"
    finally:
        stack.stop()


def test_a_data_directory_of_another_major_version_is_refused_and_left_untouched(tmp_path: Path) -> None:
    # What ./ops/dev left in ARANDU_HOME/pg before the embedded server moved from PostgreSQL 16 to 18.
    old = tmp_path / "pg"
    old.mkdir()
    (old / "PG_VERSION").write_text("16\n")
    (old / "base").mkdir()
    (old / "base" / "16384").write_text("the user's data")
    before = sorted(str(path.relative_to(old)) for path in old.rglob("*"))

    stack = EmbeddedStack(tmp_path)
    with pytest.raises(IncompatibleDataDirectoryError) as caught:
        stack.postgres.start()
    message = str(caught.value)
    assert "PostgreSQL 16" in message
    assert f"PostgreSQL {bundled_major_version()}" in message
    assert "ARANDU_HOME" in message
    assert "pg_dump" in message
    assert sorted(str(path.relative_to(old)) for path in old.rglob("*")) == before
    assert (old / "PG_VERSION").read_text() == "16\n"
    assert (old / "base" / "16384").read_text() == "the user's data"
    assert not stack_processes([], [old])
