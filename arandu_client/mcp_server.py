"""The agent's memory as a Model Context Protocol server: tools and a resource over the HTTP API.

One server definition serves both transports:

- ``arandu mcp --agent-id ID`` runs it over stdio for desktop agents and IDEs, talking to the
  service the CLI targets (``ARANDU_URL``, ``ARANDU_API_KEY``);
- the API serves it over streamable HTTP at ``/mcp``, where each request's API key and
  ``X-Arandu-Agent-Id`` header choose the memory.

The agent whose memory is used always comes from how the server was configured (a
:data:`ScopeResolver`), never from a tool argument: a model cannot talk its way into another
agent's memory. Every tool goes through the public API, so the API's validation and scoping
apply unchanged, and its field errors come back as tool errors that name the argument.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from arandu_client.aio import AsyncAranduClient
from arandu_client.errors import ApiError, AranduError, NotFoundError, TransportError, WaitTimeoutError
from arandu_client.models import EventStatus, FactDetail, ScoredFact

try:
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.types import ToolAnnotations
except ImportError as missing:  # pragma: no cover - depends on the installation
    raise ImportError("the MCP server needs the `mcp` package: pip install 'mcp>=2.3'") from missing

SERVER_NAME = "arandu-memory"

SERVER_INSTRUCTIONS = (
    "Long-term memory of one agent. Call `remember` with every message worth keeping (who said it, "
    "and when it happened if it is not now); call `recall` before answering anything that may depend on "
    "what was said before, and paste its `context` into your reasoning. Facts have ids: `forget` one "
    "when the user asks you to."
)

# How long `remember(wait=true)` waits for the write pipeline: less than the usual client-side
# tool timeout (60 s), so the model gets an answer ("still processing") rather than a timeout.
REMEMBER_WAIT_S = 30.0
MAX_LISTED = 100
MAX_RECALLED_FACTS = 50

# Which API field each tool argument travels in: an API field error names the argument instead.
_ARGUMENT_OF_FIELD = {
    "body.message": "message",
    "body.speaker_name": "speaker_name",
    "body.occurred_at": "occurred_at",
    "body.session_id": "session_id",
    "body.query": "query",
    "body.entity_keys": "entity_keys",
    "body.as_of": "as_of",
    "body.as_of.start": "as_of",
    "body.as_of.end": "as_of",
    "query.entity_keys": "entity_key",
    "query.limit": "limit",
    "query.offset": "offset",
    "path.fact_id": "fact_id",
    "path.event_id": "event_id",
    "path.entity_key": "key",
}


@dataclass(frozen=True)
class MemoryScope:
    """Whose memory a call works on, and the client that reaches it."""

    client: AsyncAranduClient
    agent_id: str


# Gives the scope of one tool or resource call; the request context carries HTTP headers when
# the transport has them. Raise ToolError to refuse the call.
ScopeResolver = Callable[[Context], AbstractAsyncContextManager[MemoryScope]]


def fixed_scope(client: AsyncAranduClient, agent_id: str) -> ScopeResolver:
    """A resolver that always answers with one client and agent (the stdio server's)."""

    @asynccontextmanager
    async def resolve(_: Context) -> AsyncIterator[MemoryScope]:
        yield MemoryScope(client, agent_id)

    return resolve


# ---- What the tools answer -------------------------------------------------------------------------


class FactChangeOut(BaseModel):
    """A fact a processed message added, updated or removed."""

    fact_id: str | None = None
    entity_key: str
    fact_text: str
    supersedes_fact_id: str | None = None


class Remembered(BaseModel):
    """A stored message; with ``wait``, what processing it changed in memory."""

    event_id: str
    status: str = Field(description="received, processing, done or failed")
    duplicate: bool = False
    added: list[FactChangeOut] = Field(default_factory=list)
    updated: list[FactChangeOut] = Field(default_factory=list)
    deleted: list[FactChangeOut] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list, description="canonical keys of the entities it mentions")
    error: str | None = None
    note: str | None = None


class RecalledFact(BaseModel):
    """A fact found for the query, best first."""

    fact_id: str
    fact_text: str
    entity_key: str
    entity_name: str | None = None
    score: float
    speaker: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class Recalled(BaseModel):
    """What memory holds about the query: a context ready to paste into a prompt, and the top facts."""

    context: str
    facts: list[RecalledFact]
    warnings: list[str] = Field(default_factory=list)


class Forgotten(BaseModel):
    """How many facts were deleted."""

    deleted: int


class ListedFact(BaseModel):
    """An active fact of the agent's memory."""

    fact_id: str
    fact_text: str
    entity_key: str
    entity_name: str | None = None
    speaker: str | None = None
    valid_from: datetime
    source_event_id: str | None = None


class FactList(BaseModel):
    """A page of active facts, newest first."""

    facts: list[ListedFact]
    total: int


class ListedEntity(BaseModel):
    """An entity of the agent's memory (a person, place, organisation, thing...)."""

    key: str = Field(description="canonical key, e.g. person:ana; use it in entity_keys and memory://entities/{key}")
    name: str | None = None
    type: str
    fact_count: int
    summary: str | None = None


class EntityList(BaseModel):
    """A page of entities, most recently seen first."""

    entities: list[ListedEntity]
    total: int


class EventProgress(BaseModel):
    """Where the processing of a remembered message stands."""

    event_id: str
    status: str = Field(description="received, processing, retrying, done or failed")
    stage: str | None = None
    attempts: int = 0
    error: str | None = None
    added: list[FactChangeOut] = Field(default_factory=list)
    updated: list[FactChangeOut] = Field(default_factory=list)
    deleted: list[FactChangeOut] = Field(default_factory=list)


class MemoryConfigShown(BaseModel):
    """The agent's overrides of the service's memory configuration and the configuration in use."""

    overrides: dict[str, Any] = Field(description="field -> value this agent overrides ({} when none)")
    updated_at: datetime | None = Field(None, description="when the overrides were last changed")
    config_effective: dict[str, Any] = Field(description="the service config with the overrides: what is in use")


# ---- Errors ----------------------------------------------------------------------------------------


def _argument(field: str) -> str:
    return _ARGUMENT_OF_FIELD.get(field, field.split(".", 1)[-1] if "." in field else field)


def tool_error(error: AranduError) -> ToolError:
    """The client's error as a tool error a model can act on: the arguments named, no traceback."""
    if isinstance(error, ApiError):
        if error.details:
            problems = "; ".join(f"{_argument(item.field)}: {item.message}" for item in error.details)
            return ToolError(f"invalid arguments: {problems}")
        if error.status == 401:
            return ToolError("the memory service refused the API key this server was configured with")
        if error.status == 429 or error.status >= 500:
            return ToolError(f"the memory service is unavailable ({error.message}); try again shortly")
        return ToolError(error.message)
    if isinstance(error, TransportError):
        return ToolError(f"the memory service cannot be reached: {error}")
    return ToolError(str(error))


def _changes(result: dict[str, Any] | None, key: str) -> list[FactChangeOut]:
    return [FactChangeOut.model_validate(item) for item in (result or {}).get(key) or []]


def _progress(status: EventStatus) -> EventProgress:
    return EventProgress(
        event_id=status.event_id,
        status=status.status,
        stage=status.stage,
        attempts=status.attempts,
        error=status.error,
        added=_changes(status.result, "facts_added"),
        updated=_changes(status.result, "facts_updated"),
        deleted=_changes(status.result, "facts_deleted"),
    )


def _recalled(fact: ScoredFact) -> RecalledFact:
    return RecalledFact(
        fact_id=fact.fact_id,
        fact_text=fact.fact_text,
        entity_key=fact.entity_key,
        entity_name=fact.entity_name,
        score=round(fact.score, 4),
        speaker=fact.speaker,
        valid_from=fact.valid_from,
        valid_to=fact.valid_to,
    )


def _listed(fact: FactDetail) -> ListedFact:
    return ListedFact(
        fact_id=fact.fact_id,
        fact_text=fact.fact_text,
        entity_key=fact.entity_key,
        entity_name=fact.entity_name,
        speaker=fact.speaker,
        valid_from=fact.valid_from,
        source_event_id=fact.source_event_id,
    )


def _as_of(value: str | None) -> str | tuple[str, str] | None:
    """``"2024-05-01"`` or ``"2024-05-01/2024-05-31"`` (an interval, ISO 8601 style)."""
    if value is None or not value.strip():
        return None
    start, slash, end = value.strip().partition("/")
    if slash:
        if not start.strip() or not end.strip():
            raise ToolError("invalid arguments: as_of: an interval is START/END, both ISO 8601 dates")
        return start.strip(), end.strip()
    return start


# ---- The server ------------------------------------------------------------------------------------


def build_memory_server(scope_of: ScopeResolver, *, name: str = SERVER_NAME) -> MCPServer:
    """The MCP server of an agent's memory; ``scope_of`` decides, per call, whose memory and how to reach it."""
    server: MCPServer = MCPServer(name, instructions=SERVER_INSTRUCTIONS)

    @server.tool(annotations=ToolAnnotations(title="Remember a message", destructive_hint=False))
    async def remember(
        ctx: Context,
        *,
        message: Annotated[str, Field(description="What was said, verbatim (one conversation message).")],
        speaker_name: Annotated[str, Field(description="Who said it: a person's name, or the assistant's name.")],
        occurred_at: Annotated[
            str | None,
            Field(description="When it was said, ISO 8601 (2024-05-01T14:30:00Z); omit for now."),
        ] = None,
        session_id: Annotated[str | None, Field(description="The conversation it belongs to, if any.")] = None,
        wait: Annotated[
            bool,
            Field(description=f"Wait (up to {REMEMBER_WAIT_S:.0f} s) until it is processed and report what changed."),
        ] = False,
    ) -> Remembered:
        """Store a conversation message in long-term memory. Facts about people, places, preferences and
        events are extracted from it in the background; a later `recall` finds them. Newer facts
        supersede older ones (a move, a new job), keeping the history."""
        async with scope_of(ctx) as scope:
            options: dict[str, Any] = {}
            if occurred_at is not None:
                options["occurred_at"] = occurred_at
            if session_id is not None:
                options["session_id"] = session_id
            try:
                accepted = await scope.client.send_message(scope.agent_id, message, speaker_name, **options)
                if not wait:
                    return Remembered(event_id=accepted.event_id, status=accepted.status, duplicate=accepted.duplicate)
                status = await scope.client.wait_for_event(accepted.event_id, timeout=REMEMBER_WAIT_S)
            except WaitTimeoutError:
                return Remembered(
                    event_id=accepted.event_id,
                    status="processing",
                    duplicate=accepted.duplicate,
                    note=f"not processed within {REMEMBER_WAIT_S:.0f} s; ask `event_status` later",
                )
            except AranduError as error:
                raise tool_error(error) from error
        result = status.result or {}
        return Remembered(
            event_id=status.event_id,
            status=status.status,
            duplicate=accepted.duplicate,
            added=_changes(result, "facts_added"),
            updated=_changes(result, "facts_updated"),
            deleted=_changes(result, "facts_deleted"),
            entities=_entity_keys(result),
            error=status.error,
        )

    @server.tool(annotations=ToolAnnotations(title="Recall from memory", read_only_hint=True))
    async def recall(
        ctx: Context,
        query: Annotated[str, Field(description="What you want to know, in plain words (a question works best).")],
        entity_keys: Annotated[
            list[str] | None,
            Field(description="Only facts about these entities (canonical keys like person:ana, or names)."),
        ] = None,
        as_of: Annotated[
            str | None,
            Field(
                description="What memory held at that time (ISO 8601 date), or within START/END; omit for now.",
            ),
        ] = None,
        max_facts: Annotated[
            int, Field(ge=1, le=MAX_RECALLED_FACTS, description="How many of the top facts to list.")
        ] = 10,
    ) -> Recalled:
        """Search long-term memory. Answers `context`, a compact text of the relevant facts and past
        messages ready to use when answering, and the top facts with their ids and scores."""
        async with scope_of(ctx) as scope:
            try:
                result = await scope.client.retrieve(
                    scope.agent_id, query, entity_keys=entity_keys or None, as_of=_as_of(as_of)
                )
            except AranduError as error:
                raise tool_error(error) from error
        return Recalled(
            context=result.context,
            facts=[_recalled(fact) for fact in result.facts[:max_facts]],
            warnings=result.warnings,
        )

    @server.tool(annotations=ToolAnnotations(title="Forget facts", destructive_hint=True, idempotent_hint=True))
    async def forget(
        ctx: Context,
        fact_id: Annotated[
            str | None, Field(description="The id of the fact to delete (from recall or list_facts).")
        ] = None,
        all_facts: Annotated[
            bool, Field(description="Delete every fact of this memory instead of one. Needs confirm=true.")
        ] = False,
        confirm: Annotated[
            bool,
            Field(description="Set only after the user explicitly agreed to delete ALL facts; cannot be undone."),
        ] = False,
    ) -> Forgotten:
        """Delete a fact from memory for good (when the user asks you to forget something), or, with
        all_facts and the user's explicit confirmation, every fact. Messages already stored stay."""
        if all_facts == (fact_id is not None):
            raise ToolError("invalid arguments: fact_id: give either fact_id or all_facts=true, not both or neither")
        if all_facts and not confirm:
            raise ToolError(
                "invalid arguments: confirm: deleting every fact cannot be undone; ask the user, "
                "then call again with confirm=true"
            )
        async with scope_of(ctx) as scope:
            try:
                if all_facts:
                    return Forgotten(deleted=await scope.client.delete_all_facts(scope.agent_id))
                assert fact_id is not None
                await scope.client.delete_fact(scope.agent_id, fact_id)
            except NotFoundError as error:
                raise ToolError(f"invalid arguments: fact_id: no fact {fact_id} in this memory") from error
            except AranduError as error:
                raise tool_error(error) from error
        return Forgotten(deleted=1)

    @server.tool(annotations=ToolAnnotations(title="List facts", read_only_hint=True))
    async def list_facts(
        ctx: Context,
        entity_key: Annotated[
            str | None, Field(description="Only this entity's facts (canonical key like person:ana, or a name).")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LISTED, description="Page size.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Facts to skip (for the next page).")] = 0,
    ) -> FactList:
        """List the active facts of memory, newest first (use `recall` to search by meaning)."""
        async with scope_of(ctx) as scope:
            try:
                page = await scope.client.list_facts(
                    scope.agent_id, limit=limit, offset=offset, entity_keys=entity_key or None
                )
            except AranduError as error:
                raise tool_error(error) from error
        return FactList(facts=[_listed(fact) for fact in page.facts], total=page.total)

    @server.tool(annotations=ToolAnnotations(title="List entities", read_only_hint=True))
    async def list_entities(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=MAX_LISTED, description="Page size.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Entities to skip (for the next page).")] = 0,
    ) -> EntityList:
        """List the people, places, organisations and things memory knows, most recently seen first."""
        async with scope_of(ctx) as scope:
            try:
                page = await scope.client.list_entities(scope.agent_id, limit=limit, offset=offset)
            except AranduError as error:
                raise tool_error(error) from error
        entities = [
            ListedEntity(
                key=entity.canonical_key,
                name=entity.display_name,
                type=entity.entity_type,
                fact_count=entity.fact_count,
                summary=entity.summary_text,
            )
            for entity in page.entities
        ]
        return EntityList(entities=entities, total=page.total)

    @server.tool(annotations=ToolAnnotations(title="Processing status", read_only_hint=True))
    async def event_status(
        ctx: Context,
        event_id: Annotated[str, Field(description="The event id `remember` answered.")],
    ) -> EventProgress:
        """Where the processing of a remembered message stands, and what it changed once done."""
        async with scope_of(ctx) as scope:
            try:
                status = await scope.client.event(event_id, agent_id=scope.agent_id)
            except NotFoundError as error:
                raise ToolError(f"invalid arguments: event_id: no event {event_id} in this memory") from error
            except AranduError as error:
                raise tool_error(error) from error
        return _progress(status)

    @server.resource(
        "memory://entities/{key}",
        name="entity",
        title="An entity's profile and facts",
        description="One entity of memory (canonical key like person:ana, or a name): profile, aliases, "
        "relationships and active facts.",
        mime_type="application/json",
    )
    async def entity(key: str, ctx: Context) -> str:
        async with scope_of(ctx) as scope:
            try:
                profile = await scope.client.get_entity(scope.agent_id, key)
                facts = await scope.client.list_facts(
                    scope.agent_id, limit=MAX_LISTED, entity_keys=profile.canonical_key
                )
            except NotFoundError as error:
                raise ResourceError(f"no entity {key!r} in this memory") from error
            except AranduError as error:
                raise ResourceError(str(tool_error(error))) from error
        document = EntityDocument(
            entity=profile.model_dump(mode="json"),
            facts=[_listed(fact) for fact in facts.facts],
            total_facts=facts.total,
        )
        return document.model_dump_json(indent=2)

    # Read-only: changing an agent's config is an operator's act (admin keys, the CLI, the API), not a model's.
    @server.tool(annotations=ToolAnnotations(title="Memory configuration", read_only_hint=True))
    async def get_config(ctx: Context) -> MemoryConfigShown:
        """This memory's configuration: the agent's overrides of the service config and what its processing and
        retrieval run on (read-only)."""
        async with scope_of(ctx) as scope:
            try:
                stored = await scope.client.get_agent_config(scope.agent_id)
            except AranduError as error:
                raise tool_error(error) from error
        return MemoryConfigShown(
            overrides=stored.overrides, updated_at=stored.updated_at, config_effective=stored.config_effective
        )

    return server


class EntityDocument(BaseModel):
    """What ``memory://entities/{key}`` reads: the entity's profile and its active facts (newest first)."""

    entity: dict[str, Any]
    facts: list[ListedFact]
    total_facts: int


def _entity_keys(result: dict[str, Any]) -> list[str]:
    resolved = result.get("entities_resolved") or []
    return [str(item["canonical_key"]) for item in resolved if isinstance(item, dict) and item.get("canonical_key")]


__all__ = [
    "SERVER_NAME",
    "MemoryScope",
    "ScopeResolver",
    "build_memory_server",
    "fixed_scope",
    "tool_error",
]
