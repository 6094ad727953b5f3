"""The message signal: a fact said in a message that answers the query is relevant too.

A fact is one sentence of a message, rewritten to stand alone ("Caroline went to a LGBTQ support
group"); its own words often miss the query's ("When did she go to that meeting?") while the
message, with its speaker and the rest of what was said, matches. Relevant conversations
(:mod:`memory_core.read.conversations`) score the agent's latest messages by meaning and by every
word of the query; each candidate message's own relevance becomes the ``message`` signal of the
facts said in it, joined to their relevance at :data:`~memory_core.read.rank.MESSAGE_BLEND`
(:class:`~memory_core.read.rank._Scorer`). The facts of those messages that no other signal found
are read (one statement, by ``source_event_id``) and ranked with the others, under the same
filters (validity or time-travel window, ``min_confidence``, session, ``entity_keys``).

Measured on the LoCoMo sample (docs/retrieval-quality.md): the facts alone, ordered by score, found
the evidence 15 points less often at 10 than facts and messages merged; with this signal, the
facts carry the evidence as the messages do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.db.driver_reads import fetch_all
from memory_core.read.entities import TimeWindow, window_params
from memory_core.read.rank import Candidate
from memory_core.read.signals import ELIGIBLE_CTE, FACT_COLUMNS, base_candidate, confidence_params, fact_filter_sql

__all__ = ["facts_said_in", "set_message_signal"]

_FACTS_SAID_IN_SQL = """
{eligible}SELECT {fact_columns}
FROM memory_facts f
LEFT JOIN memory_events ev ON ev.id = f.source_event_id
WHERE {fact_filter} AND f.source_event_id = ANY(CAST(:event_ids AS uuid[]))
  AND NOT (CAST(f.id AS text) = ANY(CAST(:known AS text[])))
"""


def set_message_signal(candidates: Iterable[Candidate], message_relevance: Mapping[str, float]) -> list[Candidate]:
    """Give each candidate the relevance of the message it was said in; the candidates whose signal rose."""
    raised: list[Candidate] = []
    for candidate in candidates:
        value = message_relevance.get(candidate.source_event_id or "", 0.0)
        if value > candidate.message:
            candidate.message = value
            candidate.sources.add("message")
            raised.append(candidate)
    return raised


def facts_said_in(
    session: Session,
    agent_id: str,
    message_relevance: Mapping[str, float],
    known_fact_ids: Iterable[str],
    config: MemoryConfig,
    *,
    now: datetime,
    window: TimeWindow | None,
    session_id: str | None,
    filter_keys: Iterable[str] | None,
) -> list[Candidate]:
    """The facts said in the scored messages at or above ``min_similarity`` that are not among ``known_fact_ids``."""
    event_ids = [event_id for event_id, value in message_relevance.items() if value >= config.min_similarity]
    if not event_ids:
        return []
    params: dict[str, Any] = {
        "agent": agent_id,
        "event_ids": event_ids,
        "known": list(known_fact_ids),
        **confidence_params(config, now),
        **window_params(window),
    }
    if session_id is not None:
        params["session_id"] = session_id
    keys = list(filter_keys) if filter_keys is not None else None
    if keys is not None:
        params["filter_keys"] = keys
    sql = _FACTS_SAID_IN_SQL.format(
        eligible=f"WITH {ELIGIBLE_CTE.strip()}\n" if keys is not None else "",
        fact_columns=FACT_COLUMNS,
        fact_filter=fact_filter_sql(window, session_filter=session_id is not None, entity_filter=keys is not None),
    )
    found = [base_candidate(row) for row in fetch_all(session, sql, params)]
    set_message_signal(found, message_relevance)
    return found
