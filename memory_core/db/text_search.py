"""The text-search configurations: facts by word prefix, messages by stem, accents removed either way.

``arandu_search`` is PostgreSQL's ``simple`` configuration (no stemming, no stop words, so
Portuguese and English facts are matched alike) with the contrib ``unaccent`` dictionary in front
of it: "São Paulo" is indexed as ``sao`` and ``paulo``, and a query for "sao" or "São" finds it.
Migration 0013 creates it; ``memory_facts.search_vector`` and every ``to_tsquery`` of the read
path use it, so documents and queries are folded by the same code, in the database.

Messages (relevant conversations) are matched by stem instead: ``arandu_english`` and
``arandu_portuguese`` (migration 0014) are the Snowball stemmers with their stop words, behind
``unaccent`` (Portuguese stop words are dropped before the accents are: "não" and "você" are stop
words, "nao" is not in the list). See :data:`STEMMED_CONFIGS`.
"""

from __future__ import annotations

__all__ = [
    "STEMMED_CONFIGS",
    "TEXT_SEARCH_CONFIG",
    "event_search_vector_sql",
    "fact_search_vector_sql",
    "word_is_searchable_sql",
    "word_query_sql",
]

TEXT_SEARCH_CONFIG = "arandu_search"


def fact_search_vector_sql(column: str = "fact_text") -> str:
    """The generated expression of ``memory_facts.search_vector``."""
    return f"to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, {column})"


# Messages are matched by stem ("researching" finds "research", "pesquisou" finds "pesquisar"),
# in both languages the service extracts: each message's document holds its words as the English
# and as the Portuguese configuration stem them (each with its own stop words removed and accents
# folded first), and a query word matches when either stem of it is there. No language detection
# is needed on either side, and a mixed-language memory is matched alike (migration 0014).
STEMMED_CONFIGS = ("arandu_english", "arandu_portuguese")


def event_search_vector_sql(speaker: str = "speaker", text: str = "text") -> str:
    """The search document of a message: its speaker and text, stemmed in every configuration of ``STEMMED_CONFIGS``."""
    document = f"coalesce({speaker}, '') || ' ' || {text}"
    return " || ".join(f"to_tsvector('{config}'::regconfig, {document})" for config in STEMMED_CONFIGS)


def word_query_sql(word: str) -> str:
    """A tsquery matching any stem of the SQL text expression ``word`` (one word) in ``STEMMED_CONFIGS``."""
    return " || ".join(f"plainto_tsquery('{config}'::regconfig, {word})" for config in STEMMED_CONFIGS)


def word_is_searchable_sql(word: str) -> str:
    """True when no configuration drops the SQL text expression ``word`` as a stop word."""
    return " AND ".join(f"numnode(plainto_tsquery('{config}'::regconfig, {word})) > 0" for config in STEMMED_CONFIGS)
