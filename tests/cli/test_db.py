"""``arandu db upgrade|check|current|index-agents`` on a database of their own."""

from __future__ import annotations

import json

from sqlalchemy import create_engine, text
from typer.testing import CliRunner, Result

from arandu_cli.exit_codes import ExitCode
from arandu_cli.main import app as cli_app
from memory_core.db.migrate import head_revision
from tests.support.services import TestServices


def _db(args: list[str], database_url: str, dimensions: int = 384, **extra_env: str) -> Result:
    env = {"ARANDU_DATABASE_URL": database_url, "ARANDU_EMBEDDING_DIMENSIONS": str(dimensions), **extra_env}
    return CliRunner().invoke(cli_app, ["db", *args], env=env, catch_exceptions=False)


def test_db_upgrade_migrates_a_new_database_and_check_tells_a_mismatch(services: TestServices) -> None:
    url = services.new_database("arandu_cli_db")

    before = _db(["check"], url)
    assert before.exit_code == ExitCode.FAILED
    assert "no arandu schema" in before.stderr
    assert "(none)" in _db(["current"], url).stdout

    upgraded = _db(["upgrade"], url)
    assert upgraded.exit_code == 0, upgraded.output
    assert "384-dimensional" in upgraded.stdout

    checked = _db(["check"], url)
    assert checked.exit_code == 0, checked.output
    assert head_revision() in _db(["current"], url).stdout
    assert json.loads(_db(["current", "--json"], url).stdout) == {"revision": head_revision(), "head": head_revision()}
    assert json.loads(_db(["check", "--json"], url).stdout)["current"] is True

    other = _db(["check"], url, dimensions=1536)
    assert other.exit_code == ExitCode.FAILED
    assert "384" in other.stderr
    assert "1536" in other.stderr


def test_db_index_agents_builds_the_large_agents_indexes_once(services: TestServices) -> None:
    url = services.new_database("arandu_cli_index")
    assert _db(["upgrade"], url, dimensions=8).exit_code == 0
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for agent, facts in (("big-one", 40), ("small-one", 5)):
                connection.execute(
                    text(
                        "INSERT INTO memory_facts (agent_id, entity_type, entity_key, fact_text, confidence, "
                        "valid_from, embedding_vec) SELECT :agent, 'concept', 'concept:item', 'item ' || g, 0.9, "
                        "now(), CAST(array_fill(g::float4, ARRAY[8]) AS vector) FROM generate_series(1, :n) AS g"
                    ),
                    {"agent": agent, "n": facts},
                )

        first = _db(["index-agents", "--min-facts", "20"], url, dimensions=8)
        assert first.exit_code == 0, first.output
        assert "1 agents with at least 20 facts" in first.stdout
        assert "[1] big-one (40 facts): built (vector and keyword)" in first.stdout
        with engine.connect() as connection:
            predicates = connection.execute(
                text(
                    "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
                    "WHERE i.indrelid = 'memory_facts'::regclass AND i.indisvalid "
                    "AND pg_get_expr(i.indpred, i.indrelid) LIKE '(agent_id%'"
                )
            ).scalars()
            assert sorted(predicates) == ["(agent_id = 'big-one'::text)"] * 2

        again = json.loads(_db(["index-agents", "--min-facts", "20", "--json"], url, dimensions=8).stdout)
        assert again == {"min_facts": 20, "agents": []}
        off = _db(["index-agents"], url, dimensions=8, ARANDU_RETRIEVAL_AGENT_INDEX_MIN_FACTS="0")
        assert off.exit_code == ExitCode.FAILED
        assert "--min-facts" in off.stderr
    finally:
        engine.dispose()
