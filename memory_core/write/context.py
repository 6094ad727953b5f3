"""Everything a write stage needs, built once per process."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson
from psycopg.types.json import set_json_loads
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from memory_core.agent_config import ConfigResolver
from memory_core.cognition.write_skills import WriteSkills
from memory_core.config import MemoryConfig
from memory_core.db.engine import create_db_engine, create_session_factory
from memory_core.providers.factory import build_embedding_provider, build_llm_provider
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.providers.protocols import EmbeddingProvider
from memory_core.settings import Settings


@dataclass
class WriteContext:
    """Database access, providers, skills and the base memory configuration of a process."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    embedder: EmbeddingProvider
    skills: WriteSkills
    base_config: MemoryConfig
    extra: dict[str, Any] = field(default_factory=dict)
    _autocommit: Engine | None = field(default=None, repr=False)
    _configs: ConfigResolver | None = field(default=None, repr=False)

    @property
    def configs(self) -> ConfigResolver:
        """Agents' and runs' effective configs on top of ``base_config``, memoised (made once)."""
        configs = self._configs
        if configs is None or configs.base is not self.base_config:
            configs = self._configs = ConfigResolver(self.base_config)
        return configs

    @property
    def autocommit_engine(self) -> Engine:
        """``engine`` with every statement committed at once (same pool), made once.

        ``Engine.execution_options`` builds a new option engine on each call, which cost a
        tenth of an extraction worker's CPU when stages asked for one per reading session.
        """
        engine = self._autocommit
        if engine is None:
            engine = self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        return engine

    @property
    def skills_in_process(self) -> bool:
        """The skills are rules computed here and now (offline): nothing to wait for while they run.

        Stages then keep their reading session's connection across skill calls: giving it back
        and taking it again cost a pool checkout with its ping (a round trip) per call.
        """
        return self.skills.kind == "offline"

    @property
    def embedder_in_process(self) -> bool:
        """The embedder hashes words in this process at once (no model, no network)."""
        return isinstance(self.embedder, HashingEmbedder)

    def release(self, session: Session) -> Session | None:
        """What a stage passes as ``release`` to ``call_skill``: ``session``, unless the skills run in process."""
        return None if self.skills_in_process else session

    def config_for(self, options: dict[str, Any], agent_config: dict[str, Any] | None = None) -> MemoryConfig:
        """The effective configuration of a run: the service's, its agent's stored overrides, its own.

        Its own overrides were validated when it was accepted; ``agent_config`` is what
        ``agent_configs`` holds for its agent (read with the run, see ``load_runs``).
        """
        overrides = options.get("config_overrides") or {}
        if not overrides and not agent_config:
            return self.base_config
        return self.configs.effective(agent_config, overrides)

    def close(self) -> None:
        """Release the database pool."""
        self.engine.dispose()


def build_write_skills(settings: Settings) -> WriteSkills:
    """LLM skills when an LLM is configured, offline rules otherwise."""
    provider = build_llm_provider(settings)
    if provider is None:
        from memory_core.cognition.offline import build_offline_write_skills

        return build_offline_write_skills()
    from memory_core.cognition.llm import build_llm_write_skills

    return build_llm_write_skills(provider)


def _loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # integers past 64 bits: the standard library reads them
        return json.loads(data)


def fast_json(engine: Engine) -> None:
    """Decode ``json``/``jsonb`` columns with orjson on ``engine``'s connections.

    Stage outputs carry embeddings as JSON arrays, and every stage reads the outputs before
    it: with the standard library, decoding them was a tenth of a worker's CPU.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        set_json_loads(_loads, dbapi_connection)


def build_write_context(
    settings: Settings,
    *,
    skills: WriteSkills | None = None,
    embedder: EmbeddingProvider | None = None,
    pool_size: int | None = None,
) -> WriteContext:
    """A context for ``settings``; tests pass scripted skills or embedders explicitly."""
    # No ping before each checkout: a pipeline stage takes two connections, and one that a
    # database restart closed fails a single attempt, which the task retries.
    engine = create_db_engine(settings, pool_size=pool_size, pre_ping=False)
    fast_json(engine)
    return WriteContext(
        settings=settings,
        engine=engine,
        sessions=create_session_factory(engine),
        embedder=embedder or build_embedding_provider(settings),
        skills=skills or build_write_skills(settings),
        base_config=settings.memory,
    )
