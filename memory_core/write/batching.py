"""Batched informed extraction inside a chunk: several messages of one conversation, one LLM call.

The extract stage of a chunk prepares every message (pre-retrieval, skill input), then hands
the ones that may share a call to :func:`extract_in_batches`: they are grouped by (agent,
session) in the order they happened and cut into batches bounded by
``pipeline_llm_batch_max_messages`` and ``pipeline_llm_batch_max_tokens``. Each batch is one
call of the ``extract_batch`` skill. Every message answered well has its answer stored at once
in its own run's LLM cache, under the key its single-message extraction uses; the stage then
finishes every message as usual and finds those answers there. So

- a redelivered stage pays for no call twice (the answers are stored before anything else);
- a message whose part of the answer is unusable is extracted alone, by the usual path with
  its fallbacks, and does not hold back its batch-mates; an answer unusable as a whole is
  retried in halves;
- a rate limit fails the batch's messages with the provider's error (the task retries them,
  together, after its Retry-After); a provider failure of another kind sends them alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from memory_core.cognition.models import BatchExtractionInput, BatchExtractionOutput
from memory_core.cognition.skill import Skill
from memory_core.db.statements import sql
from memory_core.write.batch_calls import BatchCall, BatchTally, HalvingBatcher, call_shares, run_side_by_side
from memory_core.write.context import WriteContext
from memory_core.write.extract import CHARS_PER_TOKEN, BatchShare, PreparedExtraction
from memory_core.write.schemas import TokenCount
from memory_core.write.skill_calls import SkillCache

# The lines around each message in a batch's prompt (its number, speaker, date), in characters.
_MESSAGE_FRAME_CHARS = 160

# The answers travel as one JSON object, run -> its answer (orjson writes it in C; a jsonb[]
# parameter is dumped element by element in Python, escaping each answer).
_STORE_ANSWERS = sql(
    "UPDATE pipeline_runs r SET llm_cache = r.llm_cache || jsonb_build_object(CAST(:key AS text), x.value) "
    "FROM jsonb_each(CAST(:answers AS jsonb)) AS x(event_id, value) "
    "WHERE r.event_id = CAST(x.event_id AS uuid)"
)


@dataclass(frozen=True)
class BatchMember:
    """A message that may share an extraction call: its run's ids, its order, its prepared input."""

    event_id: uuid.UUID
    agent_id: str
    session_id: str
    order: tuple[Any, ...]
    prepared: PreparedExtraction


@dataclass
class BatchOutcome(BatchTally):
    """What the batches decided: messages answered (their share), and messages failed with a provider error."""

    shares: dict[uuid.UUID, BatchShare] = field(default_factory=dict)


def _estimate_chars(member: BatchMember, shown: set[str]) -> int:
    """Prompt characters ``member`` adds to a batch whose known entities ``shown`` are already listed."""
    skill_input = member.prepared.inputs[0]
    size = len(skill_input.message) + _MESSAGE_FRAME_CHARS + sum(len(text) for text in skill_input.recent_messages)
    for entity in skill_input.known_entities:
        if entity.canonical_key not in shown:
            size += 40 + len(entity.profile_text or "") + sum(len(fact.text) + 4 for fact in entity.facts)
    return size


def plan_batches(members: Sequence[BatchMember], *, max_messages: int, max_tokens: int) -> list[list[BatchMember]]:
    """``members`` grouped by (agent, session) in the order they happened, cut at either bound.

    A message over the token budget on its own still makes a batch of one (it goes alone).
    """
    groups: dict[tuple[str, str], list[BatchMember]] = {}
    for member in sorted(members, key=lambda item: item.order):
        groups.setdefault((member.agent_id, member.session_id), []).append(member)
    budget = max_tokens * CHARS_PER_TOKEN
    batches: list[list[BatchMember]] = []
    for group in groups.values():
        current: list[BatchMember] = []
        shown: set[str] = set()
        used = 0
        for member in group:
            size = _estimate_chars(member, shown)
            if current and (len(current) >= max_messages or used + size > budget):
                batches.append(current)
                current, shown, used = [], set(), 0
                size = _estimate_chars(member, shown)
            current.append(member)
            shown |= {entity.canonical_key for entity in member.prepared.inputs[0].known_entities}
            used += size
        if current:
            batches.append(current)
    return batches


def _token_shares(
    usage: Any, members: Sequence[BatchMember], answer_chars: Sequence[int], *, skill: str, failed: bool = False
) -> list[TokenCount]:
    """A batch's tokens over its messages: the prompt by message size, the answer by each part's size."""
    weights = [len(member.prepared.inputs[0].message) + 1 for member in members]
    return call_shares(usage, weights, answer_chars, skill=skill, failed=failed)


class _Batcher(HalvingBatcher[BatchMember, BatchExtractionInput, BatchExtractionOutput, BatchOutcome]):
    """Extracts one planned batch of messages in one call (and its halves)."""

    def __init__(
        self,
        skill: Skill[BatchExtractionInput, BatchExtractionOutput],
        store: Callable[[list[tuple[uuid.UUID, dict[str, Any]]]], None],
    ) -> None:
        super().__init__(skill, BatchOutcome())
        self.store = store

    def batch_input(self, members: Sequence[BatchMember]) -> BatchExtractionInput:
        return BatchExtractionInput(messages=[member.prepared.inputs[0] for member in members])

    def charge_unusable(self, members: Sequence[BatchMember], usage: Any) -> None:
        spent = _token_shares(usage, members, [0] * len(members), skill=self.skill.name, failed=True)
        self._charge(members, spent)

    def take_answer(
        self, members: Sequence[BatchMember], output: BatchExtractionOutput, usage: Any, call: BatchCall
    ) -> None:
        shares = _token_shares(usage, members, output.shares or [0] * len(members), skill=self.skill.name)
        stored: list[tuple[uuid.UUID, dict[str, Any]]] = []
        for position, (member, result) in enumerate(zip(members, output.results, strict=True)):
            info = call.info(position)
            if result is None:
                info["error"] = output.errors[position]
                self._charge([member], [shares[position]])
                continue
            value = {"output": result.model_dump(mode="json"), "tokens": shares[position].model_dump(), "batch": info}
            stored.append((member.event_id, value))
            self.outcome.shares[member.event_id] = BatchShare(shares[position], info)
        if stored:
            self.store(stored)

    def _charge(self, members: Sequence[BatchMember], spent: Sequence[TokenCount]) -> None:
        """Tokens of an answer (or part) a message could not use: still counted on its run."""
        for member, tokens in zip(members, spent, strict=True):
            previous = self.outcome.shares.get(member.event_id)
            if previous is not None:
                self.outcome.shares[member.event_id] = BatchShare(previous.tokens.plus(tokens), previous.info)
            else:
                member.prepared.tokens = member.prepared.tokens.plus(tokens)


def store_batch_answers(
    ctx: WriteContext, key: str, caches: Mapping[uuid.UUID, SkillCache]
) -> Callable[[list[tuple[uuid.UUID, dict[str, Any]]]], None]:
    """A writer of a batch's answers into their runs' LLM caches under ``key``, one statement per batch.

    The runs' in-memory ``caches`` learn them too, so the stage finds them without reading again.
    """

    def store(answers: list[tuple[uuid.UUID, dict[str, Any]]]) -> None:
        with ctx.sessions.begin() as session:
            session.execute(
                _STORE_ANSWERS,
                {"key": key, "answers": orjson.dumps({str(event_id): value for event_id, value in answers}).decode()},
            )
        for event_id, value in answers:
            cache = caches.get(event_id)
            if cache is not None:
                cache.stored[key] = value
                # This attempt counts the answer's tokens through its BatchShare: finding it in
                # the cache must not charge them a second time.
                cache.charge(key)

    return store


def extract_in_batches(
    ctx: WriteContext, members: Sequence[BatchMember], key: str, caches: Mapping[uuid.UUID, SkillCache]
) -> BatchOutcome:
    """Plan the batches of ``members`` and run them side by side; their answers are stored under ``key``.

    Only batches of two or more messages make a call here; a message left alone is extracted
    by the usual single-message path afterwards. ``caches`` are the runs' LLM caches.
    """
    skill = ctx.skills.extract_batch
    total = BatchOutcome()
    if skill is None:
        return total
    settings = ctx.settings
    batches = [
        batch
        for batch in plan_batches(
            members,
            max_messages=settings.pipeline_llm_batch_max_messages,
            max_tokens=settings.pipeline_llm_batch_max_tokens,
        )
        if len(batch) > 1
    ]
    if not batches:
        return total
    store = store_batch_answers(ctx, key, caches)

    def run(batch: list[BatchMember]) -> BatchOutcome:
        return _Batcher(skill, store).run(batch)

    outcomes = run_side_by_side(
        batches, run, parallelism=settings.pipeline_chunk_parallelism, thread_prefix="arandu-batch"
    )
    for outcome in outcomes:
        total.shares.update(outcome.shares)
        total.failures.update(outcome.failures)
        total.calls += outcome.calls
    return total
