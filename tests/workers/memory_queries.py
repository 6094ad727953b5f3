"""Read what the pipeline wrote, the way a user inspecting the database would."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text


class MemoryInspector:
    """Queries over one database, always filtered by agent."""

    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url)

    def close(self) -> None:
        """Release connections."""
        self.engine.dispose()

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts."""
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(text(sql), params)]

    def active_facts(self, agent_id: str) -> list[dict[str, Any]]:
        """Active facts, oldest first."""
        return self.rows(
            "SELECT * FROM memory_facts WHERE agent_id = :a AND valid_to IS NULL ORDER BY valid_from, fact_text",
            a=agent_id,
        )

    def all_facts(self, agent_id: str) -> list[dict[str, Any]]:
        """Every fact, history included."""
        return self.rows("SELECT * FROM memory_facts WHERE agent_id = :a ORDER BY valid_from, fact_text", a=agent_id)

    def entities(self, agent_id: str) -> dict[str, dict[str, Any]]:
        """Entities by canonical key."""
        return {
            row["canonical_key"]: row
            for row in self.rows("SELECT * FROM memory_entities WHERE agent_id = :a", a=agent_id)
        }

    def relationships(self, agent_id: str) -> list[dict[str, Any]]:
        """Edges of the graph."""
        return self.rows(
            "SELECT * FROM memory_entity_relationships WHERE agent_id = :a ORDER BY source_entity_key, rel_type",
            a=agent_id,
        )

    def links(self, fact_id: Any) -> dict[str, bool]:
        """Entity key -> is_primary for one fact."""
        return {
            row["entity_key"]: row["is_primary"]
            for row in self.rows(
                "SELECT entity_key, is_primary FROM memory_fact_entity_links WHERE fact_id = :f", f=fact_id
            )
        }

    def aliases(self, agent_id: str) -> dict[str, str]:
        """Alias -> canonical key."""
        return {
            row["alias"]: row["canonical_entity_key"]
            for row in self.rows(
                "SELECT alias, canonical_entity_key FROM memory_entity_aliases WHERE agent_id = :a", a=agent_id
            )
        }

    def snapshot(self, agent_id: str) -> dict[str, Any]:
        """Every memory row of the agent without ids or wall-clock columns, for equality checks."""
        volatile = {"id", "created_at", "ingested_at", "updated_at", "invalidated_at", "profile_refreshed_at"}

        def clean(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
            return sorted(
                tuple((key, str(value)) for key, value in sorted(row.items()) if key not in volatile) for row in rows
            )

        return {
            "facts": clean(self.rows("SELECT * FROM memory_facts WHERE agent_id = :a", a=agent_id)),
            "entities": clean(self.rows("SELECT * FROM memory_entities WHERE agent_id = :a", a=agent_id)),
            "aliases": clean(self.rows("SELECT * FROM memory_entity_aliases WHERE agent_id = :a", a=agent_id)),
            "links": clean(self.rows("SELECT * FROM memory_fact_entity_links WHERE agent_id = :a", a=agent_id)),
            "relationships": clean(
                self.rows("SELECT * FROM memory_entity_relationships WHERE agent_id = :a", a=agent_id)
            ),
            "registry": clean(self.rows("SELECT * FROM memory_attribute_registry WHERE agent_id = :a", a=agent_id)),
            "events": clean(self.rows("SELECT * FROM memory_events WHERE agent_id = :a", a=agent_id)),
        }
