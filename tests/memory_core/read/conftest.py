"""Fixtures of the read-pipeline tests: a read context on the session's database and a memory builder.

The builder writes rows the way the write pipeline leaves them (facts with embeddings, entity
links, aliases, relationships, events), directly in SQL, so each test states exactly the memory
it reads from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.context import ReadContext, build_read_context
from memory_core.settings import Settings
from memory_core.write.naming import normalize_alias, slugify
from memory_core.write.repository import vector_literal

NOW = datetime.now(UTC)


@dataclass
class MemoryBuilder:
    """Inserts one agent's memory rows."""

    engine: Engine
    embedder: HashingEmbedder
    agent_id: str

    def _run(self, sql: str, params: dict[str, Any]) -> Any:
        with self.engine.begin() as connection:
            return connection.execute(text(sql), params)

    def rows(self, sql: str, **params: Any) -> list[Any]:
        """Rows of a query (``:agent`` is this builder's agent unless given)."""
        with self.engine.connect() as connection:
            return list(connection.execute(text(sql), {"agent": self.agent_id, **params}).all())

    def execute(self, sql: str, **params: Any) -> None:
        """Run a writing statement and commit it (``:agent`` is this builder's agent unless given)."""
        self._run(sql, {"agent": self.agent_id, **params})

    def entity(
        self,
        name: str,
        entity_type: str = "person",
        *,
        aliases: Sequence[str] = (),
        key: str | None = None,
        last_seen_at: datetime | None = None,
        importance: float | None = None,
        summary: str | None = None,
        profile: str | None = None,
        active: bool = True,
    ) -> str:
        """An entity with its display name and ``aliases`` registered as aliases; returns its key."""
        canonical = key or f"{entity_type}:{slugify(name)}"
        seen = last_seen_at or NOW
        self._run(
            "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, first_seen_at, "
            "last_seen_at, importance_score, summary_text, profile_text, is_active) "
            "VALUES (:agent, :key, :name, :type, :seen, :seen, :importance, :summary, :profile, :active)",
            {
                "agent": self.agent_id,
                "key": canonical,
                "name": name,
                "type": entity_type,
                "seen": seen,
                "importance": importance,
                "summary": summary,
                "profile": profile,
                "active": active,
            },
        )
        for alias in {name, *aliases}:
            self.alias(alias, canonical, entity_type)
        return canonical

    def alias(self, alias: str, key: str, entity_type: str = "person") -> None:
        self._run(
            "INSERT INTO memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type) "
            "VALUES (:agent, :alias, :key, :type) ON CONFLICT DO NOTHING",
            {"agent": self.agent_id, "alias": normalize_alias(alias), "key": key, "type": entity_type},
        )

    def event(
        self,
        message: str,
        *,
        speaker: str = "Rafael",
        session_id: str = "default",
        occurred_at: datetime | None = None,
        message_id: str | None = None,
    ) -> str:
        event_id = str(uuid.uuid4())
        vector = self.embedder.embed_one(message)
        self._run(
            "INSERT INTO memory_events (id, agent_id, text, speaker, session_id, message_id, occurred_at, "
            "embedding_vec) VALUES (:id, :agent, :text, :speaker, :session, :message_id, :at, CAST(:vec AS vector))",
            {
                "id": event_id,
                "agent": self.agent_id,
                "text": message,
                "speaker": speaker,
                "session": session_id,
                "message_id": message_id,
                "at": occurred_at or NOW,
                "vec": vector_literal(vector) if vector else None,
            },
        )
        return event_id

    def fact(
        self,
        fact_text: str,
        entity_key: str,
        *,
        links: Sequence[str] = (),
        entity_name: str | None = None,
        attribute_key: str | None = None,
        confidence: float = 0.95,
        importance: float = 0.5,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        speaker: str | None = "Rafael",
        source_event_id: str | None = None,
        reinforcement_count: int = 0,
        last_confirmed_at: datetime | None = None,
        cluster_id: str | None = None,
    ) -> str:
        """A fact about ``entity_key``, linked to it (primary) and to ``links``; returns its id."""
        fact_id = str(uuid.uuid4())
        vector = self.embedder.embed_one(fact_text)
        self._run(
            """
            INSERT INTO memory_facts (id, agent_id, entity_type, entity_key, entity_name, attribute_key, fact_text,
                speaker, confidence, importance, valid_from, valid_to, invalidated_at, source_event_id, embedding_vec,
                reinforcement_count, last_confirmed_at, cluster_id)
            VALUES (:id, :agent, :type, :key, :name, :attr, :text, :speaker, :confidence, :importance, :valid_from,
                :valid_to, :valid_to, :event, CAST(:vec AS vector), :reinforcement, :confirmed, :cluster)
            """,
            {
                "id": fact_id,
                "agent": self.agent_id,
                "type": entity_key.split(":", 1)[0],
                "key": entity_key,
                "name": entity_name or entity_key.split(":", 1)[1].replace("_", " ").title(),
                "attr": attribute_key,
                "text": fact_text,
                "speaker": speaker,
                "confidence": confidence,
                "importance": importance,
                "valid_from": valid_from or NOW - timedelta(hours=1),
                "valid_to": valid_to,
                "event": source_event_id,
                "vec": vector_literal(vector) if vector else None,
                "reinforcement": reinforcement_count,
                "confirmed": last_confirmed_at,
                "cluster": cluster_id,
            },
        )
        for key in dict.fromkeys([entity_key, *links]):
            self._run(
                "INSERT INTO memory_fact_entity_links (fact_id, entity_key, is_primary, agent_id) "
                "VALUES (:fact, :key, :primary, :agent)",
                {"fact": fact_id, "key": key, "primary": key == entity_key, "agent": self.agent_id},
            )
        return fact_id

    def refresh_fact_counts(self) -> None:
        """Each entity's ``fact_count`` = its active linked facts, as the write path's upsert keeps it."""
        self._run(
            "UPDATE memory_entities e SET fact_count = (SELECT count(*) FROM memory_fact_entity_links l "
            "JOIN memory_facts f ON f.id = l.fact_id WHERE l.agent_id = e.agent_id "
            "AND l.entity_key = e.canonical_key AND f.valid_to IS NULL) WHERE e.agent_id = :agent",
            {"agent": self.agent_id},
        )

    def relationship(
        self,
        source: str,
        target: str,
        rel_type: str,
        *,
        strength: float = 0.8,
        evidence_fact_id: str | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
    ) -> None:
        self._run(
            "INSERT INTO memory_entity_relationships (agent_id, source_entity_key, target_entity_key, rel_type, "
            "strength, evidence_fact_id, valid_from, valid_to) "
            "VALUES (:agent, :source, :target, :type, :strength, :evidence, :valid_from, :valid_to)",
            {
                "agent": self.agent_id,
                "source": source,
                "target": target,
                "type": rel_type,
                "strength": strength,
                "evidence": evidence_fact_id,
                "valid_from": valid_from or NOW - timedelta(days=1),
                "valid_to": valid_to,
            },
        )

    def cluster(self, label: str, summary: str, fact_ids: Sequence[str], *, importance: float = 0.5) -> str:
        cluster_id = str(uuid.uuid4())
        self._run(
            "INSERT INTO memory_clusters (id, agent_id, label, summary_text, fact_count, importance) "
            "VALUES (:id, :agent, :label, :summary, :count, :importance)",
            {
                "id": cluster_id,
                "agent": self.agent_id,
                "label": label,
                "summary": summary,
                "count": len(fact_ids),
                "importance": importance,
            },
        )
        self._run(
            "UPDATE memory_facts SET cluster_id = :cluster WHERE id = ANY(CAST(:ids AS uuid[]))",
            {"cluster": cluster_id, "ids": list(fact_ids)},
        )
        return cluster_id

    def observation(
        self,
        body: str,
        *,
        title: str = "pattern",
        observation_type: str = "pattern",
        supporting_fact_ids: Sequence[str] = (),
        last_reinforced_at: datetime | None = None,
    ) -> str:
        observation_id = str(uuid.uuid4())
        vector = self.embedder.embed_one(body)
        self._run(
            "INSERT INTO memory_meta_observations (id, agent_id, observation_type, title, text, supporting_fact_ids, "
            "embedding_vec, last_reinforced_at) VALUES (:id, :agent, :type, :title, :text, CAST(:facts AS jsonb), "
            "CAST(:vec AS vector), :reinforced)",
            {
                "id": observation_id,
                "agent": self.agent_id,
                "type": observation_type,
                "title": title,
                "text": body,
                "facts": json.dumps(list(supporting_fact_ids)),
                "vec": vector_literal(vector) if vector else None,
                "reinforced": last_reinforced_at or NOW,
            },
        )
        return observation_id


@pytest.fixture
def read_ctx(settings: Settings) -> Iterator[ReadContext]:
    """A read context on the session's database: hashing embeddings, no LLM (formula-only ranking)."""
    ctx = build_read_context(settings, embedder=HashingEmbedder(384), llm=None, pool_size=2)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def memory(read_ctx: ReadContext) -> MemoryBuilder:
    """A builder for a fresh agent of this test."""
    embedder = read_ctx.embedder
    assert isinstance(embedder, HashingEmbedder)
    return MemoryBuilder(read_ctx.engine, embedder, f"agent-{uuid.uuid4().hex[:12]}")
