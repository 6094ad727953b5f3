"""Run the API with uvicorn on ARANDU_API_HOST:ARANDU_API_PORT: ``python -m api``."""

from __future__ import annotations

import logging
import sys

import uvicorn

from memory_core.db.migrate import DatabaseSchemaError
from memory_core.settings import SettingsError, get_settings


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
        server.run()
    except DatabaseSchemaError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # uvicorn swallows lifespan failures and returns; a server that never started is a failure.
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
