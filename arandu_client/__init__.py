"""Typed Python client of the arandu memory service (blocking and asyncio).

::

    from arandu_client import AranduClient

    with AranduClient("http://127.0.0.1:8000", "my-key") as client:
        accepted = client.send_message("agent-1", "I live in Lisbon.", "Ana")
        client.wait_for_event(accepted.event_id)
        result = client.retrieve("agent-1", "Where does Ana live?")
        print(result.context)

The package depends on httpx and pydantic only, never on the server's packages. A LangGraph
store (:mod:`arandu_client.langgraph`) and a LangChain retriever (:mod:`arandu_client.langchain`)
come with the ``langgraph`` extra and are imported only when asked for.
"""

from arandu_client._core import VERSION
from arandu_client.aio import AsyncAranduClient
from arandu_client.errors import (
    ApiError,
    AranduError,
    AuthenticationError,
    ConflictError,
    FieldError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    TransportError,
    WaitTimeoutError,
)
from arandu_client.models import (
    AgentConfig,
    AgentErased,
    AgentEvent,
    AgentEventPage,
    AgentUsage,
    ApiKeyInfo,
    BatchAccepted,
    BulkRetry,
    CreatedApiKey,
    Directive,
    DirectiveBlock,
    DirectiveList,
    DryRunResult,
    EntityDetail,
    EntityPage,
    EntityProfile,
    EntityRelationship,
    EventLookup,
    EventStatus,
    EventSummary,
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
    RetrievedEvent,
    RetrieveResult,
    RetryAccepted,
    ScoredFact,
    TimeWindow,
)
from arandu_client.sync import AranduClient

__version__ = VERSION

__all__ = [
    "AgentConfig",
    "AgentErased",
    "AgentEvent",
    "AgentEventPage",
    "AgentUsage",
    "ApiError",
    "ApiKeyInfo",
    "AranduClient",
    "AranduError",
    "AsyncAranduClient",
    "AuthenticationError",
    "BatchAccepted",
    "BulkRetry",
    "ConflictError",
    "CreatedApiKey",
    "Directive",
    "DirectiveBlock",
    "DirectiveList",
    "DryRunResult",
    "EntityDetail",
    "EntityPage",
    "EntityProfile",
    "EntityRelationship",
    "EventLookup",
    "EventStatus",
    "EventSummary",
    "FactDetail",
    "FactPage",
    "FieldError",
    "ImportAccepted",
    "ImportProgress",
    "InvalidRequestError",
    "JobRun",
    "JobRunAccepted",
    "JobRunPage",
    "Message",
    "MessageAccepted",
    "MessageOptions",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "Readiness",
    "Reprocess",
    "RetrieveResult",
    "RetrievedEvent",
    "RetryAccepted",
    "ScoredFact",
    "ServerError",
    "TimeWindow",
    "TransportError",
    "WaitTimeoutError",
    "__version__",
]
