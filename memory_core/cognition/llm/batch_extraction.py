"""Batched informed extraction: consecutive messages of one conversation answered by one LLM call.

The model sees the messages numbered, each with its own speaker and date, and the known
entities of all of them once; it answers one item per number, each item shaped as the
single-message extraction. Every item is checked on its own, so one unusable part costs only
its message (the caller extracts that one alone):

- its index must name a message of the batch, and be answered exactly once;
- it must validate as an extraction;
- none of its facts may plainly come from another message of the batch (a fact sharing no
  word with its own message but several with another one is attributed to the wrong one).

An answer that is not JSON at all, or has no list of items, raises
:class:`~memory_core.cognition.skill.SkillOutputError` like any other skill; provider errors
propagate untouched.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, model_validator

from memory_core.cognition.llm.extraction import _ExtractionAnswer, _header, _message_block, known_block, to_output
from memory_core.cognition.llm.numbered_answers import sort_numbered
from memory_core.cognition.llm.prompts import BATCH_EXTRACTION_PROMPT
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.models import (
    ANSWER_CONFIG,
    BatchExtractionInput,
    BatchExtractionOutput,
    ExtractionInput,
    ExtractionOutput,
    KnownEntity,
)
from memory_core.cognition.skill import SkillOutcome, SkillOutputError
from memory_core.providers.protocols import LLMProvider, salvage_list

__all__ = [
    "BATCH_EXTRACTION_SKILL",
    "BatchExtractionSkill",
    "misattributed_fact",
    "render_batch",
]

BATCH_EXTRACTION_SKILL = "extract_batch"

_WORD = re.compile(r"\w{4,}", re.UNICODE)
# A fact is judged misattributed when it shares no word with its own message and at least
# this many with another message of the batch.
_FOREIGN_WORDS = 2


class _BatchItem(_ExtractionAnswer):
    """What one numbered message states: its entities, facts, relations, updated profiles and tone."""

    index: int


class _BatchAnswer(BaseModel):
    """One item per numbered message, in any order."""

    model_config = ANSWER_CONFIG

    messages: list[_BatchItem]

    @model_validator(mode="before")
    @classmethod
    def _tolerate(cls, data: Any) -> Any:
        """An answer without the list has no items (each message then goes alone)."""
        if isinstance(data, dict) and data.get("messages") is None:
            return {**data, "messages": []}
        return data


def _shared_known(messages: list[ExtractionInput]) -> list[KnownEntity]:
    """The known entities of every message, each once (the first message naming it gives its mention)."""
    seen: dict[str, KnownEntity] = {}
    for message in messages:
        for entity in message.known_entities:
            seen.setdefault(entity.canonical_key, entity)
    return list(seen.values())


def render_batch(batch: BatchExtractionInput) -> str:
    """The user message of a batch: known entities once, the fact cap, then every message under its number."""
    lines = known_block(_shared_known(batch.messages))
    caps = {message.max_facts for message in batch.messages}
    if len(caps) == 1:
        lines.append(f"Extract at most {caps.pop()} facts per message.")
    lines.append(f"Messages: {len(batch.messages)}, numbered 1 to {len(batch.messages)}.")
    for number, message in enumerate(batch.messages, start=1):
        lines.append("")
        lines.append(f"### Message {number}")
        lines.extend(_header(message))
        if len(caps) > 1:
            lines.append(f"Extract at most {message.max_facts} facts.")
        lines.extend(_message_block(message.message))
    return "\n".join(lines)


def _words(text: str, ignored: set[str]) -> set[str]:
    return {word for word in _WORD.findall(text.casefold()) if word not in ignored}


def misattributed_fact(
    facts: list[str], own: int, messages: list[str], ignored: set[str] | None = None
) -> tuple[str, int] | None:
    """The first fact text (and the message it comes from) that plainly belongs to another message.

    ``ignored`` words (speaker and entity names) appear in facts of every message and say nothing.
    """
    skip = ignored or set()
    vocabularies = [_words(text, skip) for text in messages]
    for fact in facts:
        words = _words(fact, skip)
        if not words or words & vocabularies[own]:
            continue
        best, best_index = 0, -1
        for index, vocabulary in enumerate(vocabularies):
            if index != own and len(words & vocabulary) > best:
                best, best_index = len(words & vocabulary), index
        if best >= _FOREIGN_WORDS:
            return fact, best_index
    return None


class BatchExtractionSkill:
    """Informed extraction of several messages in one call; per message an extraction or the reason it has none."""

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.llm: LLMSkill[BatchExtractionInput, _BatchAnswer] = LLMSkill(
            name=BATCH_EXTRACTION_SKILL,
            system_prompt=BATCH_EXTRACTION_PROMPT,
            render_user=render_batch,
            output_model=_BatchAnswer,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``extract_batch``."""
        return BATCH_EXTRACTION_SKILL

    def run(self, batch: BatchExtractionInput, /) -> SkillOutcome[BatchExtractionOutput]:
        """Ask once for every message; check each part on its own."""
        # One call for the batch (one agent's messages): the longest of their extraction timeouts.
        timeouts = [message.timeout_s for message in batch.messages if message.timeout_s is not None]
        try:
            outcome = self.llm.run(batch, timeout_s=max(timeouts) if timeouts else None)
        except SkillOutputError as error:
            salvaged = salvage_list(error.raw_text, "messages")
            if salvaged is None:
                raise
            output = self._sort(batch, salvaged)
            return SkillOutcome(output=output, usage=error.usage, error=error.message)
        items: list[Any] = list(outcome.output.messages)
        return SkillOutcome(output=self._sort(batch, items), usage=outcome.usage, duration_ms=outcome.duration_ms)

    def _sort(self, batch: BatchExtractionInput, items: list[Any]) -> BatchExtractionOutput:
        count = len(batch.messages)
        results: list[ExtractionOutput | None] = [None] * count
        shares = [0] * count
        sorted_parts = sort_numbered(
            items,
            _BatchItem,
            count,
            missing="no answer for this message",
            unusable="unusable answer",
            repeated="answered more than once",
        )
        errors = sorted_parts.errors
        known = _shared_known(batch.messages)
        ignored = self._names(batch)
        texts = [message.message for message in batch.messages]
        for index, item in sorted_parts.usable.items():
            position = index - 1
            foreign = misattributed_fact([fact.text for fact in item.facts], position, texts, ignored)
            if foreign is not None:
                errors[position] = f"fact {foreign[0]!r} comes from message {foreign[1] + 1}"
                continue
            results[position] = to_output(item, known, batch.messages[position].max_facts)
            errors[position] = None
            shares[position] = len(item.model_dump_json())
        return BatchExtractionOutput(results=results, errors=errors, shares=shares)

    @staticmethod
    def _names(batch: BatchExtractionInput) -> set[str]:
        names: set[str] = set()
        for message in batch.messages:
            names |= _words(message.speaker_name, set())
            for entity in message.known_entities:
                names |= _words(f"{entity.name} {entity.display_name}", set())
        return names
