"""Fact clustering (seeds B1) on the real database: clusters, summaries, embeddings, idempotence, retrieval."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from memory_core.cognition.maintenance_models import SummaryInput, SummaryOutput
from memory_core.cognition.offline.summary import OfflineSummarySkill
from memory_core.maintenance import clustering
from memory_core.maintenance.registry import run_job
from memory_core.providers.hashing_embedder import HashingEmbedder
from memory_core.read.context import build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.settings import Settings
from tests.memory_core.maintenance.conftest import ContextFactory, JobMemory, count, skills_bundle
from tests.memory_core.maintenance.pipeline_writes import write_messages
from tests.memory_core.read.conftest import NOW
from tests.support.scripted_skills import RecordingSkill

Summariser = RecordingSkill[SummaryInput, SummaryOutput]


def _summariser() -> Summariser:
    return RecordingSkill(OfflineSummarySkill("summarize_cluster"))


def _clusters(memory: JobMemory) -> dict[str, Any]:
    rows = memory.rows(
        "SELECT id, entity_key, label, summary_text, fact_count, is_active, importance, "
        "CAST(embedding_vec AS text) AS vec FROM memory_clusters WHERE agent_id = :agent"
    )
    return {str(row.entity_key): row for row in rows}


def _members(memory: JobMemory, cluster_id: Any) -> set[str]:
    rows = memory.rows("SELECT id FROM memory_facts WHERE agent_id = :agent AND cluster_id = :c", c=cluster_id)
    return {str(row.id) for row in rows}


def _vector(literal: str) -> list[float]:
    return [float(value) for value in literal.strip("[]").split(",")]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def _seed(memory: JobMemory) -> dict[str, Any]:
    ana = memory.entity("Ana Souza")
    bruno = memory.entity("Bruno")
    carla = memory.entity("Carla")
    ids = {
        "ana": [
            memory.fact(
                "Ana Souza works at Acme", ana, attribute_key="work.employer", valid_from=NOW - timedelta(days=3)
            ),
            memory.fact("Ana Souza lives in Lisbon", ana, attribute_key="location.residence"),
            memory.fact("Ana Souza plays the cello", ana, valid_from=NOW - timedelta(days=10)),
        ],
        "ana_old": memory.fact("Ana Souza studied in Porto", ana, valid_from=NOW - timedelta(days=200)),
        "ana_closed": memory.fact(
            "Ana Souza lives in Madrid",
            ana,
            valid_from=NOW - timedelta(days=20),
            valid_to=NOW - timedelta(days=1),
        ),
        "bruno": [
            memory.fact("Bruno runs marathons", bruno, valid_from=NOW - timedelta(days=2)),
            memory.fact("Bruno is a data engineer", bruno, attribute_key="work.occupation"),
        ],
        "carla": memory.fact("Carla likes jazz", carla),
    }
    return {"keys": {"ana": ana, "bruno": bruno, "carla": carla}, "ids": ids}


def test_clusters_group_recent_active_facts_by_entity_with_summary_and_mean_embedding(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    seeded = _seed(memory)
    keys, ids = seeded["keys"], seeded["ids"]
    summariser = _summariser()
    context = make_context(skills_bundle(summarize_cluster=summariser), now=NOW)

    result = run_job(context, memory.agent_id, "clustering")

    assert result["clusters_created"] == 2
    assert result["summaries_generated"] == 2
    assert result["facts_assigned"] == 5
    clusters = _clusters(memory)
    assert set(clusters) == {keys["ana"], keys["bruno"]}  # Carla has one fact: below cluster_min_facts
    ana = clusters[keys["ana"]]
    assert ana.is_active
    assert ana.fact_count == 3
    assert ana.label == "Ana Souza: location, work"
    # The offline summary keeps the newest facts; the 200-day-old and the superseded fact are out.
    assert ana.summary_text == "Ana Souza lives in Lisbon. Ana Souza works at Acme. Ana Souza plays the cello."
    assert _members(memory, ana.id) == set(ids["ana"])
    assert _members(memory, clusters[keys["bruno"]].id) == set(ids["bruno"])
    assert memory.fact_row(ids["ana_old"]).cluster_id is None
    assert memory.fact_row(ids["ana_closed"]).cluster_id is None
    assert memory.fact_row(ids["carla"]).cluster_id is None
    # The cluster embedding is the centroid of its facts' embeddings.
    fact_vectors = [
        _vector(row.vec)
        for row in memory.rows(
            "SELECT CAST(embedding_vec AS text) AS vec FROM memory_facts WHERE id = ANY(CAST(:ids AS uuid[]))",
            ids=ids["ana"],
        )
    ]
    centroid = [sum(values) / len(values) for values in zip(*fact_vectors, strict=True)]
    assert _cosine(_vector(ana.vec), centroid) == pytest.approx(1.0, abs=1e-5)
    [call] = [call for call in summariser.calls if call.subject == "Ana Souza"]
    assert [fact.fact_id for fact in call.facts] == [ids["ana"][1], ids["ana"][0], ids["ana"][2]]


def test_rerun_is_idempotent_and_only_changed_clusters_call_the_skill(
    make_context: ContextFactory, memory: JobMemory
) -> None:
    seeded = _seed(memory)
    keys = seeded["keys"]
    summariser = _summariser()
    context = make_context(skills_bundle(summarize_cluster=summariser), now=NOW)
    run_job(context, memory.agent_id, "clustering")
    first = _clusters(memory)
    calls = len(summariser.calls)

    again = run_job(context, memory.agent_id, "clustering")

    assert len(summariser.calls) == calls  # nothing changed: no skill call at all
    assert again["clusters_unchanged"] == 2
    assert again["clusters_created"] == again["clusters_reinforced"] == again["summaries_generated"] == 0
    assert {key: row.id for key, row in _clusters(memory).items()} == {key: row.id for key, row in first.items()}

    # Ana gets a new fact; Bruno loses one (superseded): Ana is re-summarised in place, Bruno dissolves.
    new_fact = memory.fact("Ana Souza adopted a cat named Miso", keys["ana"], valid_from=NOW - timedelta(minutes=5))
    bruno_fact = seeded["ids"]["bruno"][0]
    memory.update_fact(bruno_fact, valid_to=NOW - timedelta(minutes=1))

    changed = run_job(context, memory.agent_id, "clustering")

    assert [call.subject for call in summariser.calls[calls:]] == ["Ana Souza"]
    assert changed["clusters_reinforced"] == 1
    assert changed["clusters_created"] == 0
    assert changed["clusters_deactivated"] == 1
    after = _clusters(memory)
    assert count(memory, "SELECT count(*) FROM memory_clusters WHERE agent_id = :agent") == 2
    assert after[keys["ana"]].id == first[keys["ana"]].id
    assert after[keys["ana"]].fact_count == 4
    assert after[keys["ana"]].summary_text.startswith("Ana Souza adopted a cat named Miso.")
    assert new_fact in _members(memory, after[keys["ana"]].id)
    assert not after[keys["bruno"]].is_active
    assert _members(memory, after[keys["bruno"]].id) == set()

    # Bruno gets two facts again: his old cluster row comes back instead of a duplicate.
    memory.fact("Bruno lives in Recife", keys["bruno"])
    revived = run_job(context, memory.agent_id, "clustering")
    assert revived["clusters_reinforced"] == 1
    final = _clusters(memory)
    assert final[keys["bruno"]].id == first[keys["bruno"]].id
    assert final[keys["bruno"]].is_active
    assert count(memory, "SELECT count(*) FROM memory_clusters WHERE agent_id = :agent") == 2


def test_summaries_per_run_are_bounded_and_the_rest_is_deferred(
    make_context: ContextFactory, memory: JobMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clustering, "SUMMARIES_PER_RUN", 2)
    for index, name in enumerate(("Ana", "Bruno", "Carla")):
        key = memory.entity(name)
        for fact in range(2):
            memory.fact(f"{name} fact {fact}", key, valid_from=NOW - timedelta(days=index + 1, minutes=fact))
    summariser = _summariser()
    context = make_context(skills_bundle(summarize_cluster=summariser), now=NOW)

    first = run_job(context, memory.agent_id, "clustering")
    second = run_job(context, memory.agent_id, "clustering")

    assert (first["summaries_generated"], first["clusters_deferred"]) == (2, 1)
    # The freshest entities go first; the deferred one is done by the next run.
    assert [call.subject for call in summariser.calls] == ["Ana", "Bruno", "Carla"]
    assert (second["summaries_generated"], second["clusters_deferred"], second["clusters_unchanged"]) == (1, 0, 2)


def test_clustering_touches_only_the_given_agent(
    make_context: ContextFactory, memory_factory: Callable[[], JobMemory]
) -> None:
    mine, theirs = memory_factory(), memory_factory()
    for builder in (mine, theirs):
        key = builder.entity("Ana")
        builder.fact("Ana works at Acme", key)
        builder.fact("Ana lives in Lisbon", key)
    context = make_context(skills_bundle(summarize_cluster=_summariser()), now=NOW)

    run_job(context, mine.agent_id, "clustering")

    assert len(_clusters(mine)) == 1
    assert _clusters(theirs) == {}
    assert count(theirs, "SELECT count(*) FROM memory_facts WHERE agent_id = :agent AND cluster_id IS NOT NULL") == 0


def test_cluster_importance_follows_the_entity_importance(make_context: ContextFactory, memory: JobMemory) -> None:
    ana = memory.entity("Ana", importance=0.9)
    bruno = memory.entity("Bruno")
    for key, name in ((ana, "Ana"), (bruno, "Bruno")):
        memory.fact(f"{name} works at Acme", key, importance=0.4)
        memory.fact(f"{name} lives in Lisbon", key, importance=0.6)
    context = make_context(skills_bundle(summarize_cluster=_summariser()), now=NOW)

    run_job(context, memory.agent_id, "clustering")
    memory.update_entity(bruno, importance_score=0.2)
    run_job(context, memory.agent_id, "clustering")

    clusters = _clusters(memory)
    assert clusters[ana].importance == pytest.approx(0.9)
    assert clusters[bruno].importance == pytest.approx(0.2)  # followed the rescore without a new summary


def test_broad_query_after_clustering_is_cluster_first_with_the_summary(
    make_context: ContextFactory, memory: JobMemory, settings: Settings
) -> None:
    embedder = HashingEmbedder(384)
    write_messages(
        settings,
        embedder,
        memory.agent_id,
        [
            "A Fernanda trabalha na Orion Tech.",
            "A Fernanda mora em Campinas.",
            "A Fernanda gosta de escalada.",
        ],
        start=NOW - timedelta(days=2),
    )
    context = make_context(skills_bundle(summarize_cluster=OfflineSummarySkill("summarize_cluster")), now=NOW)
    result = run_job(context, memory.agent_id, "clustering")
    assert result["clusters_created"] >= 1
    [fernanda] = [row for row in _clusters(memory).values() if str(row.label).startswith("Fernanda")]
    fernanda_facts = memory.rows(
        "SELECT fact_text FROM memory_facts WHERE agent_id = :agent AND cluster_id = :c", c=fernanda.id
    )
    assert len(fernanda_facts) >= 2

    read = build_read_context(settings, embedder=embedder, llm=None, pool_size=2)
    try:
        answer = retrieve(read, agent_id=memory.agent_id, query="me conta tudo sobre a Fernanda", verbose=True)
    finally:
        read.close()

    assert answer.trace is not None
    assert answer.trace["plan"]["broad_query"] is True
    lines = answer.context.splitlines()
    assert lines[0] == "Known facts:"
    # The cluster's label and summary head the context, its facts indented under it.
    assert lines[1] == f"- {fernanda.label}: {fernanda.summary_text}"
    member_lines = {f"  - {row.fact_text}" for row in fernanda_facts}
    assert set(lines[2 : 2 + len(fernanda_facts)]) == member_lines


def test_the_offline_bundle_runs_clustering_communities_and_consolidation_in_a_cycle(
    make_context: ContextFactory, memory: JobMemory, settings: Settings
) -> None:
    from memory_core.cognition.maintenance_skills import build_offline_maintenance_skills

    write_messages(
        settings,
        HashingEmbedder(384),
        memory.agent_id,
        [
            "A Fernanda trabalha na Orion Tech.",
            "A Fernanda mora em Campinas.",
            "O Bruno trabalha na Orion Tech.",
            "O Bruno mora em Campinas.",
            "Estou feliz com o time!",
        ],
        start=NOW - timedelta(days=1),
    )
    context = make_context(build_offline_maintenance_skills(), now=NOW)

    results = {job: run_job(context, memory.agent_id, job) for job in ("clustering", "communities", "consolidation")}

    assert results["clustering"]["clusters_created"] >= 2
    assert results["communities"]["skipped"] is False
    assert results["communities"]["communities_found"] >= 1  # the works_at / lives_in edges connect them
    assert results["consolidation"]["skipped"] is False
    assert all(json.loads(json.dumps(result)) == result for result in results.values())  # JSON-friendly
    again = {job: run_job(context, memory.agent_id, job) for job in ("clustering", "communities", "consolidation")}
    assert again["clustering"]["summaries_generated"] == 0
    assert again["communities"]["communities_created"] == again["communities"]["entity_communities_created"] == 0
    assert again["consolidation"]["observations_created"] == 0
