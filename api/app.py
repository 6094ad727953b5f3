"""The FastAPI application: health probes, the ``/v1`` write endpoints (messages, imports, events),
retrieval, memory management (facts, entities), agent erasure, and the same memory as MCP tools at ``/mcp``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from api.dependencies import build_state, install_request_schemas
from api.docs_assets import install_docs
from api.errors import install_error_handlers
from api.mcp_endpoint import MCP_PATH, McpEndpoint
from api.metrics import build_metrics_registry
from api.routes import (
    agent_config,
    agent_events,
    agents,
    directives,
    event_lookup,
    events,
    imports,
    jobs,
    keys,
    memory,
    messages,
    reprocess,
    retrieve,
    usage,
)
from api.schemas import AgentConfigIn, BatchIn, ImportIn, MessageIn, PendingIn, RetrieveIn, RetryIn
from api.ui import close_ui, install_ui
from memory_core.db.migrate import check_schema
from memory_core.process_heap import freeze_startup_heap
from memory_core.settings import Settings, get_settings
from workers.health import check_broker
from workers.metrics_ledger import MetricsLedger

logger = logging.getLogger("arandu.api")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API for ``settings``; refuses to start on a database that does not fit them."""
    settings = settings or get_settings()
    state = build_state(settings)
    engine = state.engine

    @asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[None]:
        # Fail at start, not on the first request, when the database has another embedding
        # dimension or lacks pgvector: the message names both numbers.
        await run_in_threadpool(check_schema, engine, settings)
        freeze_startup_heap()  # the app and its pools live as long as the process
        async with mcp_endpoint.running():
            yield
        await state.event_writer.drain()  # publish what was accepted last, rather than leave it to the sweeper
        await state.keys.limiter.close()
        await close_ui(served)
        state.close()

    app = FastAPI(
        title="arandu",
        summary="Long-term memory service for AI agents.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by install_docs from local assets, not a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.api = state
    install_error_handlers(app)
    install_docs(app)
    app.include_router(messages.router)
    app.include_router(imports.router)
    app.include_router(events.router)
    app.include_router(event_lookup.router)
    app.include_router(agent_events.router)
    app.include_router(retrieve.router)
    app.include_router(memory.router)
    app.include_router(jobs.router)
    app.include_router(agents.router)
    app.include_router(agent_config.router)
    app.include_router(reprocess.router)
    app.include_router(directives.router)
    app.include_router(usage.router)
    app.include_router(keys.router)
    install_ui(app, settings)
    mcp_endpoint = McpEndpoint(app)
    # A route, not a mount: a mount answers /mcp with a redirect to /mcp/, which clients must then follow.
    app.router.add_route(MCP_PATH, mcp_endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    install_request_schemas(
        app,
        [
            MessageIn,
            BatchIn,
            ImportIn,
            RetryIn,
            RetrieveIn,
            AgentConfigIn,
            PendingIn,
            event_lookup.EventLookupIn,
            agent_events.BulkRetryIn,
            keys.KeyIn,
        ],
    )

    metrics_registry = build_metrics_registry(
        engine, state.celery, MetricsLedger.for_settings(settings), cache_s=settings.metrics_cache_s
    )

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics of the whole service (pipeline, queues, tasks, skills, jobs). No authentication."""
        return Response(generate_latest(metrics_registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["operations"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers. No authentication."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], responses={503: {"description": "a dependency does not answer"}})
    def readyz() -> JSONResponse:
        """Readiness: 200 only when the database and the broker both answer. No authentication.

        Each dependency is ``ok`` or ``unavailable``; why goes to the log only (an error's text
        names hosts, ports and users, and this probe answers anyone).
        """
        checks: dict[str, Any] = {}
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            checks["database"] = "ok"
        except Exception as error:
            logger.warning("readiness: the database does not answer: %s: %s", type(error).__name__, error)
            checks["database"] = "unavailable"
        try:
            check_broker(settings)
            checks["broker"] = "ok"
        except Exception as error:
            logger.warning("readiness: the broker does not answer: %s: %s", type(error).__name__, error)
            checks["broker"] = "unavailable"
        ready = all(value == "ok" for value in checks.values())
        return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks}, 200 if ready else 503)

    return app
