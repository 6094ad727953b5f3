"""Input classification and chunking (seeds W6); the module lives in memory_core.write.strategy."""

from __future__ import annotations

import re

import pytest

from memory_core.cognition.offline.text import split_sentences
from memory_core.config import MemoryConfig
from memory_core.write.strategy import (
    ExtractionMode,
    InputType,
    classify_input,
    select_strategy,
    split_into_chunks,
)

_SENTENCE = "Rafael visited the office in Lisbon and met the new team. "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Minha esposa se chama Ana e moramos em Sao Paulo.", InputType.SHORT),
        ("x" * 499, InputType.SHORT),
        ("x" * 500, InputType.MEDIUM),
        ("x" * 2000, InputType.MEDIUM),
        ("x" * 2001, InputType.LONG),
        ("- item\n" * 80, InputType.STRUCTURED),
        ("- item\n" * 10, InputType.SHORT),
        ("# Title\n\n" + "word " * 120, InputType.STRUCTURED),
        ("| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 60, InputType.STRUCTURED),
    ],
)
def test_thresholds(text: str, expected: InputType) -> None:
    assert classify_input(text).input_type is expected


def test_classification_features() -> None:
    text = "# Family\nMy sister Ana.\n\n# Work\n- Acme\n- Initech\n\n| a | b |\n| 1 | 2 |\n"
    classification = classify_input(text)
    assert classification.char_count == len(text)
    assert classification.estimated_tokens == len(text) // 4
    assert (classification.has_headers, classification.has_bullets, classification.has_tables) == (True, True, True)
    assert classification.section_count == 2
    assert classification.line_count == len(text.splitlines())


def test_thresholds_come_from_the_config_defaults() -> None:
    config = MemoryConfig()
    assert classify_input("x" * (config.input_short_max_chars - 1)).input_type is InputType.SHORT
    assert classify_input("x" * 150, short_max_chars=100, long_min_chars=120).input_type is InputType.LONG


def test_strategies() -> None:
    short = select_strategy(classify_input("I live in Berlin."))
    assert short.mode is ExtractionMode.SINGLE_SHOT
    assert (short.estimated_chunks, short.chunk_context_hint) == (1, None)
    assert short.reason
    medium = select_strategy(classify_input(_SENTENCE * 20))
    assert medium.mode is ExtractionMode.SINGLE_SHOT
    long = select_strategy(classify_input(_SENTENCE * 100))
    assert long.mode is ExtractionMode.CHUNKED
    assert long.estimated_chunks == -(-len(_SENTENCE * 100) // 1500)
    assert long.max_tokens_per_call == 1500 // 4
    assert long.chunk_context_hint
    structured = select_strategy(classify_input("# A\n\n" + _SENTENCE * 20))
    assert structured.mode is ExtractionMode.CHUNKED
    assert structured.chunk_context_hint
    assert "header" in structured.chunk_context_hint
    assert ExtractionMode.CHUNKED.value == "chunked"


def _words(text: str) -> list[str]:
    return re.findall(r"\S+", text)


def test_long_text_chunks_keep_sentences_whole_and_cover_everything() -> None:
    text = "\n\n".join(" ".join(f"Paragraph {p} sentence {s} says something." for s in range(12)) for p in range(10))
    strategy = select_strategy(classify_input(text))
    chunks = split_into_chunks(text, strategy)
    assert len(chunks) > 1
    assert all(len(chunk) <= 1500 for chunk in chunks)
    for sentence in split_sentences(text):
        assert sum(sentence in chunk for chunk in chunks) == 1
    assert _words(" ".join(chunks)) == _words(text)


def test_structured_text_is_split_at_headers_with_the_header_kept() -> None:
    sections = [f"## Section {n}\n\n" + (f"Fact {n} number one is here. " * 40) for n in range(4)]
    text = "# Notes about Rafael\n\nIntro line.\n\n" + "\n\n".join(sections)
    strategy = select_strategy(classify_input(text))
    assert strategy.mode is ExtractionMode.CHUNKED
    chunks = split_into_chunks(text, strategy)
    assert all(len(chunk) <= 1500 for chunk in chunks)
    for n in range(4):
        with_fact = [chunk for chunk in chunks if f"Fact {n} number one" in chunk]
        assert with_fact
        assert all(chunk.startswith(f"## Section {n}") or f"## Section {n}\n" in chunk for chunk in with_fact)
    for sentence in split_sentences(text):
        assert any(sentence in chunk for chunk in chunks)


def test_an_oversized_section_repeats_its_header() -> None:
    text = "# Work history\n\n" + " ".join(f"In {1990 + n} Rafael worked somewhere new." for n in range(120))
    strategy = select_strategy(classify_input(text))
    chunks = split_into_chunks(text, strategy)
    assert len(chunks) > 2
    assert all(chunk.startswith("# Work history\n\n") for chunk in chunks)
    assert all(len(chunk) <= 1500 for chunk in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut_at_spaces() -> None:
    text = "word " * 700
    strategy = select_strategy(classify_input(text))
    chunks = split_into_chunks(text, strategy)
    assert all(len(chunk) <= 1500 for chunk in chunks)
    assert _words(" ".join(chunks)) == _words(text)


def test_single_shot_returns_the_text() -> None:
    text = "I live in Berlin."
    assert split_into_chunks(text, select_strategy(classify_input(text))) == [text]
    assert split_into_chunks("   ", select_strategy(classify_input("   "))) == []
