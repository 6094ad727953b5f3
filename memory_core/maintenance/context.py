"""Everything a maintenance job needs, built once per worker process."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from memory_core.agent_config import ConfigResolver, load_agent_overrides
from memory_core.cognition.maintenance_skills import MaintenanceSkills, build_maintenance_skills
from memory_core.config import MemoryConfig
from memory_core.db.engine import create_db_engine, create_session_factory
from memory_core.providers.factory import build_embedding_provider
from memory_core.providers.protocols import EmbeddingProvider
from memory_core.settings import Settings


@dataclass
class MaintenanceContext:
    """Database access, providers, skills and the base memory configuration of a maintenance process."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    embedder: EmbeddingProvider
    skills: MaintenanceSkills
    base_config: MemoryConfig
    _configs: ConfigResolver | None = field(default=None, repr=False)

    @property
    def configs(self) -> ConfigResolver:
        """Agents' effective configs on top of ``base_config``, memoised (made once)."""
        configs = self._configs
        if configs is None or configs.base is not self.base_config:
            configs = self._configs = ConfigResolver(self.base_config)
        return configs

    def config_for(self, agent_id: str) -> MemoryConfig:
        """The agent's effective config: ``base_config`` with its stored overrides (one primary-key lookup)."""
        with self.sessions() as session:
            stored = load_agent_overrides(session, agent_id)
        return self.configs.for_agent(stored)

    def now(self) -> datetime:
        """The current instant in UTC (one place, so jobs agree on what "now" is)."""
        return datetime.now(UTC)

    def close(self) -> None:
        """Release the database pool."""
        self.engine.dispose()


def build_maintenance_context(
    settings: Settings,
    *,
    skills: MaintenanceSkills | None = None,
    embedder: EmbeddingProvider | None = None,
    pool_size: int | None = None,
) -> MaintenanceContext:
    """A context for ``settings``; tests pass scripted skills or embedders explicitly."""
    engine = create_db_engine(settings, pool_size=pool_size)
    return MaintenanceContext(
        settings=settings,
        engine=engine,
        sessions=create_session_factory(engine),
        embedder=embedder or build_embedding_provider(settings),
        skills=skills or build_maintenance_skills(settings),
        base_config=settings.memory,
    )
