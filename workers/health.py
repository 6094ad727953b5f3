"""Broker reachability (the API's readiness probe) and whether the broker is this service's (``arandu doctor``)."""

from __future__ import annotations

from kombu import Connection

from memory_core.settings import Settings
from workers.celery_app import QUEUES, broker_transport_options


def check_broker(settings: Settings, timeout_s: float = 2.0) -> None:
    """Raise if the broker does not accept a connection within ``timeout_s``."""
    with Connection(
        settings.broker_url,
        connect_timeout=timeout_s,
        transport_options={**broker_transport_options(settings), "socket_timeout": timeout_s},
    ) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout_s)
        # A TCP connect alone proves little for Redis; a real round trip does.
        client = getattr(conn.default_channel, "client", None)
        if client is not None:
            client.ping()


def service_traces(settings: Settings, timeout_s: float = 3.0) -> list[str] | None:
    """What shows that this service has used the broker: queues its workers declared, Beat's heartbeat.

    An empty list means a broker that answers but that no arandu worker or Beat ever used (some
    other Redis on the configured address); None means the broker is not Redis and cannot tell.
    """
    from workers.beat_heartbeat import HEARTBEAT_KEY

    with Connection(
        settings.broker_url,
        connect_timeout=timeout_s,
        transport_options={**broker_transport_options(settings), "socket_timeout": timeout_s},
    ) as conn:
        conn.ensure_connection(max_retries=1, timeout=timeout_s)
        client = getattr(conn.default_channel, "client", None)
        if client is None:
            return None
        # Commands kombu prefixes with ARANDU_BROKER_KEY_PREFIX, so a shared Redis is read in our namespace.
        traces = [f"queue {queue}" for queue in QUEUES if client.smembers(f"_kombu.binding.{queue}")]
        if client.hget(HEARTBEAT_KEY, "started_at"):
            traces.append("Beat's heartbeat")
        return traces
