"""What the summary and profile jobs share: an entity's active facts as skill input, and skill-call accounting.

An entity's facts are the active facts linked to it (``memory_fact_entity_links``): those
about it first, then those that only mention it ("Fernanda works at Vertix" tells something
about Vertix too), newest first within each group, so a bounded read keeps what matters most.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.cognition.maintenance_models import FactLine
from memory_core.cognition.skill import SkillOutcome
from memory_core.providers.protocols import TokenUsage

__all__ = ["SkillTally", "call_with_timeout", "entity_fact_lines", "stale_before"]

InputT = TypeVar("InputT")
ResultT = TypeVar("ResultT")

_ENTITY_FACTS_SQL = text(
    """
    SELECT f.id, f.fact_text, f.attribute_key, f.valid_from, f.entity_key = :key AS about
    FROM memory_fact_entity_links l
    JOIN memory_facts f ON f.id = l.fact_id AND f.agent_id = :agent
    WHERE l.agent_id = :agent AND l.entity_key = :key AND f.valid_to IS NULL
    ORDER BY (f.entity_key = :key) DESC, f.valid_from DESC, f.id
    LIMIT :limit
    """
)


def entity_fact_lines(session: Session, agent_id: str, entity_key: str, limit: int) -> list[FactLine]:
    """Up to ``limit`` active facts linked to ``entity_key``: about it first, then mentions, newest first."""
    rows = session.execute(_ENTITY_FACTS_SQL, {"agent": agent_id, "key": entity_key, "limit": limit}).all()
    return [
        FactLine(fact_id=str(row.id), text=row.fact_text, attribute_key=row.attribute_key, valid_from=row.valid_from)
        for row in rows
    ]


def stale_before(now: datetime, interval_days: int) -> datetime:
    """Texts refreshed before this instant are stale."""
    return now - timedelta(days=interval_days)


@dataclass
class SkillTally:
    """Calls, fallbacks and tokens of one job run's skill calls (reported in its result)."""

    calls: int = 0
    fallbacks: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)

    def add(self, outcome: SkillOutcome[Any]) -> None:
        """Count one finished call."""
        self.calls += 1
        self.fallbacks += int(outcome.used_fallback)
        self.usage = self.usage + outcome.usage

    def as_result(self) -> dict[str, int]:
        """The JSON-friendly fields of a job result."""
        return {"skill_calls": self.calls, "skill_fallbacks": self.fallbacks, "tokens": self.usage.total_tokens}


class _Call(Generic[ResultT]):
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: ResultT | None = None
        self.error: BaseException | None = None


def call_with_timeout(
    function: Callable[[InputT], ResultT], argument: InputT, timeout_s: float
) -> tuple[bool, ResultT | None]:
    """``(True, function(argument))``, or ``(False, None)`` when it takes longer than ``timeout_s``.

    The call runs in a daemon thread of its own, so one that overruns never blocks the job
    (nor the next call, as a shared pool's busy worker would); it finishes or fails later and
    its answer is dropped. The provider's own timeout bounds how long such a thread lives.
    Exceptions raised in time propagate to the caller.
    """
    call: _Call[ResultT] = _Call()

    def target() -> None:
        try:
            call.value = function(argument)
        except BaseException as error:  # handed to the caller's thread and re-raised there
            call.error = error
        finally:
            call.done.set()

    threading.Thread(target=target, name="maintenance-skill-call", daemon=True).start()
    if not call.done.wait(timeout_s):
        return False, None
    if call.error is not None:
        raise call.error
    return True, call.value
