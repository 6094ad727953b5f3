"""A redis-py client on the broker's Redis, for what the service keeps beside its queues (metrics)."""

from __future__ import annotations

from urllib.parse import parse_qs

import redis
import redis.asyncio

REDIS_SCHEMES = ("redis://", "rediss://", "redis+socket://", "unix://")


def is_redis_url(url: str) -> bool:
    """Whether ``url`` points at Redis (the broker may also be RabbitMQ, which has no such side store)."""
    return url.startswith(REDIS_SCHEMES)


def _unix_socket(url: str) -> tuple[str, int]:
    """The socket path and database of kombu's ``redis+socket://PATH?virtual_host=N`` form."""
    path, _, query = url.removeprefix("redis+socket://").partition("?")
    database = 0
    for name in ("virtual_host", "db"):
        values = parse_qs(query).get(name)
        if values and values[0].isdigit():
            database = int(values[0])
    return path, database


def redis_client_for(url: str, *, socket_timeout_s: float = 2.0) -> redis.Redis:
    """A client for a Celery/kombu Redis URL, including kombu's ``redis+socket://`` unix-socket form."""
    if url.startswith("redis+socket://"):
        path, database = _unix_socket(url)
        return redis.Redis(
            unix_socket_path=path, db=database, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s
        )
    return redis.Redis.from_url(url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s)


def async_redis_client_for(url: str, *, socket_timeout_s: float = 2.0) -> redis.asyncio.Redis:
    """The asyncio twin of :func:`redis_client_for`, for the API's event loop."""
    if url.startswith("redis+socket://"):
        path, database = _unix_socket(url)
        return redis.asyncio.Redis(
            unix_socket_path=path, db=database, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s
        )
    return redis.asyncio.Redis.from_url(url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s)
