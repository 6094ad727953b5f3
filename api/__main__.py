"""Run the API with uvicorn on ARANDU_API_HOST:ARANDU_API_PORT: ``python -m api``.

With ``ARANDU_API_WORKERS`` above 1 it runs that many server processes on the one listening
socket under uvicorn's supervisor, which replaces a process that dies and stops them all on
SIGTERM or SIGINT: each process is one GIL, so this is how one container's API uses its cores.
"""

from __future__ import annotations

import logging
import socket
import sys

import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from memory_core.db.migrate import DatabaseSchemaError
from memory_core.settings import Settings, SettingsError, get_settings

# What each supervised process builds (the settings come from its environment, as the parent's did).
WORKER_APP = "api.__main__:worker_app"


def _shared_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound with SO_REUSEPORT: ``./ops/dev`` may run several API processes on
    one port (ARANDU_API_PROCESSES) and the kernel spreads connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.value, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def worker_app() -> FastAPI:
    """The app of one supervised server process (uvicorn calls it in the process it starts)."""
    from api.app import create_app

    settings = get_settings()
    _configure_logging(settings)
    return create_app(settings)


def _uvicorn_config(settings: Settings, app: FastAPI | str, *, workers: int = 1) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        factory=isinstance(app, str),
        host=settings.api_host,
        port=settings.api_port,
        workers=workers,
        log_level=settings.log_level.value.lower(),
        access_log=False,
        lifespan="on",
    )


def _serve_one(settings: Settings) -> int:
    from api.app import create_app

    try:
        server = uvicorn.Server(_uvicorn_config(settings, create_app(settings)))
        server.run(sockets=[_shared_socket(settings.api_host, settings.api_port)])
    except DatabaseSchemaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # uvicorn swallows lifespan failures and returns; a server that never started is a failure.
    return 0 if server.started else STARTUP_FAILURE


def _serve_supervised(settings: Settings) -> int:
    from memory_core.db.engine import create_db_engine
    from memory_core.db.migrate import check_schema

    # Checked once here, so a database that does not fit stops the start with its reason rather
    # than with each process failing its start-up in turn.
    engine = create_db_engine(settings)
    try:
        check_schema(engine, settings)
    except DatabaseSchemaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    config = _uvicorn_config(settings, WORKER_APP, workers=settings.api_workers)
    supervisor = Multiprocess(config, sockets=[_shared_socket(settings.api_host, settings.api_port)])
    supervisor.run()
    # The supervisor stops everything when a process fails before it serves (it would fail the
    # same way again); a stop asked by a signal leaves no such process.
    failed = any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes)
    return STARTUP_FAILURE if failed else 0


def main() -> int:
    """Start the server(s); exit 2 with the reason when settings or the database do not fit."""
    try:
        settings = get_settings()
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    _configure_logging(settings)
    if settings.api_workers > 1:
        return _serve_supervised(settings)
    return _serve_one(settings)


if __name__ == "__main__":
    sys.exit(main())
