"""Pure clean-up of an extraction (seeds W8, W9, W16 mirror facts, W18 attribute keys).

Alias grouping and subject normalisation, self-referencing relations dropped, exact and
semantic duplicates removed, confidence and importance mapped to numbers, attribute keys
canonicalised, and a mirror fact for every relation that no fact states.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from memory_core.cognition.models import ExtractedEntity, ExtractedFact, ExtractedRelation, ExtractionOutput
from memory_core.config import MemoryConfig
from memory_core.write.attribute_keys import canonicalize_attribute_key
from memory_core.write.naming import fold, normalize_alias
from memory_core.write.schemas import PreparedFact

IDENTITY_RELATIONS = frozenset({"same_as", "alias_of", "also_known_as", "is", "identical_to", "aka"})
REL_TYPE_ALIASES: dict[str, str] = {
    "boss": "reports_to",
    "manager": "reports_to",
    "reports_to_manager": "reports_to",
    "spouse": "partner_of",
    "spouse_of": "partner_of",
    "married_to": "partner_of",
    "wife_of": "partner_of",
    "husband_of": "partner_of",
    "girlfriend_of": "partner_of",
    "boyfriend_of": "partner_of",
    "employee_of": "works_at",
    "works_for": "works_at",
    "employed_by": "works_at",
    "resides_in": "lives_in",
    "lives_at": "lives_in",
    "moved_to": "lives_in",
    "brother_of": "sibling_of",
    "sister_of": "sibling_of",
    "mother_of": "parent_of",
    "father_of": "parent_of",
    "friends_with": "friend_of",
    "pet_of": "owned_by",
    "has_pet": "owns",
    "student_at": "studies_at",
}
REL_TYPE_ATTRIBUTES: dict[str, str] = {
    "lives_in": "location.residence",
    "works_at": "work.employer",
    "partner_of": "relationship.partner",
    "sibling_of": "family.sibling",
    "friend_of": "relationship.friend",
    "studies_at": "education.school",
    "owns": "pet",
}
_PUNCTUATION = re.compile(r"[^\w\s]")


def normalize_rel_type(raw: str) -> str:
    """snake_case, then the alias map (boss -> reports_to, spouse -> partner_of)."""
    snake = re.sub(r"[^a-z0-9]+", "_", fold(raw)).strip("_") or "related_to"
    return REL_TYPE_ALIASES.get(snake, snake)[:64]


def _text_key(subject: str, fact_text: str) -> tuple[str, str]:
    return normalize_alias(subject), " ".join(_PUNCTUATION.sub(" ", fold(fact_text)).split())


def _mentions(fact_text: str, name: str) -> bool:
    folded_name = fold(name)
    return len(folded_name) >= 3 and folded_name in fold(fact_text)


def _cosine(left: Sequence[float], right: Sequence[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=False))
    norm = math.sqrt(sum(a * a for a in left)) * math.sqrt(sum(b * b for b in right))
    return dot / norm if norm else 0.0


def group_aliases(output: ExtractionOutput, speaker_name: str) -> ExtractionOutput:
    """One entity per real-world thing: aliases folded into the most complete name, references rewritten."""
    canonical_of: dict[str, str] = {}
    merged: dict[str, ExtractedEntity] = {}
    for entity in output.entities:
        names = [entity.name, *entity.aliases]
        existing = next((canonical_of[normalize_alias(n)] for n in names if normalize_alias(n) in canonical_of), None)
        target = existing or entity.name
        current = merged.get(normalize_alias(target))
        if current is None:
            current = ExtractedEntity(name=target, type=entity.type, aliases=[])
            merged[normalize_alias(target)] = current
        for name in names:
            key = normalize_alias(name)
            canonical_of.setdefault(key, current.name)
            if key != normalize_alias(current.name) and name not in current.aliases:
                current.aliases.append(name)
        if current.type in ("", "other") and entity.type not in ("", "other"):
            current.type = entity.type

    def canonical(name: str) -> str:
        return canonical_of.get(normalize_alias(name), name)

    facts = [fact.model_copy(update={"subject": canonical(fact.subject)}) for fact in output.facts]
    relations: list[ExtractedRelation] = []
    for relation in output.relations:
        source, target = canonical(relation.source), canonical(relation.target)
        rel_type = normalize_rel_type(relation.type)
        # A relation that collapses onto one entity says nothing (seeds: "caroline child_of caroline").
        if normalize_alias(source) == normalize_alias(target) or rel_type in IDENTITY_RELATIONS:
            continue
        relations.append(ExtractedRelation(source=source, target=target, type=rel_type))

    known = {normalize_alias(name) for name in merged}
    for name in [fact.subject for fact in facts] + [r.source for r in relations] + [r.target for r in relations]:
        if normalize_alias(name) not in known:
            entity_type = "person" if normalize_alias(name) == normalize_alias(speaker_name) else "other"
            merged[normalize_alias(name)] = ExtractedEntity(name=name, type=entity_type)
            known.add(normalize_alias(name))
    profiles = {canonical(name): profile for name, profile in output.updated_profiles.items()}
    return ExtractionOutput(
        entities=list(merged.values()),
        facts=facts,
        relations=relations,
        updated_profiles=profiles,
        relation_retry_triggered=output.relation_retry_triggered,
    )


def mirror_facts(output: ExtractionOutput) -> list[ExtractedFact]:
    """A plain fact for every relation that no extracted fact mentions both ends of (seeds: fatos-espelho)."""
    aliases: dict[str, list[str]] = {
        normalize_alias(entity.name): [entity.name, *entity.aliases] for entity in output.entities
    }
    mirrors: list[ExtractedFact] = []
    for relation in output.relations:
        source_names = aliases.get(normalize_alias(relation.source), [relation.source])
        target_names = aliases.get(normalize_alias(relation.target), [relation.target])
        stated = any(
            any(_mentions(fact.text, name) for name in source_names)
            and any(_mentions(fact.text, name) for name in target_names)
            for fact in output.facts
        )
        if not stated:
            phrase = relation.type.replace("_", " ")
            mirrors.append(
                ExtractedFact(
                    subject=relation.source,
                    text=f"{relation.source} {phrase} {relation.target}",
                    attribute_key=REL_TYPE_ATTRIBUTES.get(relation.type),
                    confidence_level="weak_inference",
                )
            )
    return mirrors


def prepare_facts(
    output: ExtractionOutput,
    config: MemoryConfig,
    embed: Callable[[list[str]], list[list[float]]],
) -> list[PreparedFact]:
    """Extracted and mirror facts, deduplicated, scored, keyed and embedded."""
    seen: set[tuple[str, str]] = set()
    candidates: list[tuple[ExtractedFact, str | None]] = []
    for fact in output.facts:
        key = _text_key(fact.subject, fact.text)
        if not fact.text.strip() or key in seen:
            continue
        seen.add(key)
        candidates.append((fact, None))
    for mirror in mirror_facts(output):
        key = _text_key(mirror.subject, mirror.text)
        if key not in seen:
            seen.add(key)
            candidates.append((mirror, "inferred_from_relation"))
    candidates = candidates[: config.max_facts_per_event]
    if not candidates:
        return []
    vectors = embed([fact.text for fact, _ in candidates])
    kept: list[PreparedFact] = []
    kept_vectors: list[list[float]] = []
    for (fact, source_context), vector in zip(candidates, vectors, strict=True):
        # Near-duplicates inside one message: keep the first wording (seeds: cosine > 0.85).
        if source_context is None and any(
            _cosine(vector, other) > config.semantic_dedup_threshold for other in kept_vectors
        ):
            continue
        attribute_key, _action = canonicalize_attribute_key(
            fact.attribute_key,
            extra_keys=config.extra_attribute_keys,
            aliases=config.attribute_aliases,
            extra_namespaces=config.extra_namespaces,
        )
        if source_context == "inferred_from_relation":
            confidence = config.mirror_fact_confidence
        elif fact.confidence_level is not None:
            confidence = config.confidence_level_map.get(fact.confidence_level, config.confidence_default)
        else:
            confidence = config.confidence_default
        importance = (
            config.importance_category_map.get(fact.importance_category, config.default_fact_importance)
            if fact.importance_category
            else config.default_fact_importance
        )
        kept.append(
            PreparedFact(
                subject=fact.subject,
                text=fact.text.strip(),
                attribute_key=attribute_key,
                importance=importance,
                confidence=confidence,
                source_context=source_context,
                embedding=vector,
                replaces_fact_id=fact.replaces_fact_id,
                judged=fact.judged,
            )
        )
        kept_vectors.append(vector)
    return kept
