"""Per-key rate limit: a token bucket per tenant key, kept in the broker's Redis.

Every API process draws from the same bucket, so the limit holds for a key across processes
and replicas. The bucket refills at the key's rate and holds at most twice that (a burst),
and one request takes one token; a request that finds none is answered 429 with
``Retry-After`` (the seconds until a token is back). The bucket's state is one Redis hash per
key, updated by one Lua script (atomic, one round trip).

The limiter fails open: when Redis does not answer, requests pass (and a warning is logged at
most once a minute). The event log in PostgreSQL is the source of truth and accepting
messages while the broker is away is what the service is built to do; refusing every request
because the limiter cannot count would turn a broker outage into an API outage.
"""

from __future__ import annotations

import logging
import math
import time

import redis.asyncio
import redis.exceptions

from memory_core.settings import Settings
from workers.redis_client import async_redis_client_for, is_redis_url

logger = logging.getLogger("arandu.api")

_WARN_EVERY_S = 60.0

# KEYS[1] the bucket; ARGV: rate (tokens/s), capacity, now (s). Answers {allowed 0/1, seconds to wait}.
_REFILL_AND_TAKE_LUA = """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
    tokens = tokens - 1
    allowed = 1
else
    wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return {allowed, tostring(wait)}
"""


class RateLimiter:
    """Token buckets of tenant keys in Redis (:meth:`take`)."""

    def __init__(self, client: redis.asyncio.Redis | None, key_prefix: str) -> None:
        self._client = client
        self._script = client.register_script(_REFILL_AND_TAKE_LUA) if client is not None else None
        self._prefix = f"{key_prefix}arandu:rate:"
        self._warned_at = -math.inf

    @classmethod
    def for_settings(cls, settings: Settings) -> RateLimiter:
        """A limiter on the broker's Redis; without a Redis broker (RabbitMQ) nothing is limited."""
        if not is_redis_url(settings.broker_url):
            logger.warning("the broker is not Redis: per-key rate limits are off")
            return cls(None, "")
        return cls(async_redis_client_for(settings.broker_url, socket_timeout_s=0.5), settings.broker_key_prefix)

    async def take(self, key_hash: str, rate_per_s: float) -> float | None:
        """Take a token of the key's bucket: None when the request may go, else the seconds to wait."""
        if self._script is None or rate_per_s <= 0:
            return None
        capacity = max(1.0, 2 * rate_per_s)
        try:
            allowed, wait = await self._script(keys=[self._prefix + key_hash], args=[rate_per_s, capacity, time.time()])
        except (redis.exceptions.RedisError, OSError) as error:
            now = time.monotonic()
            if now - self._warned_at > _WARN_EVERY_S:
                self._warned_at = now
                logger.warning("rate limits not enforced: Redis does not answer (%s: %s)", type(error).__name__, error)
            return None
        return None if int(allowed) == 1 else float(wait)

    async def close(self) -> None:
        """Close the Redis connections."""
        if self._client is not None:
            await self._client.aclose()


__all__ = ["RateLimiter"]
