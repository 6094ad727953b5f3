"""``arandu mcp --agent-id ID``: the agent's memory as an MCP server over stdio.

For desktop agents and IDEs that launch their tools as subprocesses (Claude Desktop, Cursor,
...). It talks to the service the CLI targets (``--url`` / ``ARANDU_URL``, ``--api-key`` /
``ARANDU_API_KEY``). Standard output carries the protocol only; diagnostics go to standard error.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import anyio
import typer

from arandu_cli.target import Target

logger = logging.getLogger("arandu.mcp")

# The ends of a stdio session: the client closed our stdin or stopped reading our stdout.
_PIPE_CLOSED = (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError, anyio.ClosedResourceError)


async def serve_stdio(url: str, api_key: str | None, agent_id: str, timeout_s: float) -> None:
    """Serve the memory tools of ``agent_id`` on stdin/stdout until the client goes away."""
    # Imported here: the MCP SDK would add ~0.6 s to every other command of the CLI.
    from arandu_client.aio import AsyncAranduClient
    from arandu_client.mcp_server import build_memory_server, fixed_scope

    async with AsyncAranduClient(url, api_key, timeout=timeout_s) as client:
        await build_memory_server(fixed_scope(client, agent_id)).run_stdio_async()


def _pipe_closed(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_pipe_closed(inner) for inner in error.exceptions)
    return isinstance(error, _PIPE_CLOSED)


def register(app: typer.Typer) -> None:
    """Add ``arandu mcp`` to ``app``."""

    @app.command("mcp")
    def mcp(
        ctx: typer.Context,
        agent_id: Annotated[
            str,
            typer.Option(
                "--agent-id",
                "--agent",
                "-a",
                envvar="ARANDU_AGENT_ID",
                help="The agent whose memory the tools use (fixed for the server's life; no tool can change it).",
            ),
        ],
    ) -> None:
        """Serve the agent's memory to an MCP client over stdio (tools: remember, recall, forget, ...)."""
        if not agent_id.strip():
            raise typer.BadParameter("must not be empty", param_hint="--agent-id")
        target: Target = ctx.obj
        url, key = target.resolved()
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="arandu mcp: %(message)s")
        print(f"arandu mcp: memory of agent {agent_id!r} at {url}, over stdio", file=sys.stderr)
        try:
            anyio.run(serve_stdio, url, key, agent_id.strip(), target.timeout_s)
        except KeyboardInterrupt:
            pass
        except BaseException as error:
            if not _pipe_closed(error):
                raise
            # The client went away mid-answer: nothing is left to serve, and nothing to report.
            logger.debug("client closed the pipe: %r", error)
