"""An unreachable database answers 503 with Retry-After; an error about the statement stays a 500."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
from fastapi import FastAPI
from sqlalchemy import create_engine, exc, text

from api.errors import DATABASE_RETRY_AFTER_S, database_unreachable, install_error_handlers


def _app(raise_error: Exception) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise raise_error

    return app


def _get(app: FastAPI) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/boom")

    return asyncio.run(call())


def _refused_connection() -> exc.OperationalError:
    # A real one: a server that does not listen (nothing does on this socket directory).
    engine = create_engine("postgresql+psycopg://nobody@/x?host=/nonexistent-arandu-socket-dir")
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except exc.OperationalError as error:
        return error
    finally:
        engine.dispose()
    raise AssertionError("connecting to nothing succeeded")


def test_a_refused_connection_answers_503_with_retry_after() -> None:
    response = _get(_app(_refused_connection()))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(DATABASE_RETRY_AFTER_S)
    assert "database is unavailable" in response.json()["error"]


def test_a_wrapped_connection_error_is_503_too() -> None:
    try:
        try:
            raise psycopg.OperationalError("the database system is shutting down")
        except psycopg.OperationalError as inner:
            raise RuntimeError("while writing the batch") from inner
    except RuntimeError as outer:
        wrapped = outer
    assert database_unreachable(wrapped)
    assert _get(_app(wrapped)).status_code == 503


def test_an_error_about_the_statement_stays_a_500_with_an_error_id() -> None:
    error = exc.IntegrityError("INSERT ...", {}, psycopg.errors.UniqueViolation("duplicate key"))
    assert not database_unreachable(error)
    response = _get(_app(error))
    assert response.status_code == 500
    assert response.json()["error_id"]
