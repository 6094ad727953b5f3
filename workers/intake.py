"""Coalescing single messages into chunks before they enter the pipeline.

A message sent alone would otherwise be a chain of four tasks of its own: four task
deliveries, eight short transactions and a dozen broker round trips for one message, five
times the CPU of the same message in a chunk. The API instead appends the committed event's id
to a Redis list (one round trip) and, when no collector is pending, publishes one
``ingest.collect`` task. The collector waits until a chunk's worth of ids is there or the
longest wait has passed, then starts one chain per chunk; chunks may mix agents (the upsert
locks every agent of its chunk, in sorted order).

Nothing is lost if any of this fails: the event and its run are committed before the id is
pushed, and the Beat sweeper both drains the list and re-enqueues runs that stay idle.
The pending flag expires, so a collector whose publish failed is replaced by the next push.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis

from memory_core.settings import Settings
from workers.redis_client import is_redis_url, redis_client_for

# How long a published collector counts as pending: past it, the next push publishes another
# (a collector lost with a broker hiccup must not leave ids waiting for the sweeper).
PENDING_TTL_MS = 5_000
# How often a waiting collector looks at the list's length.
POLL_S = 0.01
# Ids taken from the list at once (one ``ingest.dispatch`` worth).
TAKE_LIMIT = 500


class IntakeQueue:
    """The list of committed single-message events waiting for a collector, on the broker's Redis."""

    def __init__(self, client: redis.Redis, key_prefix: str = "") -> None:
        self.client = client
        self.list_key = f"{key_prefix}arandu:intake:events"
        self.pending_key = f"{key_prefix}arandu:intake:collector"

    @classmethod
    def for_settings(cls, settings: Settings, *, producer: bool = True) -> IntakeQueue | None:
        """The queue on the configured broker; ``None`` when the broker is not Redis.

        A producer (the API) also gets ``None`` when coalescing is off; a consumer (a worker)
        still drains what an API configured otherwise may have queued.
        """
        if not is_redis_url(settings.broker_url) or (producer and settings.pipeline_intake_wait_ms <= 0):
            return None
        return cls(redis_client_for(settings.broker_url), settings.broker_key_prefix or "")

    def push(self, event_ids: Sequence[str]) -> bool:
        """Append ``event_ids``; True when the caller must publish a collector (none is pending)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self.list_key, *event_ids)
        pipe.set(self.pending_key, b"1", nx=True, px=PENDING_TTL_MS)
        _, claimed = pipe.execute()
        return bool(claimed)

    def wait_for(self, count: int, deadline: float) -> None:
        """Return once ``count`` ids are waiting or at ``deadline`` (``time.monotonic()``)."""
        while time.monotonic() < deadline and int(self.client.llen(self.list_key)) < count:
            time.sleep(POLL_S)

    def take(self, limit: int = TAKE_LIMIT) -> list[str]:
        """Release the pending flag and take up to ``limit`` ids, oldest first.

        The flag goes first: an id pushed after it is either taken here or triggers a new
        collector, so none is left behind without one.
        """
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(self.pending_key)
        pipe.lpop(self.list_key, limit)
        _, taken = pipe.execute()
        return [item.decode() if isinstance(item, bytes) else str(item) for item in taken or []]

    def depth(self) -> int:
        """Ids waiting for a collector."""
        return int(self.client.llen(self.list_key))

    def close(self) -> None:
        """Release the client's connections."""
        self.client.close()
