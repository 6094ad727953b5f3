"""Input classification and chunking for extraction (seeds W6): pure functions, no LLM, no database.

A message is SHORT (< 500 chars), MEDIUM (500-2000, unstructured), LONG (> 2000,
unstructured) or STRUCTURED (> 500 with markdown headers, bullets or tables). SHORT and
MEDIUM inputs are extracted in one call; LONG and STRUCTURED inputs are split into chunks
of about 1,500 characters: at headers (each header stays with its section and is repeated
on the section's later chunks, so every chunk says what it is about), then at paragraphs,
lines and sentences, never inside a sentence unless a single sentence is longer than a chunk.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from memory_core.cognition.offline.text import sentence_spans

__all__ = [
    "DEFAULT_CHUNK_CHARS",
    "ExtractionMode",
    "ExtractionStrategy",
    "InputClassification",
    "InputType",
    "classify_input",
    "select_strategy",
    "split_into_chunks",
]

DEFAULT_CHUNK_CHARS = 1500

_HEADER_LINE = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+\S.*$|^[ \t]*\*\*[^*\n]+\*\*:?[ \t]*$", re.MULTILINE)
_BULLET_LINE = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t]+\S", re.MULTILINE)
_TABLE_ROW = re.compile(r"^[ \t]*\|.*\|[ \t]*$", re.MULTILINE)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_MIN_TABLE_ROWS = 2
# A header repeated on every chunk of its section must leave room for the section's text.
_MAX_REPEATED_HEADER_SHARE = 3


class InputType(StrEnum):
    """What kind of text is being extracted from."""

    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"
    STRUCTURED = "structured"


class ExtractionMode(StrEnum):
    """One extraction call, or one per chunk."""

    SINGLE_SHOT = "single_shot"
    CHUNKED = "chunked"


@dataclass(frozen=True, slots=True)
class InputClassification:
    """Features of an input text and the type they imply."""

    input_type: InputType
    char_count: int
    estimated_tokens: int
    has_headers: bool
    has_bullets: bool
    has_tables: bool
    section_count: int
    line_count: int


@dataclass(frozen=True, slots=True)
class ExtractionStrategy:
    """How to extract from a classified input.

    ``max_tokens_per_call`` estimates the message tokens one extraction call receives (the
    whole input, or one chunk); ``chunk_chars`` is the chunk size used by
    :func:`split_into_chunks`; ``chunk_context_hint`` tells each chunked call what it is
    reading (None for single-shot).
    """

    mode: ExtractionMode
    reason: str
    max_tokens_per_call: int
    estimated_chunks: int
    chunk_context_hint: str | None
    input_type: InputType
    chunk_chars: int = DEFAULT_CHUNK_CHARS


def _sections(text: str) -> list[tuple[int, int, int]]:
    """``(start, body_start, end)`` of each section: ``text[start:body_start]`` is its header line."""
    headers = list(_HEADER_LINE.finditer(text))
    if not headers:
        return [(0, 0, len(text))]
    sections: list[tuple[int, int, int]] = []
    if text[: headers[0].start()].strip():
        sections.append((0, 0, headers[0].start()))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        sections.append((header.start(), header.end(), end))
    return sections


def _paragraph_count(text: str) -> int:
    return sum(1 for block in _PARAGRAPH_BREAK.split(text) if block.strip())


def classify_input(
    text: str,
    *,
    short_max_chars: int = 500,
    long_min_chars: int = 2000,
    chars_per_token: int = 4,
) -> InputClassification:
    """Classify ``text`` by length and markdown structure.

    The thresholds default to :class:`~memory_core.config.MemoryConfig`'s
    ``input_short_max_chars``, ``input_long_min_chars`` and ``chars_per_token``.
    ``section_count`` counts header sections (plus a leading untitled one) or, without
    headers, paragraphs.
    """
    char_count = len(text)
    has_headers = _HEADER_LINE.search(text) is not None
    has_bullets = _BULLET_LINE.search(text) is not None
    has_tables = sum(1 for _ in _TABLE_ROW.finditer(text)) >= _MIN_TABLE_ROWS
    section_count = len(_sections(text)) if has_headers else max(_paragraph_count(text), 1 if text.strip() else 0)
    if char_count < short_max_chars:
        input_type = InputType.SHORT
    elif has_headers or has_bullets or has_tables:
        input_type = InputType.STRUCTURED
    elif char_count > long_min_chars:
        input_type = InputType.LONG
    else:
        input_type = InputType.MEDIUM
    return InputClassification(
        input_type=input_type,
        char_count=char_count,
        estimated_tokens=char_count // max(chars_per_token, 1),
        has_headers=has_headers,
        has_bullets=has_bullets,
        has_tables=has_tables,
        section_count=section_count,
        line_count=len(text.splitlines()),
    )


def select_strategy(
    classification: InputClassification,
    *,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    chars_per_token: int = 4,
) -> ExtractionStrategy:
    """Single-shot for SHORT and MEDIUM inputs, chunked for LONG and STRUCTURED ones."""
    kind = classification.input_type
    if kind in (InputType.SHORT, InputType.MEDIUM):
        return ExtractionStrategy(
            mode=ExtractionMode.SINGLE_SHOT,
            reason=f"{kind.value} input ({classification.char_count} chars) fits one extraction call",
            max_tokens_per_call=max(classification.estimated_tokens, 1),
            estimated_chunks=1,
            chunk_context_hint=None,
            input_type=kind,
            chunk_chars=chunk_chars,
        )
    chunks = max(math.ceil(classification.char_count / chunk_chars), 1)
    if kind is InputType.STRUCTURED:
        reason = f"structured input ({classification.section_count} sections) is split at its headers"
        hint = (
            "This is one part of a structured document (markdown sections, lists or tables) that was split "
            "into parts; a section's header is repeated on each of its parts. Extract only what "
            "this part states and write every fact so that it stands on its own."
        )
    else:
        reason = f"long input ({classification.char_count} chars) is split into ~{chunk_chars}-char chunks"
        hint = (
            "This is one part of a long text that was split into parts at paragraph and sentence boundaries. "
            "Extract only what this part states and write every fact so that it stands on its own."
        )
    return ExtractionStrategy(
        mode=ExtractionMode.CHUNKED,
        reason=reason,
        max_tokens_per_call=max(chunk_chars // max(chars_per_token, 1), 1),
        estimated_chunks=chunks,
        chunk_context_hint=hint,
        input_type=kind,
        chunk_chars=chunk_chars,
    )


def _pieces(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Spans of at most ``limit`` chars covering ``text[start:end]``: paragraphs, lines, sentences, words."""
    spans: list[tuple[int, int]] = []
    for block_start, block_end in _split(text, start, end, _PARAGRAPH_BREAK):
        if block_end - block_start <= limit:
            spans.append((block_start, block_end))
            continue
        for line_start, line_end in _split(text, block_start, block_end, re.compile(r"\n")):
            if line_end - line_start <= limit:
                spans.append((line_start, line_end))
                continue
            for sentence_start, sentence_end in sentence_spans(text[line_start:line_end]):
                absolute = (line_start + sentence_start, line_start + sentence_end)
                if absolute[1] - absolute[0] <= limit:
                    spans.append(absolute)
                else:
                    spans.extend(_hard_split(text, absolute[0], absolute[1], limit))
    return spans


def _split(text: str, start: int, end: int, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """Trimmed, non-empty spans of ``text[start:end]`` between ``separator`` matches."""
    spans: list[tuple[int, int]] = []
    cursor = start
    for match in separator.finditer(text, start, end):
        spans.append((cursor, match.start()))
        cursor = match.end()
    spans.append((cursor, end))
    trimmed: list[tuple[int, int]] = []
    for span_start, span_end in spans:
        left, right = span_start, span_end
        while left < right and text[left].isspace():
            left += 1
        while right > left and text[right - 1].isspace():
            right -= 1
        if right > left:
            trimmed.append((left, right))
    return trimmed


def _hard_split(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """A sentence longer than a chunk: cut at the last space before the limit (or at the limit)."""
    spans: list[tuple[int, int]] = []
    while end - start > limit:
        cut = text.rfind(" ", start + 1, start + limit + 1)
        if cut <= start:
            cut = start + limit
        spans.append((start, cut))
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if end > start:
        spans.append((start, end))
    return spans


def split_into_chunks(text: str, strategy: ExtractionStrategy) -> list[str]:
    """Split ``text`` into chunks of at most ``strategy.chunk_chars`` characters.

    Single-shot strategies return the whole text. Structured inputs are split at headers,
    each chunk of a section starting with its header; small neighbouring sections share a
    chunk. Chunks break at paragraphs, then lines, then sentences; only a sentence longer
    than a chunk is cut (at a space).
    """
    if not text.strip():
        return []
    if strategy.mode is ExtractionMode.SINGLE_SHOT:
        return [text]
    size = max(strategy.chunk_chars, 1)
    structured = strategy.input_type is InputType.STRUCTURED
    sections = _sections(text) if structured else [(0, 0, len(text))]
    chunks: list[str] = []
    mergeable: list[bool] = []
    for start, header_end, end in sections:
        header = text[start:header_end].strip()
        body_start = header_end
        if len(header) * _MAX_REPEATED_HEADER_SHARE > size:
            header, body_start = "", start  # a "header" this long is text: split it like text
        limit = size - (len(header) + 2 if header else 0)
        section_chunks: list[str] = []
        current: tuple[int, int] | None = None
        for piece in _pieces(text, body_start, end, limit):
            if current is not None and piece[1] - current[0] <= limit:
                current = (current[0], piece[1])
                continue
            if current is not None:
                section_chunks.append(text[current[0] : current[1]])
            current = piece
        if current is not None:
            section_chunks.append(text[current[0] : current[1]])
        if header and not section_chunks:
            section_chunks.append(header)
        elif header:
            section_chunks = [f"{header}\n\n{chunk}" for chunk in section_chunks]
        for index, chunk in enumerate(section_chunks):
            # Only a section that fits one chunk may share it with its neighbours.
            chunks.append(chunk)
            mergeable.append(len(section_chunks) == 1 and index == 0)
    return _merge_small(chunks, mergeable, size)


def _merge_small(chunks: list[str], mergeable: list[bool], size: int) -> list[str]:
    merged: list[str] = []
    open_for_more = False
    for chunk, can_merge in zip(chunks, mergeable, strict=True):
        if merged and open_for_more and can_merge and len(merged[-1]) + 2 + len(chunk) <= size:
            merged[-1] = f"{merged[-1]}\n\n{chunk}"
            continue
        merged.append(chunk)
        open_for_more = can_merge
    return merged
