"""Broker reachability, used by the API's readiness probe."""

from __future__ import annotations

from kombu import Connection

from memory_core.settings import Settings
from workers.celery_app import broker_transport_options


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
