"""Pattern tables: the fast paths agree with the plain regexes, and the verb tables conjugate."""

from __future__ import annotations

import pytest

from memory_core.cognition.offline.patterns import KIN, PATTERNS, is_profession, pt_first_to_third

_CORPUS = [
    "Eu moro em São Paulo e trabalho na Vertix.",
    "Me mudei para o Rio de Janeiro.",
    "I moved to Berlin last year and I work at Acme Corp.",
    "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia.",
    "I'm a nurse and Ana's a doctor; she is married to Pedro.",
    "Sou casado com a Beatriz. Ele é de Minas e nasceu em Belo Horizonte.",
    "I don't work at Acme anymore and I no longer live in Paris.",
    "We used to live in Rome but I was born in Milan and grew up in Turin.",
    "Ele se formou na USP e estudou medicina na Unicamp; hoje trabalha como médico.",
    "I'm a big fan of the Beatles, I love jazz and I can't stand country music.",
    "Ana started working at Google. Pedro joined Stripe and was hired by Nubank.",
    "Não trabalho mais na Vertix, pedi demissão da Vertix e fui contratado pela Orion.",
    "MORO EM LISBOA E GOSTO DE FADO",
    "İstanbul'da yaşıyorum and I live in İzmir.",
    "Reclamo em casa; amor e mudanças.",
]


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda pattern: f"{pattern.language}-{pattern.kind}")
def test_fast_path_agrees_with_the_regex(pattern: object) -> None:
    from memory_core.cognition.offline.patterns import RelationPattern

    assert isinstance(pattern, RelationPattern)
    for text in _CORPUS:
        expected = [(match.start(), match.end()) for match in pattern.regex.finditer(text)]
        lowered = text.lower() if len(text.lower()) == len(text) else None
        found = [(match.start(), match.end()) for match in pattern.finditer(text, lowered)]
        assert found == expected, text


@pytest.mark.parametrize(
    ("first", "third"),
    [
        ("moro", "mora"),
        ("Sou", "É"),
        ("tenho", "tem"),
        ("mudei", "mudou"),
        ("comecei", "começou"),
        ("fiquei", "ficou"),
        ("cheguei", "chegou"),
        ("conheci", "conheceu"),
        ("fui", "foi"),
        ("faco", "faz"),
    ],
)
def test_portuguese_conjugation(first: str, third: str) -> None:
    assert pt_first_to_third(first) == third


@pytest.mark.parametrize("word", ["mora", "sai", "vôlei", "lei", "casa", "Ana"])
def test_not_first_person_forms(word: str) -> None:
    assert pt_first_to_third(word) is None


def test_professions() -> None:
    assert all(is_profession(word) for word in ("doctor", "Engenheira", "designer", "cardiologist", "dentista"))
    assert not any(is_profession(word) for word in ("beautiful", "otimista", "city", "legal"))


def test_kinship_table() -> None:
    assert KIN["irma"].relation == "sibling_of"
    assert KIN["mae"].named_is_source
    assert KIN["cachorro"].named_type == "pet"


@pytest.mark.parametrize("language", ["en", "pt"])
def test_the_index_never_misses_a_matching_pattern(language: str) -> None:
    from memory_core.cognition.offline.patterns import PatternIndex
    from memory_core.cognition.offline.text import WORD_RE

    patterns = tuple(pattern for pattern in PATTERNS if pattern.language == language)
    index = PatternIndex(patterns)
    for text in _CORPUS:
        candidates = index.candidates(match.group().lower() for match in WORD_RE.finditer(text))
        for pattern in patterns:
            if pattern.regex.search(text):
                assert pattern in candidates, (pattern.kind, text)
