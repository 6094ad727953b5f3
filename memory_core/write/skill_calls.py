"""Calling skills with the seeds' fail-safe policy, and caching LLM answers per (event, stage).

Throttling (a 429 or an unreachable endpoint) propagates so the task waits and retries,
and so does a request error (bad key, unknown model): a configuration problem must
surface as a failed run, not be hidden by rules. Any other failure (timeout, 5xx, invalid
JSON, an answer that does not fit the schema) is a *skill* failure and the caller applies
the seeds' fallback.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from memory_core.cognition.skill import Skill, SkillOutputError
from memory_core.db.statements import sql
from memory_core.providers.errors import ProviderResponseError, RetryableProviderError
from memory_core.write.schemas import TokenCount

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)


@dataclass(frozen=True)
class SkillCall(Generic[OutputT]):
    """A skill's answer (None when it failed), what it cost, and the failure if any."""

    output: OutputT | None
    tokens: TokenCount
    error: str | None
    duration_ms: float


def _tokens(usage: Any) -> TokenCount:
    return TokenCount(
        input_tokens=int(getattr(usage, "input_tokens", 0)),
        output_tokens=int(getattr(usage, "output_tokens", 0)),
        total_tokens=int(getattr(usage, "total_tokens", 0)),
    )


# Textual, not an ORM update: the ORM's bulk-update path cost about a fifth of an ingest
# worker's CPU with an LLM (one such write per model call).
_STORE_ANSWER = sql(
    "UPDATE pipeline_runs SET llm_cache = llm_cache || jsonb_build_object(CAST(:key AS text), CAST(:value AS jsonb)) "
    "WHERE event_id = :event"
)


class SkillCache:
    """LLM answers of one run, persisted as soon as they arrive so a redelivered stage never pays twice."""

    def __init__(self, sessions: sessionmaker[Session] | None, event_id: uuid.UUID | None, stored: dict[str, Any]):
        self.sessions = sessions
        self.event_id = event_id
        self.stored = dict(stored)

    def get(self, key: str) -> dict[str, Any] | None:
        """A stored answer for ``key``."""
        value = self.stored.get(key)
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Persist ``value`` under ``key`` in its own short transaction."""
        self.stored[key] = value
        if self.sessions is None or self.event_id is None:
            return
        with self.sessions.begin() as session:
            session.execute(_STORE_ANSWER, {"event": self.event_id, "key": key, "value": orjson.dumps(value).decode()})


def call_skill(
    skill: Skill[InputT, OutputT],
    skill_input: InputT,
    output_model: type[OutputT],
    *,
    cache: SkillCache | None = None,
    cache_key: str | None = None,
    cacheable: bool = False,
    release: Session | None = None,
) -> SkillCall[OutputT]:
    """Run ``skill``; skill failures come back as ``output=None`` with the reason, throttling raises.

    ``release`` is a reading session to close before the call, so no pooled connection waits on a model.
    """
    if cache is not None and cache_key and cacheable:
        hit = cache.get(cache_key)
        if hit is not None:
            return SkillCall(output_model.model_validate(hit["output"]), TokenCount(), None, 0.0)
    if release is not None:
        release.close()
    started = time.perf_counter()
    try:
        outcome = skill.run(skill_input)
    except SkillOutputError as error:
        return SkillCall(None, _tokens(error.usage), f"{error.skill}: {error.message}", _ms(started))
    except RetryableProviderError as error:
        if error.is_throttling:
            raise
        return SkillCall(None, TokenCount(), f"{skill.name}: {error.message}", _ms(started))
    except ProviderResponseError as error:
        return SkillCall(None, TokenCount(), f"{skill.name}: {error.message}", _ms(started))
    tokens = _tokens(outcome.usage)
    if cache is not None and cache_key and cacheable:
        cache.put(cache_key, {"output": outcome.output.model_dump(mode="json"), "tokens": tokens.model_dump()})
    return SkillCall(outcome.output, tokens, outcome.error, _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0
