"""Per-app singletons, body reading with a size guard, and publishing to the pipeline.

Everything a request needs that can be built once is built once, in :func:`build_state`,
and kept on ``app.state.api``: the database engine and session factory, a Celery app used
only to publish, the override checker with the deployment's base config, the encoded API
keys. The write context for dry runs (providers, skills) is built on the first dry run, the
read context (embedder, reranker; it shares the app's database pool) on the first retrieval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from celery import Celery
from fastapi import Depends, Request
from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse

from api.auth import SECURITY_SCHEME, SECURITY_SCHEME_NAME, KeyResolver, encode_keys
from api.errors import ApiError, raise_for_pydantic
from api.event_writer import EventWriter
from api.heavy_work import HeavyWork
from api.rate_limit import RateLimiter
from api.schemas import OverrideChecker
from memory_core.db.engine import create_db_engine, create_session_factory
from memory_core.settings import LLMProviderName, Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.intake import AcceptedMessage, IncomingMessage, accept_agent_messages
from workers.celery_app import create_celery_app
from workers.intake import IntakeQueue
from workers.tasks.pipeline import enqueue_events

if TYPE_CHECKING:
    from memory_core.read.context import ReadContext

logger = logging.getLogger("arandu.api")

MiB = 1024 * 1024
DEFAULT_BODY_CAP = 16 * MiB
IMPORT_BODY_CAP = 64 * MiB
DRY_RUN_POOL_SIZE = 2

NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"})

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass
class ApiState:
    """What the handlers of one app share."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    # Sessions whose every statement commits on its own: for a request that writes in one
    # statement, it saves the BEGIN and COMMIT round trips.
    statement_sessions: sessionmaker[Session]
    celery: Celery
    overrides: OverrideChecker
    heavy: HeavyWork
    keys: KeyResolver
    body_cap: int
    import_body_cap: int
    intake: IntakeQueue | None = None
    event_writer: EventWriter = field(init=False, repr=False)
    _write_context: WriteContext | None = field(default=None, repr=False)
    _read_context: ReadContext | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.event_writer = EventWriter(self._write_single_messages, self.enqueue_single)

    def _write_single_messages(self, items: Sequence[tuple[str, IncomingMessage]]) -> list[AcceptedMessage]:
        # One statement, atomic on its own: no transaction around it, so no BEGIN and COMMIT
        # round trips.
        with self.statement_sessions() as session:
            return accept_agent_messages(session, items)

    def write_context(self) -> WriteContext:
        """The dry-run context (providers, skills, a small pool of its own), built once."""
        context = self._write_context
        if context is None:
            with self._lock:
                context = self._write_context
                if context is None:
                    context = build_write_context(self.settings, pool_size=DRY_RUN_POOL_SIZE)
                    self._write_context = context
        return context

    def read_context(self) -> ReadContext:
        """The retrieval context (embedder, reranker), built on first use; it shares the app's engine."""
        context = self._read_context
        if context is None:
            with self._lock:
                context = self._read_context
                if context is None:
                    # Imported here: processes that never retrieve do not load the read pipeline.
                    from memory_core.read.context import build_read_context

                    context = build_read_context(self.settings, engine=self.engine)
                    self._read_context = context
        return context

    def enqueue(self, event_ids: Sequence[str], start: str = "extract") -> bool:
        """Publish the pipeline for committed events; False (and a warning) when the broker fails.

        The events are durable already: the Beat sweeper re-enqueues runs that stay idle, so a
        broker outage delays processing but loses nothing, and the caller still gets its 202.
        """
        if not event_ids:
            return True
        try:
            enqueue_events(self.celery, list(event_ids), start)
        except Exception as error:
            logger.warning(
                "could not enqueue %d event(s) from %s (%s: %s); the sweeper will re-enqueue them",
                len(event_ids),
                start,
                type(error).__name__,
                error,
            )
            return False
        return True

    def enqueue_single(self, event_ids: Sequence[str]) -> bool:
        """Queue single messages for coalescing into chunks (see :mod:`workers.intake`); False on a broker failure.

        Without an intake list (coalescing off, or a broker that is not Redis) each message
        starts a chain of its own at once.
        """
        if self.intake is None:
            return self.enqueue(event_ids)
        try:
            pushed = self.intake.push(event_ids)
            if pushed.publish_collector:
                # A message without company starts at once: nobody is coming to share its chunk.
                self.celery.signature(
                    "ingest.collect", kwargs={"wait": pushed.has_company}, immutable=True
                ).apply_async()
        except Exception as error:
            logger.warning(
                "could not queue %d event(s) for a collector (%s: %s); the sweeper will re-enqueue them",
                len(event_ids),
                type(error).__name__,
                error,
            )
            return False
        return True

    def close(self) -> None:
        """Release the pools (database, dry-run and read contexts, broker connections)."""
        self.event_writer.close()
        self.engine.dispose()
        if self.intake is not None:
            self.intake.close()
        if self._write_context is not None:
            self._write_context.close()
        if self._read_context is not None:
            self._read_context.close()
        self.celery.close()


def build_state(settings: Settings) -> ApiState:
    """The singletons of an app for ``settings``."""
    engine = create_db_engine(settings)
    celery = create_celery_app(settings)
    # The API only publishes. A dead broker must cost a request a second or two, not the
    # default retries' many seconds: the events are stored and the sweeper catches up.
    celery.conf.broker_connection_timeout = 2
    celery.conf.task_publish_retry_policy = {
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.2,
    }
    cap = max(DEFAULT_BODY_CAP, 2 * settings.max_message_bytes + MiB)
    sessions = create_session_factory(engine)
    keys = KeyResolver(
        encode_keys(settings.api_keys),
        sessions,
        RateLimiter.for_settings(settings),
        cache_s=settings.api_key_cache_s,
        default_rate_per_s=settings.api_key_rate_limit_per_s,
    )
    return ApiState(
        settings=settings,
        engine=engine,
        sessions=sessions,
        statement_sessions=create_session_factory(engine.execution_options(isolation_level="AUTOCOMMIT")),
        celery=celery,
        overrides=OverrideChecker(
            settings.memory,
            llm_configured=settings.llm is not LLMProviderName.OFFLINE,
        ),
        heavy=HeavyWork(settings.heavy_request_concurrency),
        keys=keys,
        body_cap=cap,
        import_body_cap=max(IMPORT_BODY_CAP, cap),
        intake=IntakeQueue.for_settings(settings),
    )


def get_state(request: Request) -> ApiState:
    """The app's :class:`ApiState`."""
    state: ApiState = request.app.state.api
    return state


# ---- Bodies ------------------------------------------------------------------------------


def media_type(request: Request) -> str | None:
    """The request's media type, lower-cased and without parameters (None when absent)."""
    raw = request.headers.get("content-type")
    if raw is None:
        return None
    return raw.split(";", 1)[0].strip().lower() or None


def is_json_type(kind: str | None) -> bool:
    """JSON, or no content type at all (curl -d without -H is common enough to allow)."""
    return kind is None or kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


async def read_body(request: Request, cap: int) -> bytes:
    """The body, refused with 413 before reading when its Content-Length exceeds ``cap``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            problem = ("header.content-length", "not a number")
            raise ApiError(400, "malformed Content-Length header", [problem]) from None
        if size > cap:
            raise _body_too_large(cap)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > cap:  # chunked bodies declare no length: count as they come
            raise _body_too_large(cap)
        chunks.append(chunk)
    return b"".join(chunks)


def _body_too_large(cap: int) -> ApiError:
    message = f"request body is larger than the limit of {cap} bytes"
    return ApiError(413, f"body: {message}", [("body", message)])


async def json_body(request: Request) -> bytes:
    """A JSON request body (415 for another content type)."""
    kind = media_type(request)
    if not is_json_type(kind):
        raise ApiError(
            415,
            f"header.content-type: expected application/json, got {kind}",
            [("header.content-type", "expected application/json")],
        )
    return await read_body(request, get_state(request).body_cap)


JsonBody = Annotated[bytes, Depends(json_body)]


@dataclass(frozen=True)
class ImportBody:
    """An import's body and its format (``json`` or ``ndjson``)."""

    kind: str
    data: bytes


async def import_body(request: Request) -> ImportBody:
    """An import body: JSON ``{"messages": [...]}`` or NDJSON (``application/x-ndjson``)."""
    kind = media_type(request)
    if kind in NDJSON_TYPES:
        fmt = "ndjson"
    elif is_json_type(kind):
        fmt = "json"
    else:
        raise ApiError(
            415,
            f"header.content-type: expected application/json or application/x-ndjson, got {kind}",
            [("header.content-type", "expected application/json or application/x-ndjson")],
        )
    return ImportBody(kind=fmt, data=await read_body(request, get_state(request).import_body_cap))


def parse_json(model: type[ModelT], body: bytes) -> ModelT:
    """``body`` validated as ``model``, or the 422 naming every bad field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise_for_pydantic(error)


def answer(status_code: int, content: dict[str, Any], *, then: Callable[[], object] | None = None) -> JSONResponse:
    """A JSON answer built from plain values (no response-model re-validation).

    ``then`` runs once the answer is sent (in the thread pool): work the client need not wait for.
    """
    return JSONResponse(content, status_code=status_code, background=BackgroundTask(then) if then else None)


# ---- OpenAPI: bodies are parsed by the handlers, so their schemas are declared here ---------


def body_doc(model: type[BaseModel], *, ndjson: bool = False) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the JSON request body (and NDJSON lines if asked)."""
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}
    if ndjson:
        content["application/x-ndjson"] = {
            "schema": {"type": "string", "description": "One message object per line; blank lines are ignored."}
        }
    return {"requestBody": {"required": True, "content": content}}


def install_request_schemas(app: Any, models: Sequence[type[BaseModel]]) -> None:
    """Add the request models to the OpenAPI components (FastAPI only adds models it parses)."""
    from fastapi.openapi.utils import get_openapi
    from pydantic.json_schema import models_json_schema

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return dict(app.openapi_schema)
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        _, definitions = models_json_schema(
            [(model, "validation") for model in models], ref_template="#/components/schemas/{model}"
        )
        components = schema.setdefault("components", {})
        for name, definition in definitions.get("$defs", {}).items():
            components.setdefault("schemas", {}).setdefault(name, definition)
        components.setdefault("securitySchemes", {})[SECURITY_SCHEME_NAME] = SECURITY_SCHEME
        for path, operations in schema.get("paths", {}).items():
            if path.startswith("/v1/"):
                for operation in operations.values():
                    operation["security"] = [{SECURITY_SCHEME_NAME: []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi
