"""A worker must survive the loss of its Redis broker: a fix for kombu's Redis channel close.

What happened (kombu 5.7.0, the latest release on PyPI; the read below came with kombu PR #1733
in 2023): when the
broker goes away, Celery's consumer closes the connection twice, first ``collect()`` then
``close()``. ``kombu.transport.redis.Channel.close`` first reads the reply of a ``BRPOP`` still in
flight (kombu PR #1733, so that a popped message is not lost on a clean shutdown). With the
server gone, that read raises ``ConnectionError`` *before* the channel marks itself closed;
``maybe_close_channel`` swallows the error, ``collect()`` then detaches the transport from its
connection (``transport.client = None``), and the second ``close()`` finds the channel still
open: it restores the unacknowledged messages through a new connection pool built from the
detached connection, ``_connparams`` reads ``None.hostname``, and the ``AttributeError`` (not a
connection error, so nothing ignores it) ends the worker with "Unrecoverable error". It
happens only when the loss finds the channel waiting on ``BRPOP``, which is most of the time
on an idle worker and some of the time on a busy one (2 runs in 5 of a 5 s Redis stop).

The fix keeps kombu's order and finishes the close: when reading the pending ``BRPOP`` reply
fails because the connection is gone (``_brpop_read`` has cleared ``_in_poll`` by then), the
close runs once more and now marks the channel closed, while the transport still has its
connection. Nothing is lost by not reading that reply: the worker reconnects and consumes again,
tasks it had not acknowledged stay in Redis's unacked set and come back after the visibility
timeout, and the pipeline's sweeper re-enqueues any run left idle (``apply.sweep_stuck_runs``).
The stages are idempotent, so a task that runs again applies nothing twice.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from kombu.transport import redis as kombu_redis

logger = logging.getLogger("arandu.broker")

_MARKER = "_arandu_closes_without_server"


def install() -> None:
    """Patch kombu's Redis ``Channel.close`` (idempotent; every process that builds the Celery app)."""
    channel_class: Any = kombu_redis.Channel
    if getattr(channel_class.close, _MARKER, False):
        return
    kombu_close = channel_class.close

    @functools.wraps(kombu_close)
    def close(self: Any) -> None:
        try:
            kombu_close(self)
        except self.connection_errors as error:
            if self.closed:
                raise  # closed already; the error came from restoring messages with no server
            logger.warning("broker connection lost while closing a channel (%s); closing it without the server", error)
            kombu_close(self)

    setattr(close, _MARKER, True)
    channel_class.close = close
