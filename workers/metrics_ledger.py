"""A metrics ledger in the broker's Redis: task durations and outcomes, skill calls and tokens.

Workers run on many processes and machines and restart at will, so per-process Prometheus
counters would be scattered and reset. Each worker instead adds its observations to a few
Redis hashes (one pipelined round trip per task), and the API's ``/metrics`` reads them back
as cumulative Prometheus counters and histograms. Counts survive worker restarts (Redis
persists them with the queues) and no label carries an agent id, so cardinality stays fixed.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis

from memory_core.providers.protocols import TokenUsage
from memory_core.settings import Settings
from workers.intake import IntakeQueue
from workers.redis_client import is_redis_url, redis_client_for

logger = logging.getLogger("arandu.metrics")

#: Upper bounds (seconds) of the task-duration histogram buckets; +Inf is implied.
DURATION_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

#: How kombu's Redis transport names a queue's per-priority lists (its defaults, which we keep).
KOMBU_PRIORITY_STEPS: tuple[int, ...] = (0, 3, 6, 9)
KOMBU_PRIORITY_SEPARATOR = "\x06\x16"


@dataclass
class TaskStats:
    """Everything recorded about one task name."""

    bucket_counts: dict[float, int] = field(default_factory=dict)  # non-cumulative, by upper bound (inf last)
    duration_sum_s: float = 0.0
    count: int = 0
    states: dict[str, int] = field(default_factory=dict)

    def cumulative_buckets(self) -> list[tuple[str, float]]:
        """Prometheus-style ``(le, cumulative count)`` pairs, ending with ``+Inf``."""
        running = 0
        pairs: list[tuple[str, float]] = []
        for bound in (*DURATION_BUCKETS, math.inf):
            running += self.bucket_counts.get(bound, 0)
            pairs.append(("+Inf" if math.isinf(bound) else repr(bound), float(running)))
        return pairs


@dataclass
class LedgerSnapshot:
    """What the ledger holds at one instant."""

    tasks: dict[str, TaskStats] = field(default_factory=dict)
    skill_calls: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (skill, implementation, outcome)
    skill_tokens: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (skill, implementation, direction)


class MetricsLedger:
    """Writes and reads the ledger under ``<key prefix>arandu:metrics:``."""

    def __init__(self, client: redis.Redis, key_prefix: str = "") -> None:
        self.client = client
        self.key_prefix = key_prefix
        self.base = f"{key_prefix}arandu:metrics:"
        # Skill calls wait here until the task that made them ends: one round trip per task,
        # not one per call (a message's extraction alone makes several).
        self._pending_skills: Counter[str] = Counter()
        self._pending_lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings: Settings) -> MetricsLedger | None:
        """The ledger on the configured broker, or ``None`` when the broker is not Redis."""
        if not is_redis_url(settings.broker_url):
            return None
        return cls(redis_client_for(settings.broker_url), settings.broker_key_prefix or "")

    def queue_depth(self, queue: str) -> int:
        """Messages waiting in a Celery queue on this Redis: kombu keeps one list per priority step.

        Read directly because kombu's passive ``queue_declare`` misses queues under a
        ``global_keyprefix`` (its existence check does not apply the prefix).
        """
        names = [queue, *(f"{queue}{KOMBU_PRIORITY_SEPARATOR}{step}" for step in KOMBU_PRIORITY_STEPS if step)]
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.llen(f"{self.key_prefix}{name}")
        return sum(int(size) for size in pipe.execute())

    def intake_depth(self) -> int:
        """Single messages waiting for a collector (:mod:`workers.intake`)."""
        return IntakeQueue(self.client, self.key_prefix).depth()

    def _task_key(self, task: str) -> str:
        return f"{self.base}task:{task}"

    def observe_task(self, task: str, duration_s: float, state: str) -> None:
        """Count one execution of ``task`` that took ``duration_s`` and ended in ``state`` (SUCCESS, RETRY...)."""
        bound = next((b for b in DURATION_BUCKETS if duration_s <= b), math.inf)
        key = self._task_key(task)
        pipe = self.client.pipeline(transaction=False)
        pipe.sadd(f"{self.base}tasks", task)
        pipe.hincrby(key, f"le:{'inf' if math.isinf(bound) else repr(bound)}", 1)
        pipe.hincrbyfloat(key, "sum", duration_s)
        pipe.hincrby(key, "count", 1)
        pipe.hincrby(key, f"state:{state}", 1)
        self._add_pending_skills(pipe)
        pipe.execute()

    def record_skill_call(self, skill: str, implementation: str, outcome: str, usage: TokenUsage) -> None:
        """Count one skill call and its tokens (the :class:`SkillCallSink` of instrumented skills).

        Buffered in process: the next :meth:`observe_task` (the end of the task that made the
        call) or :meth:`flush` writes it.
        """
        with self._pending_lock:
            self._pending_skills[f"calls|{skill}|{implementation}|{outcome}"] += 1
            if usage.input_tokens:
                self._pending_skills[f"tokens|{skill}|{implementation}|input"] += usage.input_tokens
            if usage.output_tokens:
                self._pending_skills[f"tokens|{skill}|{implementation}|output"] += usage.output_tokens

    def flush(self) -> None:
        """Write buffered skill calls now (a process that records outside tasks calls this)."""
        pipe = self.client.pipeline(transaction=False)
        if self._add_pending_skills(pipe):
            pipe.execute()

    def _add_pending_skills(self, pipe: redis.client.Pipeline) -> bool:
        with self._pending_lock:
            pending, self._pending_skills = self._pending_skills, Counter()
        for name, amount in pending.items():
            pipe.hincrby(f"{self.base}skills", name, amount)
        return bool(pending)

    def snapshot(self) -> LedgerSnapshot:
        """Read everything back (a handful of round trips, whatever the traffic was)."""
        snapshot = LedgerSnapshot()
        names = sorted(_text(name) for name in self.client.smembers(f"{self.base}tasks"))
        if names:
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(self._task_key(name))
            for name, raw in zip(names, pipe.execute(), strict=True):
                snapshot.tasks[name] = _task_stats(raw)
        for raw_field, raw_value in self.client.hgetall(f"{self.base}skills").items():
            kind, _, rest = _text(raw_field).partition("|")
            parts = tuple(rest.split("|"))
            if len(parts) != 3:
                continue
            target = snapshot.skill_calls if kind == "calls" else snapshot.skill_tokens
            target[(parts[0], parts[1], parts[2])] = int(raw_value)
        return snapshot


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _task_stats(raw: Mapping[bytes, bytes]) -> TaskStats:
    stats = TaskStats()
    for raw_field, raw_value in raw.items():
        name, value = _text(raw_field), _text(raw_value)
        if name.startswith("le:"):
            bound = name.removeprefix("le:")
            stats.bucket_counts[math.inf if bound == "inf" else float(bound)] = int(value)
        elif name.startswith("state:"):
            stats.states[name.removeprefix("state:")] = int(value)
        elif name == "sum":
            stats.duration_sum_s = float(value)
        elif name == "count":
            stats.count = int(value)
    return stats
