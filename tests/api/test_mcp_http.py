"""The memory tools over MCP's streamable HTTP transport at ``/mcp``, with the SDK's own client.

A real API served over HTTP, a real Celery worker, the real ``mcp`` client: what an agent
framework connecting to ``https://memory.example/mcp`` would see.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, TextResourceContents

from memory_core.settings import Settings
from tests.support.api_server import TEST_API_KEY, api_settings, auth_headers, serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker


@pytest.fixture(scope="module")
def mcp_url(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    base = api_settings(migrated_database_url, services.broker_url, tmp_path_factory.mktemp("mcp-home"))
    app = isolated_app(base)
    own: Settings = app.arandu_settings  # type: ignore[attr-defined]
    with running_worker(app, concurrency=2), serve_api(own) as base_url:
        yield f"{base_url}/mcp"


def new_agent() -> str:
    return f"mcp-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def connected(url: str, agent_id: str, *, mode: str = "auto", key: str = TEST_API_KEY) -> AsyncIterator[Client]:
    """An MCP client session on ``url`` acting for ``agent_id`` with ``key``."""
    headers = {**auth_headers(key), "X-Arandu-Agent-Id": agent_id}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def answer(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a successful tool call."""
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    """The message of a failed tool call."""
    assert result.is_error, result.structured_content
    texts = [item.text for item in result.content if isinstance(item, TextContent)]
    assert texts
    return " ".join(texts)


def run(coroutine_fn: Any, *args: Any) -> Any:
    return anyio.run(coroutine_fn, *args)


def test_remember_then_recall_finds_the_fact_with_its_id(mcp_url: str) -> None:
    agent = new_agent()

    async def scenario() -> None:
        async with connected(mcp_url, agent) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"remember", "recall", "forget", "list_facts", "list_entities", "event_status"} <= names

            lisbon = answer(
                await client.call_tool(
                    "remember",
                    {
                        "message": "I live in Lisbon.",
                        "speaker_name": "Ana",
                        "occurred_at": "2024-03-01T09:00:00Z",
                        "wait": True,
                    },
                )
            )
            assert lisbon["status"] == "done"
            assert any("Lisbon" in fact["fact_text"] for fact in lisbon["added"])
            assert "person:ana" in lisbon["entities"]

            moved = answer(
                await client.call_tool(
                    "remember",
                    {"message": "I moved to Porto.", "speaker_name": "Ana", "occurred_at": "2024-06-01T09:00:00Z"},
                )
            )
            assert moved["status"] == "received"
            progress: dict[str, Any] = {}
            with anyio.fail_after(90):
                while progress.get("status") not in ("done", "failed"):
                    await anyio.sleep(0.2)
                    progress = answer(await client.call_tool("event_status", {"event_id": moved["event_id"]}))
            assert progress["status"] == "done"
            # The move supersedes the earlier city: reported as an update that points at it.
            changed = progress["added"] + progress["updated"]
            assert any("Porto" in fact["fact_text"] for fact in changed), progress

            recalled = answer(await client.call_tool("recall", {"query": "Which city does Ana live in now?"}))
            assert "Porto" in recalled["context"]
            top = recalled["facts"][0]
            assert "Porto" in top["fact_text"]
            assert top["score"] > 0
            uuid.UUID(top["fact_id"])

            # Time travel: what memory held in April.
            then = answer(await client.call_tool("recall", {"query": "Where does Ana live?", "as_of": "2024-04-01"}))
            assert any("Lisbon" in fact["fact_text"] for fact in then["facts"])
            assert not any("Porto" in fact["fact_text"] for fact in then["facts"])

            listed = answer(await client.call_tool("list_facts", {"entity_key": "person:ana"}))
            assert listed["total"] >= 1
            assert any("Porto" in fact["fact_text"] for fact in listed["facts"])
            entities = answer(await client.call_tool("list_entities", {}))
            assert "person:ana" in {entity["key"] for entity in entities["entities"]}

            resource = await client.read_resource("memory://entities/person:ana")
            contents = resource.contents[0]
            assert isinstance(contents, TextResourceContents)
            document = json.loads(contents.text)
            assert document["entity"]["canonical_key"] == "person:ana"
            assert any("Porto" in fact["fact_text"] for fact in document["facts"])

            forgotten = answer(await client.call_tool("forget", {"fact_id": top["fact_id"]}))
            assert forgotten == {"deleted": 1}
            after = answer(await client.call_tool("list_facts", {"entity_key": "person:ana"}))
            assert top["fact_id"] not in {fact["fact_id"] for fact in after["facts"]}

    run(scenario)


def test_the_legacy_handshake_of_older_clients_works_too(mcp_url: str) -> None:
    agent = new_agent()

    async def scenario() -> None:
        async with connected(mcp_url, agent, mode="legacy") as client:
            stored = answer(
                await client.call_tool(
                    "remember", {"message": "I have a cat named Luna.", "speaker_name": "Bo", "wait": True}
                )
            )
            assert stored["status"] == "done"
            recalled = answer(await client.call_tool("recall", {"query": "What is the name of Bo's cat?"}))
            assert "Luna" in recalled["context"]

    run(scenario)


def test_another_agents_server_never_sees_the_memory(mcp_url: str) -> None:
    owner, stranger = new_agent(), new_agent()

    async def scenario() -> None:
        async with connected(mcp_url, owner) as client:
            stored = answer(
                await client.call_tool(
                    "remember", {"message": "My locker code is 4512.", "speaker_name": "Caio", "wait": True}
                )
            )
            assert stored["status"] == "done"
            fact_id = stored["added"][0]["fact_id"]
        async with connected(mcp_url, stranger) as client:
            recalled = answer(await client.call_tool("recall", {"query": "What is Caio's locker code?"}))
            assert "4512" not in recalled["context"]
            assert recalled["facts"] == []
            assert answer(await client.call_tool("list_facts", {}))["total"] == 0
            assert answer(await client.call_tool("list_entities", {}))["total"] == 0
            # Ids of the owner's memory behave like ids that do not exist.
            assert "fact_id" in error_text(await client.call_tool("forget", {"fact_id": fact_id}))
            assert "event_id" in error_text(await client.call_tool("event_status", {"event_id": stored["event_id"]}))
            with pytest.raises(Exception, match="person:caio"):
                await client.read_resource("memory://entities/person:caio")
        async with connected(mcp_url, owner) as client:
            listed = answer(await client.call_tool("list_facts", {}))
            assert fact_id in {fact["fact_id"] for fact in listed["facts"]}

    run(scenario)


def test_get_config_shows_this_agents_overrides_only(mcp_url: str) -> None:
    configured, other = new_agent(), new_agent()
    base = mcp_url.removesuffix("/mcp")
    with httpx.Client(base_url=base, headers=auth_headers(), timeout=30) as api:
        put = api.put(f"/v1/agents/{configured}/config", json={"overrides": {"topk_facts": 4}})
        assert put.status_code == 200, put.text

    async def read(agent: str) -> dict[str, Any]:
        async with connected(mcp_url, agent) as client:
            return answer(await client.call_tool("get_config", {}))

    mine = run(read, configured)
    assert mine["overrides"] == {"topk_facts": 4}
    assert mine["config_effective"]["topk_facts"] == 4
    assert mine["updated_at"] is not None
    theirs = run(read, other)
    assert theirs["overrides"] == {}
    assert theirs["updated_at"] is None
    assert theirs["config_effective"]["topk_facts"] != 4


def test_bad_arguments_are_tool_errors_that_name_the_argument(mcp_url: str) -> None:
    agent = new_agent()

    async def scenario() -> None:
        async with connected(mcp_url, agent) as client:
            missing = error_text(await client.call_tool("remember", {"message": "hello"}))
            assert "speaker_name" in missing
            bad_date = error_text(
                await client.call_tool(
                    "remember", {"message": "hello", "speaker_name": "Ana", "occurred_at": "next tuesday-ish"}
                )
            )
            assert "occurred_at" in bad_date
            assert "occurred_at" in error_text(
                await client.call_tool("remember", {"message": "hello", "speaker_name": "", "occurred_at": "x"})
            )
            assert "speaker_name" in error_text(
                await client.call_tool("remember", {"message": "hi", "speaker_name": ""})
            )
            assert "query" in error_text(await client.call_tool("recall", {"query": ""}))
            assert "max_facts" in error_text(await client.call_tool("recall", {"query": "x", "max_facts": 0}))
            assert "as_of" in error_text(await client.call_tool("recall", {"query": "x", "as_of": "yesterday"}))
            assert "fact_id" in error_text(await client.call_tool("forget", {"fact_id": "not-a-uuid"}))
            assert "fact_id" in error_text(await client.call_tool("forget", {}))
            assert "confirm" in error_text(await client.call_tool("forget", {"all_facts": True}))
            assert "limit" in error_text(await client.call_tool("list_facts", {"limit": 1000}))
            # The server is still serving after all of that.
            assert answer(await client.call_tool("list_facts", {}))["total"] == 0

    run(scenario)


def test_forget_everything_needs_confirmation_and_deletes_only_this_agents_facts(mcp_url: str) -> None:
    agent, other = new_agent(), new_agent()

    async def scenario() -> None:
        async with connected(mcp_url, other) as client:
            answer(
                await client.call_tool(
                    "remember", {"message": "I play the cello.", "speaker_name": "Dani", "wait": True}
                )
            )
        async with connected(mcp_url, agent) as client:
            for message in ("I work at Acme Corp.", "My sister is called Eva."):
                answer(await client.call_tool("remember", {"message": message, "speaker_name": "Ana", "wait": True}))
            before = answer(await client.call_tool("list_facts", {}))["total"]
            assert before >= 2
            assert "confirm" in error_text(await client.call_tool("forget", {"all_facts": True, "confirm": False}))
            assert answer(await client.call_tool("list_facts", {}))["total"] == before
            deleted = answer(await client.call_tool("forget", {"all_facts": True, "confirm": True}))
            assert deleted["deleted"] >= before
            assert answer(await client.call_tool("list_facts", {}))["total"] == 0
        async with connected(mcp_url, other) as client:
            assert answer(await client.call_tool("list_facts", {}))["total"] >= 1

    run(scenario)


def test_mcp_needs_the_api_key_and_an_agent_header(mcp_url: str) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    agent_header = {"X-Arandu-Agent-Id": new_agent()}
    no_key = httpx.post(mcp_url, json=initialize, headers={**accept, **agent_header})
    assert no_key.status_code == 401
    assert "API key" in no_key.json()["error"]
    wrong_key = httpx.post(mcp_url, json=initialize, headers={**accept, **agent_header, **auth_headers("nope")})
    assert wrong_key.status_code == 401
    no_agent = httpx.post(mcp_url, json=initialize, headers={**accept, **auth_headers()})
    assert no_agent.status_code == 400
    assert no_agent.json()["detail"][0]["field"] == "header.x-arandu-agent-id"
    bad_agent = httpx.post(
        mcp_url, json=initialize, headers={**accept, **auth_headers(), "X-Arandu-Agent-Id": "no spaces allowed"}
    )
    assert bad_agent.status_code == 400
    served = httpx.post(mcp_url, json=initialize, headers={**accept, **auth_headers(), **agent_header})
    assert served.status_code == 200
    assert served.json()["result"]["serverInfo"]["name"] == "arandu-memory"

    async def wrong_key_client() -> None:
        async with connected(mcp_url, new_agent(), key="nope") as client:
            await client.list_tools()

    with pytest.raises(BaseException) as refused:  # noqa: PT011 - the SDK wraps it in exception groups
        run(wrong_key_client)
    # The SDK client turns the 401 into a protocol error: the handshake fails, no tool is listed.
    assert any(isinstance(error, MCPError) for error in leaves(refused.value))


def leaves(error: BaseException) -> list[BaseException]:
    """An exception, or everything grouped in it."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]
