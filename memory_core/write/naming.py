"""Entity keys and name normalisation shared by extraction, resolution and retrieval."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_NON_WORD = re.compile(r"[^a-z0-9]+")


# Pure, and asked for the same few names again and again (every fact is matched against every
# entity name of its message, in three stages): cached, it stops showing up in profiles.
@lru_cache(maxsize=8192)
def fold(text: str) -> str:
    """Lower-case and strip accents: ``"São Paulo"`` -> ``"sao paulo"``."""
    if text.isascii():
        # Nothing to decompose: the same result without a Python loop over every character
        # (extraction folds every n-gram of every message to look for known names).
        return text.lower().strip()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).lower().strip()


def slugify(name: str) -> str:
    """``"Clara Rezende"`` -> ``"clara_rezende"``; never empty."""
    slug = _NON_WORD.sub("_", fold(name)).strip("_")
    return slug or "unnamed"


def normalize_entity_type(entity_type: str | None) -> str:
    """Entity types are free strings, lower-cased and slugged (``"Person"`` -> ``"person"``)."""
    if not entity_type or not entity_type.strip():
        return "other"
    return slugify(entity_type)[:64]


def entity_key(entity_type: str | None, name: str) -> str:
    """Canonical key ``type:slug`` (``person:clara_rezende``)."""
    return f"{normalize_entity_type(entity_type)}:{slugify(name)}"[:256]


def normalize_alias(alias: str) -> str:
    """How aliases are stored and matched: folded, single-spaced."""
    return " ".join(fold(alias).split())


_CONNECTORS = frozenset({"de", "da", "do", "dos", "das", "of", "the", "e", "and", "van", "von", "del", "la"})


def _words(name: str) -> list[str]:
    return [word for word in _NON_WORD.sub(" ", fold(name)).split() if word not in _CONNECTORS]


def _words_match(left: str, right: str) -> bool:
    if left == right:
        return True
    # Numbers tell things apart ("Apollo 11", "Room 101"): they must be equal.
    if any(ch.isdigit() for ch in left + right):
        return False
    shorter, longer = sorted((left, right), key=len)
    if len(shorter) >= 3 and longer.startswith(shorter):
        return True
    common = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        common += 1
    return common >= 4 and common >= 0.6 * len(shorter)


def names_compatible(left: str, right: str) -> bool:
    """Could the two names denote one entity? ("Ana" ~ "Ana Souza", "Carol" ~ "Carolina"; "Ana Souza" !~ "Ana Silva").

    Every word of the shorter name must match a word of the longer one (equal, or a prefix /
    diminutive of it), and two multi-word names must agree on their last word (the surname).
    """
    a, b = _words(left), _words(right)
    if not a or not b:
        return False
    shorter, longer = (a, b) if len(a) <= len(b) else (b, a)
    if len(shorter) > 1 and not _words_match(shorter[-1], longer[-1]):
        return False
    return all(any(_words_match(word, other) for other in longer) for word in shorter)
