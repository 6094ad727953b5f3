"""The read path's statements are prepared once per connection and reused (fixed texts, COMMIT).

An agent searched exactly (no index of its own) gets its signal statement prepared at once and
run with one generic plan; time travel, sessions, entity filters and agents with their own
indexes get it unprepared and planned for each execution's parameters
(memory_core.db.driver_reads, ``prepare=False``). The statements after it keep one generic plan:
prepared, they are not planned again.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine

from memory_core.db.statements import collapse_whitespace
from memory_core.read import signals
from memory_core.read.context import ReadContext, build_read_context
from memory_core.read.pipeline import retrieve
from memory_core.read.planner import fold_words
from memory_core.settings import Settings
from tests.memory_core.read.conftest import MemoryBuilder


def test_repeated_retrieves_reuse_prepared_statements(settings: Settings, memory: MemoryBuilder) -> None:
    marcos = memory.entity("Marcos Tavares", aliases=["Marcos"])
    porto_alegre = memory.entity("Porto Alegre", "place")
    lives = memory.fact("Marcos Tavares mora em Porto Alegre", marcos, links=[porto_alegre])
    memory.relationship(marcos, porto_alegre, "lives_in", evidence_fact_id=lives)
    # One connection, no overflow: every retrieve runs on the same server session.
    engine = create_engine(settings.sqlalchemy_url, pool_size=1, max_overflow=0)
    ctx: ReadContext = build_read_context(settings, embedder=memory.embedder, llm=None, engine=engine)
    try:
        first = retrieve(ctx, agent_id=memory.agent_id, query="Onde o Marcos mora?")
        for _ in range(6):
            again = retrieve(ctx, agent_id=memory.agent_id, query="Onde o Marcos mora?")
            assert [fact.fact_id for fact in again.facts] == [fact.fact_id for fact in first.facts]
        with engine.connect() as connection:
            prepared = connection.exec_driver_sql(
                "SELECT strpos(statement, 'AS in_broad') > 0 AS signal, strpos(statement, 'WITH seeds AS') > 0 "
                "AS spreading, strpos(statement, 'WITH recent AS') > 0 AS conversations, "
                "strpos(statement, 'FROM memory_entity_relationships r LEFT JOIN') > 0 AS expansion, generic_plans, "
                "custom_plans FROM pg_prepared_statements"
            ).all()
            connection.commit()
        # A ROLLBACK at the end of each read would have made psycopg deallocate them all.
        spreading = [(row.generic_plans, row.custom_plans) for row in prepared if row.spreading]
        assert spreading, "the spreading statement was not prepared"
        # psycopg prepares a statement once it has run 5 times: 7 retrieves ran it twice prepared,
        # each time with the generic plan (PostgreSQL's "auto" would have planned it twice again).
        assert spreading[0] == (2, 0)
        assert [(row.generic_plans, row.custom_plans) for row in prepared if row.conversations] == [(2, 0)]
        # The signal statement was prepared at its first execution and never planned again (two
        # shapes: the first retrieve also counted its keywords' frequencies, the others reuse them).
        signal_plans = [(row.generic_plans, row.custom_plans) for row in prepared if row.signal]
        assert sorted(signal_plans) == [(1, 0), (6, 0)]
        # A small agent's 1-hop expansion too, once the transaction plans generically from it on.
        assert [(row.generic_plans, row.custom_plans) for row in prepared if row.expansion] == [(7, 0)]
        # Under time travel it is planned for its values every time: never prepared.
        for _ in range(6):
            retrieve(ctx, agent_id=memory.agent_id, query="Onde o Marcos mora?", as_of=datetime.now(UTC))
        with engine.connect() as connection:
            expansions = connection.exec_driver_sql(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE strpos(statement, 'FROM memory_entity_relationships r LEFT JOIN') > 0"
            ).all()
            connection.commit()
        assert [tuple(row) for row in expansions] == [(7, 0)]
        assert lives in {fact.fact_id for fact in first.facts}
    finally:
        ctx.close()


def test_collapse_whitespace_keeps_quoted_text() -> None:
    statement = "SELECT  'a  b''  c',\n   \"x  y\"  FROM t\n  WHERE x ILIKE p ESCAPE '\\' AND y = ' '  "
    expected = "SELECT 'a  b''  c', \"x  y\" FROM t WHERE x ILIKE p ESCAPE '\\' AND y = ' '"
    assert collapse_whitespace(statement) == expected


def test_collapse_whitespace_refuses_line_comments() -> None:
    with pytest.raises(ValueError, match="comment"):
        collapse_whitespace("SELECT 1 -- one\nFROM t")


@pytest.mark.parametrize("text", ["Who ran the Recife half-marathon?", "ASCII only: 42 Words_here", ""])
def test_fold_words_ascii_shortcut_matches_the_general_path(text: str) -> None:
    import unicodedata

    from memory_core.read import planner

    decomposed = unicodedata.normalize("NFKD", text)
    general = planner._WORD.findall("".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold())
    assert fold_words(text) == general
    assert fold_words("Ágata é de São Paulo") == ["agata", "e", "de", "sao", "paulo"]


def _prepared_signal_statements(ctx: ReadContext) -> int:
    with ctx.engine.connect() as connection:
        count = int(
            connection.exec_driver_sql(
                "SELECT count(*) FROM pg_prepared_statements WHERE strpos(statement, 'AS in_broad') > 0"
            ).scalar_one()
        )
        connection.commit()  # a ROLLBACK would make psycopg deallocate the connection's statements
    return count


def test_generic_signal_plan_finds_what_a_plan_for_the_parameters_finds(
    settings: Settings, memory: MemoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    marcos = memory.entity("Marcos Tavares", aliases=["Marcos"])
    porto_alegre = memory.entity("Porto Alegre", "place")
    carolina = memory.entity("Carolina Souza", aliases=["Carolina"])
    memory.fact("Marcos Tavares mora em Porto Alegre", marcos, links=[porto_alegre])
    memory.fact("Marcos Tavares trabalha como engenheiro de software", marcos)
    memory.fact("Carolina Souza é arquiteta em Porto Alegre", carolina, links=[porto_alegre])
    memory.fact("Carolina Souza gosta de correr no parque", carolina)
    engine = create_engine(settings.sqlalchemy_url, pool_size=1, max_overflow=0)
    ctx: ReadContext = build_read_context(settings, embedder=memory.embedder, llm=None, engine=engine)
    questions = ["Quem mora em Porto Alegre?", "O que o Marcos faz?", "Carolina gosta de correr?"]
    try:
        generic = [retrieve(ctx, agent_id=memory.agent_id, query=question) for question in questions]
        shapes = _prepared_signal_statements(ctx)
        assert shapes >= 1, "a small agent's signal statement is prepared at its first execution"
        monkeypatch.setattr(signals, "_plans_generically", lambda request: False)
        planned = [retrieve(ctx, agent_id=memory.agent_id, query=question) for question in questions]
        for with_generic, with_planned in zip(generic, planned, strict=True):
            assert [f.fact_id for f in with_generic.facts] == [f.fact_id for f in with_planned.facts]
            # Recency and the graph's edge age come from each call's own clock: equal to a few
            # microseconds' decay (the sixth decimal of a score can flip between the two calls).
            for generic_fact, planned_fact in zip(with_generic.facts, with_planned.facts, strict=True):
                assert generic_fact.scores == pytest.approx(planned_fact.scores, abs=1e-5)
            assert with_generic.facts, "each question finds facts"
        keyword_hits = [f for result in generic for f in result.facts if f.scores["keyword"] > 0]
        assert keyword_hits, "the keyword signal (its term query built once per statement) found facts"
        monkeypatch.undo()
        # Time travel is planned for its parameters: no new prepared signal statement.
        travelled = retrieve(ctx, agent_id=memory.agent_id, query=questions[0], as_of=datetime.now(UTC))
        assert travelled.warnings == []
        assert _prepared_signal_statements(ctx) == shapes
    finally:
        ctx.close()
