"""Pooled connections are checked before use only after sitting idle, and a dead one is replaced unseen."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from memory_core.db import engine as engine_module
from memory_core.db.engine import create_db_engine
from memory_core.settings import Settings


def _counting_pings(engine: Engine) -> list[int]:
    pings: list[int] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return bool(ping(dbapi_connection))

    engine.dialect.do_ping = counted  # type: ignore[method-assign]
    return pings


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


@pytest.fixture
def make_engine(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    engines: list[Engine] = []

    def make(idle_s: float) -> Engine:
        monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", idle_s)
        engine = create_db_engine(settings, pool_size=1)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.dispose()


def test_a_connection_used_a_moment_ago_is_handed_out_without_a_ping(make_engine: Any) -> None:
    engine = make_engine(60.0)
    pings = _counting_pings(engine)
    first = _backend_pid(engine)
    second = _backend_pid(engine)
    assert second == first  # the same pooled connection
    assert pings == []


def test_a_connection_idle_for_a_while_is_pinged_first(make_engine: Any) -> None:
    engine = make_engine(0.2)
    pings = _counting_pings(engine)
    first = _backend_pid(engine)
    time.sleep(0.4)
    assert _backend_pid(engine) == first
    assert len(pings) == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(make_engine: Any, settings: Settings) -> None:
    engine = make_engine(0.2)
    first = _backend_pid(engine)
    # What a database restart does to the pool's connections, to this one alone.
    with create_db_engine(settings, pool_size=1, pre_ping=False).connect() as admin:
        assert admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first}).scalar_one()
    time.sleep(0.4)
    # The caller never sees the dead connection: the ping found it and the pool opened another.
    replacement = _backend_pid(engine)
    assert replacement != first
