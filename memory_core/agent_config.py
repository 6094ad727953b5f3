"""Per-agent memory configuration: MemoryConfig overrides stored per agent in ``agent_configs``.

Precedence, lowest first: the seeds' defaults, the service's memory file, the service's
``ARANDU_MEMORY__`` variables (together :attr:`memory_core.settings.Settings.memory`, the same
in every process), the agent's stored overrides (this module), and a request's
``config_overrides``.

Stored overrides are checked strictly when they are put (:func:`check_agent_overrides`: an
unknown field is an error, not a warning, since nobody would see a warning later) and checked
again when they are used, against the service config of the process using them: a service
config changed since (a restart with other variables) may make a stored combination invalid,
and the agent then runs on the service config, with a warning in the log.

Readers find an agent's row by its primary key, joined to what they read anyway where they can:
the write pipeline with a chunk's runs (:func:`memory_core.write.runs.load_runs`), retrieval in
the round trip that opens its read transaction (:mod:`memory_core.read.read_transaction`), a
maintenance job once at its start. :class:`ConfigResolver` turns stored overrides into configs,
memoised by content, so a chunk of a hundred runs of one agent validates its config once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from memory_core.config import (
    ConfigOverrideError,
    ConfigResolution,
    MemoryConfig,
    OverrideProblem,
    apply_overrides,
    unknown_field_hint,
)

logger = logging.getLogger(__name__)

__all__ = [
    "AGENT_CONFIG_SQL",
    "FIXED_FIELDS",
    "ConfigResolver",
    "StoredAgentConfig",
    "check_agent_overrides",
    "delete_agent_config",
    "load_agent_overrides",
    "read_agent_config",
    "store_agent_config",
]

# Fields an agent cannot change: the vectors' width is the database's.
FIXED_FIELDS = frozenset({"embedding_dimensions"})

# The statement every reader runs (or joins): one primary-key lookup.
AGENT_CONFIG_SQL = "SELECT overrides FROM agent_configs WHERE agent_id = :agent"

_READ = text("SELECT overrides, updated_at FROM agent_configs WHERE agent_id = :agent")
_STORE = text(
    """
    INSERT INTO agent_configs (agent_id, overrides, updated_at)
    VALUES (:agent, CAST(:overrides AS jsonb), now())
    ON CONFLICT (agent_id) DO UPDATE SET overrides = EXCLUDED.overrides, updated_at = EXCLUDED.updated_at
    RETURNING overrides, updated_at
    """
)
_DELETE = text("DELETE FROM agent_configs WHERE agent_id = :agent")


@dataclass(frozen=True)
class StoredAgentConfig:
    """An agent's stored overrides and when they were last put."""

    overrides: dict[str, Any]
    updated_at: datetime


def check_agent_overrides(base: MemoryConfig, overrides: Mapping[str, Any]) -> MemoryConfig:
    """The config ``overrides`` give on top of ``base``; :class:`ConfigOverrideError` naming every bad field.

    Stricter than a request's overrides: an unknown field and a fixed one are errors.
    """
    problems = [
        OverrideProblem(str(key), str(key), f"unknown config field{unknown_field_hint(key)}")
        for key in overrides
        if key not in MemoryConfig.model_fields
    ]
    problems.extend(
        OverrideProblem(key, key, "cannot be set per agent: it is fixed when the database is created")
        for key in overrides
        if key in FIXED_FIELDS
    )
    if problems:
        raise ConfigOverrideError(problems)
    return apply_overrides(base, overrides).config


def load_agent_overrides(connection: Session | Connection, agent_id: str) -> dict[str, Any] | None:
    """The agent's stored overrides (None when it has none): one primary-key lookup."""
    value = connection.execute(text(AGENT_CONFIG_SQL), {"agent": agent_id}).scalar()
    return dict(value) if isinstance(value, dict) and value else None


def read_agent_config(connection: Session | Connection, agent_id: str) -> StoredAgentConfig | None:
    """The agent's stored row, or None."""
    row = connection.execute(_READ, {"agent": agent_id}).first()
    return None if row is None else StoredAgentConfig(dict(row.overrides or {}), row.updated_at)


def store_agent_config(
    connection: Session | Connection, agent_id: str, overrides: Mapping[str, Any]
) -> StoredAgentConfig:
    """Replace the agent's overrides with ``overrides`` (already checked); the caller commits."""
    row = connection.execute(_STORE, {"agent": agent_id, "overrides": orjson.dumps(dict(overrides)).decode()}).one()
    return StoredAgentConfig(dict(row.overrides or {}), row.updated_at)


def delete_agent_config(connection: Session | Connection, agent_id: str) -> bool:
    """Remove the agent's overrides (it then runs on the service config); True when there were some."""
    deleted = connection.execute(_DELETE, {"agent": agent_id})
    return bool(getattr(deleted, "rowcount", 0))


def _key(value: Mapping[str, Any] | None) -> bytes:
    return orjson.dumps(value or {}, option=orjson.OPT_SORT_KEYS) if value else b""


class ConfigResolver:
    """The effective config of an agent's work: the service config, its stored overrides, a request's.

    Results are memoised by the content of both override sets (a bounded table, started over
    when full), so the many runs of a chunk, or the retrievals of one agent, validate once.
    Thread-safe: reads and writes of the table are single dict operations.
    """

    def __init__(self, base: MemoryConfig, *, max_entries: int = 512) -> None:
        self.base = base
        self.max_entries = max_entries
        self._agents: dict[bytes, MemoryConfig] = {}
        self._resolutions: dict[tuple[bytes, bytes], ConfigResolution | ConfigOverrideError] = {}

    def _remember(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        if len(table) >= self.max_entries:
            table.clear()
        table[key] = value

    def for_agent(self, stored: Mapping[str, Any] | None) -> MemoryConfig:
        """The service config with the agent's ``stored`` overrides (the service config if they no longer fit)."""
        if not stored:
            return self.base
        key = _key(stored)
        config = self._agents.get(key)
        if config is None:
            try:
                config = check_agent_overrides(self.base, stored)
            except ConfigOverrideError as error:
                # The service config changed since they were put; the agent's work must go on.
                logger.warning("stored agent config ignored, it no longer fits the service config: %s", error)
                config = self.base
            self._remember(self._agents, key, config)
        return config

    def resolve(self, stored: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None) -> ConfigResolution:
        """The agent's config with a request's ``overrides``; :class:`ConfigOverrideError` for bad ones."""
        agent = self.for_agent(stored)
        if not overrides:
            return ConfigResolution(config=agent, warnings=[])
        try:
            key = (_key(stored), _key(overrides))
        except TypeError:  # not JSON: apply_overrides says which key
            return apply_overrides(agent, overrides)
        found = self._resolutions.get(key)
        if found is None:
            try:
                found = apply_overrides(agent, overrides)
            except ConfigOverrideError as error:
                found = error
            self._remember(self._resolutions, key, found)
        if isinstance(found, ConfigOverrideError):
            raise found
        return ConfigResolution(config=found.config, warnings=list(found.warnings))

    def effective(self, stored: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None) -> MemoryConfig:
        """As :meth:`resolve`, for work whose overrides were accepted earlier (a pipeline run).

        Overrides that the agent's config, put since, makes invalid together (a request's
        ``hot_tier_ratio`` with the agent's ``warm_tier_ratio``) are dropped for the agent's
        config rather than failing a message that was accepted.
        """
        try:
            return self.resolve(stored, overrides).config
        except ConfigOverrideError as error:
            logger.warning("config_overrides of an accepted run ignored against its agent's config: %s", error)
            return self.for_agent(stored)
