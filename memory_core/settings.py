"""Service settings read from the environment (prefix ``ARANDU_``).

Every process of the service (API, workers, Beat, Flower, ops scripts) builds its
settings through :func:`load_settings`, so a bad value stops it at start with the
setting's environment name in the message instead of failing later mid-request.

The service-wide :class:`~memory_core.config.MemoryConfig` is part of the settings
(:attr:`Settings.memory`), so every process reads and validates it the same way: the seeds'
defaults, then the TOML or YAML file named by ``ARANDU_MEMORY_CONFIG`` (its top-level keys
are MemoryConfig fields), then ``ARANDU_MEMORY__<FIELD>`` variables (pydantic-settings'
nested delimiter; mappings and sets as JSON). A bad value names the variable or the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)
from pydantic_settings import SettingsError as SourceError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from memory_core.config import PAIRED_FIELDS, MemoryConfig

ENV_PREFIX = "ARANDU_"
# ARANDU_MEMORY__TIMEZONE -> Settings.memory.timezone (pydantic-settings' nested delimiter).
NESTED_DELIMITER = "__"
MEMORY_PREFIX = f"{ENV_PREFIX}MEMORY{NESTED_DELIMITER}"
MEMORY_FILE_VARIABLE = f"{ENV_PREFIX}MEMORY_CONFIG"
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class LLMProviderName(StrEnum):
    """Which LLM backend the cognition skills use."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    OFFLINE = "offline"


class EmbeddingProviderName(StrEnum):
    """Which embedding backend turns text into vectors."""

    OPENAI = "openai"
    HASHING = "hashing"
    LOCAL = "local"


class Environment(StrEnum):
    """Deployment kind: production refuses to start with development secrets."""

    DEV = "dev"
    PRODUCTION = "production"


class LogLevel(StrEnum):
    """Standard logging levels accepted by ``ARANDU_LOG_LEVEL``."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


DEFAULT_EMBEDDING_MODELS = {
    EmbeddingProviderName.OPENAI: "text-embedding-3-small",
    EmbeddingProviderName.HASHING: "hashing-v1",
    EmbeddingProviderName.LOCAL: "all-MiniLM-L6-v2",
}
DEFAULT_EMBEDDING_DIMENSIONS = {
    EmbeddingProviderName.OPENAI: 1536,
    EmbeddingProviderName.HASHING: 384,
    EmbeddingProviderName.LOCAL: 384,
}
# Events per pipeline chain when ARANDU_PIPELINE_CHUNK_SIZE is not set (see Settings.chunk_size).
DEFAULT_CHUNK_SIZE = 64
DEFAULT_LLM_MODELS = {
    LLMProviderName.OPENAI: "gpt-4o-mini",
    LLMProviderName.ANTHROPIC: "claude-sonnet-4-20250514",
    LLMProviderName.OFFLINE: "offline-rules",
}
# hnsw.ef_search of a search through an agent's own vector index (ARANDU_RETRIEVAL_EF_SEARCH).
DEFAULT_RETRIEVAL_EF_SEARCH = 300


class SettingsError(ValueError):
    """A setting has a bad value; the message names the environment variable."""


def _memory_file_path(init_kwargs: Mapping[str, Any] | None = None) -> Path | None:
    """The file ``ARANDU_MEMORY_CONFIG`` names (or ``memory_config`` passed to :func:`load_settings`)."""
    given = (init_kwargs or {}).get("memory_config")
    if given is None:
        given = next(
            (value for name, value in os.environ.items() if name.upper() == MEMORY_FILE_VARIABLE and value.strip()),
            None,
        )
    return Path(given) if given else None


def read_memory_file(path: Path) -> dict[str, Any]:
    """The MemoryConfig fields of a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file, by pydantic-settings.

    Raises :class:`SettingsError` naming ``ARANDU_MEMORY_CONFIG`` and the path when the file is
    missing, unreadable, of another kind, or not a mapping of fields.
    """
    where = f"{MEMORY_FILE_VARIABLE}={path}"
    if not path.is_file():
        raise SettingsError(f"invalid settings: {where}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = TomlConfigSettingsSource(Settings, toml_file=path).toml_data
        elif suffix in {".yaml", ".yml"}:
            data = YamlConfigSettingsSource(Settings, yaml_file=path).yaml_data
        else:
            raise SettingsError(f"invalid settings: {where}: the file must end in .toml, .yaml or .yml")
    except SettingsError:
        raise
    except Exception as error:  # tomllib, yaml and OS errors alike: the file cannot be read
        raise SettingsError(
            f"invalid settings: {where}: cannot be read as a mapping of MemoryConfig fields: {error}"
        ) from None
    if data is None:  # an empty YAML file
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"invalid settings: {where}: must hold MemoryConfig fields as keys (a mapping)")
    return data


class _MemoryFileSource(PydanticBaseSettingsSource):
    """The file of ``ARANDU_MEMORY_CONFIG`` as the ``memory`` field (below the environment in precedence)."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.data = read_memory_file(path) if path is not None else {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Unused: :meth:`__call__` answers for the whole source."""
        return (self.data if field_name == "memory" else None), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {"memory": dict(self.data)} if self.data else {}


class Settings(BaseSettings):
    """Process-wide settings of the service; see the README's configuration table."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        frozen=True,
        validate_default=True,
        # An empty variable (compose's `${VAR:-}`) means "not set", not "set to empty".
        env_ignore_empty=True,
        env_nested_delimiter=NESTED_DELIMITER,
    )

    # The service-wide memory configuration (see the module's docstring). Its
    # embedding_dimensions is always the embedder's (embedding_dimensions below).
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    # A TOML or YAML file of MemoryConfig fields, read below the ARANDU_MEMORY__ variables.
    memory_config: Path | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the memory file (the first source wins a field)."""
        init_kwargs = getattr(init_settings, "init_kwargs", None)
        memory_file = _MemoryFileSource(settings_cls, _memory_file_path(init_kwargs))
        return (init_settings, env_settings, dotenv_settings, file_secret_settings, memory_file)

    env: Environment = Environment.DEV
    home: Path = PROJECT_ROOT / ".arandu"

    database_url: str = "postgresql+psycopg://postgres@localhost:5432/arandu"
    broker_url: str = "redis://localhost:6379/0"
    # Must stay well above the longest task plus its longest retry delay, and be
    # the same in every client (API, workers, Beat, Flower), or Redis redelivers
    # tasks that are still running.
    broker_visibility_timeout_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)
    # Prefix of every Redis key the service uses, so several deployments (or test runs) can share one Redis.
    broker_key_prefix: str = Field(default="", max_length=64, pattern=r"^[A-Za-z0-9_.:-]*$")

    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    api_keys: Annotated[tuple[str, ...], NoDecode] = ()
    # Tenant keys (arandu keys create): requests per second each, bursts of twice that (token
    # bucket in Redis); 0 turns the limit off. A key may carry its own. The operator's keys
    # (api_keys) are not limited.
    api_key_rate_limit_per_s: float = Field(default=50.0, ge=0, le=1_000_000)
    # How long an API process trusts what it read of a tenant key: a revocation takes effect
    # within this many seconds on every process.
    api_key_cache_s: float = Field(default=2.0, ge=0, le=60)
    # The memory explorer's (/ui/) session cookie: how long a login lasts, and whether the cookie
    # is marked Secure: "auto" when the request came over https, "always", or "never" (plain
    # http on another host than 127.0.0.1/localhost, which browsers refuse Secure cookies on).
    ui_session_ttl_s: int = Field(default=8 * 3600, ge=60, le=30 * 24 * 3600)
    ui_cookie_secure: Literal["auto", "always", "never"] = "auto"
    max_message_bytes: int = Field(default=256 * 1024, ge=1024, le=64 * 1024 * 1024)
    # A retrieve's query: a question, not a document. Its words are matched against every
    # entity name and may go to the LLM reranker; 256 KiB queries stalled the API (issue 46).
    max_query_bytes: int = Field(default=4096, ge=256, le=64 * 1024)
    # Requests with more than 1 KiB of text to work on (a long query, a long dry run) that one
    # API process serves at once; the others wait their turn (api.heavy_work).
    heavy_request_concurrency: int = Field(default=1, ge=1, le=64)

    flower_host: str = "127.0.0.1"
    flower_port: int = Field(default=5555, ge=1, le=65535)
    flower_user: str = Field(default="admin", min_length=1)
    flower_password: SecretStr | None = None

    ingest_concurrency: int = Field(default=16, ge=1, le=512)
    apply_concurrency: int = Field(default=8, ge=1, le=128)
    # Worker processes ./ops/dev starts for the apply queue: its stages are CPU-bound Python,
    # so one process is capped by its GIL; the agent lock already serialises each agent.
    apply_processes: int = Field(default=2, ge=1, le=16)
    # API processes ./ops/dev starts on the one port (SO_REUSEPORT): each is one GIL.
    api_processes: int = Field(default=2, ge=1, le=16)
    # Server processes one `python -m api` runs on its port under uvicorn's supervisor (which
    # replaces one that dies): how a container's API uses more than one core. ./ops/dev starts
    # ARANDU_API_PROCESSES single-process APIs instead and runs each with 1.
    api_workers: int = Field(default=1, ge=1, le=64)
    maintenance_concurrency: int = Field(default=1, ge=1, le=64)
    # A maintenance task not started this long after it was sent is dropped, and its run guard released.
    maintenance_task_expires_s: float = Field(default=3600.0, ge=10, le=7 * 24 * 3600)
    # Per-job cadence overrides in seconds, as JSON ({"importance": 7200}); jobs not named keep beat_schedule.py's.
    maintenance_cadences: Annotated[dict[str, float], NoDecode] = Field(default_factory=dict)
    database_pool_size: int = Field(default=10, ge=1, le=200)
    # Statements each database connection keeps prepared (psycopg's default; the least recently
    # used are deallocated beyond it): their plans live in the server (memory_core.db.engine).
    database_prepared_max: int = Field(default=100, ge=1, le=10_000)
    # Retrieval counters (times_retrieved, last_retrieved_at) are queued and written this often; 0 = in the request.
    retrieval_bookkeeping_flush_s: float = Field(default=1.0, ge=0, le=600)
    # Agents with at least this many facts get a vector index of their own (0 = never).
    retrieval_agent_index_min_facts: int = Field(default=10_000, ge=0, le=100_000_000)
    # HNSW candidate list of a search through an agent's own vector index: recall against cost
    # (memory_core.read.signals says what each value measured).
    retrieval_ef_search: int = Field(default=DEFAULT_RETRIEVAL_EF_SEARCH, ge=40, le=1000)
    # Extra connections per process that let a large agent's retrieve run its independent
    # statements side by side (memory_core.read.side_reads); 0 = one connection per retrieve.
    retrieval_side_connections: int = Field(default=4, ge=0, le=64)
    # Retrievals of one process reading the database at once (memory_core.read.read_slots says
    # what was measured); 0 = the CPUs this process may run on.
    retrieval_concurrency: int = Field(default=0, ge=0, le=256)

    # Background processes (workers, Beat, Flower) lower their CPU priority by this much (nice,
    # their session group's and, with the embedded PostgreSQL, the workers' database backends';
    # see workers.priority): where they share cores with the API, a request is answered before
    # background work goes on. Under a request load that fills the cores the workers keep ~10%
    # of them at 10 (~25% at 5, ~1.5% at 19); idle cores are theirs at any value
    # (docs/performance.md, "Worker priority"). 0 keeps the same priority.
    worker_nice: int = Field(default=10, ge=0, le=19)

    pipeline_max_attempts: int = Field(default=6, ge=1, le=100)
    # A provider answering 429 with Retry-After says when to come back: such a retry does not
    # spend one of the attempts above (meant for real failures) but one of these, so that a
    # provider refusing a third of calls cannot fail a message (six refusals in a row did, in 1
    # run in 3 of 600 messages), while one that never lets a message through still fails it:
    # after this many refusals of its run, all stages together (30 at a Retry-After of 1-20 s:
    # from half a minute to ten).
    pipeline_max_throttled_retries: int = Field(default=30, ge=0, le=1000)
    pipeline_retry_base_s: float = Field(default=2.0, gt=0, le=600)
    pipeline_retry_max_s: float = Field(default=300.0, gt=0, le=3600)
    pipeline_stale_after_s: float = Field(default=600.0, ge=0.5, le=7 * 24 * 3600)
    # How often Beat runs the sweeper (re-enqueues runs idle past pipeline_stale_after_s, and
    # what the API accepted while the broker was down). After an outage, processing resumes
    # within this plus the staleness.
    pipeline_sweep_interval_s: float = Field(default=30.0, ge=1.0, le=3600)
    # A run re-enqueued this many times without moving is failed: its message probably kills workers.
    pipeline_max_sweeps: int = Field(default=5, ge=1, le=10000)
    # Batches, imports and sweeps run one chain per (agent, this many events): Celery's per-task
    # cost is paid once per chunk and the chunk's upsert is one transaction under the agent lock.
    # None: DEFAULT_CHUNK_SIZE (see :attr:`Settings.chunk_size`).
    pipeline_chunk_size: int | None = Field(default=None, ge=1, le=500)
    # Single messages (POST .../messages) wait up to this long for others to share a chunk with
    # (any agents), when another arrived within this long before them (a lone one starts at
    # once); a full chunk starts at once. 0 = each message is a chain of its own at once.
    pipeline_intake_wait_ms: float = Field(default=300.0, ge=0, le=10_000)
    # Single messages per chunk: a chain's fixed cost (four task deliveries, eight transactions)
    # shared by more messages; an agent's lock is held only for its own messages' apply.
    pipeline_intake_chunk_size: int = Field(default=32, ge=1, le=500)
    # Events of one chunk computed at once when the skills call an LLM (hides its latency).
    pipeline_chunk_parallelism: int = Field(default=8, ge=1, le=64)
    # With an LLM, consecutive messages of one agent and session waiting in the same chunk are
    # extracted in one call (their answers stored per message); off: one call per message.
    pipeline_llm_batching: bool = True
    # A batch's bounds: messages, and an estimate of its prompt's tokens (messages and the
    # known entities shown with them, about four characters a token; the fixed instructions
    # are not counted). A message over the budget on its own goes alone.
    pipeline_llm_batch_max_messages: int = Field(default=8, ge=1, le=64)
    pipeline_llm_batch_max_tokens: int = Field(default=6000, ge=100, le=200_000)
    # With batching on, the new facts of one agent in a chunk that need a reconciliation
    # decision are decided in one call, bounded by a number of decisions and an estimate of
    # the prompt's tokens (new facts and the existing facts shown with each).
    pipeline_llm_reconcile_batch_max: int = Field(default=24, ge=1, le=128)
    pipeline_llm_reconcile_batch_max_tokens: int = Field(default=6000, ge=100, le=200_000)

    llm_provider: LLMProviderName | None = None
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(default=30.0, gt=0, le=600)

    embedding_provider: EmbeddingProviderName | None = None
    embedding_model: str | None = None
    embedding_dimensions: int | None = Field(default=None, ge=8, le=16000)
    embedding_base_url: str | None = None

    log_level: LogLevel = LogLevel.INFO
    # GET /metrics reuses a reading of the database, broker and ledger for this long.
    metrics_cache_s: float = Field(default=5.0, ge=0, le=300)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_api_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(key.strip() for key in value.split(",") if key.strip())
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("maintenance_cadences", mode="before")
    @classmethod
    def _parse_cadences(cls, value: Any) -> Any:
        # Parsed here rather than by pydantic-settings so that bad JSON names the variable too.
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError('must be a JSON object of job name to seconds, e.g. {"importance": 7200}') from None
        if not isinstance(value, dict):
            raise ValueError('must be a JSON object of job name to seconds, e.g. {"importance": 7200}')
        for job, seconds in value.items():
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 10:
                raise ValueError(f"{job}: the interval must be a number of seconds, at least 10")
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
            raise ValueError("must be a PostgreSQL URL (postgresql+psycopg://user:pass@host:port/db)")
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "redis+socket://", "amqp://", "amqps://", "pyamqp://")):
            raise ValueError("must be a Redis (redis://, redis+socket://) or RabbitMQ (amqp://) URL")
        return value

    @model_validator(mode="after")
    def _fill_provider_defaults(self) -> Self:
        # The service runs fully offline unless a key says otherwise, so a fresh
        # checkout works without any account.
        api_key = self.resolved_llm_api_key
        if self.llm_provider is None:
            chosen = LLMProviderName.OPENAI if api_key else LLMProviderName.OFFLINE
            object.__setattr__(self, "llm_provider", chosen)
        if self.embedding_provider is None:
            has_openai_key = api_key is not None and self.llm_provider is LLMProviderName.OPENAI
            chosen_embedder = EmbeddingProviderName.OPENAI if has_openai_key else EmbeddingProviderName.HASHING
            object.__setattr__(self, "embedding_provider", chosen_embedder)
        assert self.llm_provider is not None
        assert self.embedding_provider is not None
        if self.llm_model is None:
            object.__setattr__(self, "llm_model", DEFAULT_LLM_MODELS[self.llm_provider])
        if self.embedding_model is None:
            object.__setattr__(self, "embedding_model", DEFAULT_EMBEDDING_MODELS[self.embedding_provider])
        if self.embedding_dimensions is None:
            object.__setattr__(self, "embedding_dimensions", DEFAULT_EMBEDDING_DIMENSIONS[self.embedding_provider])
        keyless_local_server = self.llm_provider is LLMProviderName.OPENAI and bool(self.llm_base_url)
        if self.llm_provider is not LLMProviderName.OFFLINE and api_key is None and not keyless_local_server:
            raise ValueError(
                f"ARANDU_LLM_PROVIDER={self.llm_provider.value} needs ARANDU_LLM_API_KEY "
                "(or OPENAI_API_KEY for openai); an OpenAI-compatible local server "
                "may instead set ARANDU_LLM_BASE_URL"
            )
        self._fix_memory_dimensions()
        if self.env is Environment.PRODUCTION:
            if not self.api_keys:
                raise ValueError("ARANDU_API_KEYS must be set when ARANDU_ENV=production")
            if self.flower_password is None:
                raise ValueError("ARANDU_FLOWER_PASSWORD must be set when ARANDU_ENV=production")
            if _weak_database_password(self.database_url):
                raise ValueError(
                    "ARANDU_DATABASE_URL must carry a database password of your own when ARANDU_ENV=production "
                    "(empty or a well-known default such as 'arandu' or 'postgres' is refused; "
                    "with docker compose set POSTGRES_PASSWORD in .env)"
                )
        return self

    def _fix_memory_dimensions(self) -> None:
        # The vectors' width is the embedder's and fixed when the database is created: the memory
        # config follows it, and a memory file or variable saying otherwise is a mistake.
        assert self.embedding_dimensions is not None
        asked = self.memory.embedding_dimensions
        if "embedding_dimensions" in self.memory.model_fields_set and asked != self.embedding_dimensions:
            raise ValueError(
                f"{_memory_source('embedding_dimensions', {})}: embedding_dimensions ({asked}) must equal the "
                "embedder's dimensions "
                f"({self.embedding_dimensions}, ARANDU_EMBEDDING_DIMENSIONS); leave it out of the memory config"
            )
        if asked != self.embedding_dimensions:
            object.__setattr__(
                self, "memory", self.memory.model_copy(update={"embedding_dimensions": self.embedding_dimensions})
            )

    @property
    def resolved_llm_api_key(self) -> str | None:
        """The LLM key: ``ARANDU_LLM_API_KEY``, else ``OPENAI_API_KEY`` from the environment."""
        if self.llm_api_key is not None and self.llm_api_key.get_secret_value():
            return self.llm_api_key.get_secret_value()
        fallback = os.environ.get("OPENAI_API_KEY", "").strip()
        return fallback or None

    @property
    def chunk_size(self) -> int:
        """Events of one agent per pipeline chain: ``ARANDU_PIPELINE_CHUNK_SIZE``, else 64.

        A chunk's later messages are reconciled before its earlier ones are applied; the apply
        re-checks each decision (repeats, near-duplicates, single-valued slots, retractions)
        against what the earlier ones wrote. A chain's fixed cost (four task deliveries, the
        run reads and writes) is most of a short chunk's CPU, so chunks are long with an LLM
        too: an agent's chunks start together and are extracted side by side anyway, so
        shorter ones did not let reconciliation see more of a conversation, and 64 instead of
        16 took a third off the CPU per message of a batched burst (docs/performance.md).
        """
        if self.pipeline_chunk_size is not None:
            return self.pipeline_chunk_size
        return DEFAULT_CHUNK_SIZE

    @property
    def llm(self) -> LLMProviderName:
        """The effective LLM provider (never None once validated)."""
        assert self.llm_provider is not None
        return self.llm_provider

    @property
    def embedder(self) -> EmbeddingProviderName:
        """The effective embedding provider (never None once validated)."""
        assert self.embedding_provider is not None
        return self.embedding_provider

    @property
    def dimensions(self) -> int:
        """The effective embedding dimension (never None once validated)."""
        assert self.embedding_dimensions is not None
        return self.embedding_dimensions

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL with the psycopg 3 driver that SQLAlchemy must use."""
        url = self.database_url
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url


# Passwords that ship in examples and images: a database reachable over TCP with one of these is
# open to anyone who read the same page.
DEFAULT_DATABASE_PASSWORDS = frozenset({"", "arandu", "postgres", "password", "changeme"})


def _weak_database_password(url: str) -> bool:
    """True when ``url`` reaches its server over TCP with no password or a default one.

    A Unix-socket URL (host a path, or none) authenticates by the operating system's user, not
    by a password, and is left alone.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:  # not a URL SQLAlchemy reads: connecting fails loudly anyway
        return False
    socket_host = parsed.query.get("host")
    host = parsed.host or (socket_host if isinstance(socket_host, str) else None)
    if host is None or host.startswith("/"):
        return False
    return (parsed.password or "") in DEFAULT_DATABASE_PASSWORDS


def _memory_source(field: str, overrides: Mapping[str, Any]) -> str:
    """Where a memory field's value came from: its variable, an argument, or the memory file.

    A check of two fields (hot + warm tier ratios...) reports on the later one; when that one
    was not set, the source named is the partner's that was.
    """
    variables = {name.upper() for name in os.environ}
    memory = overrides.get("memory")
    path = _memory_file_path(overrides)
    file_fields: Mapping[str, Any] = {}
    if path is not None:
        try:
            file_fields = read_memory_file(path)
        except SettingsError:
            file_fields = {}
    for name in (field, *PAIRED_FIELDS.get(field, ())):
        variable = f"{MEMORY_PREFIX}{name}".upper()
        if variable in variables:
            return variable
        if isinstance(memory, Mapping) and name in memory:
            return f"memory.{name}"
        if name in file_fields:
            return f"{MEMORY_FILE_VARIABLE}={path}: {name}"
    return f"{MEMORY_PREFIX}{field}".upper()


def _undecodable_variable() -> str | None:
    """The first ``ARANDU_MEMORY__`` variable of a mapping or set field that is not JSON."""
    for name, value in sorted(os.environ.items()):
        if not name.upper().startswith(MEMORY_PREFIX) or not value.strip():
            continue
        field = MemoryConfig.model_fields.get(name[len(MEMORY_PREFIX) :].lower())
        if field is None or field.annotation in {str, int, float, bool}:
            continue
        try:
            json.loads(value)
        except ValueError:
            return name.upper()
    return None


def _describe(error: ValidationError, overrides: Mapping[str, Any]) -> str:
    lines = []
    for item in error.errors():
        location = [str(part) for part in item["loc"] if part != "__root__"]
        message = str(item["msg"]).removeprefix("Value error, ")
        if len(location) >= 2 and location[0] == "memory":
            # The field, with the path inside it (score_weights.semantic), and where it was set.
            inner = ".".join(part for part in location[2:] if part != "[key]")
            detail = f" ({location[1]}.{inner})" if inner else ""
            lines.append(f"{_memory_source(location[1], overrides)}{detail}: {message}")
            continue
        if not location and message.startswith(ENV_PREFIX):  # a whole-settings check that names its variable
            lines.append(message)
            continue
        name = ENV_PREFIX + "_".join(location).upper() if location else "settings"
        lines.append(f"{name}: {message}")
    return "invalid settings: " + "; ".join(lines)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, raising :class:`SettingsError` naming the bad variable.

    A bad memory config field names its ``ARANDU_MEMORY__<FIELD>`` variable, or the file of
    ``ARANDU_MEMORY_CONFIG`` and the field.
    """
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(_describe(error, overrides)) from None
    except SourceError as error:
        # A variable pydantic-settings could not decode (bad JSON for a mapping or a set).
        variable = _undecodable_variable()
        if variable is not None:
            raise SettingsError(
                f"invalid settings: {variable}: must be JSON (an object for a mapping, a list for a set)"
            ) from None
        raise SettingsError(f"invalid settings: {error}") from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return load_settings()
