"""The read path's statements are prepared once per connection and reused (fixed texts, COMMIT).

The signal statement is the exception: its best plan depends on the agent, so it is sent
unprepared and planned for each execution's parameters (memory_core.db.engine.PLAN_EACH_EXECUTION).
The statements after it keep one generic plan: prepared, they are not planned again.
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from memory_core.db.statements import collapse_whitespace
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
                "AS spreading, strpos(statement, 'WITH recent AS') > 0 AS conversations, generic_plans, "
                "custom_plans FROM pg_prepared_statements"
            ).all()
        # A ROLLBACK at the end of each read would have made psycopg deallocate them all.
        spreading = [(row.generic_plans, row.custom_plans) for row in prepared if row.spreading]
        assert spreading, "the spreading statement was not prepared"
        # psycopg prepares a statement once it has run 5 times: 7 retrieves ran it twice prepared,
        # each time with the generic plan (PostgreSQL's "auto" would have planned it twice again).
        assert spreading[0] == (2, 0)
        assert [(row.generic_plans, row.custom_plans) for row in prepared if row.conversations] == [(2, 0)]
        assert not any(row.signal for row in prepared), "the signal statement must be planned per execution"
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
