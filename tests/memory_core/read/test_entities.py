"""Deterministic query entity resolution, the entity_keys filter and expansion (R2)."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core.read.context import ReadContext
from memory_core.read.entities import expand_query, query_grams, resolve_entity_filter, resolve_query_context
from tests.memory_core.read.conftest import MemoryBuilder


def test_query_grams_are_whole_folded_words() -> None:
    grams = {gram.text for gram in query_grams("Onde o Dr. Silva e a Ana-Clara moram em São Paulo?")}
    assert {"sao paulo", "dr. silva", "ana-clara", "silva", "onde o dr. silva"} <= grams
    assert "paulo?" not in grams
    assert "dr." not in grams
    assert "an" not in grams
    assert "o" not in grams
    assert "onde" not in grams
    assert not any(gram.startswith("ao ") for gram in grams)  # never inside a word


def test_names_aliases_and_slugs_resolve_to_canonical_keys(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    marcos = memory.entity("Marcos Tavares", aliases=["Marquinhos"])
    memory.entity("Marcos", key="person:marcos")
    sao_paulo = memory.entity("São Paulo", "place")
    memory.entity("Fantasma", active=False)
    # An entity with no alias rows at all: found by its key slug.
    memory.rows("SELECT 1")
    with read_ctx.engine.begin() as connection:
        from sqlalchemy import text

        connection.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type) "
                "VALUES (:agent, 'project:apollo_11', 'Apollo 11', 'project')"
            ),
            {"agent": memory.agent_id},
        )

    def resolved(query: str) -> list[tuple[str, str]]:
        with read_ctx.sessions() as session:
            found = resolve_query_context(session, memory.agent_id, query)
        return [(entity.key, entity.method) for entity in found.entities]

    # The longest match wins: "marcos tavares" is one entity, not also "person:marcos".
    assert resolved("Onde o Marcos Tavares mora?") == [(marcos, "alias")]
    assert resolved("E o Marcos?") == [("person:marcos", "alias")]
    assert resolved("cadê o marquinhos") == [(marcos, "alias")]
    assert resolved("Quem mora em sao paulo?") == [(sao_paulo, "alias")]
    assert [key for key, _ in resolved("Como vai o apollo 11?")] == ["project:apollo_11"]
    assert resolved("Fantasma existe?") == []
    assert resolved("Marcossss") == []  # word boundaries
    assert resolved("What is Marcos Tavares's job?") == [(marcos, "alias")]


def test_display_names_slugs_and_entity_types_are_found_through_their_indexes(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    """The resolution's lookups by expression match the migration's indexes (migration 0007)."""
    from sqlalchemy import event, text

    with read_ctx.engine.begin() as connection:
        # No alias rows: found by the folded display name, or by the key's slug.
        connection.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type) VALUES "
                "(:agent, 'person:alvaro_nunez', 'Álvaro Núñez', 'person'), "
                "(:agent, 'project:apollo_11', 'Apollo Eleven', 'project')"
            ),
            {"agent": memory.agent_id},
        )
        # Enough other entities that reading them all would be the slow plan it is for a large agent.
        connection.execute(
            text(
                "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type) "
                "SELECT :agent, 'place:spot_' || g, 'Spot ' || g, 'place' FROM generate_series(1, 3000) AS g"
            ),
            {"agent": memory.agent_id},
        )
        connection.execute(text("ANALYZE memory_entities"))
    captured: list[tuple[str, object]] = []

    def capture(_conn: object, _cursor: object, statement: str, parameters: object, *_: object) -> None:
        captured.append((statement, parameters))

    event.listen(read_ctx.engine, "before_cursor_execute", capture)
    try:
        with read_ctx.sessions() as session:
            found = resolve_query_context(
                session, memory.agent_id, "O ÁLVARO NUÑEZ e o apollo 11?", candidate_prefixes=["person", "pet"]
            )
    finally:
        event.remove(read_ctx.engine, "before_cursor_execute", capture)
    assert sorted((entity.key, entity.method) for entity in found.entities) == [
        ("person:alvaro_nunez", "display_name"),
        ("project:apollo_11", "slug"),
    ]
    assert found.existing_prefixes == {"person"}
    statement, parameters = next(item for item in captured if "'display_name'" in item[0])
    with read_ctx.engine.connect() as connection:
        plan = "\n".join(str(row[0]) for row in connection.exec_driver_sql("EXPLAIN " + statement, parameters))
    for index in (
        "ix_memory_entities_agent_folded_name",
        "ix_memory_entities_agent_key_slug",
        "ix_memory_entities_agent_key_type",
    ):
        assert index in plan, plan


def test_filter_keys_resolve_canonical_alias_bare_and_warn_otherwise(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    pedro = memory.entity("Pedro Menezes", aliases=["Pedro"])
    ana = memory.entity("Ana Silva", aliases=["Ana"])
    with read_ctx.sessions() as session:
        result = resolve_entity_filter(
            session, memory.agent_id, [pedro, "person:ana", "pedro", "place:ana", "person:unknown"]
        )
    assert result.resolved == {pedro: [pedro], "person:ana": [ana], "pedro": [pedro]}
    assert result.keys == [pedro, ana]
    assert result.warnings == [
        "entity_key 'place:ana' not found (not canonical, no matching alias)",
        "entity_key 'person:unknown' not found (not canonical, no matching alias)",
    ]


def test_expansion_primes_one_hop_neighbours_over_active_edges(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    marcos = memory.entity("Marcos")
    carolina = memory.entity("Carolina")
    vertix = memory.entity("Vertix", "organization")
    acme = memory.entity("Acme", "organization")
    lucia = memory.entity("Lúcia")
    memory.relationship(marcos, carolina, "partner_of", strength=0.9)
    memory.relationship(vertix, marcos, "employs", strength=0.7)  # incoming edges count too
    memory.relationship(marcos, acme, "works_at", valid_to=datetime(2024, 1, 1, tzinfo=UTC))  # ended
    memory.relationship(carolina, lucia, "child_of")  # two hops away
    with read_ctx.sessions() as session:
        expanded = expand_query(session, memory.agent_id, [marcos])
        past = expand_query(session, memory.agent_id, [marcos], window=None)
    assert expanded.primed_entities == [carolina, vertix]
    assert [(n.via, n.rel_type, n.strength) for n in expanded.neighbours] == [
        (marcos, "partner_of", 0.9),
        (marcos, "employs", 0.7),
    ]
    assert "carolina" in expanded.expanded_terms
    assert past.primed_entities == expanded.primed_entities


def test_the_gram_work_is_bounded_by_the_number_of_tokens_whatever_the_query_length() -> None:
    # 256 KiB of short words made 311k grams, each looked up among the agent's names (issue 46).
    padding = " ".join(f"w{index % 997}" for index in range(60_000))
    grams = query_grams("Onde mora a Ana Clara? " + padding)
    assert len(grams) <= 3 * 64 * 6
    assert {"ana clara", "ana"} <= {gram.text for gram in grams}  # names early in the query are still found
