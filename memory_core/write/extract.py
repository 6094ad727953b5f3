"""Stage ``extract``: emotion, alias lookup, pre-retrieval, informed (or blind) extraction, clean-up.

Runs entirely outside any lock: it reads memory to inform the LLM and writes nothing but
its own output. Fallbacks follow the seeds: informed extraction failing falls back to blind
extraction; blind failing yields an empty extraction (the event is kept and can be re-driven).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from memory_core.cognition.directive_models import ExtractedDirective
from memory_core.cognition.models import (
    EmotionInput,
    EmotionOutput,
    ExtractionInput,
    ExtractionOutput,
    KnownEntity,
    KnownFact,
)
from memory_core.config import MemoryConfig
from memory_core.write import repository
from memory_core.write.context import WriteContext
from memory_core.write.directives import detect_offline, plan_directives
from memory_core.write.naming import fold
from memory_core.write.normalize import group_aliases, prepare_facts
from memory_core.write.schemas import ExtractStageOutput, TokenCount, TraceStep
from memory_core.write.skill_calls import SkillCache, call_skill
from memory_core.write.strategy import classify_input, select_strategy, split_into_chunks

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class ExtractionResult:
    """The stage output plus what goes on the event row."""

    output: ExtractStageOutput
    event_embedding: list[float] | None
    emotion: EmotionOutput | None


def lookup_grams(message: str, speaker: str | None) -> list[str]:
    """The strings an alias of a known entity could be: the message's word runs, and the speaker's name.

    The speaker is known context of every message: "I moved to Porto" is about them without naming them.
    """
    grams = repository.message_ngrams(message)
    if speaker and speaker.strip():
        grams.append(speaker)
    return grams


def known_entities_for(
    session: Session,
    agent_id: str,
    message: str,
    message_vector: list[float] | None,
    config: MemoryConfig,
    *,
    lookup: repository.KnownAliases | None = None,
    speaker: str | None = None,
    closest: Mapping[str, list[repository.FactRow]] | None = None,
) -> list[KnownEntity]:
    """Alias lookup (no LLM) then pre-retrieval: each known entity's profile and facts (the speaker's too).

    The context budget (``informed_extraction_context_budget_tokens``) is shared by the
    entities found, in the order they appear in the message (the speaker first). Each shows its
    profile (at most half its share), then its ``informed_extraction_topk`` facts closest to the
    message, as many as its share holds. Facts are numbered in the prompt, so extraction says
    which one a new fact replaces; none is left out because the profile tells it: a new fact is
    compared with its entity's facts by its own vector, not the message's, so a fact far from the
    message ("Liam loves pizza" for "I could eat lasagna every day") is as often a candidate of
    reconciliation ("Liam loves lasagna"), and one extraction was not shown costs a reconcile
    call. ``lookup`` answers the alias and entity lookups when the chunk read them already
    (:func:`chunk_known_aliases`), and ``closest`` each entity's closest facts
    (:func:`chunk_closest_facts`).
    """
    grams = lookup_grams(message, speaker)
    if lookup is not None:
        found = lookup.aliases_for(agent_id, grams)
    else:
        found = repository.aliases_for(session, agent_id, grams)
    if not found:
        return []
    keys, mention_of = _mentioned_keys(found, message)
    if lookup is not None:
        rows = lookup.entities_by_keys(agent_id, keys)
    else:
        rows = repository.entities_by_keys(session, agent_id, keys)
    budget_chars = config.informed_extraction_context_budget_tokens * CHARS_PER_TOKEN
    per_entity = max(budget_chars // max(len(keys), 1), 80)
    known: list[KnownEntity] = []
    for key in keys:
        row = rows.get(key)
        if row is None:
            continue
        entity = KnownEntity(
            name=mention_of[key], canonical_key=key, display_name=row.display_name, entity_type=row.entity_type
        )
        used = 0
        if row.profile_text:
            # Half the entity's share at most: the facts that matter come after it.
            entity.profile_text = row.profile_text[: per_entity // 2]
            used = len(entity.profile_text)
        read = closest.get(key) if closest is not None else None
        if read is None:
            read = repository.closest_active_facts(
                session, agent_id, key, message_vector, limit=config.informed_extraction_topk
            )
        for fact in read:
            if used + len(fact.text) > per_entity:
                break
            used += len(fact.text)
            entity.facts.append(KnownFact(fact_id=fact.fact_id, text=fact.text, attribute_key=fact.attribute_key))
        known.append(entity)
    return known


def _mentioned_keys(found: Mapping[str, str], message: str) -> tuple[list[str], dict[str, str]]:
    """The keys ``found`` (alias -> key) points to, in the order the message names them, with each one's mention."""
    folded = fold(message)
    order = sorted(found.items(), key=lambda item: (folded.find(item[0]), item[0]))
    keys: list[str] = []
    mention_of: dict[str, str] = {}
    for alias, key in order:
        if key not in mention_of:
            keys.append(key)
            mention_of[key] = alias
    return keys, mention_of


@dataclass(frozen=True)
class PreRead:
    """What a chunk read ahead for one message's pre-retrieval: its vector, and its known entities' closest facts."""

    event_vector: list[float] | None
    closest: dict[str, list[repository.FactRow]]
    # The database's clock and snapshot right after the chunk's read (LLM skills only).
    read: repository.ReadPoint | None = None


def chunk_closest_facts(
    session: Session,
    lookup: repository.KnownAliases,
    messages: Sequence[tuple[str, str, str, list[float] | None, MemoryConfig]],
) -> list[dict[str, list[repository.FactRow]]]:
    """The closest active facts of every known entity each of a chunk's messages names, in one statement.

    ``messages``: (agent, text, speaker, the text's vector, config) per message. Each message's
    lists are what :func:`known_entities_for` would read for it on its own (the same search,
    :func:`repository.closest_active_facts_many`); a message with no vector, or whose config does
    not extract informed, gets none and reads its own as before.
    """
    wanted: list[tuple[int, str, int]] = []
    queries: list[repository.ClosestFactsQuery] = []
    for position, (agent_id, message, speaker, vector, config) in enumerate(messages):
        if not vector or not config.enable_informed_extraction:
            continue
        found = lookup.aliases_for(agent_id, lookup_grams(message, speaker))
        keys, _ = _mentioned_keys(found, message)
        known = lookup.entities_by_keys(agent_id, keys)
        for key in keys:
            if key in known:
                wanted.append((position, key, config.informed_extraction_topk))
                queries.append(repository.ClosestFactsQuery(agent_id, key, vector))
    closest: list[dict[str, list[repository.FactRow]]] = [{} for _ in messages]
    # One statement per distinct limit (agents' configs may differ; in practice one).
    for limit in sorted({limit for _, _, limit in wanted}):
        chosen = [index for index, (_, _, each) in enumerate(wanted) if each == limit]
        found_lists = repository.closest_active_facts_many(session, [queries[index] for index in chosen], limit=limit)
        for index, facts in zip(chosen, found_lists, strict=True):
            position, key, _ = wanted[index]
            closest[position][key] = facts
    return closest


def chunk_known_aliases(
    session: Session,
    messages: Sequence[tuple[str, str]],
    config_of: Sequence[MemoryConfig],
    speakers: Sequence[str] | None = None,
) -> repository.KnownAliases:
    """The alias and entity lookups of a chunk's (agent, message) pairs (and their speakers), in one statement.

    Only messages whose config extracts informed ask anything (blind extraction reads no memory).
    """
    said_by = list(speakers) if speakers is not None else [""] * len(messages)
    return repository.known_aliases(
        session,
        (
            (agent_id, lookup_grams(message, speaker))
            for (agent_id, message), config, speaker in zip(messages, config_of, said_by, strict=True)
            if config.enable_informed_extraction
        ),
    )


def _merge(outputs: list[ExtractionOutput]) -> ExtractionOutput:
    if len(outputs) == 1:
        return outputs[0]
    merged = ExtractionOutput()
    for output in outputs:
        merged.entities.extend(output.entities)
        merged.facts.extend(output.facts)
        merged.relations.extend(output.relations)
        merged.updated_profiles.update(output.updated_profiles)
        merged.relation_retry_triggered |= output.relation_retry_triggered
        merged.emotion = merged.emotion or output.emotion
        merged.directives.extend(output.directives)
    return merged


@dataclass(frozen=True)
class BatchShare:
    """A message's part of a batched extraction call: its share of the call's tokens, and the batch it was in."""

    tokens: TokenCount
    info: dict[str, Any]


@dataclass
class PreparedExtraction:
    """Everything ``extract`` computes for a message before asking the model (memory read, nothing written).

    ``inputs`` holds one skill input per chunk of the message (one unless the message is long).
    """

    config: MemoryConfig
    speaker: str
    informed: bool
    event_vector: list[float] | None
    emotion: EmotionOutput | None
    tokens: TokenCount
    trace: list[TraceStep]
    known: list[KnownEntity]
    input_type: str
    strategy: str
    inputs: list[ExtractionInput]
    agent_id: str = ""
    message: str = ""
    # Offline: the directives the rule twin found (an LLM answers them in the extraction call).
    directives: list[ExtractedDirective] | None = None
    # The database's clock and snapshot after pre-retrieval (LLM informed extraction only): see
    # ExtractStageOutput.
    known_as_of: datetime | None = None
    known_snapshot: str | None = None

    @property
    def batchable(self) -> bool:
        """Whether the message may share a call with others: informed, in one piece."""
        return self.informed and len(self.inputs) == 1


def prepare_extraction(
    ctx: WriteContext,
    session: Session,
    *,
    agent_id: str,
    message: str,
    speaker: str,
    occurred_at: datetime,
    options: dict[str, Any],
    agent_config: dict[str, Any] | None = None,
    known_aliases: repository.KnownAliases | None = None,
    pre_read: PreRead | None = None,
) -> PreparedExtraction:
    """Embedding, emotion (offline), pre-retrieval and the skill inputs of one message.

    ``agent_config``: the agent's stored config overrides (the run's ``agent_config``).
    Informed by an LLM, the database's clock and snapshot just after pre-retrieval read memory
    (``known_as_of``, ``known_snapshot``): the chunk's, taken right after its one statement, with
    ``pre_read`` (the message's vector and its entities' closest facts, :func:`chunk_closest_facts`);
    else read in this session after this message's own reads. Never one reading after several
    messages' reads: a fact committed between them would look seen, and cost a reconcile call.
    """
    config = ctx.config_for(options, agent_config)
    trace: list[TraceStep] = []
    tokens = TokenCount()
    cacheable = ctx.skills.kind == "llm"

    started = time.perf_counter()
    event_vector = pre_read.event_vector if pre_read is not None else ctx.embedder.embed_one(message)
    emotion: EmotionOutput | None = None
    if not cacheable:
        # Offline rules tag emotion for free. An LLM tags it inside the extraction call instead:
        # a second call per message would double the cost; events it could not tag are picked
        # up by the consolidation job.
        emotion_call = call_skill(ctx.skills.tag_emotion, EmotionInput(text=message), EmotionOutput)
        tokens = tokens.plus(emotion_call.tokens)
        emotion = emotion_call.output
        trace.append(
            TraceStep(
                name="emotion",
                duration_ms=(time.perf_counter() - started) * 1000,
                data={"emotion": emotion.model_dump() if emotion else None},
            )
        )

    directives: list[ExtractedDirective] | None = None
    if not cacheable:
        directives = detect_offline(ctx, message, speaker)

    started = time.perf_counter()
    informed = config.enable_informed_extraction
    known = (
        known_entities_for(
            session,
            agent_id,
            message,
            event_vector,
            config,
            lookup=known_aliases,
            speaker=speaker,
            closest=pre_read.closest if pre_read is not None else None,
        )
        if informed
        else []
    )
    # Only an LLM's extraction judges facts against what it was shown (offline rules judge none).
    read: repository.ReadPoint | None = None
    if informed and cacheable:
        read = pre_read.read if pre_read is not None and pre_read.read is not None else repository.read_point(session)
    trace.append(
        TraceStep(
            name="pre_retrieval",
            duration_ms=(time.perf_counter() - started) * 1000,
            data={"known_entities": [entity.canonical_key for entity in known]},
        )
    )

    classification = classify_input(
        message,
        short_max_chars=config.input_short_max_chars,
        long_min_chars=config.input_long_min_chars,
        chars_per_token=config.chars_per_token,
    )
    strategy = select_strategy(classification, chars_per_token=config.chars_per_token)
    chunks = split_into_chunks(message, strategy) if strategy.mode.value == "chunked" else [message]
    inputs = [
        ExtractionInput(
            message=chunk,
            speaker_name=speaker,
            occurred_at=occurred_at,
            timezone=config.timezone,
            recent_messages=list(options.get("recent_messages") or []),
            known_entities=known,
            chunk_hint=strategy.chunk_context_hint if len(chunks) > 1 else None,
            max_facts=config.max_facts_per_event,
            # The provider's own timeout (ARANDU_LLM_TIMEOUT_S) stays the ceiling of every call.
            timeout_s=config.extraction_timeout_sec,
            relation_retry_min_entities=config.relation_retry_min_entities,
        )
        for chunk in chunks
    ]
    return PreparedExtraction(
        config=config,
        speaker=speaker,
        informed=informed,
        event_vector=event_vector,
        emotion=emotion,
        tokens=tokens,
        trace=trace,
        known=known,
        input_type=classification.input_type.value,
        strategy=strategy.mode.value,
        inputs=inputs,
        agent_id=agent_id,
        message=message,
        directives=directives,
        known_as_of=read.at if read is not None else None,
        known_snapshot=read.snapshot if read is not None else None,
    )


def informed_cache_key(ctx: WriteContext, chunk: int = 0) -> str:
    """The run's LLM-cache key of a chunk's informed extraction (batched answers are stored under it too)."""
    return f"{ctx.skills.extract_informed.name}:{chunk}"


def compute_extraction(
    ctx: WriteContext,
    session: Session,
    *,
    agent_id: str,
    message: str,
    speaker: str,
    occurred_at: datetime,
    options: dict[str, Any],
    agent_config: dict[str, Any] | None = None,
    cache: SkillCache | None = None,
    known_aliases: repository.KnownAliases | None = None,
    pre_read: PreRead | None = None,
) -> ExtractionResult:
    """Everything ``extract`` produces for one message; reads memory, writes nothing.

    ``known_aliases``: the chunk's alias lookups, read once for all its messages; ``pre_read``:
    its closest facts, likewise (:func:`chunk_closest_facts`).
    """
    prepared = prepare_extraction(
        ctx,
        session,
        agent_id=agent_id,
        message=message,
        speaker=speaker,
        occurred_at=occurred_at,
        options=options,
        agent_config=agent_config,
        known_aliases=known_aliases,
        pre_read=pre_read,
    )
    return finish_extraction(ctx, session, prepared, cache=cache)


def finish_extraction(
    ctx: WriteContext,
    session: Session,
    prepared: PreparedExtraction,
    *,
    cache: SkillCache | None = None,
    batch: BatchShare | None = None,
) -> ExtractionResult:
    """Ask the model (or find its answer in ``cache``), fall back as the seeds say, and clean up.

    ``batch``: the message's answer came from a batched call and waits in ``cache``; its share
    of that call's tokens is counted here.
    """
    cacheable = ctx.skills.kind == "llm"
    config = prepared.config
    speaker = prepared.speaker
    informed = prepared.informed
    trace = list(prepared.trace)
    tokens = prepared.tokens.plus(batch.tokens) if batch is not None else prepared.tokens
    outputs: list[ExtractionOutput] = []
    errors: list[str] = []
    used_fallback = False
    mode = "informed" if informed else "blind"
    started = time.perf_counter()
    batch_info = batch.info if batch is not None else None
    for number, skill_input in enumerate(prepared.inputs):
        primary = ctx.skills.extract_informed if informed else ctx.skills.extract_blind
        key = f"{primary.name}:{number}"
        if batch_info is None and cache is not None and informed:
            # A redelivered stage whose answer came from a batch: keep saying so.
            stored = cache.get(key)
            if stored is not None and isinstance(stored.get("batch"), dict):
                batch_info = stored["batch"]
        call = call_skill(
            primary,
            skill_input,
            ExtractionOutput,
            cache=cache,
            cache_key=key,
            cacheable=cacheable,
            release=ctx.release(session),
        )
        tokens = tokens.plus(call.tokens)
        result = call.output
        if result is None and informed:
            errors.append(call.error or "informed extraction failed")
            used_fallback = True
            blind = call_skill(
                ctx.skills.extract_blind,
                skill_input.model_copy(update={"known_entities": []}),
                ExtractionOutput,
                cache=cache,
                cache_key=f"{ctx.skills.extract_blind.name}:{number}",
                cacheable=cacheable,
                release=ctx.release(session),
            )
            tokens = tokens.plus(blind.tokens)
            result = blind.output
            if result is None:
                errors.append(blind.error or "blind extraction failed")
        elif result is None:
            errors.append(call.error or "extraction failed")
        outputs.append(result or ExtractionOutput())
    merged = _merge(outputs)
    emotion = prepared.emotion or merged.emotion
    extraction = group_aliases(merged, speaker)
    if not ctx.embedder_in_process:
        session.close()  # the embedder may be remote: give the connection back meanwhile
    facts = prepare_facts(extraction, config, ctx.embedder.embed)
    started_directives = time.perf_counter()
    detected = prepared.directives if prepared.directives is not None else merged.directives
    if not detected and used_fallback and prepared.directives is None:
        # The model's extraction failed: the rules stand in for its directives.
        detected = detect_offline(ctx, prepared.message, speaker)
    planning = plan_directives(ctx, session, agent_id=prepared.agent_id, detected=detected, config=config, cache=cache)
    tokens = tokens.plus(planning.tokens)
    if detected:
        trace.append(
            TraceStep(
                name="directives",
                duration_ms=(time.perf_counter() - started_directives) * 1000,
                data={
                    "plans": [{"text": p.text, "action": p.action, "target_id": p.target_id} for p in planning.plans],
                    "errors": planning.errors,
                },
            )
        )
    trace.append(
        TraceStep(
            name="extraction",
            duration_ms=(time.perf_counter() - started) * 1000,
            data={
                "mode": mode,
                "input_type": prepared.input_type,
                "strategy": prepared.strategy,
                "chunks": len(prepared.inputs),
                "used_fallback": used_fallback,
                "errors": errors,
                "relation_retry_triggered": extraction.relation_retry_triggered,
                "entities": len(extraction.entities),
                "facts": len(facts),
                "relations": len(extraction.relations),
                **({"batch": batch_info} if batch_info is not None else {}),
            },
        )
    )
    output = ExtractStageOutput(
        extraction=extraction,
        facts=facts,
        known_entities=prepared.known,
        mode=mode,
        strategy=prepared.strategy,
        chunks=len(prepared.inputs),
        used_fallback=used_fallback,
        error="; ".join(errors) or None,
        emotion=emotion.model_dump() if emotion else None,
        directives=planning.plans,
        tokens=tokens,
        trace=trace,
        batch=batch_info,
        known_as_of=prepared.known_as_of,
        known_snapshot=prepared.known_snapshot,
    )
    return ExtractionResult(output=output, event_embedding=prepared.event_vector, emotion=emotion)
