"""Run the API with uvicorn on ARANDU_API_HOST:ARANDU_API_PORT: ``python -m api``."""

from __future__ import annotations

import logging
import socket
import sys

import uvicorn

from memory_core.db.migrate import DatabaseSchemaError
from memory_core.settings import SettingsError, get_settings


def _shared_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound with SO_REUSEPORT: ``./ops/dev`` may run several API processes on
    one port (ARANDU_API_PROCESSES) and the kernel spreads connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def main() -> int:
    """Start the server; exit 2 with the reason when settings or the database do not fit."""
    try:
        settings = get_settings()
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.value, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from api.app import create_app

    try:
        app = create_app(settings)
        config = uvicorn.Config(
            app,
            host=settings.api_host,
            port=settings.api_port,
            log_level=settings.log_level.value.lower(),
            access_log=False,
            lifespan="on",
        )
        server = uvicorn.Server(config)
        server.run(sockets=[_shared_socket(settings.api_host, settings.api_port)])
    except DatabaseSchemaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # uvicorn swallows lifespan failures and returns; a server that never started is a failure.
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
