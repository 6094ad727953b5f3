"""Everything a retrieval needs, built once per process (the read twin of the write context)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from memory_core.agent_config import ConfigResolver
from memory_core.cognition.directive_models import DirectiveBlockInput, DirectiveBlockOutput
from memory_core.cognition.llm.directives import DirectiveBlockSkill
from memory_core.cognition.offline.directives import OfflineDirectiveBlockSkill
from memory_core.cognition.skill import FallbackSkill, Skill
from memory_core.config import MemoryConfig
from memory_core.db.engine import create_db_engine, create_session_factory
from memory_core.providers.factory import build_embedding_provider, build_llm_provider
from memory_core.providers.protocols import EmbeddingProvider, LLMProvider
from memory_core.read.bookkeeping import RetrievalBookkeeper
from memory_core.read.read_slots import ReadSlots, build_read_slots
from memory_core.read.rerank import LLMRerankSkill, RerankInput, RerankOutput
from memory_core.read.side_reads import SideReads
from memory_core.settings import Settings
from memory_core.usage import DeferredUsage

__all__ = ["ReadContext", "build_read_context"]


@dataclass
class ReadContext:
    """Database access, the embedder, the optional reranker and the base memory configuration.

    ``reranker`` is ``None`` when no LLM is configured: retrieval then ranks by the formula alone,
    even when ``enable_reranker`` is true (there is no offline reranker).
    """

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    embedder: EmbeddingProvider
    base_config: MemoryConfig
    llm: LLMProvider | None = None
    reranker: Skill[RerankInput, RerankOutput] | None = None
    # Merges persona + directives into the directive block (memory_core.read.directives).
    directive_composer: Skill[DirectiveBlockInput, DirectiveBlockOutput] | None = None
    bookkeeper: RetrievalBookkeeper | None = None
    side_reads: SideReads | None = None
    # How many of this process's retrievals read the database at once (memory_core.read.read_slots).
    read_slots: ReadSlots | None = None
    # The reranker's LLM usage, written behind the requests (memory_core.usage).
    usage: DeferredUsage | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    _configs: ConfigResolver | None = field(default=None, repr=False)

    @property
    def configs(self) -> ConfigResolver:
        """Agents' and requests' effective configs on top of ``base_config``, memoised (made once)."""
        configs = self._configs
        if configs is None or configs.base is not self.base_config:
            configs = self._configs = ConfigResolver(self.base_config)
        return configs

    def __post_init__(self) -> None:
        if self.bookkeeper is None:
            self.bookkeeper = RetrievalBookkeeper(
                self.sessions, flush_interval_s=self.settings.retrieval_bookkeeping_flush_s
            )
        if self.usage is None:
            self.usage = DeferredUsage(self.sessions, flush_interval_s=self.settings.retrieval_bookkeeping_flush_s)
        if self.side_reads is None:
            self.side_reads = SideReads(self.engine, self.settings.retrieval_side_connections)
        if self.read_slots is None:
            self.read_slots = build_read_slots(self.settings.retrieval_concurrency)

    def flush_bookkeeping(self) -> bool:
        """Write the queued retrieval counters and LLM usage now (they are otherwise written in the background)."""
        usage_written = self.usage.flush() if self.usage is not None else True
        return (self.bookkeeper.flush() if self.bookkeeper is not None else True) and usage_written

    def close(self) -> None:
        """Write the queued retrieval counters and LLM usage, then release the database pools."""
        if self.bookkeeper is not None:
            self.bookkeeper.close()
        if self.usage is not None:
            self.usage.close()
        if self.side_reads is not None:
            self.side_reads.close()
        self.engine.dispose()


_FROM_SETTINGS: Any = object()


def build_read_context(
    settings: Settings,
    *,
    embedder: EmbeddingProvider | None = None,
    llm: LLMProvider | None = _FROM_SETTINGS,
    reranker: Skill[RerankInput, RerankOutput] | None = None,
    engine: Engine | None = None,
    pool_size: int | None = None,
) -> ReadContext:
    """A read context for ``settings``.

    ``llm`` defaults to the provider the settings configure (``None`` when offline); pass
    ``llm=None`` to force formula-only ranking. ``reranker`` overrides the skill built on ``llm``
    (tests pass a scripted one). ``engine`` lets a process share one pool between reads and writes.
    """
    provider: LLMProvider | None = build_llm_provider(settings) if llm is _FROM_SETTINGS else llm
    skill = reranker if reranker is not None else (LLMRerankSkill(provider) if provider is not None else None)
    composer: Skill[DirectiveBlockInput, DirectiveBlockOutput] = (
        FallbackSkill(DirectiveBlockSkill(provider), OfflineDirectiveBlockSkill())
        if provider is not None
        else OfflineDirectiveBlockSkill()
    )
    bound = engine if engine is not None else create_db_engine(settings, pool_size=pool_size)
    return ReadContext(
        settings=settings,
        engine=bound,
        sessions=create_session_factory(bound),
        embedder=embedder or build_embedding_provider(settings),
        base_config=settings.memory,
        llm=provider,
        reranker=skill,
        directive_composer=composer,
    )
