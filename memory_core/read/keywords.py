"""The keyword signal weighted by how rare each word is (inverse document frequency; ours).

The seeds' keyword signal (R4) scores a fact by the fraction of the query's keywords it
contains. Every keyword counts the same, so in "When did Caroline go to the support group?" a
fact that only names Caroline scores as much as one that only says "support": in a memory where
Caroline is one of two people talking, that lifts half of all facts by the same amount and tells
nothing about which of them answer. Search engines solved this long ago with inverse document
frequency: a word found in most documents carries almost no evidence, a rare one carries much.

Here ``keyword = sum of idf(matched keywords) / sum of idf(all keywords)`` with the BM25 idf
``ln(1 + (N - n + 0.5) / (n + 0.5))``, ``N`` the agent's facts in the searched validity window
and ``n`` those containing the keyword (the fact signal's own prefix match on ``search_vector``,
counted up to :data:`DF_CAP` rows so a very common word costs a bounded index scan). With
keywords that are all equally rare this is exactly the seeds' fraction; a query of one keyword
still scores 1.0 on a match. A fact "contains" a keyword as the keyword signal's SQL decides (its
text, as written or accent-folded, contains the word), so both agree on what matched.
Aggregation matches ("my friends" -> ``person:%``) keep their fixed score.

The same weighting scores relevant conversations (:mod:`memory_core.read.conversations`), so
facts and events keep one scale. ``keyword_idf = false`` restores the plain fraction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

from memory_core.read.conversations import term_queries
from memory_core.read.entities import TimeWindow, fact_validity_sql, window_params
from memory_core.read.planner import fold_words
from memory_core.read.rank import AGGREGATION_KEYWORD_SCORE, Candidate

__all__ = ["DF_CAP", "bm25_idf", "keyword_weights", "matched_keywords", "reweigh_keywords"]

# Document frequencies are counted up to this many facts (beyond it a word is simply "very common").
DF_CAP = 2_000

_DF_SQL = """
SELECT t.ord, (
    SELECT count(*) FROM (
        SELECT 1 FROM memory_facts f
        WHERE f.agent_id = :agent AND {validity} AND f.search_vector @@ to_tsquery('simple', t.q)
        LIMIT :cap
    ) AS hit
) AS df
FROM unnest(CAST(:term_queries AS text[])) WITH ORDINALITY AS t(q, ord)
"""


def bm25_idf(total: int, containing: int) -> float:
    """``ln(1 + (N - n + 0.5) / (n + 0.5))``: near 0 for a word in every document, large for a rare one."""
    total = max(total, containing, 0)
    return math.log(1.0 + (total - containing + 0.5) / (containing + 0.5))


def keyword_weights(
    session: Session,
    agent_id: str,
    keywords: Sequence[str],
    total_facts: int,
    *,
    window: TimeWindow | None = None,
) -> list[float]:
    """The idf of each keyword over the agent's facts (one statement; an index scan per keyword)."""
    queries = term_queries(keywords)
    if len(queries) != len(keywords) or not keywords:
        return [1.0] * len(keywords)
    rows = session.execute(
        text(_DF_SQL.format(validity=fact_validity_sql("f", window))),
        {"agent": agent_id, "term_queries": queries, "cap": DF_CAP, **window_params(window)},
    ).all()
    counts = {int(row.ord): int(row.df) for row in rows}
    return [bm25_idf(total_facts, counts.get(position, 0)) for position in range(1, len(keywords) + 1)]


def matched_keywords(fact_text: str, keywords: Sequence[str]) -> list[bool]:
    """Which keywords ``fact_text`` contains (as written or accent-folded), as the keyword SQL's ILIKE decides."""
    lowered = fact_text.casefold()
    folded = " ".join(fold_words(fact_text))
    matches: list[bool] = []
    for word in keywords:
        plain = word.casefold()
        folded_word = "".join(fold_words(word)) or plain
        matches.append(plain in lowered or folded_word in lowered or folded_word in folded)
    return matches


def reweigh_keywords(
    candidates: Iterable[Candidate],
    keywords: Sequence[str],
    weights: Sequence[float],
    entity_patterns: Sequence[str] = (),
) -> None:
    """Set each candidate's keyword signal to the idf-weighted share of the keywords it contains."""
    total = sum(weights)
    prefixes = [pattern.removesuffix("%") for pattern in entity_patterns]
    for candidate in candidates:
        if not keywords or total <= 0.0:
            continue
        matches = matched_keywords(candidate.fact_text, keywords)
        score = sum(weight for weight, hit in zip(weights, matches, strict=True) if hit) / total
        if prefixes and any(candidate.entity_key.startswith(prefix) for prefix in prefixes):
            score = max(score, AGGREGATION_KEYWORD_SCORE)
        candidate.keyword = min(1.0, score)
        if candidate.keyword > 0.0:
            candidate.sources.add("keyword")
