"""Attribute keys: the built-in catalogue and canonicalisation of the keys extraction proposes.

Canonicalisation runs exact -> alias -> punctuation variant -> suffix -> open catalogue -> drop
(seeds/003 "Canonicalizacao de Chaves de Atributo"). Dropping removes the *key*, never the fact.
A key is ``namespace.name`` (or a bare built-in like ``pet``); single-valued keys (where a new
value replaces the old one: where someone lives, works, their partner) drive temporal UPDATEs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

CanonicalAction = Literal["allow", "map", "propose", "drop"]


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    """A built-in attribute key: whether a newer value supersedes the older one."""

    key: str
    single_valued: bool
    description: str


ATTRIBUTE_CATALOGUE: dict[str, AttributeSpec] = {
    spec.key: spec
    for spec in (
        AttributeSpec("location.residence", True, "where the entity lives"),
        AttributeSpec("location.hometown", True, "where the entity is from"),
        AttributeSpec("work.employer", True, "organisation the entity works for"),
        AttributeSpec("work.occupation", True, "profession or role"),
        AttributeSpec("relationship.partner", True, "spouse, girlfriend, boyfriend, partner"),
        AttributeSpec("relationship.friend", False, "a friend"),
        AttributeSpec("family.parent", False, "mother or father"),
        AttributeSpec("family.sibling", False, "brother or sister"),
        AttributeSpec("family.child", False, "son or daughter"),
        AttributeSpec("family.relative", False, "another relative"),
        AttributeSpec("preference.like", False, "something the entity likes or loves"),
        AttributeSpec("preference.dislike", False, "something the entity dislikes"),
        AttributeSpec("pet", False, "a pet, by name"),
        AttributeSpec("education.school", False, "where the entity studies or studied"),
        AttributeSpec("personal.age", True, "age"),
        AttributeSpec("personal.birthday", True, "date of birth"),
        AttributeSpec("personal.name", False, "a name the entity goes by (a self-introduction)"),
        AttributeSpec("personal.info", False, "other personal information"),
        AttributeSpec("health.condition", False, "health condition"),
        AttributeSpec("event.activity", False, "something the entity did or will do"),
        AttributeSpec("goal.plan", False, "an intention or plan"),
    )
}

BUILTIN_NAMESPACES: frozenset[str] = frozenset(key.split(".", 1)[0] for key in ATTRIBUTE_CATALOGUE)

BUILTIN_ALIASES: dict[str, str] = {
    "residence": "location.residence",
    "city": "location.residence",
    "lives_in": "location.residence",
    "address": "location.residence",
    "employer": "work.employer",
    "company": "work.employer",
    "works_at": "work.employer",
    "job": "work.occupation",
    "occupation": "work.occupation",
    "profession": "work.occupation",
    "role": "work.occupation",
    "spouse": "relationship.partner",
    "wife": "relationship.partner",
    "husband": "relationship.partner",
    "girlfriend": "relationship.partner",
    "boyfriend": "relationship.partner",
    "partner": "relationship.partner",
    "friend": "relationship.friend",
    "mother": "family.parent",
    "father": "family.parent",
    "parent": "family.parent",
    "brother": "family.sibling",
    "sister": "family.sibling",
    "sibling": "family.sibling",
    "son": "family.child",
    "daughter": "family.child",
    "child": "family.child",
    "likes": "preference.like",
    "like": "preference.like",
    "loves": "preference.like",
    "hobby": "preference.like",
    "food_preference": "preference.like",
    "dislikes": "preference.dislike",
    "pets": "pet",
    "school": "education.school",
    "university": "education.school",
    "age": "personal.age",
    "birthday": "personal.birthday",
}

_KEY_SHAPE = re.compile(r"^[a-z][a-z0-9_]{0,30}(\.[a-z][a-z0-9_]{0,30}){0,2}$")


def normalize_key(raw: str) -> str:
    """Lower-case, trim, spaces/hyphens/slashes to dots; underscores are kept."""
    key = raw.strip().lower()
    key = re.sub(r"[\s\-/:]+", ".", key)
    return re.sub(r"\.+", ".", key).strip(".")


def validate_proposed_key(key: str, extra_namespaces: Iterable[str] = ()) -> bool:
    """True when ``key`` is well formed and lives in a known namespace."""
    if not _KEY_SHAPE.match(key):
        return False
    namespace = key.split(".", 1)[0]
    return namespace in BUILTIN_NAMESPACES or namespace in set(extra_namespaces)


def canonicalize_attribute_key(
    raw_key: str | None,
    *,
    extra_keys: Iterable[str] = (),
    aliases: Mapping[str, str] | None = None,
    extra_namespaces: Iterable[str] = (),
) -> tuple[str | None, CanonicalAction]:
    """Map a proposed key to a canonical one: ``(key, action)``; ``(None, "drop")`` when unusable."""
    if raw_key is None or not raw_key.strip():
        return None, "drop"
    known = set(ATTRIBUTE_CATALOGUE) | set(extra_keys)
    all_aliases = {**BUILTIN_ALIASES, **(aliases or {})}
    key = normalize_key(raw_key)
    if key in known:
        return key, "allow"
    if key in all_aliases:
        return all_aliases[key], "map"
    variant = key.replace(".", "_")
    if variant in all_aliases:
        return all_aliases[variant], "map"
    underscored = key.replace("_", ".")
    if underscored in known:
        return underscored, "map"
    suffix = key.rsplit(".", 1)[-1]
    matches = sorted(candidate for candidate in known if candidate.rsplit(".", 1)[-1] == suffix)
    if len(matches) == 1:
        return matches[0], "map"
    if suffix in all_aliases:
        return all_aliases[suffix], "map"
    if validate_proposed_key(key, extra_namespaces):
        return key, "propose"
    return None, "drop"


def is_single_valued(key: str | None) -> bool:
    """Whether a newer value of ``key`` replaces the older one (residence, employer, partner...)."""
    spec = ATTRIBUTE_CATALOGUE.get(key or "")
    return bool(spec and spec.single_valued)
