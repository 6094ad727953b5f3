"""Batched reconciliation inside a chunk: the decisions of one agent's new facts, one LLM call.

The reconcile stage of a chunk reads every fact's candidates in one statement (a snapshot:
nothing is written between the messages' reads, and ``upsert`` re-checks each decision in
arrival order). The facts that need the reconcile skill are listed with exactly the input
their single call would get, grouped by agent in the order the messages happened, and cut into
batches bounded by ``pipeline_llm_reconcile_batch_max`` decisions and
``pipeline_llm_reconcile_batch_max_tokens``. Each batch is one call of the ``reconcile_batch``
skill. Every decision answered well is stored at once in its own run's LLM cache, under the key
the single-fact call uses; the stage then reconciles every message as usual and finds the
decisions there. So

- a redelivered stage pays for no call twice (decisions are stored before anything else);
- a fact whose decision is unusable is decided alone, by the usual path with its fallback
  (ADD), and does not hold back its batch-mates; an answer unusable as a whole is retried in
  halves;
- a rate limit fails the batch's messages with the provider's error (the task retries them);
  a provider failure of another kind sends each fact alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from memory_core.cognition.models import BatchReconcileInput, BatchReconcileOutput
from memory_core.cognition.skill import Skill
from memory_core.db.statements import sql
from memory_core.write.batch_calls import BatchCall, BatchTally, HalvingBatcher, call_shares, run_side_by_side
from memory_core.write.context import WriteContext
from memory_core.write.extract import CHARS_PER_TOKEN
from memory_core.write.reconcile import ReconcileRequest
from memory_core.write.schemas import TokenCount
from memory_core.write.skill_calls import SkillCache

# The lines around each new fact in a batch's prompt (its number, entity, dates), in characters.
_FACT_FRAME_CHARS = 120
# An existing fact's line besides its text: id, date, similarity.
_EXISTING_FRAME_CHARS = 90

# Several decisions of one run arrive together: merged into its cache in one row update.
# The answers travel as one JSON object, run -> its answers (orjson writes it in C; a jsonb[]
# parameter is dumped element by element in Python, escaping each answer).
_STORE_DECISIONS = sql(
    "UPDATE pipeline_runs r SET llm_cache = r.llm_cache || x.answers "
    "FROM jsonb_each(CAST(:answers AS jsonb)) AS x(event_id, answers) "
    "WHERE r.event_id = CAST(x.event_id AS uuid)"
)


@dataclass(frozen=True)
class ReconcileMember:
    """A fact that may share a reconciliation call: its run, its agent, its message's order, its request."""

    event_id: uuid.UUID
    agent_id: str
    order: tuple[Any, ...]
    request: ReconcileRequest


@dataclass
class ReconcileBatchOutcome(BatchTally):
    """What the batches cost each run (tokens), the runs failed with a provider error, and the calls made."""

    tokens: dict[uuid.UUID, TokenCount] = field(default_factory=dict)

    def charge(self, event_id: uuid.UUID, tokens: TokenCount) -> None:
        """Count ``tokens`` on the run of ``event_id``."""
        self.tokens[event_id] = self.tokens.get(event_id, TokenCount()).plus(tokens)

    def add(self, other: ReconcileBatchOutcome) -> None:
        """Fold in the outcome of another batch."""
        for event_id, tokens in other.tokens.items():
            self.charge(event_id, tokens)
        self.failures.update(other.failures)
        self.calls += other.calls


def _estimate_chars(member: ReconcileMember) -> int:
    """Prompt characters ``member`` adds to a batch."""
    skill_input = member.request.skill_input
    return (
        _FACT_FRAME_CHARS
        + len(skill_input.entity_name)
        + len(skill_input.new_text)
        + sum(len(fact.text) + _EXISTING_FRAME_CHARS for fact in skill_input.existing)
    )


def plan_reconcile_batches(
    members: Sequence[ReconcileMember], *, max_decisions: int, max_tokens: int
) -> list[list[ReconcileMember]]:
    """``members`` grouped by agent in the order their messages happened, cut at either bound.

    A fact over the token budget on its own still makes a batch of one (it goes alone).
    """
    groups: dict[str, list[ReconcileMember]] = {}
    for member in sorted(members, key=lambda item: (item.order, item.request.index)):
        groups.setdefault(member.agent_id, []).append(member)
    budget = max_tokens * CHARS_PER_TOKEN
    batches: list[list[ReconcileMember]] = []
    for group in groups.values():
        current: list[ReconcileMember] = []
        used = 0
        for member in group:
            size = _estimate_chars(member)
            if current and (len(current) >= max_decisions or used + size > budget):
                batches.append(current)
                current, used = [], 0
            current.append(member)
            used += size
        if current:
            batches.append(current)
    return batches


def _token_shares(
    usage: Any, members: Sequence[ReconcileMember], answer_chars: Sequence[int], *, skill: str, failed: bool = False
) -> list[TokenCount]:
    """A call's tokens over its facts: the prompt by each fact's size, the answer by each decision's."""
    weights = [_estimate_chars(member) for member in members]
    return call_shares(usage, weights, answer_chars, skill=skill, failed=failed)


class _Batcher(HalvingBatcher[ReconcileMember, BatchReconcileInput, BatchReconcileOutput, ReconcileBatchOutcome]):
    """Decides one planned batch of facts in one call (and its halves)."""

    def __init__(
        self,
        skill: Skill[BatchReconcileInput, BatchReconcileOutput],
        store: Callable[[list[tuple[uuid.UUID, str, dict[str, Any]]]], None],
    ) -> None:
        super().__init__(skill, ReconcileBatchOutcome())
        self.store = store

    def batch_input(self, members: Sequence[ReconcileMember]) -> BatchReconcileInput:
        return BatchReconcileInput(items=[member.request.skill_input for member in members])

    def charge_unusable(self, members: Sequence[ReconcileMember], usage: Any) -> None:
        spent_shares = _token_shares(usage, members, [0] * len(members), skill=self.skill.name, failed=True)
        for member, spent in zip(members, spent_shares, strict=True):
            self.outcome.charge(member.event_id, spent)

    def take_answer(
        self, members: Sequence[ReconcileMember], output: BatchReconcileOutput, usage: Any, call: BatchCall
    ) -> None:
        shares = _token_shares(usage, members, output.shares or [0] * len(members), skill=self.skill.name)
        stored: list[tuple[uuid.UUID, str, dict[str, Any]]] = []
        for position, (member, result) in enumerate(zip(members, output.results, strict=True)):
            # Spent whether or not the decision is usable: the run pays its share either way.
            self.outcome.charge(member.event_id, shares[position])
            if result is None:
                continue  # decided alone afterwards
            value = {
                "output": result.model_dump(mode="json"),
                "tokens": shares[position].model_dump(),
                "batch": call.info(position),
            }
            stored.append((member.event_id, member.request.cache_key, value))
        if stored:
            self.store(stored)


def store_decisions(
    ctx: WriteContext, caches: Mapping[uuid.UUID, SkillCache]
) -> Callable[[list[tuple[uuid.UUID, str, dict[str, Any]]]], None]:
    """A writer of a batch's decisions into their runs' LLM caches, one statement per batch.

    The runs' in-memory ``caches`` learn them too, so the stage finds them without reading again.
    """

    def store(decisions: list[tuple[uuid.UUID, str, dict[str, Any]]]) -> None:
        by_run: dict[uuid.UUID, dict[str, Any]] = {}
        for event_id, key, value in decisions:
            by_run.setdefault(event_id, {})[key] = value
        with ctx.sessions.begin() as session:
            session.execute(
                _STORE_DECISIONS,
                {"answers": orjson.dumps({str(event_id): answers for event_id, answers in by_run.items()}).decode()},
            )
        for event_id, answers in by_run.items():
            cache = caches.get(event_id)
            if cache is not None:
                cache.stored.update(answers)
                for key in answers:
                    # Counted through the batch's shares already: finding them in the cache is free.
                    cache.charge(key)

    return store


def reconcile_in_batches(
    ctx: WriteContext, members: Sequence[ReconcileMember], caches: Mapping[uuid.UUID, SkillCache]
) -> ReconcileBatchOutcome:
    """Plan the batches of ``members`` and run them side by side; decisions are stored in ``caches``' runs.

    Only batches of two or more facts make a call here; a fact left alone is decided by the
    usual single-fact path afterwards.
    """
    skill = ctx.skills.reconcile_batch
    total = ReconcileBatchOutcome()
    if skill is None:
        return total
    settings = ctx.settings
    batches = [
        batch
        for batch in plan_reconcile_batches(
            members,
            max_decisions=settings.pipeline_llm_reconcile_batch_max,
            max_tokens=settings.pipeline_llm_reconcile_batch_max_tokens,
        )
        if len(batch) > 1
    ]
    if not batches:
        return total
    store = store_decisions(ctx, caches)

    def run(batch: list[ReconcileMember]) -> ReconcileBatchOutcome:
        return _Batcher(skill, store).run(batch)

    outcomes = run_side_by_side(
        batches, run, parallelism=settings.pipeline_chunk_parallelism, thread_prefix="arandu-reconcile-batch"
    )
    for outcome in outcomes:
        total.add(outcome)
    return total
