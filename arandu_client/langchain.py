"""A LangChain retriever over one agent's arandu memory: :class:`AranduRetriever` (``langgraph`` extra).

::

    from arandu_client.langchain import AranduRetriever

    retriever = AranduRetriever(agent_id="ana-assistant", base_url="http://127.0.0.1:8000", api_key=key)
    for document in retriever.invoke("Where does Ana live?"):
        print(document.metadata["score"], document.page_content)

Each fact the retrieve endpoint ranks becomes a :class:`~langchain_core.documents.Document`:
``page_content`` is the fact's text, ``id`` and ``metadata["fact_id"]`` its id, and ``metadata``
has ``kind`` ("fact"), ``score``, ``entity_key``, ``entity_name``, ``attribute_key``, ``speaker``,
``valid_from``, ``valid_to`` (ISO 8601 strings), ``message_id`` and ``source_event_id``. With
``include_context=True`` the first document is the service's prompt-ready context (the known
facts and the relevant past messages, one text; ``metadata["kind"]`` is "context"), when it has one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field, PrivateAttr

from arandu_client._connection import Connection
from arandu_client.aio import AsyncAranduClient
from arandu_client.models import RetrieveResult, ScoredFact
from arandu_client.sync import AranduClient

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "arandu_client.langchain needs langchain-core: install the extra with pip install 'arandu-service[langgraph]'"
    ) from missing


def fact_document(fact: ScoredFact) -> Document:
    """The :class:`Document` of a retrieved fact."""
    metadata: dict[str, Any] = {
        "kind": "fact",
        "fact_id": fact.fact_id,
        "score": fact.score,
        "entity_key": fact.entity_key,
        "entity_name": fact.entity_name,
        "attribute_key": fact.attribute_key,
        "speaker": fact.speaker,
        "valid_from": fact.valid_from.isoformat() if fact.valid_from is not None else None,
        "valid_to": fact.valid_to.isoformat() if fact.valid_to is not None else None,
        "message_id": fact.message_id,
        "source_event_id": fact.source_event_id,
    }
    return Document(page_content=fact.fact_text, id=fact.fact_id, metadata=metadata)


def result_documents(agent_id: str, result: RetrieveResult, *, include_context: bool) -> list[Document]:
    """The documents of a retrieve answer: its context first when asked for (and not empty), then its facts."""
    documents: list[Document] = []
    if include_context and result.context.strip():
        documents.append(Document(page_content=result.context, metadata={"kind": "context", "agent_id": agent_id}))
    documents.extend(fact_document(fact) for fact in result.facts)
    return documents


class AranduRetriever(BaseRetriever):
    """Retrieves one agent's facts relevant to a query, as LangChain documents (sync and async).

    Give it ``base_url`` and ``api_key`` (default: ``ARANDU_URL`` / ``ARANDU_API_KEY``, as the
    command line reads them) or ready clients (``client``, ``async_client``; not closed by the
    retriever). ``k`` caps the facts (the service's ``topk_facts``, default 20); ``entity_keys``
    keeps the facts of those entities; ``include_context`` puts the service's context text first.
    """

    agent_id: str
    """The agent whose memory is searched."""
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    client: AranduClient | None = Field(default=None, repr=False, exclude=True)
    async_client: AsyncAranduClient | None = Field(default=None, repr=False, exclude=True)
    k: int | None = Field(default=None, ge=1, le=500)
    """At most this many facts (None: the service's ``topk_facts``)."""
    entity_keys: list[str] | None = None
    """Only facts linked to these entities (canonical keys such as ``person:ana``, or aliases)."""
    include_context: bool = False
    """Put the service's prompt-ready context text first, as a document of ``kind`` "context"."""
    timeout: float = 30

    _connection: Connection = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Set up the connection from the URL and key, or the given clients."""
        if not self.agent_id.strip():
            raise ValueError("AranduRetriever needs a non-empty agent_id")
        self._connection = Connection(
            self.base_url, self.api_key, client=self.client, async_client=self.async_client, timeout=self.timeout
        )

    def _overrides(self) -> dict[str, Any] | None:
        return {"topk_facts": self.k} if self.k is not None else None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        result = self._connection.sync_client().retrieve(
            self.agent_id, query, entity_keys=self.entity_keys, config_overrides=self._overrides()
        )
        return result_documents(self.agent_id, result, include_context=self.include_context)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        client = self._connection.async_client()
        if client is None:
            return await asyncio.to_thread(self._get_relevant_documents, query, run_manager=run_manager.get_sync())
        result = await client.retrieve(
            self.agent_id, query, entity_keys=self.entity_keys, config_overrides=self._overrides()
        )
        return result_documents(self.agent_id, result, include_context=self.include_context)

    def close(self) -> None:
        """Close the blocking client the retriever made (clients given to it stay open)."""
        self._connection.close()

    async def aclose(self) -> None:
        """Close the clients the retriever made, the running loop's asyncio client included."""
        await self._connection.aclose()


__all__ = ["AranduRetriever", "fact_document", "result_documents"]
