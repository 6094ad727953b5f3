"""Extraction skills answered by an LLM: informed (one call) and blind (entity scan, then facts and relations).

Informed extraction sees what memory already knows about the entities a message
names and answers everything in one call. Blind extraction is its fallback: it
asks for the entities first, then for facts and relations concurrently, and asks
once more for relations when a message with two or more entities gave none.

Neither skill swallows a failure: a :class:`~memory_core.cognition.skill.SkillOutputError`
(carrying every token spent so far) or a provider error reaches the caller, which
applies the fallbacks of the pipeline.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, model_validator

from memory_core.cognition.directive_models import ExtractedDirective
from memory_core.cognition.llm.prompts import (
    BLIND_ENTITIES_PROMPT,
    BLIND_FACTS_PROMPT,
    BLIND_RELATIONS_PROMPT,
    INFORMED_EXTRACTION_PROMPT,
    RELATION_RETRY_NOTE,
)
from memory_core.cognition.llm_skill import LLMSkill
from memory_core.cognition.models import (
    ANSWER_CONFIG,
    ConfidenceLevel,
    EmotionOutput,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    ExtractionInput,
    ExtractionOutput,
    ImportanceCategory,
    KnownEntity,
    KnownFact,
)
from memory_core.cognition.skill import SkillOutcome, SkillOutputError
from memory_core.providers.protocols import LLMProvider, TokenUsage

__all__ = [
    "BLIND_ENTITIES_SKILL",
    "BLIND_EXTRACTION_SKILL",
    "BLIND_FACTS_SKILL",
    "BLIND_RELATIONS_SKILL",
    "INFORMED_EXTRACTION_SKILL",
    "BlindExtractionSkill",
    "InformedExtractionSkill",
    "render_message_date",
]

INFORMED_EXTRACTION_SKILL = "extract_informed"
BLIND_EXTRACTION_SKILL = "extract_blind"
BLIND_ENTITIES_SKILL = "extract_blind.entities"
BLIND_FACTS_SKILL = "extract_blind.facts"
BLIND_RELATIONS_SKILL = "extract_blind.relations"

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


# --- what the model answers ------------------------------------------------------------
# Answer models of their own keep fields the model must not fill (relation_retry_triggered)
# out of the schema it is shown. Informed extraction's answer models leave their docstrings out
# of the schema (ANSWER_CONFIG): every message pays for it, and the prompt describes each field.


class ProfileUpdate(BaseModel):
    """An entity's new profile (a list item rather than a mapping: strict JSON schemas have no free-form keys)."""

    model_config = ANSWER_CONFIG

    entity: str
    profile: str


class DirectiveAnswer(BaseModel):
    """An instruction to the assistant as the model answers it (strict schemas have no string lengths)."""

    model_config = ANSWER_CONFIG

    text: str
    confidence: float = Field(ge=0.0, le=1.0)


class FactAnswer(BaseModel):
    """One fact as the model answers it; ``replaces`` is the number of a known fact it supersedes."""

    model_config = ANSWER_CONFIG

    subject: str
    text: str
    attribute_key: str | None
    importance_category: ImportanceCategory | None
    confidence_level: ConfidenceLevel | None
    # Required by the strict schema; a JSON-mode answer that leaves it out judged nothing (see to_output).
    replaces: int | None = None


class _ExtractionAnswer(BaseModel):
    """Entities, facts, relations and updated profiles found in the message."""

    model_config = ANSWER_CONFIG

    entities: list[ExtractedEntity]
    facts: list[FactAnswer]
    relations: list[ExtractedRelation]
    updated_profiles: list[ProfileUpdate]
    emotion: EmotionOutput | None
    directives: list[DirectiveAnswer]

    @model_validator(mode="before")
    @classmethod
    def _tolerate(cls, data: Any) -> Any:
        """Missing lists are empty, and a profile mapping (JSON mode answers) becomes the list."""
        if not isinstance(data, dict):
            return data
        fixed = dict(data)
        for name in ("entities", "facts", "relations", "updated_profiles", "directives"):
            if fixed.get(name) is None:
                fixed[name] = []
        fixed.setdefault("emotion", None)
        profiles = fixed["updated_profiles"]
        if isinstance(profiles, dict):
            fixed["updated_profiles"] = [{"entity": key, "profile": value} for key, value in profiles.items()]
        facts = fixed["facts"]
        if isinstance(facts, list):
            fixed["facts"] = [{**_FACT_DEFAULTS, **fact} if isinstance(fact, dict) else fact for fact in facts]
        return fixed


# What a JSON-mode answer may leave out of a fact (a strict schema makes the model write every field).
_FACT_DEFAULTS: dict[str, Any] = {
    "attribute_key": None,
    "importance_category": None,
    "confidence_level": None,
}


def shown_facts(known: list[KnownEntity]) -> list[KnownFact]:
    """The known facts in the order they are numbered (from 1) in the prompt."""
    return [fact for entity in known for fact in entity.facts]


def to_output(answer: _ExtractionAnswer, known: list[KnownEntity], max_facts: int) -> ExtractionOutput:
    """The stored extraction of an answer; a fact's ``replaces`` number becomes the known fact's id."""
    numbered = shown_facts(known)
    facts: list[ExtractedFact] = []
    for fact in answer.facts[: max(max_facts, 0)]:
        answered = "replaces" in fact.model_fields_set
        in_range = fact.replaces is not None and 1 <= fact.replaces <= len(numbered)
        target = numbered[fact.replaces - 1].fact_id if in_range and fact.replaces is not None else None
        facts.append(
            ExtractedFact(
                subject=fact.subject,
                text=fact.text,
                attribute_key=fact.attribute_key,
                action="UPDATE" if target else "NEW",
                importance_category=fact.importance_category,
                confidence_level=fact.confidence_level,
                replaces_fact_id=target,
                # Only an answer that said what the fact replaces (null: nothing, or a number it was
                # shown) judged it against the known facts.
                judged=answered and (fact.replaces is None or in_range),
            )
        )
    profiles: dict[str, str] = {}
    for update in answer.updated_profiles:
        profiles[update.entity] = update.profile
    return ExtractionOutput(
        entities=answer.entities,
        facts=facts,
        relations=answer.relations,
        updated_profiles=profiles,
        emotion=answer.emotion,
        directives=[
            ExtractedDirective(text=directive.text.strip()[:500], confidence=directive.confidence)
            for directive in answer.directives
            if directive.text.strip()
        ],
    )


class _EntityScan(BaseModel):
    """The entities the message names."""

    entities: list[ExtractedEntity] = Field(default_factory=list)


class _FactList(BaseModel):
    """Facts the message states about the listed entities."""

    facts: list[ExtractedFact] = Field(default_factory=list)


class _RelationList(BaseModel):
    """Relations between the listed entities."""

    relations: list[ExtractedRelation] = Field(default_factory=list)


class _BlindStep(BaseModel):
    """Input of the second blind step: the message plus the entities the scan found."""

    message: ExtractionInput
    entities: list[ExtractedEntity]
    retry: bool = False


# --- rendering the user message ------------------------------------------------------------


def _zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        # A bad timezone must not cost the extraction: dates are then shown in UTC.
        return UTC


def render_message_date(occurred_at: datetime, timezone: str = "UTC") -> str:
    """The sentence that anchors relative dates: ``This message was sent on Sunday, June 15, 2025, 14:30 (...)``.

    A naive ``occurred_at`` is taken as UTC; an unknown ``timezone`` falls back to UTC.
    Names are spelled out here rather than by ``strftime`` so a process locale cannot
    turn them into another language.
    """
    moment = occurred_at if occurred_at.tzinfo is not None else occurred_at.replace(tzinfo=UTC)
    zone = _zone(timezone)
    local = moment.astimezone(zone)
    offset = local.strftime("%z") or "+0000"
    zone_name = str(zone) if zone is not UTC else "UTC"
    return (
        f"This message was sent on {_WEEKDAYS[local.weekday()]}, {_MONTHS[local.month - 1]} {local.day}, "
        f"{local.year}, {local:%H:%M} ({zone_name}, UTC{offset[:3]}:{offset[3:]})."
    )


def _header(skill_input: ExtractionInput) -> list[str]:
    lines = [
        f"Speaker: {skill_input.speaker_name}",
        render_message_date(skill_input.occurred_at, skill_input.timezone),
    ]
    if skill_input.recent_messages:
        lines.append("Recent messages (context only, oldest first):")
        lines.extend(f"- {' '.join(text.split())}" for text in skill_input.recent_messages)
    if skill_input.chunk_hint:
        lines.append(f"This is one part of a longer input: {skill_input.chunk_hint}")
    return lines


def _message_block(message: str) -> list[str]:
    return ["<message>", message.strip(), "</message>"]


def known_entity_lines(entity: KnownEntity, first_number: int) -> list[str]:
    """An entity's lines in the known-entities block: its label and profile, then its numbered facts.

    ``first_number`` continues the numbering of the entities before it.
    """
    label = f"- {entity.display_name} ({entity.entity_type})"
    if entity.name.strip() and entity.name.casefold() != entity.display_name.casefold():
        label += f', called "{entity.name}" in the message'
    if entity.profile_text and entity.profile_text.strip():
        label += f". Profile: {' '.join(entity.profile_text.split())}"
    elif not entity.facts:
        label += ". Nothing known yet."
    lines = [label]
    for number, fact in enumerate(entity.facts, start=first_number):
        key = f" ({fact.attribute_key})" if fact.attribute_key else ""
        lines.append(f"  #{number} {' '.join(fact.text.split())}{key}")
    return lines


def known_block(known: list[KnownEntity]) -> list[str]:
    """The known entities with their facts numbered #1, #2... across the block (what ``replaces`` names)."""
    if not known:
        return ["Known entities: none."]
    lines = ["Known entities:"]
    number = 1
    for entity in known:
        lines.extend(known_entity_lines(entity, number))
        number += len(entity.facts)
    return lines


def _render_informed(skill_input: ExtractionInput) -> str:
    lines = [*known_block(skill_input.known_entities), f"Extract at most {skill_input.max_facts} facts."]
    lines.extend(_header(skill_input))
    lines.extend(_message_block(skill_input.message))
    return "\n".join(lines)


def _render_scan(skill_input: ExtractionInput) -> str:
    return "\n".join([*_header(skill_input), *_message_block(skill_input.message)])


def _entity_list(entities: list[ExtractedEntity]) -> list[str]:
    lines = ["Entities:"]
    for entity in entities:
        aliases = f"; also called {', '.join(entity.aliases)}" if entity.aliases else ""
        lines.append(f"- {entity.name} ({entity.type}{aliases})")
    return lines


def _render_facts(step: _BlindStep) -> str:
    lines = [*_header(step.message), *_entity_list(step.entities)]
    lines.append(f"Extract at most {step.message.max_facts} facts.")
    lines.extend(_message_block(step.message.message))
    return "\n".join(lines)


def _render_relations(step: _BlindStep) -> str:
    lines = [*_header(step.message), *_entity_list(step.entities)]
    if step.retry:
        lines.append(RELATION_RETRY_NOTE)
    lines.extend(_message_block(step.message.message))
    return "\n".join(lines)


# --- the skills --------------------------------------------------------------------------


class InformedExtractionSkill:
    """Informed extraction: one LLM call sees the message and what memory knows, and answers everything.

    The user message carries the speaker, the message date in the input's timezone
    (to resolve "yesterday"), recent messages, every known entity with its profile or
    facts, the chunk hint and the fact cap. Facts beyond ``max_facts`` are dropped.
    """

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.llm: LLMSkill[ExtractionInput, _ExtractionAnswer] = LLMSkill(
            name=INFORMED_EXTRACTION_SKILL,
            system_prompt=INFORMED_EXTRACTION_PROMPT,
            render_user=_render_informed,
            output_model=_ExtractionAnswer,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``extract_informed``."""
        return INFORMED_EXTRACTION_SKILL

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        """Ask once; the validated answer becomes an :class:`ExtractionOutput`."""
        outcome = self.llm.run(skill_input, timeout_s=skill_input.timeout_s)
        output = to_output(outcome.output, skill_input.known_entities, skill_input.max_facts)
        return SkillOutcome(output=output, usage=outcome.usage, duration_ms=outcome.duration_ms)


class BlindExtractionSkill:
    """Blind extraction: an entity scan, then fact and relation extraction side by side.

    Calls made: one when the scan finds no entity; two (scan, facts) for a single
    entity, since a relation needs two ends; three otherwise, and a fourth when the
    relation call returns nothing for two or more entities (the output then has
    ``relation_retry_triggered``). The relation call runs on a helper thread while
    the facts call runs on the caller's: the provider is synchronous and thread-safe.

    Facts come back with ``action="NEW"`` (reconciliation decides later) and there are
    no profiles. When a call answers garbage the :class:`SkillOutputError` raised
    carries the tokens of every call made; a provider error takes precedence over it,
    so a rate limit still reaches the task queue.
    """

    def __init__(self, provider: LLMProvider, *, temperature: float = 0.0, max_tokens: int | None = None) -> None:
        self.entities: LLMSkill[ExtractionInput, _EntityScan] = LLMSkill(
            name=BLIND_ENTITIES_SKILL,
            system_prompt=BLIND_ENTITIES_PROMPT,
            render_user=_render_scan,
            output_model=_EntityScan,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        self.facts: LLMSkill[_BlindStep, _FactList] = LLMSkill(
            name=BLIND_FACTS_SKILL,
            system_prompt=BLIND_FACTS_PROMPT,
            render_user=_render_facts,
            output_model=_FactList,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        self.relations: LLMSkill[_BlindStep, _RelationList] = LLMSkill(
            name=BLIND_RELATIONS_SKILL,
            system_prompt=BLIND_RELATIONS_PROMPT,
            render_user=_render_relations,
            output_model=_RelationList,
            provider=provider,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    @property
    def name(self) -> str:
        """``extract_blind``."""
        return BLIND_EXTRACTION_SKILL

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        """Scan, then extract facts and relations concurrently; usage is the sum of every call."""
        started = time.perf_counter()
        scan = self.entities.run(skill_input, timeout_s=skill_input.timeout_s)
        entities = scan.output.entities
        usage = scan.usage
        if not entities:
            return self._outcome(ExtractionOutput(), usage, started)
        step = _BlindStep(message=skill_input, entities=entities)
        if len(entities) < 2:
            alone = self._facts_or_raise(step, usage)
            output = ExtractionOutput(entities=entities, facts=self._new_facts(alone.output, skill_input))
            return self._outcome(output, usage + alone.usage, started)

        facts_outcome: SkillOutcome[_FactList] | None = None
        found: tuple[list[ExtractedRelation], TokenUsage, bool] | None = None
        errors: list[Exception] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="extract-relations") as pool:
            relations_future = pool.submit(self._find_relations, step)
            # Each failure is held until both calls settle: which one is raised is decided below.
            try:
                facts_outcome = self.facts.run(step, timeout_s=step.message.timeout_s)
            except Exception as error:
                errors.append(error)
            try:
                found = relations_future.result()
            except Exception as error:
                errors.append(error)

        if errors:
            spent = usage
            if facts_outcome is not None:
                spent += facts_outcome.usage
            if found is not None:
                spent += found[1]
            raise self._sorted_failure(errors, spent)
        assert facts_outcome is not None
        assert found is not None
        relations, relations_usage, retried = found
        output = ExtractionOutput(
            entities=entities,
            facts=self._new_facts(facts_outcome.output, skill_input),
            relations=relations,
            relation_retry_triggered=retried,
        )
        return self._outcome(output, usage + facts_outcome.usage + relations_usage, started)

    def _find_relations(self, step: _BlindStep) -> tuple[list[ExtractedRelation], TokenUsage, bool]:
        """The relation call, repeated once with a nudge when it finds nothing between 2+ entities."""
        first = self.relations.run(step, timeout_s=step.message.timeout_s)
        # The seeds' retry: nothing found between at least relation_retry_min_entities entities.
        if first.output.relations or len(step.entities) < step.message.relation_retry_min_entities:
            return first.output.relations, first.usage, False
        try:
            second = self.relations.run(step.model_copy(update={"retry": True}), timeout_s=step.message.timeout_s)
        except SkillOutputError as error:
            raise _with_usage(error, first.usage + error.usage) from error
        return second.output.relations, first.usage + second.usage, True

    def _facts_or_raise(self, step: _BlindStep, spent: TokenUsage) -> SkillOutcome[_FactList]:
        try:
            return self.facts.run(step, timeout_s=step.message.timeout_s)
        except SkillOutputError as error:
            raise _with_usage(error, spent + error.usage) from error

    @staticmethod
    def _new_facts(answer: _FactList, skill_input: ExtractionInput) -> list[ExtractedFact]:
        facts = answer.facts[: max(skill_input.max_facts, 0)]
        return [fact if fact.action == "NEW" else fact.model_copy(update={"action": "NEW"}) for fact in facts]

    @staticmethod
    def _sorted_failure(errors: list[Exception], spent: TokenUsage) -> Exception:
        """The error to raise: a provider error as it is, else the first bad answer charged with all tokens.

        ``spent`` covers the scan and the calls that succeeded; the failed calls' own
        tokens travel on their errors and are added here.
        """
        # A provider error (retry later) outranks a bad answer (fall back now): retrying
        # the whole extraction is worth more than rules standing in for it.
        for error in errors:
            if not isinstance(error, SkillOutputError):
                return error
        bad_answers = [error for error in errors if isinstance(error, SkillOutputError)]
        total = spent
        for error in bad_answers:
            total += error.usage
        failure = _with_usage(bad_answers[0], total)
        failure.__cause__ = bad_answers[0]
        return failure

    @staticmethod
    def _outcome(output: ExtractionOutput, usage: TokenUsage, started: float) -> SkillOutcome[ExtractionOutput]:
        return SkillOutcome(output=output, usage=usage, duration_ms=(time.perf_counter() - started) * 1000.0)


def _with_usage(error: SkillOutputError, usage: TokenUsage) -> SkillOutputError:
    """The same failure, charged with every token spent up to it."""
    return SkillOutputError(error.message, skill=error.skill, raw_text=error.raw_text, usage=usage)
