"""A worker outlives its Redis broker: kombu's channel close with a BRPOP in flight and no server.

Celery's consumer, on losing the broker, calls ``connection.collect()`` then ``connection.close()``.
Without :mod:`workers.broker_compat` the first leaves the channel open (reading the pending BRPOP
reply fails) and the second rebuilds a pool from the detached connection: ``AttributeError``,
which ends the worker ("Unrecoverable error").
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Producer, Queue

from ops.embedded import EmbeddedRedis
from workers import broker_compat


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    # A server of this test's own: it is stopped mid-test, and the session's is shared.
    with tempfile.TemporaryDirectory(prefix="arandu-broker-") as home:
        server = EmbeddedRedis(Path(home) / "redis")
        server.start()
        try:
            yield server
        finally:
            server.stop()


def test_a_channel_waiting_on_brpop_closes_when_the_server_is_gone(own_redis: EmbeddedRedis) -> None:
    broker_compat.install()
    connection = Connection(own_redis.url)
    channel = connection.default_channel
    # The consuming channel holds a delivered, unacknowledged task (acks_late)...
    queue = Queue("tasks", Exchange("tasks", type="direct"), routing_key="tasks")
    queue(channel).declare()
    Producer(channel).publish({"task": 1}, exchange=queue.exchange, routing_key="tasks")
    assert channel.basic_get("tasks", no_ack=False) is not None
    # ... and waits for a BRPOP reply, as does another channel of the worker (its events).
    other = connection.channel()
    for waiting in (channel, other):
        waiting.client.ping()
        waiting._in_poll = waiting.client.connection
    own_redis.stop()

    # What celery.worker.consumer.Consumer.on_connection_error_after_connected does.
    connection.collect(socket_timeout=1)
    connection.close()

    assert channel.closed


def test_install_is_idempotent() -> None:
    broker_compat.install()
    from kombu.transport import redis as kombu_redis

    patched = kombu_redis.Channel.close
    broker_compat.install()
    assert kombu_redis.Channel.close is patched
