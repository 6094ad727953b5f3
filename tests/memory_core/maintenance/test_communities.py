"""Community detection (seeds B2, "Job 4") on the real database: cluster themes and entity communities."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from memory_core.cognition.maintenance_models import CommunityInput, CommunityOutput
from memory_core.cognition.offline.community import OfflineCommunitySkill
from memory_core.maintenance.registry import run_job
from memory_core.maintenance.union_find import UnionFind, connected_components
from memory_core.write.repository import vector_literal
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, count, skills_bundle
from tests.memory_core.read.conftest import NOW
from tests.support.scripted_skills import RecordingSkill

DIMENSIONS = 384

Describer = RecordingSkill[CommunityInput, CommunityOutput]


def _direction(*weights: tuple[int, float]) -> list[float]:
    """A unit vector with the given (axis, weight) components."""
    vector = [0.0] * DIMENSIONS
    for axis, weight in weights:
        vector[axis] = weight
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector]


def _execute(memory: JobMemory, sql: str, **params: Any) -> None:
    """Run one write statement for the builder's agent, committed."""
    with memory.engine.begin() as connection:
        connection.execute(text(sql), {"agent": memory.agent_id, **params})


def _cluster(memory: JobMemory, name: str, summary: str, vector: Sequence[float], *, importance: float = 0.5) -> str:
    """An active cluster about entity ``name`` with two facts, the given embedding and a fingerprint."""
    key = memory.entity(name)
    cluster_id = str(uuid.uuid4())
    _execute(
        memory,
        "INSERT INTO memory_clusters (id, agent_id, entity_type, entity_key, label, summary_text, fact_count, "
        "importance, embedding_vec, facts_fingerprint) VALUES (:id, :agent, 'person', :key, :label, :summary, 2, "
        ":importance, CAST(:vec AS vector), :fingerprint)",
        id=cluster_id,
        key=key,
        label=name,
        summary=summary,
        importance=importance,
        vec=vector_literal(vector),
        fingerprint=uuid.uuid4().hex,
    )
    for index in range(2):
        memory.fact(f"{name} fact {index}", key, cluster_id=cluster_id, valid_from=NOW - timedelta(hours=index))
    return cluster_id


def _observations(memory: JobMemory, kind: str, *, active: bool = True) -> list[Any]:
    return memory.rows(
        "SELECT id, title, text, members, supporting_fact_ids, times_reinforced, confidence, "
        "embedding_vec IS NOT NULL AS embedded FROM memory_meta_observations "
        "WHERE agent_id = :agent AND observation_type = :kind AND is_active = :active ORDER BY first_detected_at, id",
        kind=kind,
        active=active,
    )


def _work_and_sports(memory: JobMemory) -> dict[str, str]:
    work, sport, other = 0, 1, 2
    return {
        "fernanda": _cluster(
            memory,
            "Fernanda",
            "Fernanda works at Orion Tech. Fernanda built the data pipeline.",
            _direction((work, 1.0)),
            importance=0.9,
        ),
        "bruno": _cluster(
            memory,
            "Breno",
            "Breno works at Orion Tech. Breno developed the ML model.",
            _direction((work, 1.0), (other, 0.2)),
            importance=0.7,
        ),
        "marcos": _cluster(
            memory, "Marcos", "Marcos runs marathons. Marcos trains on weekends.", _direction((sport, 1.0))
        ),
        "julia": _cluster(
            memory, "Julia", "Julia runs trail marathons with Marcos.", _direction((sport, 1.0), (other, 0.3))
        ),
        "alone": _cluster(memory, "Zeca", "Zeca collects stamps.", _direction((other, 1.0), (work, -0.5))),
    }


def test_similar_clusters_become_community_theme_observations(make_context: ContextFactory, memory: JobMemory) -> None:
    clusters = _work_and_sports(memory)
    describer: Describer = RecordingSkill(OfflineCommunitySkill())
    context = make_context(skills_bundle(describe_community=describer), now=NOW)

    result = run_job(context, memory.agent_id, "communities")

    assert result["communities_created"] == 2
    assert result["clusters_in_communities"] == 4
    assert result["skipped"] is False
    observations = _observations(memory, "community_theme")
    by_members = {frozenset(row.members): row for row in observations}
    work = by_members[frozenset({clusters["fernanda"], clusters["bruno"]})]
    assert set(by_members) == {work_members(clusters), frozenset({clusters["marcos"], clusters["julia"]})}
    assert work.title == "Orion, Tech, works"
    assert work.text.startswith(
        "2 related groups of memories, linked by Orion, Tech and works: Fernanda works at Orion Tech."
    )
    assert work.embedded
    assert 0.75 <= work.confidence <= 1.0
    # The observation cites its clusters' facts, so retrieval shows it next to them.
    fact_ids = {
        str(row.id)
        for row in memory.rows(
            "SELECT id FROM memory_facts WHERE cluster_id = ANY(CAST(:ids AS uuid[]))",
            ids=[clusters["fernanda"], clusters["bruno"]],
        )
    }
    assert set(work.supporting_fact_ids) == fact_ids
    # The most important cluster's summary comes first.
    assert describer.calls[0].cluster_summaries[0].startswith("Fernanda works at Orion Tech.")


def work_members(clusters: dict[str, str]) -> frozenset[str]:
    return frozenset({clusters["fernanda"], clusters["bruno"]})


def test_rerun_reuses_observations_and_skips_the_skill_for_unchanged_communities(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    clusters = _work_and_sports(memory)
    describer: Describer = RecordingSkill(OfflineCommunitySkill())
    context = make_context(skills_bundle(describe_community=describer), now=NOW)
    run_job(context, memory.agent_id, "communities")
    first = {frozenset(row.members): row.id for row in _observations(memory, "community_theme")}

    again = run_job(context, memory.agent_id, "communities")

    assert len(describer.calls) == 2
    assert again["communities_unchanged"] == 2
    assert again["communities_created"] == again["communities_reinforced"] == 0
    assert {frozenset(row.members): row.id for row in _observations(memory, "community_theme")} == first

    # A third Orion Tech cluster joins the work community: the same observation is updated.
    carla = _cluster(memory, "Carla", "Carla works at Orion Tech as a designer.", _direction((0, 1.0), (2, 0.1)))
    # Julia's cluster goes away: the sports community has one cluster left and dissolves.
    _execute(memory, "UPDATE memory_clusters SET is_active = false WHERE id = :id", id=clusters["julia"])

    changed = run_job(context, memory.agent_id, "communities")

    assert len(describer.calls) == 3
    assert changed["communities_reinforced"] == 1
    assert changed["communities_created"] == 0
    assert changed["communities_dissolved"] == 1
    [work] = _observations(memory, "community_theme")
    assert work.id == first[work_members(clusters)]
    assert set(work.members) == {clusters["fernanda"], clusters["bruno"], carla}
    assert work.times_reinforced == 1
    [gone] = _observations(memory, "community_theme", active=False)
    assert gone.id == first[frozenset({clusters["marcos"], clusters["julia"]})]


def test_too_few_clusters_is_skipped_with_a_reason(make_context: ContextFactory, memory: JobMemory) -> None:
    _cluster(memory, "Ana", "Ana works at Acme.", _direction((0, 1.0)))
    context = make_context(skills_bundle(describe_community=RecordingSkill(OfflineCommunitySkill())), now=NOW)

    result = run_job(context, memory.agent_id, "communities")

    assert result["skipped"] is True
    assert "1 active clusters" in result["skip_reason"]
    assert _observations(memory, "community_theme") == []


def _graph(memory: JobMemory) -> dict[str, str]:
    keys = {name: memory.entity(name.title()) for name in ("ana", "bruno", "carla", "davi", "eva", "fabio", "gil")}
    keys["hugo"] = memory.entity("Hugo")
    keys["iris"] = memory.entity("Iris")
    memory.relationship(keys["ana"], keys["bruno"], "friend_of", strength=0.8)
    memory.relationship(keys["bruno"], keys["carla"], "works_with", strength=0.5)
    memory.relationship(keys["carla"], keys["ana"], "sibling_of", strength=0.3)  # exactly at the threshold: counts
    memory.relationship(keys["davi"], keys["eva"], "partner_of", strength=0.9)
    memory.relationship(keys["eva"], keys["fabio"], "knows", strength=0.2)  # too weak
    memory.relationship(keys["hugo"], keys["iris"], "friend_of", strength=0.9, valid_to=NOW - timedelta(days=1))
    return keys


def _community_of(memory: JobMemory) -> dict[str, str | None]:
    rows = memory.rows("SELECT canonical_key, community_id FROM memory_entities WHERE agent_id = :agent")
    return {str(row.canonical_key): (str(row.community_id) if row.community_id else None) for row in rows}


def test_entity_communities_by_union_find_over_strong_active_edges(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    keys = _graph(memory)
    context = make_context(skills_bundle(), now=NOW)  # no skill may be called for entity communities

    result = run_job(context, memory.agent_id, "communities")

    assert result["communities_found"] == 2
    assert result["total_entities_assigned"] == 5
    assert result["largest_entity_community"] == 3
    observations = _observations(memory, "entity_community")
    by_members = {frozenset(row.members): row for row in observations}
    friends = by_members[frozenset({keys["ana"], keys["bruno"], keys["carla"]})]
    couple = by_members[frozenset({keys["davi"], keys["eva"]})]
    assert friends.title == "Ana, Bruno, Carla"
    assert friends.text == "3 connected entities: Ana, Bruno, Carla. Relationships: friend_of, sibling_of, works_with."
    assert not friends.embedded
    assert friends.supporting_fact_ids == []
    community = _community_of(memory)
    assert {key for key, value in community.items() if value == str(friends.id)} == {
        keys["ana"],
        keys["bruno"],
        keys["carla"],
    }
    assert {key for key, value in community.items() if value == str(couple.id)} == {keys["davi"], keys["eva"]}
    assert community[keys["fabio"]] is None
    assert community[keys["gil"]] is None
    assert community[keys["hugo"]] is None  # their edge is closed
    assert community[keys["iris"]] is None


def test_entity_communities_merge_in_place_and_rerun_changes_nothing(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    keys = _graph(memory)
    context = make_context(skills_bundle(), now=NOW)
    run_job(context, memory.agent_id, "communities")
    before = {frozenset(row.members): row.id for row in _observations(memory, "entity_community")}

    again = run_job(context, memory.agent_id, "communities")
    assert again["entity_communities_unchanged"] == 2
    assert again["entity_communities_created"] == again["entity_communities_updated"] == 0
    assert {frozenset(row.members): row.id for row in _observations(memory, "entity_community")} == before

    # Carla starts working with Davi: the two communities merge into the one with the most members.
    memory.relationship(keys["carla"], keys["davi"], "works_with", strength=0.6)
    merged = run_job(context, memory.agent_id, "communities")

    assert merged["communities_found"] == 1
    assert merged["total_entities_assigned"] == 5
    assert merged["entity_communities_updated"] == 1
    assert merged["entity_communities_dissolved"] == 1
    [community] = _observations(memory, "entity_community")
    assert community.id == before[frozenset({keys["ana"], keys["bruno"], keys["carla"]})]
    assert len(community.members) == 5
    assert community.title == "Carla, Ana, Bruno (+2)"  # the best-connected members name it
    assert set(_community_of(memory).values()) == {str(community.id), None}
    assert (
        count(memory, "SELECT count(*) FROM memory_entities WHERE agent_id = :agent AND community_id IS NOT NULL") == 5
    )


def test_communities_touch_only_the_given_agent(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    _graph(mine)
    _graph(theirs)
    _work_and_sports(theirs)
    _work_and_sports(mine)
    context = make_context(skills_bundle(describe_community=RecordingSkill(OfflineCommunitySkill())), now=NOW)

    run_job(context, mine.agent_id, "communities")

    assert len(_observations(mine, "entity_community")) == 2
    assert len(_observations(mine, "community_theme")) == 2
    assert count(theirs, "SELECT count(*) FROM memory_meta_observations WHERE agent_id = :agent") == 0
    assert set(_community_of(theirs).values()) == {None}


def test_union_find_compresses_paths_and_unions_by_rank() -> None:
    sets: UnionFind[int] = UnionFind(range(6))
    assert sets.union(0, 1)
    assert sets.union(2, 3)
    assert sets.union(1, 3)  # two rank-1 trees: one root goes under the other
    assert not sets.union(0, 2)  # already one set
    root = sets.find(3)
    assert {sets.find(item) for item in range(4)} == {root}
    assert sets.groups() == [[0, 1, 2, 3], [4], [5]]
    # A long chain stays cheap: after one find every node points at the root.
    chain: UnionFind[int] = UnionFind()
    for item in range(1, 5000):
        chain.union(item, item - 1)
    assert len({chain.find(item) for item in range(5000)}) == 1
    assert connected_components("abcde", [("a", "b"), ("d", "e"), ("b", "a")], min_size=2) == [["a", "b"], ["d", "e"]]


def test_offline_community_description_in_portuguese() -> None:
    output = (
        OfflineCommunitySkill()
        .run(
            CommunityInput(
                cluster_summaries=[
                    "A Fernanda trabalha na Orion Tech. Ela mora em Campinas.",
                    "O Bruno trabalha na Orion Tech desde 2020.",
                ]
            )
        )
        .output
    )
    assert output.title == "Orion, Tech, trabalha"
    assert output.observation == (
        # Portuguese summaries, English observation (W20); the quotes keep their words.
        "2 related groups of memories, linked by Orion, Tech and trabalha: A Fernanda trabalha na Orion Tech. "
        "O Bruno trabalha na Orion Tech desde 2020."
    )
    assert json.loads(output.model_dump_json())["title"] == output.title
