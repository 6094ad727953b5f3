"""Alembic migrations of the service schema (applied by ``python -m memory_core.db.migrate upgrade``)."""
