"""``/mcp``: the memory tools of :mod:`arandu_client.mcp_server` over MCP's streamable HTTP transport.

Every request needs the API's bearer key and an ``X-Arandu-Agent-Id`` header naming the agent
whose memory the tools use (one the key covers: 403 otherwise); the agent never comes from a
tool argument. Each tool needs the permission of the endpoint it calls (``remember`` write,
``forget`` write, the others read). The tools call the
``/v1`` endpoints of this same application in-process (an ASGI transport, no socket), with
the caller's own key, so validation, scoping and limits are exactly the REST API's.

Stateless mode with JSON answers: any API process can answer any request, so ``/mcp`` scales
with the API's workers and replicas like the rest of it, and nothing is held between calls.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import httpx
from anyio.abc import TaskGroup, TaskStatus
from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from api.auth import key_scope, require_api_key
from api.errors import ApiError, error_response
from api.schemas import AGENT_ID_PATTERN

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from arandu_client.mcp_server import MemoryScope

MCP_PATH = "/mcp"
AGENT_HEADER = "X-Arandu-Agent-Id"

_AGENT_ID = re.compile(AGENT_ID_PATTERN)
_AGENT_PROBLEM = f"send '{AGENT_HEADER}: <agent id>', 1 to 128 characters: letters, digits and . _ : - @"
# The in-process client's base URL: requests never leave the process, the host is a label.
_IN_PROCESS_URL = "http://arandu.in-process"
# An MCP call does at most a retrieve or a short wait for one message.
_IN_PROCESS_TIMEOUT_S = 60.0


def agent_of(headers: object) -> str | None:
    """The valid agent id of ``X-Arandu-Agent-Id`` in ``headers`` (a mapping), else None."""
    value = headers.get(AGENT_HEADER.lower()) if hasattr(headers, "get") else None
    if isinstance(value, str) and _AGENT_ID.fullmatch(value.strip()):
        return value.strip()
    return None


class McpEndpoint:
    """The ASGI app routed at ``/mcp``: the API key and agent header checked, then MCP.

    The MCP SDK is imported and its session manager started on the first request, not at start:
    it costs ~30 MiB and ~0.6 s of start-up per API process, which deployments that never use
    ``/mcp`` should not pay.
    """

    def __init__(self, app: FastAPI) -> None:
        self._transport = httpx.ASGITransport(app=app)
        self._task_group: TaskGroup | None = None
        self._stopping = anyio.Event()
        self._starting = anyio.Lock()
        self._sessions: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Own the session manager's task for the API's lifetime (its lifespan enters this)."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            try:
                yield
            finally:
                self._stopping.set()
                self._task_group = None

    async def _session_manager(self) -> StreamableHTTPSessionManager:
        if self._sessions is None:
            async with self._starting:
                if self._sessions is None:
                    if self._task_group is None:
                        raise RuntimeError("the MCP endpoint serves only while the API's lifespan runs")
                    self._sessions = await self._task_group.start(self._serve)
        return self._sessions

    async def _serve(self, *, task_status: TaskStatus[StreamableHTTPSessionManager]) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from arandu_client.mcp_server import build_memory_server

        server = build_memory_server(self._scope_of)
        # MCPServer.streamable_http_app would build a whole Starlette app with its own lifespan;
        # the manager alone, driven from here, fits inside this API. It drives the low-level server.
        sessions = StreamableHTTPSessionManager(
            app=server._lowlevel_server,
            json_response=True,
            stateless=True,
        )
        async with sessions.run():
            task_status.started(sessions)
            await self._stopping.wait()

    @asynccontextmanager
    async def _scope_of(self, ctx: Context) -> AsyncIterator[MemoryScope]:
        from mcp.server.mcpserver.exceptions import ToolError

        from arandu_client.aio import AsyncAranduClient
        from arandu_client.mcp_server import MemoryScope

        headers = ctx.headers or {}
        agent_id = agent_of(headers)
        if agent_id is None:  # checked before the request reached MCP; kept for safety
            raise ToolError(f"the request has no valid {AGENT_HEADER} header")
        _, _, token = str(headers.get("authorization", "")).partition(" ")
        client = AsyncAranduClient(
            _IN_PROCESS_URL, token.strip() or None, timeout=_IN_PROCESS_TIMEOUT_S, transport=self._transport
        )
        async with client:
            yield MemoryScope(client, agent_id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        try:
            await require_api_key(request)
        except ApiError as refused:
            response = error_response(refused.status_code, refused.error, refused.detail, headers=refused.headers)
            await response(scope, receive, send)
            return
        agent_id = agent_of(request.headers)
        if agent_id is None:
            response = error_response(
                400, f"missing or invalid {AGENT_HEADER} header", [("header.x-arandu-agent-id", _AGENT_PROBLEM)]
            )
            await response(scope, receive, send)
            return
        key = key_scope(request)
        if not key.covers(agent_id):
            message = f"API key {key.name!r} may not act for agent {agent_id!r} (it covers {key.describe_agents()})"
            response = error_response(403, message, [("header.x-arandu-agent-id", "not covered by this API key")])
            await response(scope, receive, send)
            return
        sessions = await self._session_manager()
        await sessions.handle_request(scope, receive, send)


__all__ = ["AGENT_HEADER", "MCP_PATH", "McpEndpoint", "agent_of"]
