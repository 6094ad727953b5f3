"""LLM usage accounting: calls and tokens per agent, UTC day, skill and model, in ``llm_usage``.

Every LLM call made on behalf of an agent is counted once, where the work it served is recorded:

* the write pipeline: each stage's output carries its calls by skill and model
  (:class:`~memory_core.write.schemas.TokenCount` ``.by_skill``), written by the statement that
  stores the output and advances the run (:func:`memory_core.write.runs.complete_stages`), so a
  redelivered stage that advances nothing counts nothing;
* maintenance jobs: the job's skills add to a :class:`UsageTally` (:func:`account_skills`), written
  in the transaction that records the run's end;
* the reranker: :class:`DeferredUsage` queues each call (even one that finishes after retrieval
  gave up waiting) and a background thread writes the queue in one statement per flush.

Rows are only ever added to (``INSERT ... ON CONFLICT DO UPDATE SET calls = calls + excluded.calls``),
in key order, so concurrent writers wait for each other instead of deadlocking.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from memory_core.cognition.skill import Skill, SkillOutcome, SkillOutputError
from memory_core.providers.protocols import TokenUsage

__all__ = [
    "COUNTERS",
    "AccountedSkill",
    "AgentUsage",
    "DeferredUsage",
    "UsageCounts",
    "UsageTally",
    "account_skills",
    "read_agent_usage",
    "record_usage",
    "usage_totals_by_skill",
]

logger = logging.getLogger(__name__)

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)
BundleT = TypeVar("BundleT")

#: The counters of a usage row, in the order the statements list them.
COUNTERS: tuple[str, ...] = ("calls", "failures", "input_tokens", "output_tokens", "cached_input_tokens")

# The day is PostgreSQL's, in UTC: every process agrees on it whatever its clock or zone.
_UPSERT_ROWS = text(
    """
    INSERT INTO llm_usage AS u (agent_id, day, skill, model, calls, failures, input_tokens, output_tokens,
                                cached_input_tokens)
    SELECT x.agent_id, CAST(timezone('UTC', now()) AS date), x.skill, x.model, sum(x.calls), sum(x.failures),
           sum(x.input_tokens), sum(x.output_tokens), sum(x.cached_input_tokens)
    FROM unnest(CAST(:agents AS text[]), CAST(:skills AS text[]), CAST(:models AS text[]), CAST(:calls AS bigint[]),
                CAST(:failures AS bigint[]), CAST(:inputs AS bigint[]), CAST(:outputs AS bigint[]),
                CAST(:cached AS bigint[]))
         AS x(agent_id, skill, model, calls, failures, input_tokens, output_tokens, cached_input_tokens)
    GROUP BY x.agent_id, x.skill, x.model
    ORDER BY x.agent_id, x.skill, x.model
    ON CONFLICT (agent_id, day, skill, model) DO UPDATE SET
        calls = u.calls + excluded.calls,
        failures = u.failures + excluded.failures,
        input_tokens = u.input_tokens + excluded.input_tokens,
        output_tokens = u.output_tokens + excluded.output_tokens,
        cached_input_tokens = u.cached_input_tokens + excluded.cached_input_tokens,
        updated_at = now()
    """
)


@dataclass
class UsageCounts:
    """Calls and tokens of one (skill, model), or a sum of them."""

    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def add(self, other: UsageCounts) -> None:
        """Add ``other``'s counters to these."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def of(cls, usage: TokenUsage, *, failed: bool) -> UsageCounts:
        """The counts of one skill run that spent ``usage`` (and produced nothing usable when ``failed``)."""
        return cls(
            calls=usage.calls,
            failures=1 if failed else 0,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return {name: int(getattr(self, name)) for name in COUNTERS}


UsageKey = tuple[str, str, str]  # (agent_id, skill, model)


class UsageTally:
    """Usage counted in memory, by (agent, skill, model), until someone writes it; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[UsageKey, UsageCounts] = {}

    def add(self, agent_id: str, skill: str, usage: TokenUsage, *, failed: bool = False) -> None:
        """Count one skill run; a free, successful run (offline rules) counts nothing."""
        if not usage.calls and not failed:
            return
        key = (agent_id, skill, usage.model or "")
        with self._lock:
            self._counts.setdefault(key, UsageCounts()).add(UsageCounts.of(usage, failed=failed))

    def merge(self, counts: Mapping[UsageKey, UsageCounts]) -> None:
        """Add ``counts`` (a drained tally put back after a failed write)."""
        with self._lock:
            for key, value in counts.items():
                self._counts.setdefault(key, UsageCounts()).add(value)

    def drain(self) -> dict[UsageKey, UsageCounts]:
        """Everything counted so far, and an empty tally."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def __len__(self) -> int:
        with self._lock:
            return len(self._counts)


def record_usage(session: Session | Connection, counts: Mapping[UsageKey, UsageCounts]) -> None:
    """Add ``counts`` to today's (UTC) rows of ``llm_usage`` in one statement, in the caller's transaction."""
    if not counts:
        return
    keys = sorted(counts)
    session.execute(
        _UPSERT_ROWS,
        {
            "agents": [key[0] for key in keys],
            "skills": [key[1] for key in keys],
            "models": [key[2] for key in keys],
            "calls": [counts[key].calls for key in keys],
            "failures": [counts[key].failures for key in keys],
            "inputs": [counts[key].input_tokens for key in keys],
            "outputs": [counts[key].output_tokens for key in keys],
            "cached": [counts[key].cached_input_tokens for key in keys],
        },
    )


class AccountedSkill(Generic[InputT, OutputT]):
    """``inner`` with every run counted in ``tally`` for ``agent_id``; counting never fails the run.

    A run that answered (or fell back to rules: ``used_fallback``) counts its calls and tokens;
    one that raised counts as a failure, with the tokens an invalid answer cost.
    """

    def __init__(self, inner: Skill[InputT, OutputT], agent_id: str, tally: UsageTally) -> None:
        self.inner = inner
        self.agent_id = agent_id
        self.tally = tally

    @property
    def name(self) -> str:
        """The wrapped skill's name."""
        return self.inner.name

    def run(self, skill_input: InputT, /) -> SkillOutcome[OutputT]:
        """Run the wrapped skill and count what it spent, whatever its outcome."""
        try:
            outcome = self.inner.run(skill_input)
        except SkillOutputError as error:
            self.tally.add(self.agent_id, self.name, error.usage, failed=True)
            raise
        except Exception:
            self.tally.add(self.agent_id, self.name, TokenUsage(), failed=True)
            raise
        self.tally.add(self.agent_id, self.name, outcome.usage, failed=outcome.used_fallback)
        return outcome


def account_skills(bundle: BundleT, agent_id: str, tally: UsageTally) -> BundleT:
    """A copy of a skill bundle (``MaintenanceSkills``...) whose skills count their usage for ``agent_id``.

    The bundle must be a dataclass; every field holding a skill is wrapped.
    """
    if not dataclasses.is_dataclass(bundle) or isinstance(bundle, type):
        raise TypeError(f"expected a dataclass instance of skills, got {type(bundle).__name__}")
    wrapped: dict[str, Any] = {}
    for spec in dataclasses.fields(bundle):
        value = getattr(bundle, spec.name)
        if isinstance(value, Skill):
            wrapped[spec.name] = AccountedSkill(value, agent_id, tally)
    return dataclasses.replace(bundle, **wrapped)


# A flush that failed keeps its counts for the next one, this many times at most.
_DEFERRED_MAX_TRIES = 5


class DeferredUsage:
    """Usage queued in process and written by a background thread every ``flush_interval_s``.

    For the read path, whose requests should not wait for a write: one statement per flush
    whatever the number of calls. ``flush_interval_s <= 0`` writes at once, in the caller.
    What is lost: the queue of a process killed without :meth:`close`.
    """

    def __init__(self, sessions: sessionmaker[Session], *, flush_interval_s: float) -> None:
        self._sessions = sessions
        self.flush_interval_s = flush_interval_s
        self._tally = UsageTally()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._failed_flushes = 0
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    def record(self, agent_id: str, skill: str, usage: TokenUsage, *, failed: bool = False) -> None:
        """Count one skill run for ``agent_id`` (queued; never raises)."""
        self._tally.add(agent_id, skill, usage, failed=failed)
        if self.flush_interval_s <= 0 or self._stopped:
            self.flush()
            return
        self._ensure_thread()

    def pending(self) -> int:
        """How many (agent, skill, model) rows wait for the next flush."""
        return len(self._tally)

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._thread_lock:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="llm-usage-flush", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> bool:
        """Write what is queued now; ``True`` when nothing is left. Never raises."""
        with self._flush_lock:
            counts = self._tally.drain()
            if not counts:
                return True
            try:
                with self._sessions.begin() as session:
                    session.execute(text("SET LOCAL synchronous_commit = off"))
                    record_usage(session, counts)
            except Exception:  # accounting must never fail a retrieval: retried at the next flush
                self._failed_flushes += 1
                logger.warning("could not write the LLM usage of %d rows", len(counts), exc_info=True)
                if self._failed_flushes < _DEFERRED_MAX_TRIES:
                    self._tally.merge(counts)
                    return False
                failures = self._failed_flushes
                logger.error("dropping the LLM usage of %d rows after %d failed writes", len(counts), failures)
            self._failed_flushes = 0
            return True

    def close(self) -> None:
        """Stop the background thread and write what is queued."""
        self._stopped = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self.flush_interval_s * 2))
        self.flush()


# --- reading -------------------------------------------------------------------------------


@dataclass
class AgentUsage:
    """An agent's usage over a range of days: totals, per day and per skill (and model)."""

    agent_id: str
    since: date
    until: date
    totals: UsageCounts = field(default_factory=UsageCounts)
    by_day: dict[date, UsageCounts] = field(default_factory=dict)
    by_skill: dict[tuple[str, str], UsageCounts] = field(default_factory=dict)


_AGENT_ROWS = text(
    """
    SELECT day, skill, model, calls, failures, input_tokens, output_tokens, cached_input_tokens
    FROM llm_usage WHERE agent_id = :agent AND day BETWEEN :since AND :until
    ORDER BY day, skill, model
    """
)


def read_agent_usage(session: Session | Connection, agent_id: str, since: date, until: date) -> AgentUsage:
    """``agent_id``'s usage from ``since`` to ``until`` (UTC days, both included): one index range."""
    usage = AgentUsage(agent_id=agent_id, since=since, until=until)
    for row in session.execute(_AGENT_ROWS, {"agent": agent_id, "since": since, "until": until}):
        counts = UsageCounts(*(int(getattr(row, name)) for name in COUNTERS))
        usage.totals.add(counts)
        usage.by_day.setdefault(row.day, UsageCounts()).add(counts)
        usage.by_skill.setdefault((row.skill, row.model), UsageCounts()).add(counts)
    return usage


_TOTALS_SINCE = text(
    """
    SELECT skill, sum(calls) AS calls, sum(failures) AS failures, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, sum(cached_input_tokens) AS cached_input_tokens
    FROM llm_usage WHERE day >= :since AND (CAST(:until AS date) IS NULL OR day < :until)
    GROUP BY skill
    """
)


def usage_totals_by_skill(
    connection: Session | Connection, *, since: date | None = None, until: date | None = None
) -> dict[str, UsageCounts]:
    """Every agent's usage summed by skill, over days in ``[since, until)`` (open ends: all days)."""
    totals: dict[str, UsageCounts] = {}
    rows = connection.execute(_TOTALS_SINCE, {"since": since or date.min, "until": until})
    for row in rows:
        totals[str(row.skill)] = UsageCounts(*(int(getattr(row, name) or 0) for name in COUNTERS))
    return totals


def add_totals(into: dict[str, UsageCounts], more: Iterable[tuple[str, UsageCounts]]) -> dict[str, UsageCounts]:
    """``into`` plus ``more``, by skill (a new dict)."""
    summed = {skill: dataclasses.replace(counts) for skill, counts in into.items()}
    for skill, counts in more:
        summed.setdefault(skill, UsageCounts()).add(counts)
    return summed
