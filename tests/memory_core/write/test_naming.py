"""Folding names: the ASCII shortcut gives what the general path gives."""

from __future__ import annotations

import unicodedata

import pytest

from memory_core.write.naming import fold, normalize_alias


def _fold_by_decomposition(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).lower().strip()


@pytest.mark.parametrize(
    "text",
    ["Caroline", "  LGBTQ support group  ", "Dr. Seuss's books", "Rafael\tSilva\n", "", "Apollo 11", "O'Brien-Smith"],
)
def test_ascii_text_folds_as_by_decomposition(text: str) -> None:
    assert fold(text) == _fold_by_decomposition(text)


def test_accented_names_lose_their_accents() -> None:
    assert fold("São Paulo") == "sao paulo"
    assert fold("  ADOÇÃO ") == "adocao"
    assert normalize_alias("  José   da  Silva ") == "jose da silva"
