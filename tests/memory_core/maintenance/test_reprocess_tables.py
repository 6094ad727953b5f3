"""Every table with an agent column is classed for re-processing: replaced (derived) or kept.

A re-process (memory_core.maintenance.reprocess) replaces the derived tables' rows of an agent
and leaves the others alone; a table added later must say which it is, or a re-process would
leave its rows stale (a derived table) or never see them (a kept one).
"""

from __future__ import annotations

from sqlalchemy import create_engine

from memory_core.maintenance.erasure import agent_tables
from memory_core.maintenance.reprocess import DERIVED_TABLES, KEPT_TABLES


def test_every_table_with_an_agent_column_is_derived_or_kept(migrated_database_url: str) -> None:
    engine = create_engine(migrated_database_url)
    try:
        with engine.connect() as connection:
            tables = set(agent_tables(connection))
    finally:
        engine.dispose()
    assert not set(DERIVED_TABLES) & set(KEPT_TABLES)
    unclassed = tables - set(DERIVED_TABLES) - set(KEPT_TABLES)
    assert not unclassed, f"add these tables to DERIVED_TABLES or KEPT_TABLES: {sorted(unclassed)}"
    assert set(DERIVED_TABLES) <= tables, sorted(set(DERIVED_TABLES) - tables)
