"""A LangGraph store backed by arandu: :class:`AranduStore` (needs the ``langgraph`` extra).

::

    from arandu_client.langgraph import AranduStore

    store = AranduStore("http://127.0.0.1:8000", api_key, wait_for_processing=True)
    store.put(("ana-assistant",), "msg-1", {"content": "I live in Lisbon.", "speaker": "Ana"})
    for item in store.search(("ana-assistant",), query="Where does Ana live?"):
        print(item.key, item.score, item.value["fact_text"])
    graph = builder.compile(store=store)   # nodes get it as runtime.store

How LangGraph's key-value model maps onto arandu's memory:

* **namespace = agent.** A namespace is ``(*prefix, agent_id)``: ``(agent_id,)`` with the default
  empty ``prefix``, ``("memories", agent_id)`` with ``prefix=("memories",)``. Any other shape is a
  ``ValueError``; so is a ``search`` over a shorter prefix (arandu searches one agent at a time).
  LangGraph forbids ``.`` in namespace labels, so agents whose id holds a dot are out of reach.
* **put = remember.** ``put(namespace, key, value)`` sends ``value`` as one message of the agent:
  ``{"content": "...", "speaker": "Ana"}`` plus, optionally, ``occurred_at`` (datetime or ISO
  8601), ``session_id``, ``source`` and ``recent_messages``; a missing field or an unknown one is a
  ``ValueError`` naming it. ``key`` becomes the message's ``message_id``, so putting the same key
  again stores nothing new, *even with another value*: a message, once said, is not rewritten (say
  the correction under a new key; the pipeline supersedes the facts it contradicts). The service
  turns messages into facts in the background; ``wait_for_processing=True`` makes ``put`` return
  only once its message is processed (raising :class:`MessageProcessingError` if that failed).
* **search = recall.** With a ``query``, the agent's facts ranked by relevance (the retrieve
  endpoint) as :class:`~langgraph.store.base.SearchItem`\\ s with ``key`` = fact id, ``score`` and
  ``value`` = the fact (see :func:`fact_value`); without one, the agent's active facts newest first
  with no score. ``limit`` and ``offset`` page through the top ``offset + limit`` facts (at most
  500, sent as ``topk_facts``: with an LLM reranker the service takes at most 50). ``filter``
  compares fields of ``value`` (exact values or ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
  ``$lte``) on the client, over that same window, so a filtered page may hold fewer than
  ``limit`` items; an ``entity_key`` filter is also sent to the service, which then
  ranks only that entity's facts.
* **get / delete by fact id.** ``get`` answers a fact (superseded ones too, with ``is_active``
  false) or None for an unknown id, another agent's id or a key that is no fact id (such as a
  message key). ``delete`` (and ``put(..., None)``) deletes the fact for good; an unknown fact id
  is a no-op, and a key that is no fact id is a ``ValueError``: messages are the permanent record
  and cannot be deleted, only the facts learned from them.
* ``list_namespaces`` is not supported (the API does not list agents): ``NotImplementedError``.
  TTLs are not supported; ``index`` is ignored (every message is indexed).

``Item.created_at`` and ``updated_at`` are when the service stored the fact, except in a
``search`` with a query, whose answer does not carry that: there they are the fact's
``valid_from``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from arandu_client._connection import Connection
from arandu_client.aio import AsyncAranduClient
from arandu_client.errors import AranduError, NotFoundError
from arandu_client.models import EventStatus, FactDetail, MessageOptions, ScoredFact
from arandu_client.sync import AranduClient

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "arandu_client.langgraph needs LangGraph: install the extra with pip install 'arandu-service[langgraph]'"
    ) from missing

# The retrieve endpoint answers at most this many facts (topk_facts), and a fact page this many.
MAX_SEARCH_WINDOW = 500

REQUIRED_MESSAGE_FIELDS = ("content", "speaker")
OPTIONAL_MESSAGE_FIELDS = ("occurred_at", "session_id", "source", "recent_messages")

_COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


class MessageProcessingError(AranduError):
    """A message put with ``wait_for_processing`` failed in the service's pipeline."""

    def __init__(self, event: EventStatus) -> None:
        super().__init__(
            f"message {event.message_id!r} (event {event.event_id}) failed at stage {event.stage}: {event.error}"
        )
        self.event = event


# ---- Translation between the store's values and the API's -------------------------------------


def message_from_value(value: Mapping[str, Any]) -> tuple[str, str, MessageOptions]:
    """The message text, its speaker and its options, from a ``put`` value; ``ValueError`` names a bad field."""
    if not isinstance(value, Mapping):
        raise ValueError(f"an AranduStore value is a dict like {{'content': ..., 'speaker': ...}}, not {value!r}")
    missing = [name for name in REQUIRED_MESSAGE_FIELDS if name not in value]
    if missing:
        raise ValueError(
            f"an AranduStore value needs {' and '.join(repr(name) for name in missing)} "
            f"(the message and who said it), got fields {sorted(value)}"
        )
    unknown = sorted(set(value) - {*REQUIRED_MESSAGE_FIELDS, *OPTIONAL_MESSAGE_FIELDS})
    if unknown:
        raise ValueError(
            f"unknown field(s) {unknown} in an AranduStore value; it takes {list(REQUIRED_MESSAGE_FIELDS)} "
            f"and optionally {list(OPTIONAL_MESSAGE_FIELDS)}"
        )
    for name in REQUIRED_MESSAGE_FIELDS:
        if not isinstance(value[name], str) or not value[name].strip():
            raise ValueError(f"the value's {name!r} must be a non-empty string, got {value[name]!r}")
    options: MessageOptions = {}
    occurred_at = value.get("occurred_at")
    if occurred_at is not None:
        if not isinstance(occurred_at, datetime | str):
            raise ValueError(f"the value's 'occurred_at' must be a datetime or an ISO 8601 string, got {occurred_at!r}")
        options["occurred_at"] = occurred_at
    for name in ("session_id", "source"):
        text = value.get(name)
        if text is not None and not isinstance(text, str):
            raise ValueError(f"the value's {name!r} must be a string, got {text!r}")
    if value.get("session_id") is not None:
        options["session_id"] = value["session_id"]
    if value.get("source") is not None:
        options["source"] = value["source"]
    recent = value.get("recent_messages")
    if recent is not None:
        if not isinstance(recent, list) or not all(isinstance(item, str) for item in recent):
            raise ValueError(f"the value's 'recent_messages' must be a list of strings, got {recent!r}")
        options["recent_messages"] = list(recent)
    return value["content"], value["speaker"], options


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def fact_value(fact: ScoredFact | FactDetail) -> dict[str, Any]:
    """An :class:`Item`'s value for a fact: JSON-ready, timestamps as ISO 8601 strings.

    Always ``fact_text``, ``entity_key``, ``entity_name``, ``attribute_key``, ``speaker``,
    ``valid_from``, ``valid_to`` and ``source_event_id``. A searched fact adds ``message_id`` (the
    store key it was put under, when it came from a ``put``) and ``scores`` (each signal's share);
    a fact read by id or listed adds ``entity_type``, ``is_active``, ``confidence``, ``importance``
    and ``supersedes_fact_id``.
    """
    value: dict[str, Any] = {
        "fact_text": fact.fact_text,
        "entity_key": fact.entity_key,
        "entity_name": fact.entity_name,
        "attribute_key": fact.attribute_key,
        "speaker": fact.speaker,
        "valid_from": _iso(fact.valid_from),
        "valid_to": _iso(fact.valid_to),
        "source_event_id": fact.source_event_id,
    }
    if isinstance(fact, ScoredFact):
        value["message_id"] = fact.message_id
        value["scores"] = dict(fact.scores)
    else:
        value["entity_type"] = fact.entity_type
        value["is_active"] = fact.is_active
        value["confidence"] = fact.confidence
        value["importance"] = fact.importance
        value["supersedes_fact_id"] = fact.supersedes_fact_id
    return value


def fact_item(namespace: tuple[str, ...], fact: FactDetail) -> Item:
    """The :class:`Item` of a fact read by id."""
    return Item(
        namespace=namespace,
        key=fact.fact_id,
        value=fact_value(fact),
        created_at=fact.created_at,
        updated_at=fact.created_at,  # a fact is never edited: a change is a new fact that supersedes it
    )


def _listed_item(namespace: tuple[str, ...], fact: FactDetail) -> SearchItem:
    return SearchItem(namespace, fact.fact_id, fact_value(fact), fact.created_at, fact.created_at, score=None)


def _scored_item(namespace: tuple[str, ...], fact: ScoredFact) -> SearchItem:
    # The retrieve answer carries no storage time; the moment the fact became true stands in.
    moment = fact.valid_from or datetime.fromtimestamp(0, tz=UTC)
    return SearchItem(namespace, fact.fact_id, fact_value(fact), moment, moment, score=fact.score)


def _compare(actual: Any, operator: str, expected: Any) -> bool:
    if operator == "$eq":
        return bool(actual == expected)
    if operator == "$ne":
        return bool(actual != expected)
    if actual is None or expected is None:
        return False
    try:
        if operator == "$gt":
            return bool(actual > expected)
        if operator == "$gte":
            return bool(actual >= expected)
        if operator == "$lt":
            return bool(actual < expected)
        return bool(actual <= expected)
    except TypeError:  # e.g. a number against a string: no match rather than a crash mid-search
        return False


def check_filter(search_filter: Mapping[str, Any] | None) -> None:
    """``ValueError`` naming an operator of a search ``filter`` the store does not know."""
    for field, condition in (search_filter or {}).items():
        if isinstance(condition, Mapping):
            unknown = sorted(set(condition) - set(_COMPARISONS))
            if unknown:
                raise ValueError(f"unsupported filter operator(s) {unknown} on {field!r}; use {list(_COMPARISONS)}")


def matches_filter(value: Mapping[str, Any], search_filter: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` passes every condition of a LangGraph search ``filter`` (checked by :func:`check_filter`)."""
    for field, condition in (search_filter or {}).items():
        actual = value.get(field)
        if isinstance(condition, Mapping):
            if not all(_compare(actual, operator, expected) for operator, expected in condition.items()):
                return False
        elif actual != condition:
            return False
    return True


def _entity_key_filter(search_filter: Mapping[str, Any] | None) -> str | None:
    """The entity key an ``entity_key`` equality filter names, which the service can filter on itself."""
    condition = (search_filter or {}).get("entity_key")
    if isinstance(condition, Mapping) and set(condition) == {"$eq"}:
        condition = condition["$eq"]
    return condition if isinstance(condition, str) and condition else None


def _fact_id(key: str) -> str | None:
    """``key`` as a fact id (a UUID), or None when it cannot be one."""
    try:
        return str(uuid.UUID(str(key)))
    except ValueError:
        return None


def _search_window(op: SearchOp) -> int:
    """How many top facts the search reads (offset + limit), after checking the search's arguments."""
    check_filter(op.filter)
    if op.limit < 0 or op.offset < 0:
        raise ValueError(f"search limit and offset must be >= 0, got limit={op.limit} offset={op.offset}")
    window = op.offset + op.limit
    if window > MAX_SEARCH_WINDOW:
        raise ValueError(f"AranduStore.search reaches at most {MAX_SEARCH_WINDOW} facts (offset + limit), got {window}")
    return window


def _page(items: Sequence[SearchItem], op: SearchOp, *, already_offset: bool) -> list[SearchItem]:
    kept = [item for item in items if matches_filter(item.value, op.filter)]
    start = 0 if already_offset else op.offset
    return kept[start : start + op.limit]


# ---- The store -----------------------------------------------------------------------------------


class AranduStore(BaseStore):
    """A LangGraph :class:`~langgraph.store.base.BaseStore` whose namespaces are arandu agents.

    See the module's documentation for the mapping. Give it ``base_url`` and ``api_key`` (default:
    ``ARANDU_URL`` / ``ARANDU_API_KEY`` as the command line reads them), or ready clients
    (``client``, ``async_client``: used as they are and not closed by the store). ``prefix`` is
    the namespace labels before the agent id. ``wait_for_processing`` makes each ``put`` wait up
    to ``processing_timeout`` seconds for its message to be processed, so a ``search`` right after
    finds its facts. Use it with ``graph.compile(store=AranduStore(...))``; close it with
    :meth:`close` (or ``with`` / ``async with``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        client: AranduClient | None = None,
        async_client: AsyncAranduClient | None = None,
        prefix: Sequence[str] = (),
        wait_for_processing: bool = False,
        processing_timeout: float = 120,
        poll_interval: float = 0.2,
        timeout: float = 30,
    ) -> None:
        if isinstance(prefix, str):
            raise ValueError(f"prefix is a tuple of namespace labels, e.g. ({prefix!r},), not a string")
        if any(not isinstance(label, str) or not label for label in prefix):
            raise ValueError(f"prefix labels must be non-empty strings, got {tuple(prefix)!r}")
        self.prefix: tuple[str, ...] = tuple(prefix)
        self.wait_for_processing = wait_for_processing
        self.processing_timeout = processing_timeout
        self.poll_interval = poll_interval
        self._connection = Connection(base_url, api_key, client=client, async_client=async_client, timeout=timeout)

    # ---- Namespaces ------------------------------------------------------------------------------

    def namespace(self, agent_id: str) -> tuple[str, ...]:
        """The namespace of ``agent_id``: ``(*prefix, agent_id)``."""
        return (*self.prefix, agent_id)

    def agent_id(self, namespace: tuple[str, ...]) -> str:
        """The agent a namespace names; ``ValueError`` when it does not have the shape ``(*prefix, agent_id)``."""
        namespace = tuple(namespace)
        shape = (*self.prefix, "<agent_id>")
        if len(namespace) != len(self.prefix) + 1 or namespace[: len(self.prefix)] != self.prefix:
            raise ValueError(
                f"namespace {namespace!r} does not name an arandu agent: AranduStore namespaces are {shape!r} "
                f"(one agent per namespace; a search cannot span agents)"
            )
        agent = namespace[-1]
        if not isinstance(agent, str) or not agent.strip():
            raise ValueError(f"namespace {namespace!r} does not name an arandu agent: the agent id is empty")
        return agent

    # ---- Sync ------------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order with the blocking client; one result per operation."""
        client = self._connection.sync_client()
        return [self._run(client, op) for op in ops]

    def _run(self, client: AranduClient, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(client, op)
        if isinstance(op, SearchOp):
            return self._search(client, op)
        if isinstance(op, PutOp):
            if op.value is None:
                self._delete(client, op)
            else:
                self._put(client, op)
            return None
        if isinstance(op, ListNamespacesOp):
            raise _no_namespace_listing()
        raise TypeError(f"unknown store operation {op!r}")

    def _get(self, client: AranduClient, op: GetOp) -> Item | None:
        agent = self.agent_id(op.namespace)
        fact_id = _fact_id(op.key)
        if fact_id is None:
            return None
        try:
            fact = client.get_fact(agent, fact_id)
        except NotFoundError:
            return None
        return fact_item(tuple(op.namespace), fact)

    def _search(self, client: AranduClient, op: SearchOp) -> list[SearchItem]:
        agent = self.agent_id(op.namespace_prefix)
        namespace = tuple(op.namespace_prefix)
        window = _search_window(op)
        if window == 0 or op.limit == 0:
            return []
        entity_key = _entity_key_filter(op.filter)
        if op.query and op.query.strip():
            result = client.retrieve(agent, op.query, entity_keys=entity_key, config_overrides={"topk_facts": window})
            return _page([_scored_item(namespace, fact) for fact in result.facts], op, already_offset=False)
        page = client.list_facts(agent, limit=op.limit, offset=op.offset, entity_keys=entity_key)
        return _page([_listed_item(namespace, fact) for fact in page.facts], op, already_offset=True)

    def _put(self, client: AranduClient, op: PutOp) -> None:
        agent = self.agent_id(op.namespace)
        assert op.value is not None
        content, speaker, options = message_from_value(op.value)
        options["message_id"] = str(op.key)
        accepted = client.send_message(agent, content, speaker, **options)
        if self.wait_for_processing:
            _raise_if_failed(
                client.wait_for_event(
                    accepted.event_id, timeout=self.processing_timeout, poll_interval=self.poll_interval
                )
            )

    def _delete(self, client: AranduClient, op: PutOp) -> None:
        agent = self.agent_id(op.namespace)
        fact_id = _fact_required(op.key)
        try:
            client.delete_fact(agent, fact_id)
        except NotFoundError:
            return

    # ---- Async -----------------------------------------------------------------------------------

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order with the asyncio client; one result per operation.

        A store given only a blocking ``client`` runs :meth:`batch` in a worker thread instead.
        """
        client = self._connection.async_client()
        if client is None:
            return await asyncio.to_thread(self.batch, list(ops))
        return [await self._arun(client, op) for op in ops]

    async def _arun(self, client: AsyncAranduClient, op: Op) -> Result:
        if isinstance(op, GetOp):
            return await self._aget(client, op)
        if isinstance(op, SearchOp):
            return await self._asearch(client, op)
        if isinstance(op, PutOp):
            if op.value is None:
                await self._adelete(client, op)
            else:
                await self._aput(client, op)
            return None
        if isinstance(op, ListNamespacesOp):
            raise _no_namespace_listing()
        raise TypeError(f"unknown store operation {op!r}")

    async def _aget(self, client: AsyncAranduClient, op: GetOp) -> Item | None:
        agent = self.agent_id(op.namespace)
        fact_id = _fact_id(op.key)
        if fact_id is None:
            return None
        try:
            fact = await client.get_fact(agent, fact_id)
        except NotFoundError:
            return None
        return fact_item(tuple(op.namespace), fact)

    async def _asearch(self, client: AsyncAranduClient, op: SearchOp) -> list[SearchItem]:
        agent = self.agent_id(op.namespace_prefix)
        namespace = tuple(op.namespace_prefix)
        window = _search_window(op)
        if window == 0 or op.limit == 0:
            return []
        entity_key = _entity_key_filter(op.filter)
        if op.query and op.query.strip():
            result = await client.retrieve(
                agent, op.query, entity_keys=entity_key, config_overrides={"topk_facts": window}
            )
            return _page([_scored_item(namespace, fact) for fact in result.facts], op, already_offset=False)
        page = await client.list_facts(agent, limit=op.limit, offset=op.offset, entity_keys=entity_key)
        return _page([_listed_item(namespace, fact) for fact in page.facts], op, already_offset=True)

    async def _aput(self, client: AsyncAranduClient, op: PutOp) -> None:
        agent = self.agent_id(op.namespace)
        assert op.value is not None
        content, speaker, options = message_from_value(op.value)
        options["message_id"] = str(op.key)
        accepted = await client.send_message(agent, content, speaker, **options)
        if self.wait_for_processing:
            _raise_if_failed(
                await client.wait_for_event(
                    accepted.event_id, timeout=self.processing_timeout, poll_interval=self.poll_interval
                )
            )

    async def _adelete(self, client: AsyncAranduClient, op: PutOp) -> None:
        agent = self.agent_id(op.namespace)
        fact_id = _fact_required(op.key)
        try:
            await client.delete_fact(agent, fact_id)
        except NotFoundError:
            return

    # ---- Lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the blocking client the store made (clients given to it stay open)."""
        self._connection.close()

    async def aclose(self) -> None:
        """Close the clients the store made, the running loop's asyncio client included."""
        await self._connection.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AranduStore({self._connection.base_url!r}, prefix={self.prefix!r})"


def _fact_required(key: str) -> str:
    fact_id = _fact_id(key)
    if fact_id is None:
        raise ValueError(
            f"cannot delete {key!r}: AranduStore deletes facts by fact id (the key of a get or search item); "
            "messages put under a key are the permanent record and cannot be deleted"
        )
    return fact_id


def _raise_if_failed(status: EventStatus) -> None:
    if status.status == "failed":
        raise MessageProcessingError(status)


def _no_namespace_listing() -> NotImplementedError:
    return NotImplementedError(
        "AranduStore cannot list namespaces: the arandu API does not list agents. "
        "Address an agent's memory by its namespace (AranduStore.namespace(agent_id))."
    )


__all__ = [
    "AranduStore",
    "MessageProcessingError",
    "check_filter",
    "fact_item",
    "fact_value",
    "matches_filter",
    "message_from_value",
]
