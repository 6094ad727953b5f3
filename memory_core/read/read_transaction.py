"""The read transaction every retrieval statement runs in: read-only and bounded in time.

:func:`begin_read` sends every setting as one simple-protocol message (one round trip), the HNSW
``ef_search`` of a side connection's semantic search included: set apart, it was a round trip
more on the critical path of a large agent's retrieve (0.3-0.4 ms on a slow machine). Sending the
``BEGIN`` in that message too (sessions in autocommit, which open the transaction themselves) was
measured and not kept: switching a pooled connection's autocommit at every checkout costs the
client what the round trip saved.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy.orm import Session

from memory_core.agent_config import AGENT_CONFIG_SQL
from memory_core.db.driver_reads import AGENT_LITERAL, run, run_then_fetch_scalar

__all__ = [
    "READ_STATEMENT_TIMEOUT_MS",
    "READ_WORK_MEM",
    "begin_read",
    "begin_read_for_agent",
    "plan_generically",
    "set_ef_search",
]

# Reads never run longer than this; a runaway query degrades to an empty result instead.
READ_STATEMENT_TIMEOUT_MS = 15_000

# Bitmaps of a large agent's keyword or graph matches stay exact (not lossy) within this memory.
READ_WORK_MEM = "32MB"

# plan_cache_mode auto (PostgreSQL's default, set so that a server configured otherwise does not
# change it): read statements are prepared (psycopg, after their 5th use on a connection), and
# after five plans made for their parameters PostgreSQL keeps one generic plan when it costs no
# more: the small lookups by agent and key stop being planned again (planning was a third of a
# small agent's retrieve in the database). The statements whose plan depends on the agent asked
# (a large agent's keyword counts and graph expansion, and a large agent's signal statements under
# time travel, a session or an entity filter) are sent unprepared and planned for their
# parameters every time (memory_core.db.driver_reads: ``prepare=False``); a small agent's signal
# statement and a large agent's semantic search and its keyword and graph statement are
# prepared at once with one generic plan (plan_generically), the large agent's naming it as a literal.
# max_parallel_workers_per_gather: a retrieval's statements read a few thousand rows at most;
# starting a parallel worker for one of them cost more than it saved (a 3 ms keyword scan took
# 17 ms behind its Gather at 100,000 facts), and under concurrent retrievals every core is busy anyway.
_BEGIN_READ = (
    f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {int(READ_STATEMENT_TIMEOUT_MS)}; "
    f"SET LOCAL work_mem = '{READ_WORK_MEM}'; SET LOCAL plan_cache_mode = auto; "
    "SET LOCAL max_parallel_workers_per_gather = 0"
)


def _ef_search_setting(ef_search: int) -> str:
    # SET LOCAL: the raised ef_search ends with the read transaction.
    return f"SET LOCAL hnsw.ef_search = {int(ef_search)}"


_GENERIC_PLANS_SETTING = "SET LOCAL plan_cache_mode = force_generic_plan"


@lru_cache(maxsize=16)
def _begin_statement(ef_search: int | None, generic_plans: bool) -> str:
    # One text per combination of settings, built once.
    settings = [_BEGIN_READ]
    if ef_search is not None:
        settings.append(_ef_search_setting(ef_search))
    if generic_plans:
        settings.append(_GENERIC_PLANS_SETTING)
    return "; ".join(settings)


def begin_read(session: Session, *, ef_search: int | None = None, generic_plans: bool = False) -> None:
    """Make ``session``'s transaction read-only and bounded in time (reads must never write or hang).

    ``ef_search`` sets the HNSW candidate list of the transaction's vector index scans (a side
    connection's semantic search) in the same round trip; ``generic_plans`` does there what
    :func:`plan_generically` does, for a transaction whose every statement may keep one generic plan.
    """
    run(session, _begin_statement(ef_search, generic_plans))


# The agent's stored config, read in the message that opens the read transaction: no round trip more.
_AGENT_CONFIG_READ = AGENT_CONFIG_SQL.replace(":agent", AGENT_LITERAL)


def begin_read_for_agent(session: Session, agent_id: str) -> dict[str, Any] | None:
    """:func:`begin_read`, also reading ``agent_id``'s stored config overrides in the same round trip.

    Retrieval needs the agent's config before it reads anything else; asked apart, the primary-key
    lookup would cost a round trip more on every retrieve.
    """
    value = run_then_fetch_scalar(
        session, f"{_begin_statement(None, False)}; {_AGENT_CONFIG_READ}", inline_agent=agent_id
    )
    return dict(value) if isinstance(value, dict) and value else None


def plan_generically(session: Session) -> None:
    """From here to the end of ``session``'s read transaction, prepared statements keep one generic plan.

    It applies to unprepared statements too: statements that must be planned for their
    parameters (sent with ``prepare=False``) have to run before it.
    """
    run(session, _GENERIC_PLANS_SETTING)


def set_ef_search(session: Session, ef_search: int) -> None:
    """Set the HNSW candidate list for the rest of ``session``'s read transaction (a search in line)."""
    run(session, _ef_search_setting(ef_search))
