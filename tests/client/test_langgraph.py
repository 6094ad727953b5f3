"""The LangGraph store and the LangChain retriever against a running API with a real Celery worker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.documents import Document
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, Item, SearchItem

from arandu_client import AranduClient, AsyncAranduClient
from arandu_client.langchain import AranduRetriever
from arandu_client.langgraph import AranduStore
from memory_core.settings import Settings
from tests.support.api_server import TEST_API_KEY, api_settings, serve_api
from tests.support.services import TestServices
from tests.support.workers import isolated_app, running_worker

ROOT = Path(__file__).resolve().parents[2]
START_AT = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Stack:
    """A served API whose events a real worker processes."""

    base_url: str
    settings: Settings


@pytest.fixture(scope="module")
def stack(
    migrated_database_url: str, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    settings = api_settings(
        migrated_database_url,
        services.broker_url,
        tmp_path_factory.mktemp("langgraph-home"),
        pipeline_retry_base_s=0.2,
        pipeline_retry_max_s=1.0,
    )
    app = isolated_app(settings)
    own: Settings = app.arandu_settings
    with running_worker(app, concurrency=4), serve_api(own) as base_url:
        yield Stack(base_url, own)


@pytest.fixture
def store(stack: Stack) -> Iterator[AranduStore]:
    with AranduStore(stack.base_url, TEST_API_KEY, wait_for_processing=True, processing_timeout=90) as opened:
        yield opened


@pytest.fixture
def agent() -> str:
    return f"lg-{uuid.uuid4().hex[:10]}"


def _texts(items: list[SearchItem]) -> list[str]:
    return [item.value["fact_text"] for item in items]


# ---- The store ---------------------------------------------------------------------------------------------


def test_put_search_get_and_delete_facts(store: AranduStore, stack: Stack, agent: str) -> None:
    namespace = (agent,)
    store.put(namespace, "m-1", {"content": "I live in Lisbon.", "speaker": "Ana", "occurred_at": START_AT})
    store.put(
        namespace,
        "m-2",
        {"content": "I have a cat named Luna.", "speaker": "Ana", "occurred_at": (START_AT + timedelta(days=1))},
    )

    found = store.search(namespace, query="Where does Ana live?")
    assert "Ana lives in Lisbon." in _texts(found)
    lisbon = next(item for item in found if item.value["fact_text"] == "Ana lives in Lisbon.")
    assert isinstance(lisbon, SearchItem)
    assert isinstance(lisbon.score, float)
    assert lisbon.score > 0
    assert lisbon.namespace == namespace
    assert lisbon.value["message_id"] == "m-1"  # the key it was put under
    assert lisbon.value["speaker"] == "Ana"
    assert lisbon.value["entity_key"] == "person:ana"
    assert lisbon.value["valid_from"] == START_AT.isoformat()
    assert lisbon.value["valid_to"] is None
    assert uuid.UUID(lisbon.key)

    item = store.get(namespace, lisbon.key)
    assert isinstance(item, Item)
    assert item.key == lisbon.key
    assert item.value["fact_text"] == "Ana lives in Lisbon."
    assert item.value["is_active"] is True
    assert item.created_at.tzinfo is not None
    # Keys that are not this agent's facts read as absent: a message key, an unknown id.
    assert store.get(namespace, "m-1") is None
    assert store.get(namespace, str(uuid.uuid4())) is None

    # Putting a key again stores nothing new, whatever the value.
    store.put(namespace, "m-1", {"content": "I live in Lisbon.", "speaker": "Ana", "occurred_at": START_AT})
    store.put(namespace, "m-2", {"content": "I live in Berlin.", "speaker": "Ana"})
    listed = store.search(namespace)
    assert sorted(_texts(listed)) == ["Ana has a cat named Luna.", "Ana lives in Lisbon."]
    assert all(entry.score is None for entry in listed)
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        assert client.list_facts(agent).total == 2

    # limit / offset page through the ranking; filter compares value fields.
    both = store.search(namespace, query="Ana", limit=2)
    assert len(both) == 2
    assert [entry.key for entry in store.search(namespace, query="Ana", limit=1)] == [both[0].key]
    assert [entry.key for entry in store.search(namespace, query="Ana", limit=1, offset=1)] == [both[1].key]
    assert [entry.key for entry in store.search(namespace, limit=1, offset=1)] == [listed[1].key]
    cat = store.search(namespace, query="Ana", filter={"fact_text": "Ana has a cat named Luna."})
    assert _texts(cat) == ["Ana has a cat named Luna."]
    assert store.search(namespace, query="Ana", filter={"speaker": {"$ne": "Ana"}}) == []
    assert len(store.search(namespace, query="Ana", filter={"entity_key": "person:ana"})) == 2

    store.delete(namespace, lisbon.key)
    assert store.get(namespace, lisbon.key) is None
    assert "Ana lives in Lisbon." not in _texts(store.search(namespace, query="Where does Ana live?"))
    assert _texts(store.search(namespace)) == ["Ana has a cat named Luna."]
    store.delete(namespace, lisbon.key)  # deleting what is gone is a no-op
    with pytest.raises(ValueError, match="deletes facts by fact id"):
        store.delete(namespace, "m-1")


def test_an_agent_never_sees_another_agents_facts(store: AranduStore, agent: str) -> None:
    other = f"{agent}-other"
    store.put((agent,), "only-mine", {"content": "I work at Acme Corp.", "speaker": "Ana"})
    mine = store.search((agent,), query="Where does Ana work?")
    assert "Ana works at Acme Corp." in _texts(mine)
    fact_id = mine[0].key

    assert store.search((other,), query="Where does Ana work?") == []
    assert store.search((other,)) == []
    assert store.get((other,), fact_id) is None
    store.delete((other,), fact_id)  # another agent's fact id is unknown there: nothing happens
    assert store.get((agent,), fact_id) is not None


def test_a_prefix_shapes_the_namespaces(stack: Stack, agent: str) -> None:
    with AranduStore(stack.base_url, TEST_API_KEY, prefix=("memories",), wait_for_processing=True) as store:
        assert store.namespace(agent) == ("memories", agent)
        store.put(("memories", agent), "p-1", {"content": "I love salsa.", "speaker": "Eva"})
        assert store.search(("memories", agent), query="What does Eva love?") != []
        with pytest.raises(ValueError, match=r"\('memories', '<agent_id>'\)"):
            store.search((agent,), query="salsa")
        with pytest.raises(ValueError, match="does not name an arandu agent"):
            store.search(("memories",), query="salsa")  # a prefix of several agents: arandu searches one


def test_bad_inputs_are_clear_errors(store: AranduStore, stack: Stack, agent: str) -> None:
    namespace = (agent,)
    with pytest.raises(ValueError, match="needs 'content'"):
        store.put(namespace, "bad-1", {"speaker": "Ana"})
    with pytest.raises(ValueError, match="needs 'speaker'"):
        store.put(namespace, "bad-2", {"content": "I live in Lisbon."})
    with pytest.raises(ValueError, match="'content' and 'speaker'"):
        store.put(namespace, "bad-3", {"data": "I live in Lisbon."})
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['mood'\]"):
        store.put(namespace, "bad-4", {"content": "I live in Lisbon.", "speaker": "Ana", "mood": "happy"})
    with pytest.raises(ValueError, match="'content' must be a non-empty string"):
        store.put(namespace, "bad-5", {"content": "  ", "speaker": "Ana"})
    with pytest.raises(ValueError, match="'occurred_at' must be a datetime"):
        store.put(namespace, "bad-6", {"content": "I live in Lisbon.", "speaker": "Ana", "occurred_at": 17})
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        # Refused before anything was sent.
        assert client.lookup_events(agent, [f"bad-{n}" for n in range(1, 7)]).events == []

    for bad in [(agent, "extra"), ("memories", agent), ()]:
        with pytest.raises(ValueError, match="does not name an arandu agent"):
            store.get(bad, str(uuid.uuid4()))
        with pytest.raises(ValueError, match="does not name an arandu agent"):
            store.search(bad, query="Lisbon")
    with pytest.raises(ValueError, match="does not name an arandu agent"):
        store.put((agent, "extra"), "bad-7", {"content": "I live in Lisbon.", "speaker": "Ana"})
    with pytest.raises(ValueError, match="at most 500 facts"):
        store.search(namespace, query="Lisbon", limit=400, offset=200)
    with pytest.raises(ValueError, match="unsupported filter operator"):
        store.search(namespace, filter={"score": {"$in": [1]}})
    with pytest.raises(NotImplementedError, match="does not list agents"):
        store.list_namespaces()
    with pytest.raises(ValueError, match="not both"):
        AranduStore(stack.base_url, client=AranduClient(stack.base_url, TEST_API_KEY))


# ---- Graphs ------------------------------------------------------------------------------------------------


class Turn(TypedDict, total=False):
    agent_id: str
    message_id: str
    message: str
    question: str
    recalled: list[str]
    first_fact: str | None


def _graph_of(remember: object, recall: object) -> StateGraph[Turn, None, Turn, Turn]:
    graph = StateGraph(Turn)
    graph.add_node("remember", remember)  # type: ignore[call-overload]
    graph.add_node("recall", recall)  # type: ignore[call-overload]
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph


def test_a_graph_remembers_and_recalls_through_the_injected_store(store: AranduStore, agent: str) -> None:
    def remember(state: Turn, *, store: BaseStore) -> Turn:
        store.put((state["agent_id"],), state["message_id"], {"content": state["message"], "speaker": "Ana"})
        return {}

    def recall(state: Turn, runtime: Runtime[None]) -> Turn:
        assert runtime.store is not None
        items = runtime.store.search((state["agent_id"],), query=state["question"], limit=5)
        first = runtime.store.get((state["agent_id"],), items[0].key) if items else None
        return {"recalled": _texts(items), "first_fact": first.value["fact_text"] if first else None}

    app = _graph_of(remember, recall).compile(store=store)
    out = app.invoke(
        {"agent_id": agent, "message_id": "g-1", "message": "I work at Acme Corp.", "question": "Where does Ana work?"}
    )
    assert "Ana works at Acme Corp." in out["recalled"]
    assert out["first_fact"] == out["recalled"][0]
    out = app.invoke(
        {
            "agent_id": agent,
            "message_id": "g-2",
            "message": "I have a cat named Luna.",
            "question": "What is the name of Ana's cat?",
        }
    )
    assert out["recalled"][0] == "Ana has a cat named Luna."
    assert "Ana works at Acme Corp." in _texts(store.search((agent,)))


def test_an_async_graph_does_the_same(stack: Stack, agent: str) -> None:
    async def remember(state: Turn, runtime: Runtime[None]) -> Turn:
        assert runtime.store is not None
        await runtime.store.aput(
            (state["agent_id"],), state["message_id"], {"content": state["message"], "speaker": "Eva"}
        )
        return {}

    async def recall(state: Turn, runtime: Runtime[None]) -> Turn:
        assert runtime.store is not None
        items = await runtime.store.asearch((state["agent_id"],), query=state["question"])
        first = await runtime.store.aget((state["agent_id"],), items[0].key) if items else None
        return {"recalled": _texts(items), "first_fact": first.value["fact_text"] if first else None}

    store = AranduStore(stack.base_url, TEST_API_KEY, wait_for_processing=True, processing_timeout=90)
    app = _graph_of(remember, recall).compile(store=store)

    async def turn(message_id: str, message: str, question: str) -> dict[str, Any]:
        return await app.ainvoke(
            {"agent_id": agent, "message_id": message_id, "message": message, "question": question}
        )

    # Two event loops in a row: the store opens an asyncio client per loop.
    first = asyncio.run(turn("a-1", "My sister Rosa is a nurse.", "What does Rosa do?"))
    assert "Eva's sister Rosa is a nurse." in first["recalled"]
    assert first["first_fact"] == first["recalled"][0]
    second = asyncio.run(turn("a-2", "I love salsa.", "What does Eva love?"))
    assert "Eva loves salsa." in second["recalled"]

    async def forget() -> None:
        rosa = [item for item in await store.asearch((agent,)) if "Rosa" in item.value["fact_text"]]
        assert len(rosa) == 1
        await store.adelete((agent,), rosa[0].key)
        assert await store.aget((agent,), rosa[0].key) is None
        assert "Eva's sister Rosa is a nurse." not in _texts(await store.asearch((agent,), query="Rosa nurse"))
        await store.aclose()

    asyncio.run(forget())
    store.close()


def test_given_clients_are_used_as_they_are(stack: Stack, agent: str) -> None:
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        store = AranduStore(client=client, wait_for_processing=True)
        store.put((agent,), "c-1", {"content": "I live in Lima.", "speaker": "Eva"})
        # Only a blocking client: the async methods run it in a thread.
        found = asyncio.run(store.asearch((agent,), query="Where does Eva live?"))
        assert "Eva lives in Lima." in _texts(found)
        store.close()
        assert client.health() is True  # the caller's client stays open

    async def only_async() -> None:
        async with AsyncAranduClient(stack.base_url, TEST_API_KEY) as async_client:
            store = AranduStore(async_client=async_client)
            assert "Eva lives in Lima." in _texts(await store.asearch((agent,), query="Where does Eva live?"))
            with pytest.raises(RuntimeError, match="only an async_client"):
                store.search((agent,), query="Where does Eva live?")

    asyncio.run(only_async())


# ---- The retriever -----------------------------------------------------------------------------------------


def test_the_retriever_returns_documents(store: AranduStore, stack: Stack, agent: str) -> None:
    store.put((agent,), "r-1", {"content": "I live in Lisbon.", "speaker": "Ana", "occurred_at": START_AT})
    store.put((agent,), "r-2", {"content": "I work at Acme Corp.", "speaker": "Ana"})

    retriever = AranduRetriever(agent_id=agent, base_url=stack.base_url, api_key=TEST_API_KEY)
    documents = retriever.invoke("Where does Ana live?")
    assert documents
    assert all(isinstance(document, Document) for document in documents)
    lisbon = next(document for document in documents if document.page_content == "Ana lives in Lisbon.")
    assert lisbon.id == lisbon.metadata["fact_id"]
    assert lisbon.metadata["kind"] == "fact"
    assert lisbon.metadata["score"] > 0
    assert lisbon.metadata["entity_key"] == "person:ana"
    assert lisbon.metadata["speaker"] == "Ana"
    assert lisbon.metadata["valid_from"] == START_AT.isoformat()
    assert lisbon.metadata["message_id"] == "r-1"
    assert store.get((agent,), lisbon.metadata["fact_id"]) is not None

    with_context = AranduRetriever(
        agent_id=agent, base_url=stack.base_url, api_key=TEST_API_KEY, include_context=True, k=1
    )
    context, *facts = asyncio.run(with_context.ainvoke("Where does Ana work?"))
    assert context.metadata["kind"] == "context"
    assert "Acme" in context.page_content
    assert [document.page_content for document in facts] == ["Ana works at Acme Corp."]

    assert (
        AranduRetriever(agent_id=f"{agent}-other", base_url=stack.base_url, api_key=TEST_API_KEY).invoke(
            "Where does Ana live?"
        )
        == []
    )
    retriever.close()
    with_context.close()


# ---- The example and the packaging -------------------------------------------------------------------------


def test_the_example_runs_as_written(stack: Stack, agent: str) -> None:
    env = {**os.environ, "ARANDU_URL": stack.base_url, "ARANDU_API_KEY": TEST_API_KEY}
    done = subprocess.run(
        [sys.executable, "examples/langgraph_memory.py", agent],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Ana: I live in Lisbon."
    assert lines[1] == "  recall 'Where does Ana live?':"
    assert lines[2].startswith("    - Ana lives in Lisbon. (score 0.")
    assert "Ana: I have a cat named Luna." in lines
    cat_question = lines.index('  recall "What is the name of Ana\'s cat?":')
    assert lines[cat_question + 1].startswith("    - Ana has a cat named Luna. (score ")
    retriever = lines.index("retriever 'Tell me about Luna':")
    assert "    - Ana has a cat named Luna. [person:ana]" in lines[retriever + 1 :]
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        assert client.list_facts(agent).total == 2

    # Run again: the messages are known by their keys, nothing new is stored, the answer stands.
    again = subprocess.run(
        [sys.executable, "examples/langgraph_memory.py", agent],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
        cwd=ROOT,
        env=env,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[2].startswith("    - Ana lives in Lisbon. (score 0.")
    with AranduClient(stack.base_url, TEST_API_KEY) as client:
        assert client.list_facts(agent).total == 2


def test_the_adapters_stay_out_of_the_plain_client_and_name_their_extra() -> None:
    plain = (
        "import sys, arandu_client\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in {'langgraph', 'langchain_core'})\n"
        "print(loaded)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr

    for module, blocked in [("arandu_client.langgraph", "langgraph"), ("arandu_client.langchain", "langchain_core")]:
        missing = f"import sys\nsys.modules[{blocked!r}] = None\nimport {module}\n"
        done = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True, check=False, cwd=ROOT)
        assert done.returncode != 0
        assert "ImportError" in done.stderr
        assert "pip install 'arandu-service[langgraph]'" in done.stderr
