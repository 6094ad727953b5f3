"""Coalescing single messages into chunks before they enter the pipeline.

A message sent alone would otherwise be a chain of four tasks of its own: four task
deliveries, eight short transactions and a dozen broker round trips for one message, five
times the CPU of the same message in a chunk. The API instead appends the committed event's id
to a Redis list (one round trip) and, when no collector is pending, publishes one
``ingest.collect`` task. The collector waits until a chunk's worth of ids is there or the
longest wait has passed, then starts one chain per chunk; chunks may mix agents (the upsert
locks every agent of its chunk, in sorted order).

The wait only pays when other messages are arriving. A message with no company (none came in
the longest wait before it: one agent writing and waiting for each turn, a quiet deployment)
starts its chunk at once instead of waiting for messages that are not coming; the cost is
one chunk of its own, which only a rate too low to load anything produces. The first message
of a burst goes alone; the ones behind it find company and wait as before.

Nothing is lost if any of this fails: the event and its run are committed before the id is
pushed, and the Beat sweeper both drains the list and re-enqueues runs that stay idle.
The pending flag expires, so a collector whose publish failed is replaced by the next push.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

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


# The last arrival's stamp outlives any wait worth configuring (the setting's bound is 10 s).
LAST_ARRIVAL_TTL_MS = 60_000


@dataclass(frozen=True)
class Pushed:
    """What a push found: whether the caller must publish a collector, and whether that one should wait."""

    publish_collector: bool
    has_company: bool


class IntakeQueue:
    """The list of committed single-message events waiting for a collector, on the broker's Redis.

    ``wait_ms``: the collectors' longest wait (``pipeline_intake_wait_ms``); a push finds
    company when another push came less than that long before it.
    """

    def __init__(self, client: redis.Redis, key_prefix: str = "", *, wait_ms: float = 0.0) -> None:
        self.client = client
        self.wait_ms = wait_ms
        self.list_key = f"{key_prefix}arandu:intake:events"
        self.pending_key = f"{key_prefix}arandu:intake:collector"
        self.last_arrival_key = f"{key_prefix}arandu:intake:last-arrival-ms"

    @classmethod
    def for_settings(cls, settings: Settings, *, producer: bool = True) -> IntakeQueue | None:
        """The queue on the configured broker; ``None`` when the broker is not Redis.

        A producer (the API) also gets ``None`` when coalescing is off; a consumer (a worker)
        still drains what an API configured otherwise may have queued.
        """
        if not is_redis_url(settings.broker_url) or (producer and settings.pipeline_intake_wait_ms <= 0):
            return None
        return cls(
            redis_client_for(settings.broker_url),
            settings.broker_key_prefix or "",
            wait_ms=settings.pipeline_intake_wait_ms,
        )

    def push(self, event_ids: Sequence[str]) -> Pushed:
        """Append ``event_ids`` and stamp their arrival, in one round trip.

        ``publish_collector``: none is pending, the caller must publish one. ``has_company``:
        another push came within the longest wait before this one (several ids pushed at
        once keep each other company), so waiting is likely to fill the chunk further.
        """
        now_ms = int(time.time() * 1000)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self.list_key, *event_ids)
        pipe.set(self.pending_key, b"1", nx=True, px=PENDING_TTL_MS)
        pipe.getset(self.last_arrival_key, now_ms)
        pipe.pexpire(self.last_arrival_key, LAST_ARRIVAL_TTL_MS)
        _, claimed, previous, _ = pipe.execute()
        # Clocks of several API hosts may disagree by a little: a stamp "from the future" is company too.
        recent = previous is not None and now_ms - int(previous) < self.wait_ms
        return Pushed(publish_collector=bool(claimed), has_company=recent or len(event_ids) > 1)

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
