"""How the framework adapters (LangGraph store, LangChain retriever) reach the service.

An adapter is given a URL and key, or ready clients, or nothing (then the environment decides,
like the ``arandu`` command line does). It needs a blocking client for sync calls and an asyncio
client for async ones; an asyncio client owned by the adapter is made once per event loop,
because httpx's async connection pool belongs to the loop that opened its connections (a graph
run with ``asyncio.run`` twice would otherwise reuse a dead loop's sockets).

Nothing here imports LangGraph or LangChain.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from pathlib import Path

from arandu_client.aio import AsyncAranduClient
from arandu_client.sync import AranduClient

DEFAULT_URL = "http://127.0.0.1:8000"


def default_url() -> str:
    """``ARANDU_URL``, else ``http://127.0.0.1:<ARANDU_API_PORT or 8000>`` (where ``./ops/dev`` listens)."""
    url = os.environ.get("ARANDU_URL", "").strip()
    if url:
        return url
    port = os.environ.get("ARANDU_API_PORT", "").strip()
    return f"http://127.0.0.1:{port}" if port else DEFAULT_URL


def default_api_key() -> str | None:
    """``ARANDU_API_KEY``, else the first of ``ARANDU_API_KEYS``, else the key ``./ops/dev`` generated.

    The generated key lives in ``$ARANDU_HOME/dev-api-key``; ``ARANDU_HOME`` defaults to ``.arandu``
    in the current directory, which is where ``./ops/dev`` keeps it when run from the checkout.
    """
    key = os.environ.get("ARANDU_API_KEY", "").strip()
    if key:
        return key
    configured = [item.strip() for item in os.environ.get("ARANDU_API_KEYS", "").split(",") if item.strip()]
    if configured:
        return configured[0]
    home = Path(os.environ.get("ARANDU_HOME", "").strip() or ".arandu")
    try:
        return (home / "dev-api-key").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class Connection:
    """The clients an adapter talks through: given ones are used as they are and never closed.

    With neither ``client`` nor ``async_client`` the connection owns its clients, built from
    ``base_url`` / ``api_key`` (or :func:`default_url` / :func:`default_api_key`). With only
    ``client``, async calls run the blocking client in a worker thread; with only
    ``async_client``, sync calls are refused (an asyncio client cannot be driven from sync code
    that may itself run inside an event loop).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        client: AranduClient | None = None,
        async_client: AsyncAranduClient | None = None,
        timeout: float = 30,
    ) -> None:
        given = client is not None or async_client is not None
        if given and (base_url is not None or api_key is not None):
            raise ValueError("pass either base_url/api_key or ready clients (client=, async_client=), not both")
        self._given_client = client
        self._given_async_client = async_client
        self._owns_clients = not given
        # Given clients carry their own URL and key: the environment is read only when it decides.
        self._base_url: str | None = base_url if base_url is not None or given else default_url()
        self._api_key = api_key if api_key is not None or given else default_api_key()
        self._timeout = timeout
        self._own_client: AranduClient | None = None
        self._own_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncAranduClient] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def base_url(self) -> str:
        """The API the clients talk to."""
        for client in (self._given_client, self._given_async_client):
            if client is not None:
                return client.base_url
        return (self._base_url or "").rstrip("/")

    def sync_client(self) -> AranduClient:
        """The blocking client; raises ``RuntimeError`` when only an asyncio client was given."""
        if self._given_client is not None:
            return self._given_client
        if not self._owns_clients:
            raise RuntimeError(
                "this adapter was given only an async_client: use its async methods (ainvoke, aget, asearch...), "
                "or also pass client=AranduClient(...)"
            )
        if self._own_client is None:
            assert self._base_url is not None
            self._own_client = AranduClient(self._base_url, self._api_key, timeout=self._timeout)
        return self._own_client

    def async_client(self) -> AsyncAranduClient | None:
        """The asyncio client for the running loop, or None when async calls must go through a thread."""
        if self._given_async_client is not None:
            return self._given_async_client
        if not self._owns_clients:
            return None
        loop = asyncio.get_running_loop()
        client = self._own_async_clients.get(loop)
        if client is None:
            assert self._base_url is not None
            client = AsyncAranduClient(self._base_url, self._api_key, timeout=self._timeout)
            self._own_async_clients[loop] = client
        return client

    def close(self) -> None:
        """Close the blocking client this connection made (given clients are the caller's to close)."""
        if self._own_client is not None:
            self._own_client.close()
            self._own_client = None

    async def aclose(self) -> None:
        """Close the clients this connection made; the asyncio one of the running loop included."""
        self.close()
        loop = asyncio.get_running_loop()
        client = self._own_async_clients.pop(loop, None)
        if client is not None:
            await client.aclose()


__all__ = ["Connection", "default_api_key", "default_url"]
