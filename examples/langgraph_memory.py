"""Long-term memory for a LangGraph agent through arandu, without any LLM.

Start the service in another shell (``./ops/dev``), then, from the checkout::

    .venv/bin/python examples/langgraph_memory.py [agent_id]

``ARANDU_URL`` and ``ARANDU_API_KEY`` say where the service is and which key to use (defaults:
``http://127.0.0.1:8000`` and the key ``./ops/dev`` generated into ``.arandu/dev-api-key``).

A two-node graph runs once per user turn: ``remember`` puts the user's message into the agent's
memory through the store LangGraph injects, ``recall`` searches that memory for the turn's
question. A real agent would hand the recalled facts to its LLM; here they are printed. Running
it again is safe: each message has its own key, and a key already stored is not stored twice.
"""

from __future__ import annotations

import sys
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from arandu_client.langchain import AranduRetriever
from arandu_client.langgraph import AranduStore


class Turn(TypedDict, total=False):
    """One user turn: who said what, a question about the past, and what memory answered."""

    agent_id: str
    message_id: str
    speaker: str
    message: str
    question: str
    recalled: list[str]


def remember(state: Turn, runtime: Runtime[None]) -> Turn:
    """Send the user's message to the agent's memory (the key makes a re-run idempotent)."""
    assert runtime.store is not None
    runtime.store.put(
        (state["agent_id"],), state["message_id"], {"content": state["message"], "speaker": state["speaker"]}
    )
    return {}


def recall(state: Turn, runtime: Runtime[None]) -> Turn:
    """Search the agent's memory for the facts relevant to the question."""
    assert runtime.store is not None
    items = runtime.store.search((state["agent_id"],), query=state["question"], limit=3)
    return {"recalled": [f"{item.value['fact_text']} (score {item.score:.2f})" for item in items]}


def build_graph() -> StateGraph[Turn, None, Turn, Turn]:
    """remember -> recall."""
    graph = StateGraph(Turn)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph


def main() -> None:
    """Two turns of Ana's conversation, then the same memory through the LangChain retriever."""
    agent_id = sys.argv[1] if len(sys.argv) > 1 else "langgraph-example"
    turns = [
        ("example-1", "I live in Lisbon.", "Where does Ana live?"),
        ("example-2", "I have a cat named Luna.", "What is the name of Ana's cat?"),
    ]
    # wait_for_processing: put returns once the service has turned the message into facts,
    # so the recall node right after it finds them.
    with AranduStore(wait_for_processing=True) as store:
        app = build_graph().compile(store=store)
        for message_id, message, question in turns:
            state = app.invoke(
                {
                    "agent_id": agent_id,
                    "message_id": message_id,
                    "speaker": "Ana",
                    "message": message,
                    "question": question,
                }
            )
            print(f"Ana: {message}")
            print(f"  recall {question!r}:")
            for line in state["recalled"]:
                print(f"    - {line}")

    retriever = AranduRetriever(agent_id=agent_id, k=2)
    print("retriever 'Tell me about Luna':")
    for document in retriever.invoke("Tell me about Luna"):
        print(f"    - {document.page_content} [{document.metadata['entity_key']}]")
    retriever.close()


if __name__ == "__main__":
    main()
