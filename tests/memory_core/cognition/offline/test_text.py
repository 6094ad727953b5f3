"""Sentence splitting, small talk, language and capitalised-name detection."""

from __future__ import annotations

import pytest

from memory_core.cognition.offline.text import (
    detect_language,
    find_names,
    fold_aligned,
    is_question,
    is_small_talk,
    sentence_spans,
    split_sentences,
)


def test_split_on_terminal_punctuation_and_newlines() -> None:
    text = "Moro em Lisboa. Trabalho na Vertix! Você conhece? Sim\nE a Ana também"
    assert split_sentences(text) == ["Moro em Lisboa.", "Trabalho na Vertix!", "Você conhece?", "Sim", "E a Ana também"]


def test_abbreviations_initials_and_decimals_do_not_split() -> None:
    text = "Dr. Silva said my pressure is 12.5 today. Sr. João e a Sra. Maria chegaram. J. R. R. Tolkien wrote it."
    assert split_sentences(text) == [
        "Dr. Silva said my pressure is 12.5 today.",
        "Sr. João e a Sra. Maria chegaram.",
        "J. R. R. Tolkien wrote it.",
    ]


def test_bullets_and_numbered_lines_are_stripped() -> None:
    text = "- Moro em Lisboa\n* Trabalho na Vertix\n1. Tenho um gato\n2) Gosto de jazz"
    assert split_sentences(text) == ["Moro em Lisboa", "Trabalho na Vertix", "Tenho um gato", "Gosto de jazz"]


def test_spans_point_into_the_text() -> None:
    text = "  Hello there.   How are you?  "
    assert [text[start:end] for start, end in sentence_spans(text)] == ["Hello there.", "How are you?"]


def test_ellipsis_and_mixed_punctuation() -> None:
    assert split_sentences("Não sei... talvez amanhã?! Vamos ver.") == ["Não sei...", "talvez amanhã?!", "Vamos ver."]


@pytest.mark.parametrize(
    "sentence",
    [
        "hi",
        "Hello!",
        "hey there",
        "thanks",
        "Thanks a lot!",
        "thank you",
        "ok",
        "okay",
        "lol",
        "haha",
        "kkkk",
        "oi",
        "Olá",
        "obrigado",
        "Obrigada!",
        "valeu",
        "bom dia",
        "Boa noite!",
        "tudo bem?",
        "e aí",
        "how are you?",
        "good morning",
        "rsrs",
        "👋",
        "...",
    ],
)
def test_small_talk(sentence: str) -> None:
    assert is_small_talk(sentence)


@pytest.mark.parametrize(
    "sentence",
    ["Moro em Lisboa.", "I live in Berlin.", "Tudo bem com a minha mãe, ela melhorou.", "Thanks to Ana I got the job."],
)
def test_informative_sentences_are_not_small_talk(sentence: str) -> None:
    assert not is_small_talk(sentence)


def test_questions() -> None:
    assert is_question("Where do you live?")
    assert is_question("Sério?!")
    assert not is_question("I live in Berlin.")


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Eu moro em São Paulo.", "pt"),
        ("Ana me contratou em 2019.", "pt"),
        ("Trabalhei sozinho ontem", "pt"),
        ("I live in Berlin with my wife.", "en"),
        ("My sister Ana is a doctor.", "en"),
    ],
)
def test_language(text: str, language: str) -> None:
    assert detect_language(text) == language


def test_fold_aligned_keeps_positions() -> None:
    text = "Conheci a JÚLIA em São Paulo"
    folded = fold_aligned(text)
    assert len(folded) == len(text)
    start = folded.index("julia")
    assert text[start : start + 5] == "JÚLIA"


def _names(sentence: str) -> list[str]:
    return [name.text for name in find_names(sentence)]


@pytest.mark.parametrize(
    ("sentence", "names"),
    [
        ("Clara Rezende saiu da Vertix e foi pra Orion Tech.", ["Clara Rezende", "Vertix", "Orion Tech"]),
        ("O Thiago Nogueira a contratou.", ["Thiago Nogueira"]),
        ("Me mudei para o Rio de Janeiro.", ["Rio de Janeiro"]),
        ("Eu moro em São Paulo.", ["São Paulo"]),
        ("I work at Bank of America in New York.", ["Bank of America", "New York"]),
        ("My wife and I met Ana on Monday in May.", ["Ana"]),
        ("Went hiking with Pedro yesterday.", ["Pedro"]),
        ("Finalmente terminei o projeto.", []),
        ("The weather is nice.", []),
        ("Minha esposa se chama Ana.", ["Ana"]),
        ("Procter & Gamble hired her.", ["Procter & Gamble"]),
        ("I MOVED TO BERLIN LAST YEAR", []),
        ("Ontem Ana ligou.", ["Ana"]),
    ],
)
def test_capitalised_names(sentence: str, names: list[str]) -> None:
    assert _names(sentence) == names


def test_possessive_s_is_cut_and_flagged() -> None:
    [name] = find_names("I met Pedro's sister.")
    assert name.text == "Pedro"
    assert name.possessive
