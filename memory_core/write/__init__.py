"""The write pipeline: extraction, entity resolution, reconciliation and upsert, as idempotent stages."""
