"""The blocking client: :class:`AranduClient`, one method per endpoint of the API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import httpx

from arandu_client import _core
from arandu_client._core import AsOf, Call, NdjsonSource
from arandu_client.errors import TransportError
from arandu_client.models import (
    AgentConfig,
    AgentErased,
    AgentEventPage,
    AgentUsage,
    ApiKeyInfo,
    BatchAccepted,
    BulkRetry,
    CreatedApiKey,
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
)

T = TypeVar("T")


class AranduClient:
    """A client of one arandu server; use it as a context manager or call :meth:`close`.

    ::

        with AranduClient("http://127.0.0.1:8000", api_key) as client:
            accepted = client.send_message("agent-1", "I live in Lisbon.", "Ana")
            client.wait_for_event(accepted.event_id)
            print(client.retrieve("agent-1", "where does Ana live?").context)

    Error answers raise :class:`~arandu_client.errors.ApiError` subclasses; a request that gets
    no answer raises :class:`~arandu_client.errors.TransportError`. ``transport`` replaces
    httpx's network transport (e.g. ``httpx.HTTPTransport(retries=3)``).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 30,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=_core.client_headers(api_key), timeout=timeout, transport=transport
        )

    # ---- Plumbing --------------------------------------------------------------------------

    def _call(self, call: Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, **call.request_kwargs())
        except httpx.TransportError as error:
            raise TransportError(f"{call.method} {call.path}: {type(error).__name__}: {error}") from error
        return _core.finish(call, response)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ---- Write path ------------------------------------------------------------------------

    def send_message(
        self, agent_id: str, message: str, speaker_name: str, **options: Unpack[MessageOptions]
    ) -> MessageAccepted:
        """Store one message and queue its processing (``session_id``, ``occurred_at``, ``message_id``...)."""
        return self._call(_core.send_message(agent_id, message, speaker_name, options))

    def dry_run(
        self, agent_id: str, message: str, speaker_name: str, **options: Unpack[MessageOptions]
    ) -> DryRunResult:
        """What the message would write, computed synchronously; nothing is stored."""
        return self._call(_core.dry_run(agent_id, message, speaker_name, options))

    def send_batch(self, agent_id: str, messages: Sequence[Message]) -> BatchAccepted:
        """Store up to 1,000 messages (all or none); event ids come back in input order."""
        return self._call(_core.send_batch(agent_id, messages))

    def start_import(
        self, agent_id: str, messages: Iterable[Message] | None = None, *, ndjson: NdjsonSource | None = None
    ) -> ImportAccepted:
        """Import up to 10,000 dated messages: ``messages`` as JSON, or ``ndjson`` as a file path, bytes or lines."""
        return self._call(_core.start_import(agent_id, messages, ndjson))

    def import_progress(self, import_id: str, *, agent_id: str | None = None) -> ImportProgress:
        """An import's progress (``agent_id`` scopes the read to that agent: 404 for another's)."""
        return self._call(_core.import_progress(import_id, agent_id))

    def wait_for_import(
        self,
        import_id: str,
        *,
        timeout: float = 600,
        poll_interval: float = 1.0,
        on_progress: Callable[[ImportProgress], object] | None = None,
    ) -> ImportProgress:
        """Poll until the import is ``done`` or ``failed``; ``on_progress`` sees every change.

        Raises :class:`~arandu_client.errors.WaitTimeoutError` (a ``TimeoutError``) after ``timeout`` s.
        """
        pacer = _core.Pacer(f"import {import_id}", timeout, poll_interval)
        seen: tuple[int, int, int, str] | None = None
        while True:
            progress = self.import_progress(import_id)
            if on_progress is not None and _core.progress_key(progress) != seen:
                seen = _core.progress_key(progress)
                on_progress(progress)
            if progress.finished:
                return progress
            time.sleep(pacer.delay(_core.describe_progress(progress)))

    def event(self, event_id: str, *, agent_id: str | None = None) -> EventStatus:
        """A message's pipeline run (``agent_id`` scopes the read to that agent)."""
        return self._call(_core.event(event_id, agent_id))

    def wait_for_event(self, event_id: str, *, timeout: float = 120, poll_interval: float = 0.5) -> EventStatus:
        """Poll until the event is ``done`` or ``failed`` (a failure is returned, not raised).

        Raises :class:`~arandu_client.errors.WaitTimeoutError` (a ``TimeoutError``) after ``timeout`` s.
        """
        pacer = _core.Pacer(f"event {event_id}", timeout, poll_interval)
        while True:
            status = self.event(event_id)
            if status.finished:
                return status
            time.sleep(pacer.delay(status.status))

    def lookup_events(
        self, agent_id: str, message_ids: Sequence[str], *, status: Sequence[str] | None = None
    ) -> EventLookup:
        """The agent's events of up to 10,000 ``message_ids`` (status, stage, error, import); ``status`` filters."""
        return self._call(_core.lookup_events(agent_id, message_ids, status))

    def retry_event(self, event_id: str, from_scratch: bool = False) -> RetryAccepted:
        """Re-drive a failed event (or, ``from_scratch``, re-process a done one); 409 otherwise."""
        return self._call(_core.retry_event(event_id, from_scratch))

    def list_events(
        self, agent_id: str, *, status: str = "failed", cursor: str | None = None, limit: int = 50
    ) -> AgentEventPage:
        """A page of the agent's events with their processing (``failed``, ``pending`` or ``all``), newest first;
        pass the page's ``next_cursor`` as ``cursor`` for the next one."""
        return self._call(_core.list_events(agent_id, status=status, cursor=cursor, limit=limit))

    def retry_failed_events(self, agent_id: str, event_ids: Sequence[str] | None = None) -> BulkRetry:
        """Re-drive the agent's failed events (``event_ids``, or all of them: 10,000 per call, see ``remaining``)."""
        return self._call(_core.retry_failed_events(agent_id, event_ids))

    def reprocess(self, agent_id: str) -> Reprocess:
        """Re-derive the agent's whole memory from its event log with the service's current skills and
        embedder; retrieval answers from the old memory until the new one replaces it. 409 while one runs."""
        return self._call(_core.start_reprocess(agent_id))

    def reprocess_status(self, agent_id: str, reprocess_id: str | None = None) -> Reprocess:
        """The agent's latest re-process (or ``reprocess_id``); NotFoundError when there is none."""
        return self._call(_core.reprocess_status(agent_id, reprocess_id))

    def cancel_reprocess(self, agent_id: str) -> Reprocess:
        """Cancel the running re-process: the new memory is discarded, the live one kept (409 when none runs)."""
        return self._call(_core.cancel_reprocess(agent_id))

    def wait_for_reprocess(
        self,
        agent_id: str,
        reprocess_id: str | None = None,
        *,
        timeout: float = 3600,
        poll_interval: float = 1.0,
        on_progress: Callable[[Reprocess], object] | None = None,
    ) -> Reprocess:
        """Poll until the re-process is ``done`` or ``cancelled``; ``on_progress`` sees every change."""
        pacer = _core.Pacer(f"re-process of {agent_id}", timeout, poll_interval)
        seen: Reprocess | None = None
        while True:
            progress = self.reprocess_status(agent_id, reprocess_id)
            if on_progress is not None and progress != seen:
                seen = progress
                on_progress(progress)
            if progress.finished:
                return progress
            time.sleep(pacer.delay(_core.describe_reprocess(progress)))

    # ---- Retrieval -------------------------------------------------------------------------

    def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        entity_keys: Sequence[str] | str | None = None,
        session_id: str | None = None,
        as_of: AsOf | None = None,
        config_overrides: Mapping[str, Any] | None = None,
        verbose: bool = False,
        include_directives: bool = False,
        persona: str | None = None,
    ) -> RetrieveResult:
        """Ranked facts and a prompt-ready context for ``query``.

        ``as_of`` is an instant (datetime or ISO string) or a ``(start, end)`` window.
        """
        return self._call(
            _core.retrieve(
                agent_id,
                query,
                entity_keys=entity_keys,
                session_id=session_id,
                as_of=as_of,
                config_overrides=config_overrides,
                verbose=verbose,
                include_directives=include_directives,
                persona=persona,
            )
        )

    # ---- Memory management -----------------------------------------------------------------

    def list_facts(
        self, agent_id: str, *, limit: int = 50, offset: int = 0, entity_keys: Sequence[str] | str | None = None
    ) -> FactPage:
        """Active facts, newest first, optionally of some entities only."""
        return self._call(_core.list_facts(agent_id, limit=limit, offset=offset, entity_keys=entity_keys))

    def get_fact(self, agent_id: str, fact_id: str) -> FactDetail:
        """One fact, superseded ones included; raises NotFoundError for another agent's id."""
        return self._call(_core.get_fact(agent_id, fact_id))

    def directives(self, agent_id: str, *, persona: str | None = None, include_inactive: bool = False) -> DirectiveList:
        """The agent's directive block (persona + learned directives) and its directives, strongest first."""
        return self._call(_core.directives(agent_id, persona=persona, include_inactive=include_inactive))

    def delete_directive(self, agent_id: str, directive_id: str) -> None:
        """Forget one directive for good; raises NotFoundError when the agent has no such directive."""
        self._call(_core.delete_directive(agent_id, directive_id))

    def delete_fact(self, agent_id: str, fact_id: str) -> None:
        """Delete one fact for good (its entity links go with it); raises NotFoundError when unknown."""
        self._call(_core.delete_fact(agent_id, fact_id))

    def delete_all_facts(self, agent_id: str) -> int:
        """Delete every fact of the agent; returns how many there were."""
        return self._call(_core.delete_all_facts(agent_id))

    def erase_agent(self, agent_id: str) -> AgentErased:
        """Erase the agent: its events and everything derived from them, for good; rows deleted per table.

        Tasks still queued for the agent end as no-ops; messages sent afterwards start a fresh
        memory. Erasing an agent that has nothing answers zeros.
        """
        return self._call(_core.erase_agent(agent_id))

    def list_entities(self, agent_id: str, *, limit: int = 50, offset: int = 0) -> EntityPage:
        """The agent's entities."""
        return self._call(_core.list_entities(agent_id, limit=limit, offset=offset))

    def get_entity(self, agent_id: str, key: str) -> EntityProfile:
        """One entity by canonical key or alias, with aliases and relationships; NotFoundError when unknown."""
        return self._call(_core.get_entity(agent_id, key))

    # ---- LLM usage -------------------------------------------------------------------------

    def usage(self, agent_id: str, since: date | str | None = None, until: date | str | None = None) -> AgentUsage:
        """LLM calls and tokens spent on the agent, totals, per UTC day and per skill (last 30 days by default).

        ``since`` and ``until`` are days (``date`` or ``YYYY-MM-DD``), both included; a range over
        366 days, or ``since`` after ``until``, raises :class:`~arandu_client.errors.InvalidRequestError`.
        """
        return self._call(_core.usage(agent_id, since=since, until=until))

    # ---- Maintenance jobs ------------------------------------------------------------------

    def get_agent_config(self, agent_id: str) -> AgentConfig:
        """The agent's MemoryConfig overrides (``{}`` when none) and the config its work runs on."""
        return self._call(_core.get_agent_config(agent_id))

    def set_agent_config(self, agent_id: str, overrides: Mapping[str, Any]) -> AgentConfig:
        """Replace the agent's MemoryConfig overrides (needs ``admin``); a bad field is a ValidationError naming it."""
        return self._call(_core.set_agent_config(agent_id, overrides))

    def reset_agent_config(self, agent_id: str) -> AgentConfig:
        """Remove the agent's overrides: it runs on the service config again (needs ``admin``)."""
        return self._call(_core.reset_agent_config(agent_id))

    def run_job(self, agent_id: str, job: str) -> JobRunAccepted:
        """Queue a maintenance job (importance, summaries, clustering...) for the agent now.

        Raises :class:`~arandu_client.errors.ConflictError` when that job is already queued or
        running for the agent (the message names its run), NotFoundError for an unknown job.
        """
        return self._call(_core.run_job(agent_id, job))

    def list_jobs(self, agent_id: str, *, limit: int = 50, job: str | None = None) -> JobRunPage:
        """The agent's most recent maintenance runs (Beat's and the API's), newest first; ``job`` filters."""
        return self._call(_core.list_jobs(agent_id, limit=limit, job=job))

    def wait_for_job(
        self, agent_id: str, job_run_id: str, *, timeout: float = 300, poll_interval: float = 1.0, limit: int = 100
    ) -> JobRun:
        """Poll until the run is ``done``, ``failed`` or ``skipped`` (a failure is returned, not raised).

        The run must be among the agent's ``limit`` most recent. Raises
        :class:`~arandu_client.errors.WaitTimeoutError` after ``timeout`` s.
        """
        pacer = _core.Pacer(f"job run {job_run_id}", timeout, poll_interval)
        while True:
            run = _core.find_run(self.list_jobs(agent_id, limit=limit), job_run_id)
            if run is not None and run.finished:
                return run
            time.sleep(pacer.delay(run.status if run is not None else "not listed"))

    # ---- API keys (operator keys only) -------------------------------------------------------

    def create_key(
        self,
        name: str,
        *,
        agent_ids: Sequence[str] | None = None,
        agent_prefix: str | None = None,
        permissions: Sequence[str] = ("read", "write"),
        tenant: str | None = None,
        expires_at: datetime | str | None = None,
        rate_limit_per_s: float | None = None,
    ) -> CreatedApiKey:
        """A new tenant key for some agents (``agent_ids``, or ``agent_prefix`` such as ``acme:``); the key is
        in the answer only."""
        return self._call(
            _core.create_key(
                name,
                agent_ids=agent_ids,
                agent_prefix=agent_prefix,
                permissions=permissions,
                tenant=tenant,
                expires_at=expires_at,
                rate_limit_per_s=rate_limit_per_s,
            )
        )

    def list_keys(self, *, include_revoked: bool = False) -> list[ApiKeyInfo]:
        """Tenant keys, newest first (never the keys themselves)."""
        return self._call(_core.list_keys(include_revoked))

    def revoke_key(self, name: str) -> ApiKeyInfo:
        """Revoke a tenant key (refused everywhere within seconds); NotFoundError when there is none."""
        return self._call(_core.revoke_key(name))

    # ---- Operations ------------------------------------------------------------------------

    def health(self) -> bool:
        """True while the server answers ``/healthz``."""
        return self._call(_core.health())

    def ready(self) -> Readiness:
        """Whether the server's database and broker answer (``.ready``, ``.checks``)."""
        return self._call(_core.ready())


__all__ = ["AranduClient"]
