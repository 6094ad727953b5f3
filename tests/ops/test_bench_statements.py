"""Benchmarks print the server's top statements by total time (pg_stat_statements, preloaded by the embedded server)."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ops.bench.common import StatementStats, libpq_url, statements_block
from tests.support.services import TestServices


def test_the_top_statements_of_a_stretch_name_each_statement_and_its_database(services: TestServices) -> None:
    url = services.new_database()
    stats = StatementStats(url)
    assert stats.reset()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for _ in range(5):
            conn.execute("SELECT count(*) FROM generate_series(1, 20000) AS marker_for_the_top_statements")
    top = stats.top(limit=50)
    database = conninfo_to_dict(libpq_url(url))["dbname"]
    (line,) = [line for line in top if "marker_for_the_top_statements" in line]
    assert f"[{database}]" in line
    assert " 5 calls" in line
    assert "statements by total execution time" in statements_block(top)
    # A reset starts the count afresh.
    assert stats.reset()
    assert not [line for line in stats.top(limit=50) if "marker_for_the_top_statements" in line]
