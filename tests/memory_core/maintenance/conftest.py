"""Fixtures of the maintenance-job tests: a maintenance context on the session's database and memory builders.

Memories are written the way the write pipeline leaves them (facts with embeddings, entity
links, relationships, events) directly in SQL, so each test states exactly the counts and
dates a job reads (retrievals, corrections, ages).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text

from memory_core.cognition.maintenance_skills import MaintenanceSkills
from memory_core.cognition.skill import SkillOutcome
from memory_core.maintenance.context import MaintenanceContext, build_maintenance_context
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.settings import Settings
from tests.memory_core.read.conftest import MemoryBuilder


class UnusedSkill:
    """A skill slot a job must not call: calling it fails the test."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        """Skill name."""
        return self._name

    def run(self, skill_input: Any, /) -> SkillOutcome[Any]:
        """Fail: this job has no business calling this skill."""
        raise AssertionError(f"the job called {self._name} with {skill_input!r}")


def skills_bundle(**given: Any) -> MaintenanceSkills:
    """A bundle whose ``given`` slots are real or scripted skills and every other slot :class:`UnusedSkill`."""
    slots = (
        "summarize_cluster",
        "summarize_entity",
        "describe_community",
        "consolidate",
        "build_profile",
        "distill",
        "tag_emotion",
    )
    unknown = set(given) - set(slots)
    assert not unknown, unknown
    return MaintenanceSkills(kind="offline", **{slot: given.get(slot, UnusedSkill(slot)) for slot in slots})


@dataclass
class ClockedContext(MaintenanceContext):
    """A maintenance context whose "now" a test may pin."""

    fixed_now: datetime | None = field(default=None)

    def now(self) -> datetime:
        """The pinned instant, or the real one."""
        return self.fixed_now or super().now()


# Columns update_fact() writes to the fact's row of memory_fact_usage rather than memory_facts.
USAGE_COLUMNS = ("times_retrieved", "last_retrieved_at")


class JobMemory(MemoryBuilder):
    """:class:`MemoryBuilder` plus the bookkeeping columns the jobs read."""

    def execute(self, sql: str, **params: Any) -> None:
        """Run one statement and commit it (``:agent`` is this builder's agent unless given)."""
        self._run(sql, {"agent": self.agent_id, **params})

    def update_fact(self, fact_id: str, **columns: Any) -> None:
        """Set columns of one fact of this agent (retrieval counts, corrections, dates...).

        The retrieval counters (:data:`USAGE_COLUMNS`) go to the fact's row of
        ``memory_fact_usage``, created when missing, as retrieval bookkeeping keeps them.
        """
        usage = {name: columns.pop(name) for name in USAGE_COLUMNS if name in columns}
        if columns:
            assignments = ", ".join(f"{name} = :{name}" for name in columns)
            updated = self._run(
                f"UPDATE memory_facts SET {assignments} WHERE id = :id AND agent_id = :agent",
                {**columns, "id": fact_id, "agent": self.agent_id},
            )
            assert updated.rowcount == 1, f"no fact {fact_id} of {self.agent_id}"
        if usage:
            names = ", ".join(usage)
            values = ", ".join(f":{name}" for name in usage)
            assignments = ", ".join(f"{name} = excluded.{name}" for name in usage)
            written = self._run(
                f"INSERT INTO memory_fact_usage (fact_id, agent_id, {names}) "
                f"SELECT id, agent_id, {values} FROM memory_facts WHERE id = :id AND agent_id = :agent "
                f"ON CONFLICT (fact_id) DO UPDATE SET {assignments}",
                {**usage, "id": fact_id, "agent": self.agent_id},
            )
            assert written.rowcount == 1, f"no fact {fact_id} of {self.agent_id}"

    def update_entity(self, key: str, **columns: Any) -> None:
        """Set columns of one entity of this agent."""
        assignments = ", ".join(f"{name} = :{name}" for name in columns)
        self._run(
            f"UPDATE memory_entities SET {assignments} WHERE canonical_key = :key AND agent_id = :agent",
            {**columns, "key": key, "agent": self.agent_id},
        )

    def entity_row(self, key: str) -> Any:
        """The entity's row."""
        [row] = self.rows("SELECT * FROM memory_entities WHERE agent_id = :agent AND canonical_key = :key", key=key)
        return row

    def fact_row(self, fact_id: str) -> Any:
        """The fact's row, with its retrieval counters (0 and None when it was never retrieved)."""
        [row] = self.rows(
            "SELECT f.*, COALESCE(u.times_retrieved, 0) AS times_retrieved, u.last_retrieved_at "
            "FROM memory_facts f LEFT JOIN memory_fact_usage u ON u.fact_id = f.id "
            "WHERE f.agent_id = :agent AND f.id = :id",
            id=fact_id,
        )
        return row


ContextFactory = Callable[..., ClockedContext]


@pytest.fixture
def make_context(settings: Settings) -> Iterator[ContextFactory]:
    """Builds maintenance contexts (hashing embeddings, the skills a test gives); closes them after the test."""
    built: list[ClockedContext] = []

    def factory(skills: MaintenanceSkills | None = None, now: datetime | None = None) -> ClockedContext:
        base = build_maintenance_context(
            settings, skills=skills or skills_bundle(), embedder=HashingEmbedder(384), pool_size=2
        )
        context = ClockedContext(
            settings=base.settings,
            engine=base.engine,
            sessions=base.sessions,
            embedder=base.embedder,
            skills=base.skills,
            base_config=base.base_config,
            fixed_now=now,
        )
        built.append(context)
        return context

    yield factory
    for context in built:
        context.close()


@pytest.fixture
def memory_factory(make_context: ContextFactory) -> Callable[[], JobMemory]:
    """Builders of fresh agents' memories on the session's database."""
    context = make_context()

    def factory() -> JobMemory:
        return JobMemory(context.engine, HashingEmbedder(384), f"agent-{uuid.uuid4().hex[:12]}")

    return factory


@pytest.fixture
def memory(memory_factory: Callable[[], JobMemory]) -> JobMemory:
    """A builder for a fresh agent of this test."""
    return memory_factory()


def count(builder: MemoryBuilder, sql: str, **params: Any) -> int:
    """``SELECT count(*) ...`` as an int, scoped to the builder's agent through ``:agent``."""
    with builder.engine.connect() as connection:
        return int(connection.execute(text(sql), {"agent": builder.agent_id, **params}).scalar_one())
