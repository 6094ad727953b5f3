"""``GET /v1/agents/{agent_id}/usage``: the LLM calls and tokens spent on an agent, by day and by skill.

Read from ``llm_usage`` (:mod:`memory_core.usage`), one index range of the agent's rows.
``since`` and ``until`` are UTC days (``YYYY-MM-DD``, both included); without them the answer
covers the last 30 days up to today. A range longer than :data:`MAX_USAGE_DAYS` days is refused:
the answer lists every day, and no dashboard needs more than a year at once.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import JSONResponse

from api.auth import READ, require_api_key
from api.dependencies import answer, get_state
from api.errors import validation_failed
from api.routes.messages import AgentId
from api.schemas import AgentUsageBody, ErrorBody
from memory_core.usage import UsageCounts, read_agent_usage

router = APIRouter(tags=["agents"], dependencies=[Depends(require_api_key)])

#: Days a default range covers, today included.
DEFAULT_USAGE_DAYS = 30
#: The longest range one request may ask for, in days (both ends included).
MAX_USAGE_DAYS = 366

Day = Annotated[str | None, Query(description="A UTC day, YYYY-MM-DD (included).")]

_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or wrong API key"},
    403: {"model": ErrorBody, "description": "the key does not cover the agent"},
    422: {
        "model": ErrorBody,
        "description": "bad agent id, a day that is not YYYY-MM-DD, since after until, or a range too long",
    },
}


def _parse_day(value: str | None, field: str) -> date | None:
    if value is None:
        return None
    try:
        if len(value) != 10:
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise validation_failed([(f"query.{field}", "must be a day written YYYY-MM-DD")]) from None


def usage_range(since: str | None, until: str | None, *, today: date | None = None) -> tuple[date, date]:
    """The (since, until) days a request asks for, defaults filled in; raises the 422 of a bad range."""
    first, last = _parse_day(since, "since"), _parse_day(until, "until")
    last = last or today or datetime.now(UTC).date()
    first = first or last - timedelta(days=DEFAULT_USAGE_DAYS - 1)
    if first > last:
        raise validation_failed([("query.since", f"must not be after until ({last.isoformat()})")])
    if (last - first).days + 1 > MAX_USAGE_DAYS:
        raise validation_failed([("query.until", f"the range covers at most {MAX_USAGE_DAYS} days")])
    return first, last


def _counts(counts: UsageCounts) -> dict[str, int]:
    return counts.as_dict()


@router.get(
    "/v1/agents/{agent_id}/usage",
    dependencies=[READ],
    response_model=AgentUsageBody,
    responses=_RESPONSES,
    summary="LLM usage of an agent",
)
def get_usage(request: Request, agent_id: AgentId, since: Day = None, until: Day = None) -> JSONResponse:
    """LLM calls and tokens spent on the agent from ``since`` to ``until`` (UTC days, both included).

    Defaults to the last 30 days. ``totals`` sums the range; ``by_day`` lists the days with usage,
    oldest first; ``by_skill`` each skill and model, by skill name.
    """
    first, last = usage_range(since, until)
    with get_state(request).sessions() as session:
        usage = read_agent_usage(session, agent_id, first, last)
    return answer(
        200,
        {
            "agent_id": agent_id,
            "since": first.isoformat(),
            "until": last.isoformat(),
            "totals": _counts(usage.totals),
            "by_day": [{"day": day.isoformat(), **_counts(counts)} for day, counts in sorted(usage.by_day.items())],
            "by_skill": [
                {"skill": skill, "model": model, **_counts(counts)}
                for (skill, model), counts in sorted(usage.by_skill.items())
            ],
        },
    )
