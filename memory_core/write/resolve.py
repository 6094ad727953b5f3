"""Stage ``resolve``: every mention to a canonical entity (seeds W10, W11).

Exact (speaker pronouns, relationship terms, aliases, key slug, display name, person
prefix >= 3 chars) -> fuzzy (name embeddings: >= ``fuzzy_threshold`` resolves, between the
lower bound and it asks the disambiguation skill with the top candidates, below is new).
Reads only: entities are created by ``upsert`` under the agent's lock, which re-checks
new names against what other messages created in the meantime.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from sqlalchemy.orm import Session

from memory_core.cognition.models import DisambiguationInput, DisambiguationOutput, EntityCandidate, ExtractedEntity
from memory_core.config import MemoryConfig
from memory_core.write import repository
from memory_core.write.context import WriteContext
from memory_core.write.naming import entity_key, fold, names_compatible, normalize_alias, normalize_entity_type
from memory_core.write.schemas import ResolvedEntity, ResolveStageOutput, TokenCount, TraceStep
from memory_core.write.skill_calls import SkillCache, call_skill

SELF_REFERENCES = frozenset(
    {"i", "me", "my", "myself", "mine", "eu", "mim", "meu", "minha", "comigo", "user", "speaker"}
)
RELATIONSHIP_TERMS = frozenset(
    {
        "girlfriend", "boyfriend", "wife", "husband", "partner", "brother", "sister", "mother", "father", "mom",
        "dad", "friend", "son", "daughter", "namorada", "namorado", "esposa", "marido", "irmao", "irma", "mae",
        "pai", "amigo", "amiga", "filho", "filha",
    }
)  # fmt: skip
_HINT = re.compile(r"^\s*(?P<name>[^()]+?)\s*\((?P<hint>[^()]*)\)\s*$")


def speaker_entity(speaker: str) -> tuple[str, str]:
    """The speaker's canonical key and display name."""
    return entity_key("person", speaker), speaker.strip()


def _strip_hint(entity: ExtractedEntity) -> ExtractedEntity:
    # "Carol (namorada do Rafael)": the hint says who she is, not what she is called.
    match = _HINT.match(entity.name)
    if not match:
        return entity
    return ExtractedEntity(name=match.group("name").strip(), type="person", aliases=entity.aliases)


def name_lookup_request(entities: Sequence[ExtractedEntity]) -> repository.NameRequest:
    """What :func:`resolve_entities` looks up for ``entities``: their names as aliases, their keys, their names."""
    cleaned = [_strip_hint(entity) for entity in entities]
    slug_keys = {normalize_alias(e.name): entity_key(e.type, e.name) for e in cleaned}
    return repository.NameRequest(
        aliases=[name for entity in cleaned for name in (entity.name, *entity.aliases)],
        keys=list(slug_keys.values()),
        display_names=[e.name for e in cleaned],
    )


def resolve_entities(
    ctx: WriteContext,
    session: Session,
    *,
    agent_id: str,
    speaker: str,
    message: str,
    entities: Sequence[ExtractedEntity],
    config: MemoryConfig,
    cache: SkillCache | None = None,
    known: repository.NameLookup | None = None,
) -> ResolveStageOutput:
    """Resolve every extracted entity (and the speaker) for ``agent_id``.

    ``known``: the answer of :func:`repository.lookup_names` for :func:`name_lookup_request`'s
    request of these entities, when a chunk read it already (:func:`repository.lookup_names_many`).
    """
    started = time.perf_counter()
    tokens = TokenCount()
    speaker_key, speaker_name = speaker_entity(speaker)
    self_words = SELF_REFERENCES | {fold(word) for word in config.extra_self_references} | {fold(speaker)}
    relationship_words = RELATIONSHIP_TERMS | {fold(word) for word in config.extra_relationship_hints}
    cleaned = [_strip_hint(entity) for entity in entities]

    slug_keys = {normalize_alias(e.name): entity_key(e.type, e.name) for e in cleaned}
    if known is None:
        # Aliases, keys and display names in one round trip (they were three statements per message).
        request = name_lookup_request(entities)
        known = repository.lookup_names(
            session, agent_id, aliases=request.aliases, keys=request.keys, display_names=request.display_names
        )
    alias_hits, key_hits, display_hits = known.aliases, known.by_key, known.by_display_name

    resolved: list[ResolvedEntity] = []
    pending_fuzzy: list[ExtractedEntity] = []
    for entity in cleaned:
        mention = normalize_alias(entity.name)
        entity_type = normalize_entity_type(entity.type)
        aliases = [alias for alias in entity.aliases if normalize_alias(alias) != mention]

        def found(
            key: str, display: str, kind: str, method: str, *, mention: str = mention, aliases: list[str] = aliases
        ) -> None:
            resolved.append(
                ResolvedEntity(
                    mention=mention,
                    canonical_key=key,
                    display_name=display,
                    entity_type=kind,
                    method=method,
                    is_new=False,
                    aliases=aliases,
                )
            )

        if mention in self_words:
            found(speaker_key, speaker_name, "person", "speaker")
            continue
        if mention in relationship_words:
            found(speaker_key, speaker_name, "person", "relationship_term")
            continue
        alias_key = next(
            (
                alias_hits[normalize_alias(n)]
                for n in (entity.name, *entity.aliases)
                if normalize_alias(n) in alias_hits
            ),
            None,
        )
        if alias_key is not None:
            row = key_hits.get(alias_key)
            found(alias_key, row.display_name if row else entity.name, row.entity_type if row else entity_type, "alias")
            continue
        slug = slug_keys[mention]
        if slug in key_hits:
            row = key_hits[slug]
            found(slug, row.display_name, row.entity_type, "key")
            continue
        same_name = display_hits.get(entity.name.strip().lower(), [])
        if same_name:
            row = next((r for r in same_name if r.entity_type == entity_type), same_name[0])
            found(row.canonical_key, row.display_name, row.entity_type, "display_name")
            continue
        first = entity.name.split()[0] if entity.name.split() else ""
        if entity_type == "person" and len(first) >= config.person_prefix_min_chars and len(entity.name.split()) == 1:
            prefixed = repository.person_prefix_matches(session, agent_id, first)
            if len(prefixed) == 1:
                found(prefixed[0].canonical_key, prefixed[0].display_name, "person", "prefix")
                continue
        pending_fuzzy.append(entity)

    if pending_fuzzy:
        if not ctx.embedder_in_process:
            session.close()  # the embedder may be remote: give the connection back meanwhile
        vectors = ctx.embedder.embed([entity.name for entity in pending_fuzzy])
        for entity, vector in zip(pending_fuzzy, vectors, strict=True):
            mention = normalize_alias(entity.name)
            entity_type = normalize_entity_type(entity.type)
            aliases = [alias for alias in entity.aliases if normalize_alias(alias) != mention]
            candidates = repository.nearest_entities(session, agent_id, vector, config.llm_resolution_max_candidates)
            best = candidates[0] if candidates else None
            choice: tuple[str, str, str, str] | None = None
            # Embeddings of short names are noisy (hashing ones are merely lexical): a close vector
            # only resolves when the names could be the same at all ("Ana Souza" is not "Ana Silva").
            if (
                best is not None
                and best[1] >= config.fuzzy_threshold
                and names_compatible(entity.name, best[0].display_name)
            ):
                choice = (best[0].canonical_key, best[0].display_name, best[0].entity_type, "fuzzy")
            elif best is not None and best[1] >= config.fuzzy_lower_threshold and config.enable_llm_resolution:
                call = call_skill(
                    ctx.skills.disambiguate,
                    DisambiguationInput(
                        mention=entity.name,
                        mention_type=entity_type,
                        message=message,
                        candidates=[
                            EntityCandidate(
                                canonical_key=row.canonical_key,
                                display_name=row.display_name,
                                entity_type=row.entity_type,
                                similarity=round(similarity, 4),
                                summary=row.summary_text or row.profile_text,
                            )
                            for row, similarity in candidates
                            if similarity >= config.fuzzy_lower_threshold
                        ],
                    ),
                    DisambiguationOutput,
                    cache=cache,
                    cache_key=f"disambiguate:{mention}",
                    cacheable=ctx.skills.kind == "llm",
                    release=ctx.release(session),
                )
                tokens = tokens.plus(call.tokens)
                chosen = call.output.match if call.output else None
                picked = next((row for row, _ in candidates if row.canonical_key == chosen), None)
                if (
                    picked is not None
                    and ctx.skills.kind != "llm"
                    and not names_compatible(entity.name, picked.display_name)
                ):
                    picked = None
                if picked is not None:
                    choice = (picked.canonical_key, picked.display_name, picked.entity_type, "llm")
            if choice is None:
                # Seeds: when in doubt, a new entity (a duplicate beats a wrong merge).
                choice = (entity_key(entity_type, entity.name), entity.name.strip(), entity_type, "new")
            resolved.append(
                ResolvedEntity(
                    mention=mention,
                    canonical_key=choice[0],
                    display_name=choice[1],
                    entity_type=choice[2],
                    method=choice[3],
                    is_new=choice[3] == "new",
                    aliases=aliases,
                    embedding=vector,
                )
            )

    if not any(item.canonical_key == speaker_key for item in resolved):
        resolved.append(
            ResolvedEntity(
                mention=normalize_alias(speaker),
                canonical_key=speaker_key,
                display_name=speaker_name,
                entity_type="person",
                method="speaker",
                is_new=False,
            )
        )
    trace = [
        TraceStep(
            name="entity_resolution",
            duration_ms=(time.perf_counter() - started) * 1000,
            data={"resolved": {item.mention: f"{item.canonical_key} ({item.method})" for item in resolved}},
        )
    ]
    return ResolveStageOutput(entities=resolved, tokens=tokens, trace=trace)
