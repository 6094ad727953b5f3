"""Entity keys and name normalisation shared by extraction, resolution and retrieval."""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[^a-z0-9]+")


def fold(text: str) -> str:
    """Lower-case and strip accents: ``"São Paulo"`` -> ``"sao paulo"``."""
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
