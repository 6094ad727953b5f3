"""The usage accounting's pieces: skills counted by agent, the deferred writer, the reranker's report, cached tokens."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine

from memory_core.cognition.skill import FallbackSkill, SkillOutcome, SkillOutputError
from memory_core.config import MemoryConfig
from memory_core.db.engine import create_session_factory
from memory_core.providers.anthropic_llm import AnthropicChatProvider
from memory_core.providers.protocols import TokenUsage
from memory_core.read.rerank import RerankInput, RerankOutput, RerankScore, rerank
from memory_core.usage import DeferredUsage, UsageTally, account_skills, read_agent_usage
from tests.memory_core.read.test_rerank import _ranked
from tests.support.anthropic_stub import AnthropicStub
from tests.support.openai_stub import StubReply

SPENT = TokenUsage(input_tokens=100, output_tokens=10, cached_input_tokens=40, calls=1, model="m-1")


class _Answers:
    """A skill answering ``outcomes`` in turn (an exception is raised)."""

    name = "summarize_entity"

    def __init__(self, *outcomes: SkillOutcome[RerankOutput] | Exception) -> None:
        self.outcomes = list(outcomes)

    def run(self, skill_input: object, /) -> SkillOutcome[RerankOutput]:
        item = self.outcomes.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class _Free:
    name = "summarize_entity"

    def run(self, skill_input: object, /) -> SkillOutcome[RerankOutput]:
        return SkillOutcome(output=RerankOutput())


@dataclass(frozen=True)
class _Bundle:
    kind: str
    summarize_entity: object


def test_accounted_skills_count_answers_failures_and_fallbacks_by_agent_skill_and_model() -> None:
    tally = UsageTally()
    garbage = SkillOutputError("bad", skill="summarize_entity", raw_text="x", usage=SPENT)
    inner = _Answers(
        SkillOutcome(output=RerankOutput(), usage=SPENT),
        garbage,
        RuntimeError("provider down"),
    )
    bundle = account_skills(_Bundle(kind="llm", summarize_entity=FallbackSkill(inner, _Free())), "ana", tally)
    skill = bundle.summarize_entity
    assert skill.run(None).usage == SPENT  # type: ignore[attr-defined]
    rescued = skill.run(None)  # type: ignore[attr-defined]
    assert rescued.used_fallback
    with pytest.raises(RuntimeError):
        skill.run(None)  # type: ignore[attr-defined]
    counts = tally.drain()
    assert set(counts) == {("ana", "summarize_entity", "m-1"), ("ana", "summarize_entity", "")}
    answered = counts[("ana", "summarize_entity", "m-1")]
    assert (answered.calls, answered.failures, answered.input_tokens, answered.cached_input_tokens) == (2, 1, 200, 80)
    unanswered = counts[("ana", "summarize_entity", "")]
    assert (unanswered.calls, unanswered.failures, unanswered.input_tokens) == (0, 1, 0)
    # Offline rules cost nothing and count nothing.
    free = account_skills(_Bundle(kind="offline", summarize_entity=_Free()), "ana", tally)
    free.summarize_entity.run(None)  # type: ignore[attr-defined]
    assert len(tally) == 0


def test_deferred_usage_adds_up_and_writes_in_one_flush(migrated_database_url: str) -> None:
    engine = create_engine(migrated_database_url)
    agent = f"deferred-{uuid.uuid4().hex[:8]}"
    deferred = DeferredUsage(create_session_factory(engine), flush_interval_s=60)
    try:
        for _ in range(3):
            deferred.record(agent, "rerank", SPENT)
        deferred.record(agent, "rerank", TokenUsage(), failed=True)
        assert deferred.pending() == 2
        today = datetime.now(UTC).date()
        with engine.connect() as conn:
            assert read_agent_usage(conn, agent, today, today).totals.calls == 0  # nothing written yet
        assert deferred.flush()
        deferred.record(agent, "rerank", SPENT)
    finally:
        deferred.close()  # writes what is left
    with engine.connect() as conn:
        usage = read_agent_usage(conn, agent, today, today)
    assert usage.totals.as_dict() == {
        "calls": 4,
        "failures": 1,
        "input_tokens": 400,
        "output_tokens": 40,
        "cached_input_tokens": 160,
    }
    assert set(usage.by_skill) == {("rerank", "m-1"), ("rerank", "")}
    engine.dispose()


class _SlowReranker:
    name = "rerank"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def run(self, skill_input: RerankInput, /) -> SkillOutcome[RerankOutput]:
        time.sleep(self.delay_s)
        scores = [RerankScore(id=candidate.id, score=0.5) for candidate in skill_input.candidates]
        return SkillOutcome(output=RerankOutput(scores=scores), usage=SPENT)


def test_the_reranker_reports_its_usage_even_when_retrieval_stopped_waiting() -> None:
    reported: list[tuple[str, TokenUsage, bool]] = []
    done = threading.Event()

    def report(skill: str, usage: TokenUsage, failed: bool) -> None:
        reported.append((skill, usage, failed))
        done.set()

    config = MemoryConfig(reranker_timeout_sec=0.05)
    outcome = rerank("q", _ranked({"a": 0.9, "b": 0.8}), _SlowReranker(0.3), config, report_usage=report)
    assert not outcome.applied
    assert outcome.reason.startswith("timeout")
    assert done.wait(5), "the call that outlived its timeout was never reported"
    assert reported == [("rerank", SPENT, False)]


def test_anthropic_reports_cache_reads_as_cached_input_tokens() -> None:
    with AnthropicStub(api_key="sk-ant-test") as stub:
        stub.enqueue_messages(
            StubReply.text(
                json.dumps({"ok": True}),
                usage={
                    "input_tokens": 30,
                    "output_tokens": 8,
                    "cache_read_input_tokens": 1000,
                    "cache_creation_input_tokens": 200,
                },
            )
        )
        claude = AnthropicChatProvider(api_key="sk-ant-test", model="claude-stub", base_url=stub.base_url, timeout_s=5)
        result = claude.complete([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    # Anthropic counts cache reads and writes apart from input_tokens; here they are part of it.
    assert (result.usage.input_tokens, result.usage.cached_input_tokens) == (1230, 1000)
    assert (result.usage.calls, result.usage.model) == (1, "claude-stub")
