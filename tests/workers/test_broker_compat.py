"""The kombu compatibility fix (:mod:`workers.broker_compat`) is installed once.

Its effect (a worker that outlives a Redis restart) is tested end to end by
``tests/ops/test_chaos.py``: Redis stopped under load, no process restarted. A unit test that
closes a channel waiting on BRPOP with the server gone did not reproduce the crash without the
fix (the crash needs Celery's consumer's exact sequence of channels), so it is not kept.
"""

from __future__ import annotations

from workers import broker_compat


def test_install_is_idempotent() -> None:
    broker_compat.install()
    from kombu.transport import redis as kombu_redis

    patched = kombu_redis.Channel.close
    broker_compat.install()
    assert kombu_redis.Channel.close is patched
