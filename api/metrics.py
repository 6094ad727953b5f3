"""``GET /metrics``: the service's state in Prometheus text format, read from where it lives.

Nothing here counts requests in process memory: the API may run as several processes on
several machines, and workers elsewhere. Each scrape reads (at most every few seconds):

* PostgreSQL: events received, processed and failed, and runs still in the pipeline, from
  ``pipeline_runs``; maintenance job runs by job and outcome from ``maintenance_job_runs``;
* the broker: messages waiting in each queue;
* the metrics ledger in Redis (:mod:`workers.metrics_ledger`): task durations (the write
  pipeline's stage latencies, maintenance jobs) and outcomes, skill calls and tokens by skill;
* PostgreSQL's ``llm_usage`` (:mod:`memory_core.usage`): every agent's LLM calls and tokens
  summed by skill (``arandu_llm_calls_total``...). Days before yesterday no longer change, so
  their sums are read once a day; each reading sums only yesterday's and today's rows.

A source that does not answer is reported through ``arandu_metrics_source_up`` instead of
failing the scrape. No label carries an agent id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta

from celery import Celery
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, text

from memory_core.usage import UsageCounts, add_totals, usage_totals_by_skill
from workers.celery_app import QUEUES
from workers.metrics_ledger import LedgerSnapshot, MetricsLedger

logger = logging.getLogger("arandu.api")

#: Statuses after which a run no longer moves.
FINISHED_STATUSES = ("done", "failed")
JOB_OUTCOMES = ("done", "failed", "skipped")
#: Skill-call outcomes (workers.metrics_ledger) that mean the LLM's answer was unusable.
INVALID_OUTPUT_OUTCOMES = ("fallback", "invalid_output")


@dataclass
class ServiceReading:
    """One reading of every source; ``None`` where the source did not answer."""

    runs_by_status: dict[str, int] | None = None
    job_runs: dict[tuple[str, str], int] | None = None
    queue_depths: dict[str, int] | None = None
    ledger: LedgerSnapshot | None = None
    llm_usage: dict[str, UsageCounts] | None = None
    source_up: dict[str, bool] = field(default_factory=dict)
    duration_s: float = 0.0


class ServiceCollector(Collector):
    """A Prometheus collector over the database, the broker and the metrics ledger."""

    def __init__(self, engine: Engine, celery: Celery, ledger: MetricsLedger | None, *, cache_s: float = 5.0) -> None:
        self.engine = engine
        # A scrape reuses an earlier reading this recent: cheap even with many scrapers.
        self.cache_s = cache_s
        self.celery = celery
        self.ledger = ledger
        self._lock = threading.Lock()
        self._cached: tuple[float, ServiceReading] | None = None
        # Usage of the days before ``_settled_before`` (a UTC day), summed once: those rows no longer change.
        self._settled_usage: dict[str, UsageCounts] = {}
        self._settled_before: date | None = None

    def reading(self) -> ServiceReading:
        """The latest reading, refreshed when older than ``cache_s``."""
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < self.cache_s:
                return self._cached[1]
            reading = self._read()
            self._cached = (time.monotonic(), reading)
            return reading

    def _read(self) -> ServiceReading:
        started = time.perf_counter()
        reading = ServiceReading()
        try:
            reading.runs_by_status, reading.job_runs = self._read_database()
            reading.llm_usage = self._read_llm_usage()
            reading.source_up["database"] = True
        except Exception:
            logger.warning("metrics: the database did not answer", exc_info=True)
            reading.source_up["database"] = False
        try:
            reading.queue_depths = self._read_queues()
            reading.source_up["broker"] = True
        except Exception:
            logger.warning("metrics: the broker did not answer", exc_info=True)
            reading.source_up["broker"] = False
        if self.ledger is not None:
            try:
                reading.ledger = self.ledger.snapshot()
                reading.source_up["ledger"] = True
            except Exception:
                logger.warning("metrics: the metrics ledger did not answer", exc_info=True)
                reading.source_up["ledger"] = False
        reading.duration_s = time.perf_counter() - started
        return reading

    def _read_database(self) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
        with self.engine.begin() as conn:
            conn.execute(text("SET LOCAL statement_timeout = '5s'"))
            runs = {
                str(status): int(count)
                for status, count in conn.execute(text("SELECT status, count(*) FROM pipeline_runs GROUP BY status"))
            }
            jobs = {
                (str(job), str(status)): int(count)
                for job, status, count in conn.execute(
                    text("SELECT job, status, count(*) FROM maintenance_job_runs GROUP BY job, status")
                )
            }
        return runs, jobs

    def _read_llm_usage(self) -> dict[str, UsageCounts]:
        """Every agent's usage by skill: the settled days' sums (read once a day) plus the last two days."""
        with self.engine.begin() as conn:
            conn.execute(text("SET LOCAL statement_timeout = '5s'"))
            today = conn.execute(text("SELECT CAST(timezone('UTC', now()) AS date)")).scalar_one()
            # A stage that started before midnight commits its usage on the day it started: yesterday
            # may still move for a moment, the days before it no longer do.
            recent_from = today - timedelta(days=1)
            if self._settled_before != recent_from:
                self._settled_usage = usage_totals_by_skill(conn, until=recent_from)
                self._settled_before = recent_from
            recent = usage_totals_by_skill(conn, since=recent_from)
        return add_totals(self._settled_usage, recent.items())

    def _read_queues(self) -> dict[str, int]:
        if self.ledger is not None:
            depths = {queue: self.ledger.queue_depth(queue) for queue in QUEUES}
            depths["intake"] = self.ledger.intake_depth()
            return depths
        depths: dict[str, int] = {}
        with self.celery.connection_for_read() as connection:
            channel = connection.default_channel
            for queue in QUEUES:
                try:
                    depths[queue] = int(channel.queue_declare(queue=queue, passive=True).message_count)
                except connection.channel_errors:
                    # Redis drops an empty queue's key; a passive declare then says "no such queue".
                    depths[queue] = 0
        return depths

    def collect(self) -> Iterator[Metric]:
        """Every metric family of the service."""
        reading = self.reading()
        yield from _pipeline_families(reading)
        yield from _job_families(reading)
        yield from _queue_families(reading)
        yield from _ledger_families(reading)
        yield from _llm_usage_families(reading)
        up = GaugeMetricFamily(
            "arandu_metrics_source_up", "1 when the source answered the last reading.", labels=["source"]
        )
        for source, answered in sorted(reading.source_up.items()):
            up.add_metric([source], 1.0 if answered else 0.0)
        yield up
        yield GaugeMetricFamily(
            "arandu_metrics_reading_seconds", "Time the last reading of every source took.", value=reading.duration_s
        )


def _pipeline_families(reading: ServiceReading) -> Iterator[Metric]:
    runs = reading.runs_by_status
    if runs is None:
        return
    yield CounterMetricFamily(
        "arandu_events_received", "Events accepted into the write pipeline.", value=float(sum(runs.values()))
    )
    yield CounterMetricFamily(
        "arandu_events_processed", "Events whose pipeline finished (status done).", value=float(runs.get("done", 0))
    )
    yield CounterMetricFamily(
        "arandu_events_failed", "Events whose pipeline failed past its retries.", value=float(runs.get("failed", 0))
    )
    in_flight = GaugeMetricFamily(
        "arandu_events_in_pipeline", "Events not yet done or failed, by run status.", labels=["status"]
    )
    for status, count in sorted(runs.items()):
        if status not in FINISHED_STATUSES:
            in_flight.add_metric([status], float(count))
    yield in_flight


def _job_families(reading: ServiceReading) -> Iterator[Metric]:
    if reading.job_runs is None:
        return
    finished = CounterMetricFamily(
        "arandu_job_runs", "Maintenance job runs that ended, by job and outcome.", labels=["job", "outcome"]
    )
    active = GaugeMetricFamily(
        "arandu_job_runs_active", "Maintenance job runs queued or running, by job and status.", labels=["job", "status"]
    )
    for (job, status), count in sorted(reading.job_runs.items()):
        (finished if status in JOB_OUTCOMES else active).add_metric([job, status], float(count))
    yield finished
    yield active


def _queue_families(reading: ServiceReading) -> Iterator[Metric]:
    if reading.queue_depths is None:
        return
    depth = GaugeMetricFamily(
        "arandu_queue_depth",
        "Tasks waiting in each broker queue; queue=intake: single messages waiting for a collector.",
        labels=["queue"],
    )
    for queue, count in sorted(reading.queue_depths.items()):
        depth.add_metric([queue], float(count))
    yield depth


def _ledger_families(reading: ServiceReading) -> Iterator[Metric]:
    ledger = reading.ledger
    if ledger is None:
        return
    durations = HistogramMetricFamily(
        "arandu_task_duration_seconds",
        "Task run time by task: the write pipeline's stage latencies and the maintenance jobs.",
        labels=["task"],
    )
    outcomes = CounterMetricFamily(
        "arandu_task_runs", "Task executions by task and final state.", labels=["task", "state"]
    )
    for task, stats in sorted(ledger.tasks.items()):
        durations.add_metric([task], stats.cumulative_buckets(), stats.duration_sum_s)
        for state, count in sorted(stats.states.items()):
            outcomes.add_metric([task, state], float(count))
    yield durations
    yield outcomes
    calls = CounterMetricFamily(
        "arandu_skill_calls",
        "Skill calls by skill, implementation (llm or offline) and outcome (ok, fallback, invalid_output, error).",
        labels=["skill", "implementation", "outcome"],
    )
    for (skill, implementation, outcome), count in sorted(ledger.skill_calls.items()):
        calls.add_metric([skill, implementation, outcome], float(count))
    yield calls
    tokens = CounterMetricFamily(
        "arandu_llm_tokens",
        "LLM tokens by skill and direction (input, output).",
        labels=["skill", "implementation", "direction"],
    )
    for (skill, implementation, direction), count in sorted(ledger.skill_tokens.items()):
        tokens.add_metric([skill, implementation, direction], float(count))
    yield tokens
    # An answer that did not parse or did not fit the schema, whatever the skill then did (its
    # offline twin stood in: "fallback"; the pipeline's fallback: "invalid_output").
    invalid = CounterMetricFamily(
        "arandu_llm_invalid_outputs",
        "LLM answers that were not valid JSON or did not match the skill's schema, by skill.",
        labels=["skill"],
    )
    by_skill: dict[str, int] = {}
    for (skill, implementation, outcome), count in ledger.skill_calls.items():
        if implementation == "llm" and outcome in INVALID_OUTPUT_OUTCOMES:
            by_skill[skill] = by_skill.get(skill, 0) + count
    for skill, count in sorted(by_skill.items()):
        invalid.add_metric([skill], float(count))
    yield invalid


_LLM_USAGE_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("arandu_llm_calls", "calls", "LLM answers received on behalf of agents, by skill (from llm_usage)."),
    (
        "arandu_llm_failures",
        "failures",
        "Skill runs whose LLM answer was unusable or never came, by skill (from llm_usage).",
    ),
    ("arandu_llm_input_tokens", "input_tokens", "LLM input tokens spent on behalf of agents, by skill."),
    ("arandu_llm_output_tokens", "output_tokens", "LLM output tokens spent on behalf of agents, by skill."),
    (
        "arandu_llm_cached_input_tokens",
        "cached_input_tokens",
        "Input tokens the provider served from its prompt cache (part of the input tokens), by skill.",
    ),
)


def _llm_usage_families(reading: ServiceReading) -> Iterator[Metric]:
    usage = reading.llm_usage
    if usage is None:
        return
    for name, counter, description in _LLM_USAGE_FAMILIES:
        family = CounterMetricFamily(name, description, labels=["skill"])
        for skill, counts in sorted(usage.items()):
            family.add_metric([skill], float(getattr(counts, counter)))
        yield family


def build_metrics_registry(
    engine: Engine, celery: Celery, ledger: MetricsLedger | None, *, cache_s: float = 5.0
) -> CollectorRegistry:
    """A registry holding the service collector (not the global one: tests build several apps)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(engine, celery, ledger, cache_s=cache_s))
    return registry
