"""Alembic environment: online migrations over the connection or URL that migrate.py passes in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from memory_core.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    """Run the migrations on the connection given by the caller, or on a new one from the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set"
    engine = create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, compare_type=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run them against a database")
run_migrations_online()
