"""Request and response models of the HTTP API, and the checks that need the settings.

Requests are validated strictly, as JSON: ``"yes"`` is not a boolean and ``123`` is not a
string. Unknown fields are refused (a typo must not be silently dropped). What pydantic
alone cannot check (config overrides against the deployment's base config, the message
size limit of the settings) is checked by :func:`prepare_messages`, which turns validated
requests into the :class:`~memory_core.write.intake.IncomingMessage` the intake stores,
without validating anything twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    PlainValidator,
    StringConstraints,
    Tag,
    WithJsonSchema,
    model_validator,
)

from api.override_bounds import MAX_RECENT_MESSAGES_BYTES, request_override_problems
from memory_core.config import ConfigOverrideError, MemoryConfig, apply_overrides
from memory_core.read.schemas import EntityDetail, FactDetail
from memory_core.write.intake import IncomingMessage
from memory_core.write.schemas import WriteResult

AGENT_ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
MAX_BATCH_MESSAGES = 1_000
MAX_IMPORT_MESSAGES = 10_000
MAX_RECENT_MESSAGES = 20
# Column widths of memory_events (speaker, session_id, message_id: 256; source: 64).
MAX_NAME_CHARS = 256
MAX_SOURCE_CHARS = 64
# Overrides that would contradict the database itself.
FIXED_CONFIG_KEYS = frozenset({"embedding_dimensions"})
# Retrieval and the management reads.
MAX_ENTITY_KEYS = 100
# A persona merged into the directive block, and a pending operation's texts and lists.
MAX_PERSONA_CHARS = 4_000
MAX_PENDING_TEXT_CHARS = 4_000
MAX_PENDING_ITEMS = 100
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# How far ahead of the server's clock a message's occurred_at may be. A message cannot have been
# said in the future; a timestamp far ahead is a client's bug (a wrong year, milliseconds read as
# seconds), and stored it would stay the "newest" fact's start forever, turning every later
# correction into history (temporal reconciliation). A day allows any time zone's local time
# sent without an offset (read as UTC, up to 14 hours ahead) and clock skew.
MAX_OCCURRED_AT_AHEAD = timedelta(hours=24)


# ---- Field types ---------------------------------------------------------------------


def _no_nul(value: str) -> str:
    # PostgreSQL text and jsonb cannot hold U+0000: refuse it here rather than fail on insert.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters (\\u0000)")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace only")
    return value


def _strip(value: str) -> str:
    return value.strip()


def _parse_iso_datetime(value: Any) -> datetime:
    """An ISO 8601 string as an aware UTC datetime; a naive one is taken as UTC."""
    if isinstance(value, datetime):  # built in Python (tests, internal callers)
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"must be an ISO 8601 date-time such as '2024-05-01T14:30:00Z', not {value[:64]!r}"
            ) from None
    else:
        raise ValueError("must be an ISO 8601 date-time string such as '2024-05-01T14:30:00Z'")
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of the supported range (years 1 to 9999 in UTC)") from None


def _check_overrides_shape(value: dict[str, Any]) -> dict[str, Any]:
    fixed = sorted(FIXED_CONFIG_KEYS.intersection(value))
    if fixed:
        raise ValueError(f"{fixed[0]} cannot be overridden per request: it is fixed when the database is created")
    _reject_nul_anywhere(value)
    return value


def _reject_nul_anywhere(value: Any) -> None:
    if isinstance(value, str):
        _no_nul(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key)
            _reject_nul_anywhere(item)
    elif isinstance(value, list):
        for item in value:
            _reject_nul_anywhere(item)


MessageText = Annotated[str, AfterValidator(_no_nul), AfterValidator(_not_blank)]
PersonaText = Annotated[str, StringConstraints(max_length=MAX_PERSONA_CHARS), AfterValidator(_no_nul)]
PendingText = Annotated[
    str, StringConstraints(max_length=MAX_PENDING_TEXT_CHARS), AfterValidator(_no_nul), AfterValidator(_not_blank)
]
SpeakerName = Annotated[
    str,
    StringConstraints(max_length=MAX_NAME_CHARS),
    AfterValidator(_no_nul),
    AfterValidator(_not_blank),
    AfterValidator(_strip),
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(_no_nul)]
SourceText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_SOURCE_CHARS), AfterValidator(_no_nul)]
RecentMessage = Annotated[str, AfterValidator(_no_nul)]
IsoDateTime = Annotated[
    datetime,
    PlainValidator(_parse_iso_datetime),
    WithJsonSchema({"type": "string", "format": "date-time", "description": "ISO 8601; naive values are UTC"}),
]
ConfigOverrides = Annotated[dict[str, Any], AfterValidator(_check_overrides_shape)]


def _not_far_ahead(value: datetime) -> datetime:
    now = datetime.now(UTC)
    if value > now + MAX_OCCURRED_AT_AHEAD:
        hours = MAX_OCCURRED_AT_AHEAD.total_seconds() / 3600
        raise ValueError(
            f"must not be more than {hours:.0f} hours ahead of the server's clock (now {now:%Y-%m-%dT%H:%M:%SZ}): "
            "a message cannot have been said in the future"
        )
    return value


# When a message was said: an ISO 8601 date-time, not ahead of the server's clock by more than a day.
OccurredAt = Annotated[IsoDateTime, AfterValidator(_not_far_ahead)]


def _no_nul_anywhere(value: dict[str, Any]) -> dict[str, Any]:
    _reject_nul_anywhere(value)
    return value


# Retrieval names a fixed key in the field itself (body.config_overrides.embedding_dimensions).
ReadConfigOverrides = Annotated[dict[str, Any], AfterValidator(_no_nul_anywhere)]


# ---- Requests ------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


class MessageFields(_Request):
    """One conversation message, as sent alone, in a batch or in an import."""

    message: MessageText = Field(description="The message text (UTF-8, at most ARANDU_MAX_MESSAGE_BYTES bytes).")
    speaker_name: SpeakerName = Field(description="Who said it, e.g. 'Rafael' or 'assistant'.")
    session_id: ShortText | None = Field(None, description="Conversation id; 'default' when absent.")
    occurred_at: OccurredAt | None = Field(
        None, description="When it was said (ISO 8601); now when absent; at most 24 hours ahead of the server's clock."
    )
    message_id: ShortText | None = Field(
        None, description="The caller's id of the message: sending it again for the agent is a no-op."
    )
    source: SourceText | None = Field(None, description="Where the message came from (free label).")
    recent_messages: list[RecentMessage] | None = Field(
        None,
        max_length=MAX_RECENT_MESSAGES,
        description="Up to 20 preceding messages (together at most 16 KiB), as context for extraction.",
    )
    config_overrides: ConfigOverrides | None = Field(
        None, description="Per-request MemoryConfig overrides; unknown keys are ignored with a warning."
    )
    verbose: bool = Field(False, description="Keep a per-stage trace in the result.")


class MessageIn(MessageFields):
    """Body of ``POST /v1/agents/{agent_id}/messages``."""

    dry_run: bool = Field(
        False, description="Compute the write result synchronously and store nothing (no event, fact or entity)."
    )


class BatchIn(_Request):
    """Body of ``POST /v1/agents/{agent_id}/messages/batch``."""

    messages: list[MessageFields] = Field(min_length=1, max_length=MAX_BATCH_MESSAGES)


class ImportMessageIn(MessageFields):
    """A message of an import: ``occurred_at`` is required (history has dates)."""

    occurred_at: OccurredAt = Field(
        description="When it was said (ISO 8601); required in imports; at most 24 hours ahead of the server's clock."
    )


class ImportIn(_Request):
    """JSON body of ``POST /v1/agents/{agent_id}/imports`` (NDJSON: one ImportMessageIn per line)."""

    messages: list[ImportMessageIn] = Field(min_length=1, max_length=MAX_IMPORT_MESSAGES)


def _as_of_instant(value: Any) -> datetime:
    if not isinstance(value, str | datetime):
        raise ValueError("must be an ISO 8601 date-time string or an object {start, end}")
    return _parse_iso_datetime(value)


class AsOfWindow(_Request):
    """A time window: facts valid at some point between ``start`` and ``end``."""

    start: IsoDateTime = Field(description="Start of the window (ISO 8601).")
    end: IsoDateTime = Field(description="End of the window (ISO 8601), not before start.")

    @model_validator(mode="after")
    def _ordered(self) -> AsOfWindow:
        if self.start > self.end:
            raise ValueError("start must not be after end")
        return self


def _as_of_kind(value: Any) -> str:
    return "window" if isinstance(value, dict | AsOfWindow) else "instant"


# Which branch of ``as_of`` a value takes; the tag appears in error locations and the retrieve
# route drops it, so a bad window end is reported as ``body.as_of.end``.
AS_OF_TAGS = ("instant", "window")
AsOf = Annotated[
    Annotated[
        datetime,
        PlainValidator(_as_of_instant),
        WithJsonSchema({"type": "string", "format": "date-time", "description": "ISO 8601; naive values are UTC"}),
        Tag("instant"),
    ]
    | Annotated[AsOfWindow, Tag("window")],
    Discriminator(_as_of_kind),
]


class RetrieveIn(_Request):
    """Body of ``POST /v1/agents/{agent_id}/retrieve``."""

    query: MessageText = Field(description="What to look for, in the user's words.")
    entity_keys: list[ShortText] | None = Field(
        None,
        max_length=MAX_ENTITY_KEYS,
        description="Only facts linked to these entities (canonical keys such as 'person:ana', or aliases); "
        "unknown keys come back in warnings.",
    )
    session_id: ShortText | None = Field(None, description="Only facts and events from this conversation.")
    as_of: AsOf | None = Field(
        None,
        description="Facts valid at this instant (ISO 8601), or during {start, end}; now when absent.",
    )
    config_overrides: ReadConfigOverrides | None = Field(
        None, description="Per-request MemoryConfig overrides; unknown keys are ignored with a warning."
    )
    verbose: bool = Field(False, description="Add the trace of every stage to the answer.")
    include_directives: bool = Field(
        False,
        description="Add the agent's directive block (procedural memory) as `directives` and at the top of "
        "`context`, within directive_max_tokens.",
    )
    persona: PersonaText | None = Field(
        None, description="A persona merged with the directives into the block (only with include_directives)."
    )


class PendingIn(_Request):
    """Body of ``PUT /v1/agents/{agent_id}/pending``: a destructive operation awaiting the user's confirmation.

    ``selection``: a search found candidates and the user must choose (``intent``, ``transactions``,
    optional ``edit_params``). ``execution``: destructive tool calls were held back (``tool_calls``,
    optional ``search_result``).
    """

    kind: Literal["selection", "execution"]
    confirmation_text: PendingText = Field(description="What the user was asked to confirm.")
    intent: ShortText | None = Field(None, description="selection: what the user wants (delete, edit...).")
    transactions: list[JsonValue] | None = Field(
        None, max_length=MAX_PENDING_ITEMS, description="selection: the candidates found."
    )
    edit_params: dict[str, JsonValue] | None = Field(None, description="selection: parameters of an edit.")
    tool_calls: list[JsonValue] | None = Field(
        None, max_length=MAX_PENDING_ITEMS, description="execution: the tool calls held back."
    )
    search_result: PendingText | None = Field(None, description="execution: the search context.")


class AgentConfigIn(_Request):
    """Body of ``PUT /v1/agents/{agent_id}/config``: the agent's MemoryConfig overrides, replacing any stored."""

    overrides: ReadConfigOverrides = Field(
        description="MemoryConfig field -> value, applied on top of the service config for this agent's "
        "write pipeline, retrieval and maintenance jobs (a request's config_overrides still come last). "
        "Unknown fields and embedding_dimensions are refused; mappings are replaced as a whole."
    )


class RetryIn(_Request):
    """Optional body of ``POST /v1/events/{event_id}/retry``."""

    from_scratch: bool = Field(
        False, description="Re-process a done (or failed) event from the event log, discarding stage outputs."
    )


# ---- Responses (documentation; handlers answer with ready JSON) ------------------------


class ErrorItem(BaseModel):
    """One problem of a request: the field (``body.messages[3].speaker_name``) and what is wrong."""

    field: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer has this shape."""

    error: str
    detail: list[ErrorItem] = Field(default_factory=list)
    error_id: str | None = Field(None, description="Only on 500: the id under which the traceback was logged.")


class MessageAccepted(BaseModel):
    """A stored message (``duplicate``: its message_id was already known; nothing was queued)."""

    event_id: str
    status: str
    duplicate: bool = False
    warnings: list[str] = Field(default_factory=list)


class DryRunAnswer(BaseModel):
    """What the message would do to memory; nothing was stored."""

    dry_run: bool = True
    result: WriteResult
    warnings: list[str] = Field(default_factory=list)


class BatchAccepted(BaseModel):
    """Event ids in input order; ``duplicates`` counts messages whose message_id was already known."""

    event_ids: list[str]
    duplicates: int
    warnings: list[str] = Field(default_factory=list)


class ImportAccepted(BaseModel):
    """An import: ``total`` new events, ``duplicates`` messages already known."""

    import_id: str
    total: int
    duplicates: int
    status: str
    warnings: list[str] = Field(default_factory=list)


class ImportStatus(BaseModel):
    """Progress of an import, counted from its events' runs."""

    import_id: str
    agent_id: str
    total: int
    duplicates: int
    done: int
    failed: int
    pending: int
    status: str
    created_at: datetime


class EventStatus(BaseModel):
    """A message's pipeline run: ``status`` ends in ``done`` or ``failed``."""

    event_id: str
    agent_id: str
    status: str
    stage: str | None
    attempts: int
    throttled_retries: int = Field(
        0, description="retries a rate-limiting provider asked for (429 with Retry-After); not failed attempts"
    )
    error: str | None
    occurred_at: datetime
    message_id: str | None
    import_id: str | None
    created_at: datetime
    finished_at: datetime | None
    result: dict[str, Any] | None


class RetryAccepted(BaseModel):
    """A re-driven event: the pipeline runs again from ``start_stage``."""

    event_id: str
    status: str
    start_stage: str


class FactPage(BaseModel):
    """A page of active facts, newest first, and how many there are in all."""

    facts: list[FactDetail]
    total: int


class EntityPage(BaseModel):
    """A page of entities and how many there are in all."""

    entities: list[EntityDetail]
    total: int


class Deleted(BaseModel):
    """How many facts a delete removed."""

    deleted: int


class AgentErased(BaseModel):
    """What erasing an agent deleted: rows per table, every table that holds agent data (zeros included)."""

    agent_id: str
    deleted: dict[str, int] = Field(
        description="Rows deleted per table: each table with an agent_id column and the tables hanging off them"
    )
    indexes_dropped: bool = Field(description="Whether the agent had search indexes of its own, now dropped")


class AgentConfigOut(BaseModel):
    """An agent's stored MemoryConfig overrides and the config its work runs on."""

    agent_id: str
    overrides: dict[str, Any] = Field(description="The agent's stored overrides ({} when it has none)")
    config_effective: dict[str, Any] = Field(
        description="The service config with the agent's overrides: what its pipeline, retrieval and jobs use"
    )
    updated_at: datetime | None = Field(description="When the overrides were last put (null: none stored)")


class JobRunAccepted(BaseModel):
    """A queued maintenance run; follow it with ``GET /v1/agents/{agent_id}/jobs``."""

    job_run_id: str
    agent_id: str
    job: str
    status: str
    trigger: str


class JobRun(BaseModel):
    """One maintenance run: ``queued`` -> ``running`` -> ``done``, ``failed`` or ``skipped``."""

    job_run_id: str
    agent_id: str
    job: str
    status: str
    trigger: str = Field(description="`beat` (scheduled) or `api`")
    task_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: float | None
    result: dict[str, Any] | None = Field(description="what the job did (counts per job), once done")
    error: str | None


class JobRunPage(BaseModel):
    """An agent's most recent maintenance runs, newest first."""

    runs: list[JobRun]


# ---- Turning validated requests into intake messages -----------------------------------


Problem = tuple[str, str]


class InvalidRequestError(Exception):
    """Problems found after parsing: 422 for invalid values, 413 for oversized ones."""

    def __init__(self, status_code: int, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.status_code = status_code
        self.problems = problems


class OverrideChecker:
    """Validates ``config_overrides`` against the deployment's base config, caching by content.

    One instance per app; the cache holds the answers for the override sets callers actually
    send (usually a handful), so a batch of a thousand messages with the same overrides pays
    for one validation.
    """

    def __init__(self, base: MemoryConfig, max_entries: int = 256, *, llm_configured: bool = False) -> None:
        self.base = base
        self.max_entries = max_entries
        # With an LLM, overrides are also held to a request's bounds (api.override_bounds).
        self.llm_configured = llm_configured
        self._cache: dict[str, tuple[dict[str, Any], list[str], list[Problem]]] = {}

    def check(self, overrides: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[Problem]]:
        """The overrides worth storing (known keys), warnings, and problems as (key path, message)."""
        try:
            cache_key = json.dumps(overrides, sort_keys=True, allow_nan=True)
        except (TypeError, ValueError):  # pragma: no cover - parsed JSON always serialises
            cache_key = None
        cached = self._cache.get(cache_key) if cache_key is not None else None
        if cached is not None:
            return cached
        known = {key: value for key, value in overrides.items() if key in MemoryConfig.model_fields}
        problems: list[Problem] = []
        warnings: list[str] = []
        try:
            resolution = apply_overrides(self.base, overrides)
            warnings = resolution.warnings
            problems = request_override_problems(resolution.config, known, llm_configured=self.llm_configured)
        except ConfigOverrideError as error:
            problems = [(problem.path, problem.message) for problem in error.problems]
        answer = (known, warnings, problems)
        if cache_key is not None:
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
            self._cache[cache_key] = answer
        return answer


def _too_large(text: str, limit: int) -> bool:
    # A character is at most 4 UTF-8 bytes: most messages skip the encode entirely.
    return len(text) * 4 > limit and len(text.encode("utf-8")) > limit


def prepare_messages(
    items: Sequence[MessageFields],
    field_of: Callable[[int], str],
    *,
    checker: OverrideChecker,
    max_message_bytes: int,
    default_source: str,
) -> tuple[list[IncomingMessage], list[str]]:
    """Intake messages for validated ``items``, plus warnings; raises :class:`InvalidRequestError`.

    ``field_of(i)`` names item ``i`` in error fields (``body`` or ``body.messages[3]``). Every
    item is checked before anything is returned, so a request is refused or stored as a whole.
    Invalid values (422) are reported before oversized ones (413).
    """
    invalid: list[Problem] = []
    oversized: list[Problem] = []
    warnings: list[str] = []
    messages: list[IncomingMessage] = []
    for index, item in enumerate(items):
        overrides: dict[str, Any] = {}
        if item.config_overrides:
            overrides, item_warnings, problems = checker.check(item.config_overrides)
            prefix = field_of(index)
            invalid.extend((f"{prefix}.config_overrides.{path}", message) for path, message in problems)
            label = "" if len(items) == 1 else f"{prefix.removeprefix('body.')}: "
            warnings.extend(label + warning for warning in item_warnings)
        if _too_large(item.message, max_message_bytes):
            oversized.append(
                (f"{field_of(index)}.message", f"message is larger than the limit of {max_message_bytes} bytes (UTF-8)")
            )
        recent = item.recent_messages or []
        recent_bytes = sum(len(text.encode("utf-8")) for text in recent)
        if recent_bytes > MAX_RECENT_MESSAGES_BYTES:
            invalid.append(
                (
                    f"{field_of(index)}.recent_messages",
                    f"recent messages are {recent_bytes} bytes together (UTF-8); the limit is "
                    f"{MAX_RECENT_MESSAGES_BYTES}: send the last few, they are context for extraction",
                )
            )
        for position, text in enumerate(recent):
            if _too_large(text, max_message_bytes):
                oversized.append(
                    (
                        f"{field_of(index)}.recent_messages[{position}]",
                        f"recent message is larger than the limit of {max_message_bytes} bytes (UTF-8)",
                    )
                )
        if invalid or oversized:
            continue
        messages.append(
            IncomingMessage(
                message=item.message,
                speaker_name=item.speaker_name,
                session_id=item.session_id or "default",
                occurred_at=item.occurred_at,
                message_id=item.message_id,
                source=item.source or default_source,
                options={"verbose": item.verbose, "config_overrides": overrides, "recent_messages": list(recent)},
            )
        )
    if invalid:
        raise InvalidRequestError(422, invalid)
    if oversized:
        raise InvalidRequestError(413, oversized)
    return messages, warnings


# ---- LLM usage -------------------------------------------------------------------------------


class UsageCountsBody(BaseModel):
    """LLM calls and tokens; ``cached_input_tokens`` is the part of ``input_tokens`` served from a prompt cache."""

    calls: int
    failures: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int


class UsageDay(UsageCountsBody):
    """One UTC day's usage."""

    day: str


class UsageSkill(UsageCountsBody):
    """One skill's usage with one model."""

    skill: str
    model: str


class AgentUsageBody(BaseModel):
    """An agent's LLM usage over ``since``..``until`` (UTC days, both included)."""

    agent_id: str
    since: str
    until: str
    totals: UsageCountsBody
    by_day: list[UsageDay]
    by_skill: list[UsageSkill]
