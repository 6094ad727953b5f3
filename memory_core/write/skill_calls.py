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
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session, sessionmaker

from memory_core.cognition.skill import Skill, SkillOutputError
from memory_core.db.statements import sql
from memory_core.providers.errors import ProviderResponseError, RetryableProviderError
from memory_core.providers.protocols import TokenUsage
from memory_core.write.schemas import SkillTokens, TokenCount

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)


@dataclass(frozen=True)
class SkillCall(Generic[OutputT]):
    """A skill's answer (None when it failed), what it cost, and the failure if any."""

    output: OutputT | None
    tokens: TokenCount
    error: str | None
    duration_ms: float


def _tokens(skill: str, usage: TokenUsage, *, failed: bool = False) -> TokenCount:
    """``usage`` as stored, with its line of the usage accounting (none for a free, successful run)."""
    by_skill: list[SkillTokens] = []
    if usage.calls or failed:
        by_skill.append(
            SkillTokens(
                skill=skill,
                model=usage.model or "",
                calls=usage.calls,
                failures=1 if failed else 0,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_input_tokens=usage.cached_input_tokens,
            )
        )
    return TokenCount(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        by_skill=by_skill,
    )


def _no_answer(skill: str) -> TokenCount:
    """A run whose request failed: no tokens, one failure."""
    return _tokens(skill, TokenUsage(), failed=True)


def _cached_tokens(hit: dict[str, Any]) -> TokenCount:
    """The tokens a cached answer cost, charged again to the stage that now uses it.

    A stage computes only while its run waits for it, and its completion records the usage
    it carries, once (the check-and-set on the run's status): an answer stored before this
    attempt therefore comes from an attempt of this same stage that never completed, whose
    usage nobody recorded. It is charged once per attempt (:meth:`SkillCache.charge`).
    """
    try:
        return TokenCount.model_validate(hit.get("tokens") or {})
    except ValidationError:
        return TokenCount()


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
        # Answers whose cost this attempt already carries: those it asked for, and stored ones it reused once.
        self._charged: set[str] = set()

    def get(self, key: str) -> dict[str, Any] | None:
        """A stored answer for ``key``."""
        value = self.stored.get(key)
        return value if isinstance(value, dict) else None

    def charge(self, key: str) -> bool:
        """True the first time this attempt uses ``key``'s stored answer (its cost is then this attempt's to report)."""
        if key in self._charged:
            return False
        self._charged.add(key)
        return True

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Persist ``value`` under ``key`` in its own short transaction."""
        self.stored[key] = value
        self._charged.add(key)
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
            tokens = _cached_tokens(hit) if cache.charge(cache_key) else TokenCount()
            return SkillCall(output_model.model_validate(hit["output"]), tokens, None, 0.0)
    if release is not None:
        release.close()
    started = time.perf_counter()
    try:
        outcome = skill.run(skill_input)
    except SkillOutputError as error:
        return SkillCall(
            None, _tokens(skill.name, error.usage, failed=True), f"{error.skill}: {error.message}", _ms(started)
        )
    except RetryableProviderError as error:
        if error.is_throttling:
            raise
        return SkillCall(None, _no_answer(skill.name), f"{skill.name}: {error.message}", _ms(started))
    except ProviderResponseError as error:
        return SkillCall(None, _no_answer(skill.name), f"{skill.name}: {error.message}", _ms(started))
    tokens = _tokens(skill.name, outcome.usage, failed=outcome.used_fallback)
    if cache is not None and cache_key and cacheable:
        cache.put(cache_key, {"output": outcome.output.model_dump(mode="json"), "tokens": tokens.model_dump()})
    return SkillCall(outcome.output, tokens, outcome.error, _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0
