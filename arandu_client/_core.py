"""What the sync and async clients share: building requests, reading answers, pacing waits.

Every endpoint is one function here returning a :class:`Call` (method, path, query, body and
the parser of its answer); :mod:`arandu_client.sync` and :mod:`arandu_client.aio` only send it
with their httpx client and hand the response to :func:`finish`. Nothing here does I/O except
reading an NDJSON file given by path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from arandu_client.errors import WaitTimeoutError, api_error
from arandu_client.models import (
    AgentConfig,
    AgentErased,
    AgentEventPage,
    AgentUsage,
    ApiKeyInfo,
    ApiKeyList,
    BatchAccepted,
    BulkRetry,
    CreatedApiKey,
    Deleted,
    DirectiveList,
    DryRunResult,
    EntityPage,
    EntityProfile,
    EventLookup,
    EventStatus,
    FactDetail,
    FactPage,
    ImportAccepted,
    ImportProgress,
    JobRun,
    JobRunAccepted,
    JobRunPage,
    Message,
    MessageAccepted,
    MessageOptions,
    Readiness,
    Reprocess,
    RetrieveResult,
    RetryAccepted,
    TimeWindow,
)

T = TypeVar("T")
ModelT = TypeVar("ModelT", bound=BaseModel)

VERSION = "0.1.0"
USER_AGENT = f"arandu-client/{VERSION}"
NDJSON = "application/x-ndjson"

NdjsonSource = str | os.PathLike[str] | bytes | Iterable[str | bytes]
AsOf = datetime | str | tuple[datetime | str, datetime | str] | TimeWindow


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request and how to read its successful answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, str | int] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # Statuses that are answers rather than errors, besides 2xx (readiness answers 503).
    also_ok: frozenset[int] = frozenset()

    def request_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client.request`` / ``httpx.AsyncClient.request``."""
        kwargs: dict[str, Any] = {"params": self.params}
        if self.content is not None:
            kwargs["content"] = self.content
        elif self.json is not None:
            kwargs["json"] = self.json
        if self.headers:
            kwargs["headers"] = self.headers
        return kwargs


def client_headers(api_key: str | None) -> dict[str, str]:
    """Headers of every request: the bearer key (when given) and the user agent."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def finish(call: Call[T], response: httpx.Response) -> T:
    """The parsed answer, or the typed :class:`~arandu_client.errors.ApiError` of an error status."""
    if response.is_success or response.status_code in call.also_ok:
        return call.parse(response)
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise api_error(response.status_code, body, response.headers)


# ---- Values ------------------------------------------------------------------------------


def _segment(value: str) -> str:
    """A path segment, percent-encoded (agent ids may hold ``:`` and ``@``, which stay readable)."""
    if not value:
        raise ValueError("ids in the path (agent, event, import, fact) must not be empty")
    return quote(str(value), safe=":@")


def _agent(agent_id: str) -> str:
    return f"/v1/agents/{_segment(agent_id)}"


def jsonable(value: Any) -> Any:
    """``value`` with datetimes as ISO 8601 strings (naive values are taken as UTC by the server)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    return value


def _model(model: type[ModelT]) -> Callable[[httpx.Response], ModelT]:
    def parse(response: httpx.Response) -> ModelT:
        return model.model_validate_json(response.content)

    return parse


def _message(message: str, speaker_name: str, options: MessageOptions) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "speaker_name": speaker_name}
    body.update((key, jsonable(value)) for key, value in options.items())
    return body


def _as_of(value: AsOf) -> Any:
    if isinstance(value, tuple):
        start, end = value
        return {"start": jsonable(start), "end": jsonable(end)}
    return jsonable(value)


def _keys(entity_keys: Sequence[str] | str | None) -> list[str] | None:
    if entity_keys is None:
        return None
    if isinstance(entity_keys, str):
        return [key.strip() for key in entity_keys.split(",") if key.strip()]
    return list(entity_keys)


# ---- Write path --------------------------------------------------------------------------


def send_message(agent_id: str, message: str, speaker_name: str, options: MessageOptions) -> Call[MessageAccepted]:
    """``POST /v1/agents/{agent_id}/messages``."""
    return Call(
        "POST", f"{_agent(agent_id)}/messages", _model(MessageAccepted), json=_message(message, speaker_name, options)
    )


def dry_run(agent_id: str, message: str, speaker_name: str, options: MessageOptions) -> Call[DryRunResult]:
    """``POST /v1/agents/{agent_id}/messages`` with ``dry_run``: nothing is stored."""
    body = {**_message(message, speaker_name, options), "dry_run": True}
    return Call("POST", f"{_agent(agent_id)}/messages", _model(DryRunResult), json=body)


def send_batch(agent_id: str, messages: Sequence[Message]) -> Call[BatchAccepted]:
    """``POST /v1/agents/{agent_id}/messages/batch``."""
    body = {"messages": [jsonable(item) for item in messages]}
    return Call("POST", f"{_agent(agent_id)}/messages/batch", _model(BatchAccepted), json=body)


def _ndjson_bytes(source: NdjsonSource) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, str | os.PathLike):
        return Path(source).read_bytes()
    lines: list[bytes] = []
    for line in source:
        raw = line if isinstance(line, bytes) else line.encode("utf-8")
        lines.append(raw.rstrip(b"\r\n"))
    return b"\n".join(lines) + b"\n"


def start_import(
    agent_id: str, messages: Iterable[Message] | None, ndjson: NdjsonSource | None
) -> Call[ImportAccepted]:
    """``POST /v1/agents/{agent_id}/imports`` as JSON (``messages``) or NDJSON (``ndjson``)."""
    if (messages is None) == (ndjson is None):
        raise ValueError("start_import takes either messages or ndjson (a path, bytes or lines), not both")
    path = f"{_agent(agent_id)}/imports"
    if messages is not None:
        return Call("POST", path, _model(ImportAccepted), json={"messages": [jsonable(item) for item in messages]})
    assert ndjson is not None
    return Call("POST", path, _model(ImportAccepted), content=_ndjson_bytes(ndjson), headers={"Content-Type": NDJSON})


def import_progress(import_id: str, agent_id: str | None = None) -> Call[ImportProgress]:
    """``GET /v1/imports/{import_id}`` (or the agent-scoped path when ``agent_id`` is given)."""
    prefix = _agent(agent_id) if agent_id is not None else "/v1"
    return Call("GET", f"{prefix}/imports/{_segment(import_id)}", _model(ImportProgress))


def event(event_id: str, agent_id: str | None = None) -> Call[EventStatus]:
    """``GET /v1/events/{event_id}`` (or the agent-scoped path when ``agent_id`` is given)."""
    prefix = _agent(agent_id) if agent_id is not None else "/v1"
    return Call("GET", f"{prefix}/events/{_segment(event_id)}", _model(EventStatus))


def lookup_events(agent_id: str, message_ids: Sequence[str], status: Sequence[str] | None) -> Call[EventLookup]:
    """``POST /v1/agents/{agent_id}/events/lookup``: the events of up to 10,000 message ids."""
    body: dict[str, Any] = {"message_ids": list(message_ids)}
    if status is not None:
        body["status"] = list(status)
    return Call("POST", f"{_agent(agent_id)}/events/lookup", _model(EventLookup), json=body)


def retry_event(event_id: str, from_scratch: bool) -> Call[RetryAccepted]:
    """``POST /v1/events/{event_id}/retry``."""
    return Call(
        "POST", f"/v1/events/{_segment(event_id)}/retry", _model(RetryAccepted), json={"from_scratch": from_scratch}
    )


def list_events(agent_id: str, *, status: str, cursor: str | None, limit: int) -> Call[AgentEventPage]:
    """``GET /v1/agents/{agent_id}/events``: a page of the agent's events (``failed``, ``pending`` or ``all``)."""
    params: dict[str, str | int] = {"status": status, "limit": limit}
    if cursor:
        params["cursor"] = cursor
    return Call("GET", f"{_agent(agent_id)}/events", _model(AgentEventPage), params=params)


def retry_failed_events(agent_id: str, event_ids: Sequence[str] | None) -> Call[BulkRetry]:
    """``POST /v1/agents/{agent_id}/events/retry``: re-drive ``event_ids``, or every failed event (None)."""
    body: dict[str, Any] = {"all": True} if event_ids is None else {"event_ids": list(event_ids)}
    return Call("POST", f"{_agent(agent_id)}/events/retry", _model(BulkRetry), json=body)


def start_reprocess(agent_id: str) -> Call[Reprocess]:
    """``POST /v1/agents/{agent_id}/reprocess``: re-derive the agent's memory from its event log."""
    return Call("POST", f"{_agent(agent_id)}/reprocess", _model(Reprocess))


def reprocess_status(agent_id: str, reprocess_id: str | None) -> Call[Reprocess]:
    """``GET /v1/agents/{agent_id}/reprocess[/{reprocess_id}]``: the latest (or one) re-process."""
    suffix = f"/{_segment(reprocess_id)}" if reprocess_id else ""
    return Call("GET", f"{_agent(agent_id)}/reprocess{suffix}", _model(Reprocess))


def cancel_reprocess(agent_id: str) -> Call[Reprocess]:
    """``DELETE /v1/agents/{agent_id}/reprocess``: cancel the running re-process (409 when none runs)."""
    return Call("DELETE", f"{_agent(agent_id)}/reprocess", _model(Reprocess))


def describe_reprocess(progress: Reprocess) -> str:
    """``running: 40 done, 0 failed, 60 pending``."""
    return f"{progress.status}: {progress.done} done, {progress.failed} failed, {progress.pending} pending"


# ---- Retrieval and memory ----------------------------------------------------------------


def retrieve(
    agent_id: str,
    query: str,
    *,
    entity_keys: Sequence[str] | str | None,
    session_id: str | None,
    as_of: AsOf | None,
    config_overrides: Mapping[str, Any] | None,
    verbose: bool,
    include_directives: bool = False,
    persona: str | None = None,
) -> Call[RetrieveResult]:
    """``POST /v1/agents/{agent_id}/retrieve``; absent options are left out of the body."""
    body: dict[str, Any] = {"query": query}
    keys = _keys(entity_keys)
    if keys is not None:
        body["entity_keys"] = keys
    if session_id is not None:
        body["session_id"] = session_id
    if as_of is not None:
        body["as_of"] = _as_of(as_of)
    if config_overrides is not None:
        body["config_overrides"] = jsonable(config_overrides)
    if verbose:
        body["verbose"] = True
    if include_directives:
        body["include_directives"] = True
    if persona is not None:
        body["persona"] = persona
    return Call("POST", f"{_agent(agent_id)}/retrieve", _model(RetrieveResult), json=body)


def directives(agent_id: str, *, persona: str | None, include_inactive: bool) -> Call[DirectiveList]:
    """``GET /v1/agents/{agent_id}/directives``: the directive block and the directives."""
    params: dict[str, str | int] = {}
    if persona is not None:
        params["persona"] = persona
    if include_inactive:
        params["include_inactive"] = "true"
    return Call("GET", f"{_agent(agent_id)}/directives", _model(DirectiveList), params=params)


def delete_directive(agent_id: str, directive_id: str) -> Call[None]:
    """``DELETE /v1/agents/{agent_id}/directives/{directive_id}``."""
    return Call("DELETE", f"{_agent(agent_id)}/directives/{_segment(directive_id)}", _nothing)


def list_facts(agent_id: str, *, limit: int, offset: int, entity_keys: Sequence[str] | str | None) -> Call[FactPage]:
    """``GET /v1/agents/{agent_id}/facts``: active facts, newest first."""
    params: dict[str, str | int] = {"limit": limit, "offset": offset}
    keys = _keys(entity_keys)
    if keys:
        params["entity_keys"] = ",".join(keys)
    return Call("GET", f"{_agent(agent_id)}/facts", _model(FactPage), params=params)


def get_fact(agent_id: str, fact_id: str) -> Call[FactDetail]:
    """``GET /v1/agents/{agent_id}/facts/{fact_id}`` (superseded facts too)."""
    return Call("GET", f"{_agent(agent_id)}/facts/{_segment(fact_id)}", _model(FactDetail))


def _deleted(response: httpx.Response) -> int:
    return Deleted.model_validate_json(response.content).deleted


def _nothing(_: httpx.Response) -> None:
    return None


def delete_fact(agent_id: str, fact_id: str) -> Call[None]:
    """``DELETE /v1/agents/{agent_id}/facts/{fact_id}``."""
    return Call("DELETE", f"{_agent(agent_id)}/facts/{_segment(fact_id)}", _nothing)


def delete_all_facts(agent_id: str) -> Call[int]:
    """``DELETE /v1/agents/{agent_id}/facts``: how many facts were deleted."""
    return Call("DELETE", f"{_agent(agent_id)}/facts", _deleted)


def erase_agent(agent_id: str) -> Call[AgentErased]:
    """``DELETE /v1/agents/{agent_id}?confirm=true``: everything of the agent, for good."""
    return Call("DELETE", _agent(agent_id), _model(AgentErased), params={"confirm": "true"})


def list_entities(agent_id: str, *, limit: int, offset: int) -> Call[EntityPage]:
    """``GET /v1/agents/{agent_id}/entities``."""
    return Call("GET", f"{_agent(agent_id)}/entities", _model(EntityPage), params={"limit": limit, "offset": offset})


def get_entity(agent_id: str, key: str) -> Call[EntityProfile]:
    """``GET /v1/agents/{agent_id}/entities/{key}`` (a canonical key or an alias)."""
    return Call("GET", f"{_agent(agent_id)}/entities/{_segment(key)}", _model(EntityProfile))


# ---- Maintenance jobs --------------------------------------------------------------------


def get_agent_config(agent_id: str) -> Call[AgentConfig]:
    """``GET /v1/agents/{agent_id}/config``: the agent's overrides and its effective config."""
    return Call("GET", f"{_agent(agent_id)}/config", _model(AgentConfig))


def set_agent_config(agent_id: str, overrides: Mapping[str, Any]) -> Call[AgentConfig]:
    """``PUT /v1/agents/{agent_id}/config``: replace the agent's overrides."""
    return Call("PUT", f"{_agent(agent_id)}/config", _model(AgentConfig), json={"overrides": dict(overrides)})


def reset_agent_config(agent_id: str) -> Call[AgentConfig]:
    """``DELETE /v1/agents/{agent_id}/config``: back to the service config."""
    return Call("DELETE", f"{_agent(agent_id)}/config", _model(AgentConfig))


def run_job(agent_id: str, job: str) -> Call[JobRunAccepted]:
    """``POST /v1/agents/{agent_id}/jobs/{job}``: queue a maintenance run now."""
    return Call("POST", f"{_agent(agent_id)}/jobs/{_segment(job)}", _model(JobRunAccepted))


def list_jobs(agent_id: str, *, limit: int, job: str | None) -> Call[JobRunPage]:
    """``GET /v1/agents/{agent_id}/jobs``: recent maintenance runs (of ``job``), newest first."""
    params: dict[str, str | int] = {"limit": limit}
    if job is not None:
        params["job"] = job
    return Call("GET", f"{_agent(agent_id)}/jobs", _model(JobRunPage), params=params)


# ---- LLM usage -----------------------------------------------------------------------------


def usage(agent_id: str, *, since: date | str | None, until: date | str | None) -> Call[AgentUsage]:
    """``GET /v1/agents/{agent_id}/usage``: LLM calls and tokens by day and by skill (UTC days, both included)."""
    params: dict[str, str | int] = {}
    if since is not None:
        params["since"] = since if isinstance(since, str) else since.isoformat()
    if until is not None:
        params["until"] = until if isinstance(until, str) else until.isoformat()
    return Call("GET", f"{_agent(agent_id)}/usage", _model(AgentUsage), params=params)


# ---- API keys (operator keys only) -------------------------------------------------------


def create_key(
    name: str,
    *,
    agent_ids: Sequence[str] | None,
    agent_prefix: str | None,
    permissions: Sequence[str],
    tenant: str | None,
    expires_at: datetime | str | None,
    rate_limit_per_s: float | None,
) -> Call[CreatedApiKey]:
    """``POST /v1/keys``: a new tenant key (answered once)."""
    body: dict[str, Any] = {"name": name, "permissions": list(permissions)}
    if agent_ids is not None:
        body["agent_ids"] = list(agent_ids)
    if agent_prefix is not None:
        body["agent_prefix"] = agent_prefix
    if tenant is not None:
        body["tenant"] = tenant
    if expires_at is not None:
        body["expires_at"] = jsonable(expires_at)
    if rate_limit_per_s is not None:
        body["rate_limit_per_s"] = rate_limit_per_s
    return Call("POST", "/v1/keys", _model(CreatedApiKey), json=body)


def list_keys(include_revoked: bool) -> Call[list[ApiKeyInfo]]:
    """``GET /v1/keys``: tenant keys, newest first."""

    def parse(response: httpx.Response) -> list[ApiKeyInfo]:
        return ApiKeyList.model_validate_json(response.content).keys

    params: dict[str, str | int] = {"include_revoked": "true"} if include_revoked else {}
    return Call("GET", "/v1/keys", parse, params=params)


def revoke_key(name: str) -> Call[ApiKeyInfo]:
    """``DELETE /v1/keys/{name}``: revoke a tenant key."""
    return Call("DELETE", f"/v1/keys/{_segment(name)}", _model(ApiKeyInfo))


def find_run(page: JobRunPage, job_run_id: str) -> JobRun | None:
    """The run ``job_run_id`` of ``page``, if listed."""
    return next((run for run in page.runs if run.job_run_id == job_run_id), None)


# ---- Operations --------------------------------------------------------------------------


def _healthy(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == "ok"


def health() -> Call[bool]:
    """``GET /healthz``: True while the server process answers."""
    return Call("GET", "/healthz", _healthy)


def ready() -> Call[Readiness]:
    """``GET /readyz``: the state of the database and the broker (a 503 is an answer, not an error)."""
    return Call("GET", "/readyz", _model(Readiness), also_ok=frozenset({503}))


# ---- Waiting -----------------------------------------------------------------------------


class Pacer:
    """Paces the polls of a ``wait_for_*`` call and gives up at its deadline."""

    def __init__(self, what: str, timeout: float, poll_interval: float) -> None:
        if timeout < 0 or poll_interval <= 0:
            raise ValueError("timeout must be >= 0 and poll_interval > 0")
        self.what = what
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.deadline = time.monotonic() + timeout

    def delay(self, last_seen: str) -> float:
        """Seconds to sleep before the next poll; raises :class:`WaitTimeoutError` past the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeoutError(f"{self.what} did not finish within {self.timeout:g} s (last seen: {last_seen})")
        return min(self.poll_interval, left)


def progress_key(progress: ImportProgress) -> tuple[int, int, int, str]:
    """What must change for an import's progress callback to be called again."""
    return (progress.done, progress.failed, progress.pending, progress.status)


def describe_progress(progress: ImportProgress) -> str:
    """``running: 40 done, 0 failed, 60 pending``."""
    return f"{progress.status}: {progress.done} done, {progress.failed} failed, {progress.pending} pending"


__all__ = ["AsOf", "Call", "NdjsonSource", "Pacer", "client_headers", "finish"]
