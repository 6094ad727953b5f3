"""Relevant conversations: the past messages (events) that answer the query, scored like facts.

Facts are what the write pipeline understood of a message; the message itself is the evidence,
with the context a one-line fact loses (who answered whom, what else was said). Retrieval shows
the best of them under "Relevant conversations". Three signals find them:

* **semantic**: cosine similarity between the query and the message's embedding;
* **keyword**: every significant word of the query (:attr:`RetrievalPlan.words
  <memory_core.read.planner.RetrievalPlan.words>`, up to 32) against the speaker and text of
  each message, matched by stem in English and Portuguese with accents folded
  (:mod:`memory_core.db.text_search`: "researching" finds "research", "adoção" finds "adocao";
  stop words are left out), weighted by inverse document frequency over the messages searched
  with the BM25 idf ``ln(1 + (N - n + 0.5) / (n + 0.5))``:
  ``keyword = sum of the matched words' idf / max(best message's sum, 0.3 x sum of every word's idf)``.
  A word most messages contain (the name of the person the agent talks to, who speaks half of
  them) weighs almost nothing; a rare one ("LGBTQ", "Vertix") carries the match. Scaling to the
  best message (rather than to every word of the question, most of which no message says) makes
  the best lexical match a strong signal; the floor keeps a match on common words alone weak.
  This is the part of BM25 that matters for short messages (a word rarely occurs twice in one,
  so term-frequency saturation and length normalisation change little, and measured worse), and
  it is what dense retrieval misses most: rare names and words the embedding model has no good
  vector for. The speaker is searched because questions name who said something and a message
  rarely names its own speaker;
* **support**: the relevance of the best candidate fact extracted from the message (a fact that
  answers the query is evidence that the message it came from does too).

**Time anchor**: when the query names a calendar date ("in June", "on 13 October 2023", "in
2022"; :func:`memory_core.read.planner.time_anchor`), a message said on another date (in the
configured ``timezone``) keeps :data:`OUTSIDE_ANCHOR_FACTOR` of its relevance.

An event's score is the fact formula of :mod:`memory_core.read.rank` with the same weights:
``w_sem x relevance + w_rec x recency + w_imp x importance``, ``relevance`` the probabilistic OR
of the three signals (keyword at :data:`EVENT_KEYWORD_BLEND`), ``importance`` the message's own
(0.5 unless a job raised it). Facts and events are therefore on one scale, and a caller can merge
the two lists by ``score``. An event is a candidate only when its relevance reaches
``min_similarity``: the bar a semantic fact candidate must clear, so recency alone never brings
an unrelated message in.

The search covers the ``event_max_scan`` latest messages of the agent (or of the session, or up
to the end of the ``as_of`` window) exactly, in one statement: no HNSW, so no filtered-ANN
problem, and a bounded cost whatever the agent's history. "Latest" is in listing order,
``occurred_at`` then arrival order (``seq``; NULL for rows older than migration 0005).

**Reply context** (``event_reply_context``, on by default): the answer to a question is often
in the turn that *replies to* the one the query matches ("what did you research?" - "adoption
agencies"). So each chosen message brings the next message of its session (next in
``occurred_at, seq`` order, inside the ``as_of`` window) when another speaker said it and it is
not chosen already, and was said at most ``event_reply_max_gap_s`` (6 h) later. The same statement
finds it, one LATERAL index lookup per candidate on
``ix_memory_events_agent_session_order``. A reply scores a share of its parent's score
(:func:`reply_factor`: 0.99 when the parent asks a question, whose reply is likely its answer;
0.85 after a statement, whose reply is more often a reaction), or its own score when it was a
candidate with a better one, and competes for the
``topk_events`` places with the other messages: the reply of a strong match displaces the weakest
matches, the reply of a weak one is what gets cut. Replies are listed right after their parent,
with ``reply_to`` set to the parent's id. When the message after a pre-0005 row shares its
``occurred_at`` and has no ``seq`` either, their order is unknown and no reply is added.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from memory_core.config import MemoryConfig
from memory_core.db.driver_reads import fetch_all
from memory_core.db.text_search import event_search_vector_sql, word_is_searchable_sql, word_query_sql
from memory_core.db.vectors import vector_param
from memory_core.read.entities import TimeWindow
from memory_core.read.planner import TimeAnchor
from memory_core.read.rank import RankedFact, recency_score, relevance
from memory_core.read.schemas import RetrievedEvent

__all__ = [
    "EVENT_CANDIDATE_FACTOR",
    "EVENT_KEYWORD_BLEND",
    "EVENT_KEYWORD_FLOOR",
    "OUTSIDE_ANCHOR_FACTOR",
    "REPLY_TO_QUESTION_FACTOR",
    "REPLY_TO_STATEMENT_FACTOR",
    "fact_support",
    "relevant_conversations",
    "reply_factor",
]

# Weight of the keyword signal inside an event's relevance (the facts' is rank.KEYWORD_BLEND, 0.5).
# The event signal is the stronger one: every word of the query, matched by stem, scaled so the
# best-matching message scores 1. On the LoCoMo sample, events ranked by this signal and the
# embedding alone (MiniLM): 0.5 -> recall@10 69.6, 0.7 -> 70.3, 0.85 -> 70.1, 1.0 -> 69.7.
EVENT_KEYWORD_BLEND = 0.7
# The keyword score is the matched words' idf over the best message's, but never over less than
# this share of every query word's idf: when the best match is only a word most messages hold
# (the speaker's name), it does not make them all perfect matches. On the LoCoMo sample
# (MiniLM): floor 0 -> recall@10 71.8, 0.3 -> 71.7, 0.5 -> 71.0.
EVENT_KEYWORD_FLOOR = 0.3
# When the query names a calendar date ("in June", "on 13 October 2023"), a message said on
# another date keeps this share of its relevance (memory_core.read.planner.time_anchor). On the
# LoCoMo sample (MiniLM; 116 of 999 questions name a month or a year): 1.0 -> recall@10 71.7,
# 0.75 -> 72.7, 0.5 -> 72.8; 0.75 keeps a strong match said on another day within reach.
OUTSIDE_ANCHOR_FACTOR = 0.75
# Candidates fetched per event returned (ties and the recency part can reorder them in Python).
EVENT_CANDIDATE_FACTOR = 3
# A reply's score as a share of its parent's: below it, so it never outranks the message that made
# it relevant. The reply to a question is most likely its answer: just below (it displaces only
# clearly weaker matches). The reply to a statement is more often a reaction ("that's great!"): it
# displaces matches only more than 15% weaker. On the LoCoMo sample (MiniLM), one factor of 0.95
# for every reply gave recall@5/10/25 58.2/66.2/73.9; these two 59.6/67.3/75.4.
REPLY_TO_QUESTION_FACTOR = 0.99
REPLY_TO_STATEMENT_FACTOR = 0.85

# ``doc``: the message's search document, stored when it was written (migration 0014), or built
# here for a message older than that migration. ``words``: each query word as a tsquery of its
# stems; a word a configuration drops as a stop word, or with the stems of an earlier one, is left out.
# ``similarity`` is computed once per message, in ``recent`` (materialised), after its LIMIT: most
# messages' embeddings are stored out of line (TOAST; a row is over 2 kB with it), and the later
# expressions that use it, inlined, fetched it several times per message (docs/performance.md,
# "CPU per retrieve").
_CONVERSATIONS_SQL = """
WITH recent AS (
    SELECT l.id, l.text, l.speaker, l.session_id, l.occurred_at, l.seq, l.message_id, l.importance, l.doc,
           GREATEST(0.0, 1 - (l.embedding_vec <=> CAST(:vec AS vector))) AS similarity
    FROM (
        SELECT e.id, e.text, e.speaker, e.session_id, e.occurred_at, e.seq, e.message_id, e.importance,
               e.embedding_vec, COALESCE(e.search_vector, {document}) AS doc
        FROM memory_events e
        WHERE e.agent_id = :agent AND e.embedding_vec IS NOT NULL {session} {window}
        ORDER BY e.occurred_at DESC, e.seq DESC NULLS LAST, e.id DESC
        LIMIT :scan
    ) l
),
words AS (
    SELECT DISTINCT ON (CAST(q AS text)) q, ord
    FROM unnest(CAST(:words AS text[])) WITH ORDINALITY AS w(word, ord), LATERAL (SELECT {word_query} AS q) s
    WHERE {searchable}
    ORDER BY CAST(q AS text), ord
),
hits AS (
    SELECT r.id, w.ord FROM recent r JOIN words w ON r.doc @@ w.q
),
idf AS (
    SELECT w.ord,
           ln(1.0 + ((SELECT count(*) FROM recent) - count(h.id) + 0.5) / (count(h.id) + 0.5)) AS weight
    FROM words w LEFT JOIN hits h ON h.ord = w.ord
    GROUP BY w.ord
),
matched AS (
    SELECT h.id, sum(i.weight) AS weight FROM hits h JOIN idf i ON i.ord = h.ord GROUP BY h.id
),
kw AS (
    SELECT id, weight / NULLIF(GREATEST(max(weight) OVER (), :keyword_floor * (SELECT sum(weight) FROM idf)), 0)
           AS keyword
    FROM matched
),
support AS (
    SELECT s.id, max(s.relevance) AS relevance
    FROM unnest(CAST(:support_ids AS uuid[]), CAST(:support_relevance AS float8[])) AS s(id, relevance)
    GROUP BY s.id
),
scored AS (
    SELECT r.id, r.text, r.speaker, r.session_id, r.occurred_at, r.seq, r.message_id, r.importance,
           r.similarity,
           COALESCE(kw.keyword, 0.0) AS keyword, COALESCE(su.relevance, 0.0) AS supported,
           {in_anchor} AS in_anchor
    FROM recent r LEFT JOIN kw ON kw.id = r.id LEFT JOIN support su ON su.id = r.id
),
anchored AS (
    SELECT *, CASE WHEN in_anchor THEN 1.0 ELSE :outside_anchor END AS anchor_factor FROM scored
),
related AS (
    SELECT *, (1 - (1 - LEAST(similarity, 1.0)) * (1 - :keyword_blend * keyword) * (1 - LEAST(supported, 1.0)))
              * anchor_factor AS relevance,
           (1 - (1 - LEAST(similarity, 1.0)) * (1 - :keyword_blend * keyword)) * anchor_factor AS own_relevance
    FROM anchored
),
{neighbours}candidates AS (
    SELECT id, text, speaker, session_id, occurred_at, seq, message_id, importance, similarity, keyword,
           supported, relevance, own_relevance
    FROM {ranked_from}
    WHERE relevance >= :min_relevance
    ORDER BY relevance DESC, occurred_at DESC, id
    LIMIT :candidates
)
SELECT c.id, c.text, c.speaker, c.occurred_at, c.message_id, c.importance, c.similarity, c.keyword,
       c.supported, c.relevance, c.own_relevance{reply_columns}
FROM candidates c{reply_join}
ORDER BY c.relevance DESC, c.occurred_at DESC, c.id
"""

# A message's relevance lifted by its neighbours' (the messages just before and after it in its
# session, in listing order): the turn that answers often says "they" or "it" where the turn
# beside it names what the query asks about. ``asked``: the own relevance of the question the
# message answers (the previous turn, by someone else, with a question mark); it lifts the
# message's own relevance too, so the facts said in the answer rise with it (message_signal).
_NEIGHBOURS_CTE = """
near AS (
    SELECT id, text, speaker, session_id, occurred_at, seq, message_id, importance, similarity, keyword,
           supported, own_relevance AS own_alone, relevance AS alone,
           GREATEST(COALESCE(lag(relevance) OVER turns, 0.0), COALESCE(lead(relevance) OVER turns, 0.0)) AS beside,
           CASE WHEN lag(speaker) OVER turns IS DISTINCT FROM speaker AND strpos(lag(text) OVER turns, '?') > 0
                THEN lag(own_relevance) OVER turns ELSE 0.0 END AS asked
    FROM related
    WINDOW turns AS (PARTITION BY session_id ORDER BY occurred_at, seq NULLS FIRST, id)
),
neighboured AS (
    SELECT *,
           1 - (1 - alone) * (1 - :neighbour_share * beside) * (1 - :question_share * asked) AS relevance,
           1 - (1 - own_alone) * (1 - :question_share * asked) AS own_relevance
    FROM near
),
"""

# The message after each candidate in its session, in listing order (occurred_at, seq NULLS FIRST,
# id: the order of ix_memory_events_agent_session_order, so LIMIT 1 reads the index from the
# candidate's position). A row with the same occurred_at comes after the candidate when its seq is
# larger, or when the candidate has none (pre-0005) and it has one; a row without seq tied with a
# seq-less candidate is returned too, but flagged: their order is unknown, so it is no reply.
_REPLY_COLUMNS = """,
       nx.id AS reply_id, nx.text AS reply_text, nx.speaker AS reply_speaker, nx.occurred_at AS reply_occurred_at,
       nx.message_id AS reply_message_id, (nx.occurred_at > c.occurred_at OR nx.seq IS NOT NULL) AS reply_ordered"""
_REPLY_JOIN = """
LEFT JOIN LATERAL (
    SELECT n.id, n.text, n.speaker, n.occurred_at, n.seq, n.message_id
    FROM memory_events n
    WHERE n.agent_id = :agent AND n.session_id = c.session_id AND n.occurred_at >= c.occurred_at
      AND (n.occurred_at > c.occurred_at OR (n.id <> c.id AND (c.seq IS NULL OR n.seq > c.seq))) {reply_window}
    ORDER BY n.occurred_at, n.seq NULLS FIRST, n.id
    LIMIT 1
) nx ON true"""


def relevant_conversations(
    session: Session,
    agent_id: str,
    query_vector: Sequence[float],
    words: Sequence[str],
    config: MemoryConfig,
    *,
    now: datetime,
    session_id: str | None = None,
    window: TimeWindow | None = None,
    support: Mapping[str, float] | None = None,
    message_relevance: dict[str, float] | None = None,
    anchor: TimeAnchor | None = None,
) -> list[RetrievedEvent]:
    """The ``topk_events`` past messages that best answer the query, best first, scored like facts.

    ``support`` maps event ids to the relevance of the best candidate fact extracted from them:
    a fact that answers the query is evidence that the message it came from does too, so the
    message's relevance is the probabilistic OR of its own and its facts'. ``message_relevance``,
    when given, receives every candidate message's own relevance (without that support) by id.
    """
    if config.topk_events <= 0 or config.event_max_scan <= 0:
        return []
    params: dict[str, Any] = {
        "agent": agent_id,
        "vec": vector_param(query_vector),
        "scan": config.event_max_scan,
        "words": list(words),
        "keyword_blend": EVENT_KEYWORD_BLEND,
        "keyword_floor": EVENT_KEYWORD_FLOOR,
        "outside_anchor": OUTSIDE_ANCHOR_FACTOR,
        "min_relevance": config.min_similarity,
        "candidates": config.topk_events * EVENT_CANDIDATE_FACTOR,
        "support_ids": list((support or {}).keys()),
        "support_relevance": [float(value) for value in (support or {}).values()],
        "neighbour_share": config.event_neighbour_share,
        "question_share": config.event_question_share,
    }
    session_sql = ""
    if session_id is not None:
        session_sql = "AND e.session_id = :session_id"
        params["session_id"] = session_id
    window_sql = reply_window_sql = ""
    if window is not None:
        window_sql = "AND e.occurred_at <= :as_of_end"
        reply_window_sql = "AND n.occurred_at <= :as_of_end"
        params["as_of_end"] = window.end
    replies = config.event_reply_context
    lifted = config.event_neighbour_share > 0 or config.event_question_share > 0
    sql = _CONVERSATIONS_SQL.format(
        document=event_search_vector_sql("e.speaker", "e.text"),
        word_query=word_query_sql("w.word"),
        searchable=word_is_searchable_sql("w.word"),
        in_anchor=_anchor_sql(anchor, config.timezone, params),
        session=session_sql,
        window=window_sql,
        reply_columns=_REPLY_COLUMNS if replies else "",
        reply_join=_REPLY_JOIN.format(reply_window=reply_window_sql) if replies else "",
        neighbours=_NEIGHBOURS_CTE.lstrip() if lifted else "",
        ranked_from="neighboured" if lifted else "related",
    )
    rows = fetch_all(session, sql, params)
    if message_relevance is not None:
        # Each candidate message's own relevance (its facts' support left out): the message
        # signal of the facts said in it (memory_core.read.message_signal).
        message_relevance.update((str(row.id), float(row.own_relevance)) for row in rows)
    half_life = float(config.recency_half_life_days)
    weights = config.score_weights
    scored: list[tuple[float, Any]] = []
    for row in rows:
        if not str(row.text).strip():
            continue
        # The fact formula, with the relevance computed above (the OR of similarity, keyword and support).
        importance = float(row.importance if row.importance is not None else 0.5)
        score = min(
            1.0,
            weights["semantic"] * min(1.0, float(row.relevance))
            + weights["recency"] * recency_score(row.occurred_at, now, half_life)
            + weights["importance"] * min(1.0, max(0.0, importance)),
        )
        scored.append((score, row))
    scored.sort(key=lambda item: (-item[0], -item[1].occurred_at.timestamp(), str(item[1].id)))
    chosen = scored[: config.topk_events]
    limit = config.context_event_max_chars
    if not replies:
        return [_event(row.id, row, score, limit) for score, row in chosen]
    own_scores = {str(row.id): score for score, row in scored}
    return _with_replies(chosen, own_scores, config.topk_events, limit, config.event_reply_max_gap_s)


def _anchor_sql(anchor: TimeAnchor | None, timezone: str, params: dict[str, Any]) -> str:
    """Whether ``r.occurred_at`` falls on the query's calendar date, in the configured zone ("true" without one)."""
    if anchor is None:
        return "true"
    params["anchor_zone"] = timezone
    parts = []
    for field_name, value in (("YEAR", anchor.year), ("MONTH", anchor.month), ("DAY", anchor.day)):
        if value is not None:
            key = f"anchor_{field_name.lower()}"
            params[key] = value
            parts.append(f"EXTRACT({field_name} FROM r.occurred_at AT TIME ZONE :anchor_zone) = :{key}")
    return "(" + " AND ".join(parts) + ")" if parts else "true"


def _event(
    event_id: Any, row: Any, score: float, limit: int, *, prefix: str = "", reply_to: str | None = None
) -> RetrievedEvent:
    """The event of ``row``'s columns named ``prefix + name`` (``reply_`` for the reply's), text cut to ``limit``."""
    body = " ".join(str(getattr(row, f"{prefix}text")).split())
    if limit and len(body) > limit:
        body = body[: max(0, limit - 3)].rstrip() + "..."
    return RetrievedEvent(
        event_id=str(event_id),
        text=body,
        speaker=str(getattr(row, f"{prefix}speaker")),
        occurred_at=getattr(row, f"{prefix}occurred_at"),
        message_id=getattr(row, f"{prefix}message_id"),
        score=round(score, 6),
        reply_to=reply_to,
    )


def reply_factor(parent_text: str) -> float:
    """The share of its parent's score a reply gets: higher after a question (module docstring)."""
    asks = "?" in parent_text or "\u00bf" in parent_text
    return REPLY_TO_QUESTION_FACTOR if asks else REPLY_TO_STATEMENT_FACTOR


def _reply_of(row: Any, max_gap_s: int) -> str | None:
    """The id of the reply ``row`` found, or None when there is none worth showing.

    A reply is another speaker's message (a speaker going on is not an answer to themself), with
    text, in a known order after its parent, said at most ``max_gap_s`` after it: the next message
    of a session can come from another import or another day, and then it answers something else.
    """
    if row.reply_id is None or not row.reply_ordered or not str(row.reply_text or "").strip():
        return None
    if (row.reply_occurred_at - row.occurred_at).total_seconds() > max_gap_s:
        return None
    if str(row.reply_speaker).strip().casefold() == str(row.speaker).strip().casefold():
        return None
    return str(row.reply_id)


def _with_replies(
    chosen: Sequence[tuple[float, Any]], own_scores: Mapping[str, float], topk: int, limit: int, max_gap_s: int
) -> list[RetrievedEvent]:
    """The chosen events and their replies, best ``topk`` by score, each reply right after its parent.

    A reply scores :func:`reply_factor` x its parent's (or its own score as a candidate, if
    better), so it always ranks below its parent and is never kept without it. A reply chosen on
    its own below its parent is listed as its reply; one chosen above it, or already brought by
    another parent, is not added twice.
    """
    taken = {str(row.id) for _, row in chosen}
    chosen_at = {str(row.id): position for position, (_, row) in enumerate(chosen)}
    # Replies chosen on their own too (an answer lifted by its question, event_question_share),
    # listed under their parent as the reply they are rather than apart from it.
    attached: set[str] = set()
    # (score, order, event): order breaks ties so a parent precedes its reply and earlier parents win.
    ranked: list[tuple[float, int, RetrievedEvent]] = []
    for position, (score, row) in enumerate(chosen):
        if str(row.id) in attached:
            continue
        parent = _event(row.id, row, score, limit)
        ranked.append((score, 2 * position, parent))
        reply_id = _reply_of(row, max_gap_s)
        if reply_id is None:
            continue
        if reply_id in taken:
            if chosen_at.get(reply_id, -1) <= position or reply_id in attached:
                continue  # brought by another parent, or listed before this one
            attached.add(reply_id)
        taken.add(reply_id)
        reply_score = max(score * reply_factor(str(row.text)), min(own_scores.get(reply_id, 0.0), score))
        reply = _event(reply_id, row, reply_score, limit, prefix="reply_", reply_to=parent.event_id)
        ranked.append((reply_score, 2 * position + 1, reply))
    kept = sorted(ranked, key=lambda item: (-item[0], item[1]))[:topk]
    # Listed in the parents' order, each reply right after its parent.
    return [event for _, _, event in sorted(kept, key=lambda item: item[1])]


def fact_support(facts: Iterable[RankedFact]) -> dict[str, float]:
    """Source event id -> relevance of its best fact among ``facts`` (the candidates retrieval ranked)."""
    support: dict[str, float] = {}
    for fact in facts:
        event_id = fact.candidate.source_event_id
        if event_id is None:
            continue
        candidate = fact.candidate
        value = relevance(candidate.semantic, candidate.keyword, candidate.graph)
        if value > support.get(event_id, 0.0):
            support[event_id] = value
    return support
