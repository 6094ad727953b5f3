"""The text-search configuration of the keyword signal: words as written, accents removed.

``arandu_search`` is PostgreSQL's ``simple`` configuration (no stemming, no stop words, so
Portuguese and English facts are matched alike) with the contrib ``unaccent`` dictionary in front
of it: "São Paulo" is indexed as ``sao`` and ``paulo``, and a query for "sao" or "São" finds it.
Migration 0013 creates it; ``memory_facts.search_vector`` and every ``to_tsquery`` of the read
path use it, so documents and queries are folded by the same code, in the database.
"""

from __future__ import annotations

__all__ = ["TEXT_SEARCH_CONFIG", "fact_search_vector_sql"]

TEXT_SEARCH_CONFIG = "arandu_search"


def fact_search_vector_sql(column: str = "fact_text") -> str:
    """The generated expression of ``memory_facts.search_vector``."""
    return f"to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, {column})"
