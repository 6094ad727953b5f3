"""One batched LLM call of a chunk, what its answer cost each member, and batches run side by side.

Batched extraction (:mod:`memory_core.write.batching`) and batched reconciliation
(:mod:`memory_core.write.reconcile_batching`) share how a batch meets the provider:

- a rate limit fails every member with the provider's error (the task retries them together,
  after its Retry-After); a request the provider refuses fails them too;
- a timeout, a 5xx or an unusable provider response leaves each member to its usual single
  call, with that call's fallbacks;
- an answer that is not usable as a whole (not JSON, cut short) is paid for and asked again in
  halves: smaller batches are likelier to come back whole;
- a batch of one makes no call here: its member goes alone.

What differs (the skill's input, how a usable answer is stored and charged) is each kind's
:class:`HalvingBatcher` subclass.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from memory_core.cognition.skill import Skill, SkillOutputError
from memory_core.providers.errors import ProviderRequestError, ProviderResponseError, RetryableProviderError
from memory_core.write.schemas import SkillTokens, TokenCount

__all__ = [
    "BatchCall",
    "BatchTally",
    "HalvingBatcher",
    "call_shares",
    "run_side_by_side",
    "split_total",
]


class _Member(Protocol):
    @property
    def event_id(self) -> uuid.UUID: ...


MemberT = TypeVar("MemberT", bound=_Member)
InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT", bound=BaseModel)
TallyT = TypeVar("TallyT", bound="BatchTally")
ResultT = TypeVar("ResultT")


@dataclass
class BatchTally:
    """The calls a kind's batches made, and the runs they failed with a provider error."""

    failures: dict[uuid.UUID, Exception] = field(default_factory=dict)
    calls: int = 0


@dataclass(frozen=True)
class BatchCall:
    """One answered call: its id (shared by its members' records), its size and duration."""

    batch_id: str
    size: int
    duration_ms: float

    def info(self, position: int) -> dict[str, Any]:
        """What a member's stored answer says of the call it came from (``position`` from 0)."""
        return {"id": self.batch_id, "index": position + 1, "size": self.size, "duration_ms": self.duration_ms}


class HalvingBatcher(ABC, Generic[MemberT, InputT, OutputT, TallyT]):
    """Runs one planned batch as one call of ``skill``, and its halves when the answer is unusable as a whole."""

    def __init__(self, skill: Skill[InputT, OutputT], outcome: TallyT) -> None:
        self.skill = skill
        self.outcome = outcome

    def run(self, members: list[MemberT]) -> TallyT:
        """Ask for ``members`` together; the outcome of this batch alone (threads merge them)."""
        self._call(members)
        return self.outcome

    @abstractmethod
    def batch_input(self, members: Sequence[MemberT]) -> InputT:
        """The skill's input for ``members``."""

    @abstractmethod
    def charge_unusable(self, members: Sequence[MemberT], usage: Any) -> None:
        """Count the tokens of an answer unusable as a whole on ``members``' runs."""

    @abstractmethod
    def take_answer(self, members: Sequence[MemberT], output: OutputT, usage: Any, call: BatchCall) -> None:
        """Store and charge a usable answer (whose parts may still be unusable one by one)."""

    def _call(self, members: list[MemberT]) -> None:
        if len(members) < 2:
            return  # alone: the usual single call
        self.outcome.calls += 1
        batch_id = uuid.uuid4().hex[:12]
        started = time.perf_counter()
        try:
            answered = self.skill.run(self.batch_input(members))
        except RetryableProviderError as error:
            if error.is_throttling:
                self._fail(members, error)
            return  # a timeout or a 5xx: each member alone, with the usual fallbacks
        except ProviderRequestError as error:
            self._fail(members, error)
            return
        except ProviderResponseError:
            return
        except SkillOutputError as error:
            self.charge_unusable(members, error.usage)
            middle = len(members) // 2
            self._call(members[:middle])
            self._call(members[middle:])
            return
        call = BatchCall(batch_id, len(members), round((time.perf_counter() - started) * 1000, 1))
        self.take_answer(members, answered.output, answered.usage, call)

    def _fail(self, members: Sequence[MemberT], error: Exception) -> None:
        for member in members:
            self.outcome.failures[member.event_id] = error


def run_side_by_side(
    batches: list[list[MemberT]], run: Callable[[list[MemberT]], ResultT], *, parallelism: int, thread_prefix: str
) -> list[ResultT]:
    """``run`` over every batch, up to ``parallelism`` at once (each call mostly waits on the provider)."""
    parallel = min(len(batches), parallelism)
    if parallel > 1:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix=thread_prefix) as pool:
            return list(pool.map(run, batches))
    return [run(batch) for batch in batches]


def split_total(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` cut into integer parts proportional to ``weights`` (even when they are all zero)."""
    if not weights:
        return []
    if sum(weights) <= 0:
        weights = [1] * len(weights)
    whole = sum(weights)
    parts = [total * weight // whole for weight in weights]
    for index in range(total - sum(parts)):
        parts[index % len(parts)] += 1
    return parts


def call_shares(
    usage: Any, input_weights: Sequence[int], answer_chars: Sequence[int], *, skill: str, failed: bool = False
) -> list[TokenCount]:
    """One call's tokens spread over its parts: the prompt by ``input_weights``, the answer by ``answer_chars``.

    Each share carries its line of the usage accounting (``llm_usage``); the call itself (and its
    failure, if it gave nothing usable) is counted on the first part's share only, so the shares
    add up to one call.
    """
    inputs = split_total(int(getattr(usage, "input_tokens", 0)), list(input_weights))
    outputs = split_total(int(getattr(usage, "output_tokens", 0)), list(answer_chars))
    cached = split_total(int(getattr(usage, "cached_input_tokens", 0)), [1] * len(inputs))
    model = str(getattr(usage, "model", "") or "")
    calls = int(getattr(usage, "calls", 1) or 1)
    return [
        TokenCount(
            input_tokens=i,
            output_tokens=o,
            total_tokens=i + o,
            cached_input_tokens=c,
            by_skill=[
                SkillTokens(
                    skill=skill,
                    model=model,
                    calls=calls if position == 0 else 0,
                    failures=1 if failed and position == 0 else 0,
                    input_tokens=i,
                    output_tokens=o,
                    cached_input_tokens=c,
                )
            ],
        )
        for position, (i, o, c) in enumerate(zip(inputs, outputs, cached, strict=True))
    ]
