"""Reading an import file (NDJSON or JSON) into checked messages with stable ids.

Every message is checked here the way the API checks it (required fields, types, ISO 8601
``occurred_at`` not in the future, no unknown fields), so a malformed line is reported with its line number
before anything is sent. A message without ``message_id`` gets one derived from its content
and its position among the file's messages: the same file always yields the same ids, so
sending it again creates nothing new.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

Format = Literal["ndjson", "json"]

# The API's limits (api.schemas): column widths and list sizes.
MAX_NAME_CHARS = 256
MAX_SOURCE_CHARS = 64
MAX_RECENT_MESSAGES = 20
# How far ahead of the clock occurred_at may be (api.schemas.MAX_OCCURRED_AT_AHEAD; the service's
# clock decides, this one only reports the line before anything is sent).
MAX_OCCURRED_AT_AHEAD = timedelta(hours=24)
GENERATED_ID_PREFIX = "cli-"
_BOM = "\ufeff"
_REQUIRED = ("message", "speaker_name", "occurred_at")
_KNOWN = frozenset({*_REQUIRED, "session_id", "message_id", "source", "recent_messages", "config_overrides", "verbose"})


@dataclass(frozen=True)
class SourceMessage:
    """One checked message of the file: where it starts, its position, and what is sent."""

    line: int
    index: int
    body: dict[str, Any]
    generated_id: bool

    @property
    def message_id(self) -> str:
        """The message id sent (the file's own, or the generated one)."""
        return str(self.body["message_id"])


@dataclass(frozen=True)
class Problem:
    """A malformed line (or JSON element starting at that line) and what is wrong with it."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


class MalformedFileError(Exception):
    """The file cannot be imported as it is; :attr:`problems` names every bad line found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems[:3]))
        self.problems = problems


def guess_format(path: str) -> Format:
    """``json`` for ``*.json`` files, else ``ndjson`` (standard input included)."""
    return "json" if path.lower().endswith(".json") else "ndjson"


def spool_stdin() -> Path:
    """Standard input copied to a temporary file, so it can be checked whole and then sent."""
    with tempfile.NamedTemporaryFile(prefix="arandu-import-", suffix=".stdin", delete=False) as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool)
    return Path(spool.name)


# ---- Checking one message -----------------------------------------------------------------


def _text(value: Any, field: str, *, max_chars: int | None = None, blank_ok: bool = False) -> str | None:
    """The reason ``value`` is not an acceptable string for ``field``, or None when it is."""
    if not isinstance(value, str):
        return f"{field} must be a string, not {_json_type(value)}"
    if "\x00" in value:
        return f"{field} must not contain NUL characters (\\u0000)"
    if not value:
        return f"{field} must not be empty"
    if not blank_ok and not value.strip():
        return f"{field} must not be empty or whitespace only"
    if max_chars is not None and len(value) > max_chars:
        return f"{field} is longer than {max_chars} characters"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def _iso(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"occurred_at must be an ISO 8601 date-time string, not {_json_type(value)}"
    try:
        said = datetime.fromisoformat(value.strip())
    except ValueError:
        return f"occurred_at must be an ISO 8601 date-time such as '2024-05-01T14:30:00Z', not {value[:64]!r}"
    # Naive values are UTC, as the service reads them.
    said = said.replace(tzinfo=UTC) if said.tzinfo is None else said
    if said - datetime.now(UTC) > MAX_OCCURRED_AT_AHEAD:
        return f"occurred_at {value[:64]!r} is in the future: a message cannot have been said after now"
    return None


def check_message(value: Any) -> str | None:
    """Why ``value`` is not an importable message, or None when it is one."""
    if not isinstance(value, dict):
        return f"expected a JSON object with message, speaker_name and occurred_at, got {_json_type(value)}"
    missing = [field for field in _REQUIRED if field not in value]
    if missing:
        return "missing " + ", ".join(missing)
    unknown = sorted(set(value) - _KNOWN)
    if unknown:
        return f"unknown field {unknown[0]!r} (allowed: {', '.join(sorted(_KNOWN))})"
    checks = [
        _text(value["message"], "message"),
        _text(value["speaker_name"], "speaker_name", max_chars=MAX_NAME_CHARS),
        _iso(value["occurred_at"]),
    ]
    for field, limit in (("session_id", MAX_NAME_CHARS), ("message_id", MAX_NAME_CHARS), ("source", MAX_SOURCE_CHARS)):
        if value.get(field) is not None:
            checks.append(_text(value[field], field, max_chars=limit, blank_ok=True))
    recent = value.get("recent_messages")
    if recent is not None:
        if not isinstance(recent, list) or not all(isinstance(item, str) for item in recent):
            checks.append("recent_messages must be an array of strings")
        elif len(recent) > MAX_RECENT_MESSAGES:
            checks.append(f"recent_messages holds more than {MAX_RECENT_MESSAGES} messages")
    if value.get("config_overrides") is not None and not isinstance(value["config_overrides"], dict):
        checks.append("config_overrides must be an object")
    if "verbose" in value and not isinstance(value["verbose"], bool):
        checks.append("verbose must be true or false")
    return next((reason for reason in checks if reason is not None), None)


def stable_id(index: int, body: dict[str, Any]) -> str:
    """An id from the message's content and its position in the file: the same file, the same ids."""
    content = json.dumps(
        [index, body["speaker_name"], body["occurred_at"], body.get("session_id"), body["message"]],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return GENERATED_ID_PREFIX + hashlib.sha256(content.encode("utf-8")).hexdigest()[:40]


# ---- Reading a file -----------------------------------------------------------------------


def _ndjson_values(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, decoded value or None, reason it is malformed or None) per non-blank line."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield number, None, f"not valid UTF-8 (byte {error.start + 1})"
                continue
            if number == 1:
                line = line.removeprefix(_BOM)
            if not line.strip():
                continue
            try:
                yield number, json.loads(line), None
            except json.JSONDecodeError as error:
                yield number, None, f"not valid JSON: {error.msg} at column {error.colno}"


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _json_values(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line where it starts, value, None) per message of a JSON array or ``{"messages": [...]}``."""
    try:
        text = path.read_bytes().decode("utf-8").removeprefix(_BOM)
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        yield line, None, "not valid UTF-8"
        return
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        yield error.lineno, None, f"not valid JSON: {error.msg} at column {error.colno}"
        return
    if isinstance(document, dict):
        if set(document) != {"messages"} or not isinstance(document["messages"], list):
            yield 1, None, 'a JSON file holds an array of messages or {"messages": [...]}'
            return
    elif not isinstance(document, list):
        yield 1, None, f'a JSON file holds an array of messages or {{"messages": [...]}}, not {_json_type(document)}'
        return
    yield from _array_items(text, _array_start(text))


def _array_start(text: str) -> int:
    """Offset of the ``[`` of the messages (the document is known to be valid JSON)."""
    position = _skip_space(text, 0)
    if text[position] == "[":
        return position
    decoder = json.JSONDecoder()
    position = _skip_space(text, position + 1)
    while True:
        key, position = decoder.raw_decode(text, position)
        position = _skip_space(text, _skip_space(text, position) + 1)  # past the ':'
        if key == "messages":
            return position
        _, position = decoder.raw_decode(text, position)
        position = _skip_space(text, _skip_space(text, position) + 1)  # past the ','


def _array_items(text: str, start: int) -> Iterator[tuple[int, Any, str | None]]:
    decoder = json.JSONDecoder()
    line, counted = 1, 0
    position = _skip_space(text, start + 1)
    while text[position] != "]":
        line += text.count("\n", counted, position)
        counted = position
        value, position = decoder.raw_decode(text, position)
        yield line, value, None
        position = _skip_space(text, position)
        if text[position] == ",":
            position = _skip_space(text, position + 1)


def read_messages(path: Path, fmt: Format) -> Iterator[SourceMessage | Problem]:
    """Every message of the file in order, checked; a malformed one comes as a :class:`Problem`."""
    values = _ndjson_values(path) if fmt == "ndjson" else _json_values(path)
    index = 0
    for line, value, malformed in values:
        reason = malformed or check_message(value)
        if reason is not None:
            yield Problem(line, reason)
            continue
        body = dict(value)
        generated = body.get("message_id") is None
        if generated:
            body["message_id"] = stable_id(index, body)
        yield SourceMessage(line=line, index=index, body=body, generated_id=generated)
        index += 1


@dataclass(frozen=True)
class FileSummary:
    """What a checking pass found: how many messages, how many ids were generated, repeated ids."""

    messages: int
    generated_ids: int
    repeated_ids: int


def check_file(path: Path, fmt: Format, *, max_problems: int = 20) -> FileSummary:
    """Read the whole file once; raise :class:`MalformedFileError` naming the bad lines (up to ``max_problems``)."""
    problems: list[Problem] = []
    seen: set[str] = set()
    count = generated = repeated = 0
    for item in read_messages(path, fmt):
        if isinstance(item, Problem):
            problems.append(item)
            if len(problems) >= max_problems:
                break
            continue
        count += 1
        generated += item.generated_id
        if item.message_id in seen:
            repeated += 1
        seen.add(item.message_id)
    if problems:
        raise MalformedFileError(problems)
    if count == 0:
        raise MalformedFileError([Problem(1, "the file holds no messages")])
    return FileSummary(messages=count, generated_ids=generated, repeated_ids=repeated)
