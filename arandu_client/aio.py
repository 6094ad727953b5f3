"""The asyncio client: :class:`AsyncAranduClient`, the same methods as the blocking client, awaited."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
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

ProgressCallback = Callable[[ImportProgress], "Awaitable[object] | object"]


class AsyncAranduClient:
    """An asyncio client of one arandu server; use ``async with`` or await :meth:`aclose`.

    ::

        async with AsyncAranduClient("http://127.0.0.1:8000", api_key) as client:
            accepted = await client.send_message("agent-1", "I live in Lisbon.", "Ana")
            await client.wait_for_event(accepted.event_id)
            result = await client.retrieve("agent-1", "where does Ana live?")

    Methods, arguments, answers and exceptions are those of
    :class:`~arandu_client.sync.AranduClient`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 30,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=_core.client_headers(api_key), timeout=timeout, transport=transport
        )

    # ---- Plumbing --------------------------------------------------------------------------

    async def _call(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(call.method, call.path, **call.request_kwargs())
        except httpx.TransportError as error:
            raise TransportError(f"{call.method} {call.path}: {type(error).__name__}: {error}") from error
        return _core.finish(call, response)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    # ---- Write path ------------------------------------------------------------------------

    async def send_message(
        self, agent_id: str, message: str, speaker_name: str, **options: Unpack[MessageOptions]
    ) -> MessageAccepted:
        """Store one message and queue its processing."""
        return await self._call(_core.send_message(agent_id, message, speaker_name, options))

    async def dry_run(
        self, agent_id: str, message: str, speaker_name: str, **options: Unpack[MessageOptions]
    ) -> DryRunResult:
        """What the message would write, computed synchronously; nothing is stored."""
        return await self._call(_core.dry_run(agent_id, message, speaker_name, options))

    async def send_batch(self, agent_id: str, messages: Sequence[Message]) -> BatchAccepted:
        """Store up to 1,000 messages (all or none); event ids come back in input order."""
        return await self._call(_core.send_batch(agent_id, messages))

    async def start_import(
        self, agent_id: str, messages: Iterable[Message] | None = None, *, ndjson: NdjsonSource | None = None
    ) -> ImportAccepted:
        """Import up to 10,000 dated messages: ``messages`` as JSON, or ``ndjson`` as a file path, bytes or lines.

        A file path is read before sending (blocking the loop for the read; imports are at most 64 MiB).
        """
        return await self._call(_core.start_import(agent_id, messages, ndjson))

    async def import_progress(self, import_id: str, *, agent_id: str | None = None) -> ImportProgress:
        """An import's progress (``agent_id`` scopes the read to that agent)."""
        return await self._call(_core.import_progress(import_id, agent_id))

    async def wait_for_import(
        self,
        import_id: str,
        *,
        timeout: float = 600,
        poll_interval: float = 1.0,
        on_progress: ProgressCallback | None = None,
    ) -> ImportProgress:
        """Poll until the import is ``done`` or ``failed``; ``on_progress`` (plain or async) sees every change."""
        pacer = _core.Pacer(f"import {import_id}", timeout, poll_interval)
        seen: tuple[int, int, int, str] | None = None
        while True:
            progress = await self.import_progress(import_id)
            if on_progress is not None and _core.progress_key(progress) != seen:
                seen = _core.progress_key(progress)
                outcome = on_progress(progress)
                if inspect.isawaitable(outcome):
                    await outcome
            if progress.finished:
                return progress
            await asyncio.sleep(pacer.delay(_core.describe_progress(progress)))

    async def event(self, event_id: str, *, agent_id: str | None = None) -> EventStatus:
        """A message's pipeline run (``agent_id`` scopes the read to that agent)."""
        return await self._call(_core.event(event_id, agent_id))

    async def wait_for_event(self, event_id: str, *, timeout: float = 120, poll_interval: float = 0.5) -> EventStatus:
        """Poll until the event is ``done`` or ``failed`` (a failure is returned, not raised)."""
        pacer = _core.Pacer(f"event {event_id}", timeout, poll_interval)
        while True:
            status = await self.event(event_id)
            if status.finished:
                return status
            await asyncio.sleep(pacer.delay(status.status))

    async def lookup_events(
        self, agent_id: str, message_ids: Sequence[str], *, status: Sequence[str] | None = None
    ) -> EventLookup:
        """The agent's events of up to 10,000 ``message_ids`` (status, stage, error, import); ``status`` filters."""
        return await self._call(_core.lookup_events(agent_id, message_ids, status))

    async def retry_event(self, event_id: str, from_scratch: bool = False) -> RetryAccepted:
        """Re-drive a failed event (or, ``from_scratch``, re-process a done one); 409 otherwise."""
        return await self._call(_core.retry_event(event_id, from_scratch))

    async def list_events(
        self, agent_id: str, *, status: str = "failed", cursor: str | None = None, limit: int = 50
    ) -> AgentEventPage:
        """A page of the agent's events with their processing (``failed``, ``pending`` or ``all``), newest first."""
        return await self._call(_core.list_events(agent_id, status=status, cursor=cursor, limit=limit))

    async def retry_failed_events(self, agent_id: str, event_ids: Sequence[str] | None = None) -> BulkRetry:
        """Re-drive the agent's failed events (``event_ids``, or all of them: 10,000 per call, see ``remaining``)."""
        return await self._call(_core.retry_failed_events(agent_id, event_ids))

    async def reprocess(self, agent_id: str) -> Reprocess:
        """Re-derive the agent's whole memory from its event log (see :meth:`AranduClient.reprocess`)."""
        return await self._call(_core.start_reprocess(agent_id))

    async def reprocess_status(self, agent_id: str, reprocess_id: str | None = None) -> Reprocess:
        """The agent's latest re-process (or ``reprocess_id``); NotFoundError when there is none."""
        return await self._call(_core.reprocess_status(agent_id, reprocess_id))

    async def cancel_reprocess(self, agent_id: str) -> Reprocess:
        """Cancel the running re-process: the new memory is discarded, the live one kept (409 when none runs)."""
        return await self._call(_core.cancel_reprocess(agent_id))

    async def wait_for_reprocess(
        self, agent_id: str, reprocess_id: str | None = None, *, timeout: float = 3600, poll_interval: float = 1.0
    ) -> Reprocess:
        """Poll until the re-process is ``done`` or ``cancelled``."""
        pacer = _core.Pacer(f"re-process of {agent_id}", timeout, poll_interval)
        while True:
            progress = await self.reprocess_status(agent_id, reprocess_id)
            if progress.finished:
                return progress
            await asyncio.sleep(pacer.delay(_core.describe_reprocess(progress)))

    # ---- Retrieval -------------------------------------------------------------------------

    async def retrieve(
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
        """Ranked facts and a prompt-ready context for ``query``."""
        return await self._call(
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

    async def list_facts(
        self, agent_id: str, *, limit: int = 50, offset: int = 0, entity_keys: Sequence[str] | str | None = None
    ) -> FactPage:
        """Active facts, newest first, optionally of some entities only."""
        return await self._call(_core.list_facts(agent_id, limit=limit, offset=offset, entity_keys=entity_keys))

    async def get_fact(self, agent_id: str, fact_id: str) -> FactDetail:
        """One fact, superseded ones included."""
        return await self._call(_core.get_fact(agent_id, fact_id))

    async def directives(
        self, agent_id: str, *, persona: str | None = None, include_inactive: bool = False
    ) -> DirectiveList:
        """The agent's directive block (persona + learned directives) and its directives, strongest first."""
        return await self._call(_core.directives(agent_id, persona=persona, include_inactive=include_inactive))

    async def delete_directive(self, agent_id: str, directive_id: str) -> None:
        """Forget one directive for good; raises NotFoundError when the agent has no such directive."""
        await self._call(_core.delete_directive(agent_id, directive_id))

    async def delete_fact(self, agent_id: str, fact_id: str) -> None:
        """Delete one fact for good (its entity links go with it)."""
        await self._call(_core.delete_fact(agent_id, fact_id))

    async def delete_all_facts(self, agent_id: str) -> int:
        """Delete every fact of the agent; returns how many there were."""
        return await self._call(_core.delete_all_facts(agent_id))

    async def erase_agent(self, agent_id: str) -> AgentErased:
        """Erase the agent: its events and everything derived from them, for good; rows deleted per table."""
        return await self._call(_core.erase_agent(agent_id))

    async def list_entities(self, agent_id: str, *, limit: int = 50, offset: int = 0) -> EntityPage:
        """The agent's entities."""
        return await self._call(_core.list_entities(agent_id, limit=limit, offset=offset))

    async def get_entity(self, agent_id: str, key: str) -> EntityProfile:
        """One entity by canonical key or alias, with aliases and relationships; NotFoundError when unknown."""
        return await self._call(_core.get_entity(agent_id, key))

    # ---- LLM usage -------------------------------------------------------------------------

    async def usage(
        self, agent_id: str, since: date | str | None = None, until: date | str | None = None
    ) -> AgentUsage:
        """LLM calls and tokens spent on the agent, totals, per UTC day and per skill (last 30 days by default).

        ``since`` and ``until`` are days (``date`` or ``YYYY-MM-DD``), both included; a range over
        366 days, or ``since`` after ``until``, raises :class:`~arandu_client.errors.InvalidRequestError`.
        """
        return await self._call(_core.usage(agent_id, since=since, until=until))

    # ---- Maintenance jobs ------------------------------------------------------------------

    async def get_agent_config(self, agent_id: str) -> AgentConfig:
        """The agent's MemoryConfig overrides (``{}`` when none) and the config its work runs on."""
        return await self._call(_core.get_agent_config(agent_id))

    async def set_agent_config(self, agent_id: str, overrides: Mapping[str, Any]) -> AgentConfig:
        """Replace the agent's MemoryConfig overrides (needs ``admin``); a bad field is a ValidationError naming it."""
        return await self._call(_core.set_agent_config(agent_id, overrides))

    async def reset_agent_config(self, agent_id: str) -> AgentConfig:
        """Remove the agent's overrides: it runs on the service config again (needs ``admin``)."""
        return await self._call(_core.reset_agent_config(agent_id))

    async def run_job(self, agent_id: str, job: str) -> JobRunAccepted:
        """Queue a maintenance job for the agent now; ConflictError when it is already queued or running."""
        return await self._call(_core.run_job(agent_id, job))

    async def list_jobs(self, agent_id: str, *, limit: int = 50, job: str | None = None) -> JobRunPage:
        """The agent's most recent maintenance runs (Beat's and the API's), newest first; ``job`` filters."""
        return await self._call(_core.list_jobs(agent_id, limit=limit, job=job))

    async def wait_for_job(
        self, agent_id: str, job_run_id: str, *, timeout: float = 300, poll_interval: float = 1.0, limit: int = 100
    ) -> JobRun:
        """Poll until the run is ``done``, ``failed`` or ``skipped`` (a failure is returned, not raised)."""
        pacer = _core.Pacer(f"job run {job_run_id}", timeout, poll_interval)
        while True:
            run = _core.find_run(await self.list_jobs(agent_id, limit=limit), job_run_id)
            if run is not None and run.finished:
                return run
            await asyncio.sleep(pacer.delay(run.status if run is not None else "not listed"))

    # ---- API keys (operator keys only) -------------------------------------------------------

    async def create_key(
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
        return await self._call(
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

    async def list_keys(self, *, include_revoked: bool = False) -> list[ApiKeyInfo]:
        """Tenant keys, newest first (never the keys themselves)."""
        return await self._call(_core.list_keys(include_revoked))

    async def revoke_key(self, name: str) -> ApiKeyInfo:
        """Revoke a tenant key (refused everywhere within seconds); NotFoundError when there is none."""
        return await self._call(_core.revoke_key(name))

    # ---- Operations ------------------------------------------------------------------------

    async def health(self) -> bool:
        """True while the server answers ``/healthz``."""
        return await self._call(_core.health())

    async def ready(self) -> Readiness:
        """Whether the server's database and broker answer."""
        return await self._call(_core.ready())


__all__ = ["AsyncAranduClient"]
