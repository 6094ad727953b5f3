"""Stage 1 of retrieval: a deterministic planner (seeds R1; no LLM, same query -> same plan).

The planner reads only the query text. It decides:

* ``skip`` for greetings and small talk ("oi", "bom dia", "hello", "thanks"...): the pipeline
  answers at once, without touching the database or any model;
* aggregation ("my friends", "quem são meus amigos?", "all my pets"): the entity types the query
  asks for, as candidate ``type:%`` patterns. Only the prefixes that exist for the agent survive,
  which needs the database, so :func:`finalize_plan` applies them once the pipeline knows;
* broad requests ("tell me everything", "o que você sabe sobre mim", "resume tudo"): a wider
  graph and candidate budget, and cluster-first context;
* ``similarity_query`` is always the query exactly as given.

It also extracts the keyword signal's terms (:func:`keyword_terms`), the same way every time.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Literal

__all__ = [
    "LEXICAL_MAX_WORDS",
    "PatternQuery",
    "RetrievalPlan",
    "Strategy",
    "TimeAnchor",
    "finalize_plan",
    "fold_words",
    "is_small_talk",
    "keyword_haystack",
    "keyword_haystack_sql",
    "keyword_terms",
    "match_forms",
    "plan_retrieval",
    "time_anchor",
]

Strategy = Literal["multi_signal", "skip"]

_WORD = re.compile(r"[^\W_]+")


def fold_words(text: str) -> list[str]:
    """Lower-cased, accent-free words of ``text`` (letters and digits only: never ``%`` or ``_``)."""
    if text.isascii():
        # NFKD leaves ASCII unchanged and it has no combining marks: skip the per-character pass
        # (ranking folds every candidate's text; most are ASCII).
        return _WORD.findall(text.casefold())
    decomposed = unicodedata.normalize("NFKD", text)
    folded = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    return _WORD.findall(folded)


# Characters that may stand right before a word ("(mora", "'rafael", "pré-natal"): made spaces
# in the text a keyword is looked for in, so the word still starts after a space.
WORD_START_MARKS = "([{\"'\u201c\u2018-/\u00bf\u00a1"
_WORD_START_TABLE = str.maketrans(dict.fromkeys(WORD_START_MARKS, " "))


def keyword_haystack(text: str) -> str:
    """``text`` as keywords are looked for in it: lower-cased, after a space, word-start marks made spaces.

    The SQL builds the same string (:func:`keyword_haystack_sql`).
    """
    return " " + text.lower().translate(_WORD_START_TABLE)


@lru_cache(maxsize=16)
def keyword_haystack_sql(expression: str) -> str:
    """The SQL of :func:`keyword_haystack` applied to ``expression``.

    One ``replace`` per mark rather than one ``translate``: in a UTF-8 database ``translate``
    walks the text character by character against every mark (the marks include multi-byte
    ones), ~4 us for a fact's 55 characters against ~1 us for the eleven replaces. The keyword
    scoring computes this for every fact holding a searched word: a large agent's common word
    matches a thousand (measured at 100,000 facts: the keyword statement 21.1 -> 18.4 ms, the
    relevant-conversations statement 3.2 -> 2.3 ms, same rows).
    """
    haystack = f"lower({expression})"
    for mark in WORD_START_MARKS:
        quoted = mark.replace("'", "''")
        haystack = f"replace({haystack}, '{quoted}', ' ')"
    return f"(' ' || {haystack})"


def match_forms(word: str) -> tuple[str, str]:
    """``word`` lower-cased, as written and accent-folded, each after a space: what keyword matches look for.

    The fact keyword signal counts a keyword as found in a candidate when either form occurs in
    the text's :func:`keyword_haystack` (``strpos``, so ``%`` and ``_`` are plain characters): at
    the start of a word, so "mora" finds "mora" and "moradia" but not "namorada", as the
    full-text pool's prefix query ("mora:*") selects them. (Relevant conversations match by
    stem in the database instead: :mod:`memory_core.db.text_search`.)
    """
    plain = word.lower()
    return " " + plain, " " + ("".join(fold_words(word)) or plain)


# --- small talk --------------------------------------------------------------------------

# Phrases that carry no request for memory, folded. A query made only of these (plus the filler
# words below) is small talk. Matching whole phrases, not substrings, keeps "hi" from matching
# "hiking" and "oi" from matching "oito".
_SMALL_TALK_PHRASES: tuple[str, ...] = (
    # Portuguese greetings, thanks and goodbyes
    "oi",
    "oie",
    "oii",
    "ola",
    "opa",
    "salve",
    "eae",
    "eai",
    "e ai",
    "fala ai",
    "bom dia",
    "boa tarde",
    "boa noite",
    "tudo bem",
    "tudo bom",
    "tudo certo",
    "tudo tranquilo",
    "como vai",
    "como voce esta",
    "como vc esta",
    "como vc ta",
    "como voce ta",
    "obrigado",
    "obrigada",
    "muito obrigado",
    "muito obrigada",
    "obg",
    "brigado",
    "brigada",
    "valeu",
    "vlw",
    "tchau",
    "ate mais",
    "ate logo",
    "ate amanha",
    "prazer",
    "beleza",
    "blz",
    "certo",
    "legal",
    "show",
    "massa",
    "sim",
    "nao",
    "kkk",
    "kkkk",
    "kkkkk",
    "rs",
    "rsrs",
    # English greetings, thanks and goodbyes
    "hi",
    "hii",
    "hello",
    "hey",
    "heya",
    "hiya",
    "howdy",
    "yo",
    "good morning",
    "good afternoon",
    "good evening",
    "good night",
    "how are you",
    "how are you doing",
    "how is it going",
    "how s it going",
    "what s up",
    "whats up",
    "sup",
    "thanks",
    "thank you",
    "thanks a lot",
    "thank you very much",
    "thx",
    "ty",
    "cheers",
    "bye",
    "goodbye",
    "see you",
    "see ya",
    "nice to meet you",
    "ok",
    "okay",
    "okey",
    "cool",
    "nice",
    "great",
    "awesome",
    "sure",
    "yes",
    "yeah",
    "yep",
    "no",
    "nope",
    "lol",
    "haha",
    "hahaha",
    "hmm",
    "hm",
    "ah",
    "oh",
)

# Words that may accompany small talk without turning it into a question ("hi there", "oi gente").
_SMALL_TALK_FILLERS = frozenset(
    {"there", "all", "everyone", "guys", "again", "too", "you", "so", "much", "very", "and", "a", "lot", "today"}
    | {
        "pessoal",
        "gente",
        "voce",
        "vc",
        "tambem",
        "tb",
        "e",
        "ai",
        "de",
        "novo",
        "muito",
        "pra",
        "para",
        "todos",
        "hoje",
    }
)

_PHRASES_BY_LENGTH: tuple[tuple[str, ...], ...] = tuple(
    sorted({tuple(phrase.split()) for phrase in _SMALL_TALK_PHRASES}, key=len, reverse=True)
)

# Longer messages are never treated as small talk, whatever words they use.
_SMALL_TALK_MAX_WORDS = 10


def is_small_talk(query: str) -> bool:
    """True when every word of ``query`` belongs to a greeting / thanks / small-talk phrase."""
    words = fold_words(query)
    if not words or len(words) > _SMALL_TALK_MAX_WORDS:
        return not words
    position = 0
    saw_phrase = False
    while position < len(words):
        for phrase in _PHRASES_BY_LENGTH:
            if tuple(words[position : position + len(phrase)]) == phrase:
                position += len(phrase)
                saw_phrase = True
                break
        else:
            if words[position] not in _SMALL_TALK_FILLERS:
                return False
            position += 1
    return saw_phrase


# --- broad requests ----------------------------------------------------------------------

_BROAD_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(pattern)
    for pattern in (
        r"\btell me everything\b",
        r"\beverything (?:you know|about)\b",
        r"\ball (?:that )?you know\b",
        r"\bwhat (?:do|else do) you know\b",
        r"\btell me (?:all )?about (?:me|myself)\b",
        r"\bsummari[sz]e (?:everything|all)\b",
        r"\bsummary of everything\b",
        r"\bme (?:conta|conte|fala|fale|diga|diz) tudo\b",
        r"\bconte-?me tudo\b",
        r"\bo que (?:mais )?(?:voce|vc) sabe\b",
        r"\btudo (?:o )?que (?:voce|vc) sabe\b",
        r"\bresum(?:e|a|ir|o de) tudo\b",
        r"\btudo sobre\b",
        r"\bme (?:fala|fale|conta|conte) sobre mim\b",
    )
)


def _is_broad(folded_query: str) -> bool:
    return any(pattern.search(folded_query) for pattern in _BROAD_PATTERNS)


# --- aggregation -------------------------------------------------------------------------

# Plural nouns that ask for a whole category, and the entity types (key prefixes) that hold it.
# Types are free strings written by extraction; each category lists the usual spellings.
_AGGREGATION_NOUNS: dict[str, tuple[str, ...]] = {}


def _category(types: tuple[str, ...], *nouns: str) -> None:
    for noun in nouns:
        _AGGREGATION_NOUNS[noun] = types


_category(
    ("person",),
    "friends",
    "amigos",
    "amigas",
    "family",
    "familia",
    "familiares",
    "parentes",
    "relatives",
    "people",
    "pessoas",
    "colleagues",
    "coworkers",
    "colegas",
    "contacts",
    "contatos",
    "siblings",
    "irmaos",
    "irmas",
    "brothers",
    "sisters",
    "children",
    "kids",
    "filhos",
    "filhas",
    "cousins",
    "primos",
    "primas",
)
_category(("pet", "animal"), "pets", "animals", "animais", "dogs", "cats", "cachorros", "caes", "gatos", "bichos")
_category(
    ("place", "city", "country", "location"),
    "places",
    "lugares",
    "cities",
    "cidades",
    "countries",
    "paises",
    "locais",
    "locations",
)
_category(
    ("organization", "company"),
    "companies",
    "empresas",
    "organizations",
    "organizacoes",
    "employers",
    "clients",
    "clientes",
)
_category(("project",), "projects", "projetos")
_category(("product",), "products", "produtos", "tools", "ferramentas", "apps", "aplicativos")
_category(("event",), "events", "eventos", "meetings", "reunioes", "appointments", "compromissos")

# A category noun asks for the whole category only after one of these (within two words):
# "my friends", "all my pets", "quem são meus amigos", "quais empresas". "Her friends" does not.
_AGGREGATION_MARKERS = frozenset(
    {"my", "our", "all", "every", "which", "what", "list", "many"}
    | {"meus", "minhas", "meu", "minha", "nossos", "nossas", "todos", "todas", "quais", "quantos", "quantas"}
)


def _aggregation_prefixes(words: Sequence[str]) -> list[str]:
    prefixes: list[str] = []
    for index, word in enumerate(words):
        types = _AGGREGATION_NOUNS.get(word)
        if types is None:
            continue
        if any(marker in _AGGREGATION_MARKERS for marker in words[max(0, index - 2) : index]):
            prefixes.extend(t for t in types if t not in prefixes)
    return prefixes


# --- keywords ----------------------------------------------------------------------------

# Words that never identify a fact: question words and the commonest function words of both
# languages. Removing them is what makes "Onde o Marcos Tavares mora?" search "marcos" and
# "tavares" (seeds: "Keyword: marcos + tavares").
_KEYWORD_STOP_WORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "was",
        "were",
        "been",
        "being",
        "has",
        "have",
        "had",
        "does",
        "did",
        "doing",
        "with",
        "from",
        "into",
        "onto",
        "about",
        "over",
        "under",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "how",
        "when",
        "where",
        "why",
        "all",
        "any",
        "some",
        "each",
        "not",
        "nor",
        "only",
        "own",
        "same",
        "than",
        "then",
        "too",
        "very",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "you",
        "your",
        "yours",
        "our",
        "ours",
        "their",
        "theirs",
        "his",
        "her",
        "hers",
        "its",
        "they",
        "them",
        "she",
        "him",
        "myself",
        "yourself",
        "tell",
        "know",
        "me",
        "my",
        "mine",
        "please",
        "que",
        "quem",
        "qual",
        "quais",
        "onde",
        "como",
        "quando",
        "porque",
        "por",
        "pra",
        "para",
        "com",
        "sem",
        "uma",
        "umas",
        "uns",
        "dos",
        "das",
        "nos",
        "nas",
        "num",
        "numa",
        "pelo",
        "pela",
        "pelos",
        "pelas",
        "meu",
        "minha",
        "meus",
        "minhas",
        "seu",
        "sua",
        "seus",
        "suas",
        "nosso",
        "nossa",
        "ele",
        "ela",
        "eles",
        "elas",
        "voce",
        "voces",
        "isso",
        "isto",
        "esse",
        "essa",
        "este",
        "esta",
        "aquele",
        "aquela",
        "aquilo",
        "sao",
        "foi",
        "era",
        "ser",
        "estar",
        "estou",
        "esta",
        "estava",
        "tem",
        "ter",
        "tinha",
        "ja",
        "mais",
        "menos",
        "tambem",
        "entre",
        "sobre",
        "ate",
        "fale",
        "fala",
        "conte",
        "conta",
        "diga",
        "diz",
        "sabe",
        "sei",
    ]
)


# Words of a query matched against the messages (a 4 KiB query has hundreds; the first ones carry it).
LEXICAL_MAX_WORDS = 32


def keyword_terms(query: str, *, min_chars: int = 3, max_terms: int = 5) -> list[str]:
    """The query's significant words for the keyword signal: > 2 chars, not stop words, first 5, distinct.

    Words are lower-cased letters and digits with their accents ("série"), so they match facts
    written with accents; the signal also tries their folded form ("serie"). They never contain
    SQL wildcard characters.
    """
    terms: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFC", query).casefold()):
        folded = fold_words(word)
        if len(word) < min_chars or (folded and folded[0] in _KEYWORD_STOP_WORDS) or word in terms:
            continue
        terms.append(word)
        if len(terms) >= max_terms:
            break
    return terms


# --- time anchors ------------------------------------------------------------------------

# (English, Portuguese without accents, abbreviations) of each month, January first.
_MONTH_NAMES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("january", "janeiro", ("jan",)),
    ("february", "fevereiro", ("feb", "fev")),
    ("march", "marco", ("mar",)),
    ("april", "abril", ("apr", "abr")),
    ("may", "maio", ("mai",)),
    ("june", "junho", ("jun",)),
    ("july", "julho", ("jul",)),
    ("august", "agosto", ("aug", "ago")),
    ("september", "setembro", ("sep", "sept", "set")),
    ("october", "outubro", ("oct", "out")),
    ("november", "novembro", ("nov",)),
    ("december", "dezembro", ("dec", "dez")),
)
_MONTHS: dict[str, int] = {
    name: number
    for number, (english, portuguese, short) in enumerate(_MONTH_NAMES, start=1)
    for name in (english, portuguese, *short)
}
# Abbreviations, "may" and "march" are also common words ("mar", "set", "out", "may"): they count
# as a month only next to a day or a year ("May 8", "8 de mar 2023") or after "in" ("in May").
_AMBIGUOUS_MONTHS = frozenset({"may", "march"}).union(*(short for _, _, short in _MONTH_NAMES))
# "in May", "early May", "em maio": the words that make a lone "may" (or abbreviation) a month.
_MONTH_LEADS = frozenset({"in", "of", "early", "late", "mid", "since", "until", "em", "desde", "ate"})


@dataclass(frozen=True, slots=True)
class TimeAnchor:
    """A calendar date the query names ("in June", "on 13 October 2023", "in 2022"): any part may be missing."""

    year: int | None = None
    month: int | None = None
    day: int | None = None

    def summary(self) -> dict[str, int | None]:
        """JSON-friendly form for the trace."""
        return {"year": self.year, "month": self.month, "day": self.day}


def _year(word: str) -> int | None:
    if len(word) == 4 and word.isdigit() and word[:2] in {"19", "20"}:
        return int(word)
    return None


def _day(word: str) -> int | None:
    digits = word.removesuffix("st").removesuffix("nd").removesuffix("rd").removesuffix("th")
    if digits.isdigit() and 1 <= int(digits) <= 31 and len(digits) <= 2:
        return int(digits)
    return None


def time_anchor(query: str) -> TimeAnchor | None:
    """The first calendar date ``query`` names, in English or Portuguese; None when it names none.

    A month name, with a day before or after it ("13 October", "October 13th", "13 de outubro")
    and a year after it ("October 13, 2023", "junho de 2023"), or a year alone ("in 2022"). Relative
    expressions ("last week") are not anchors: they depend on when the question is asked.
    """
    words = fold_words(query)
    for index, word in enumerate(words):
        month = _MONTHS.get(word)
        if month is not None:
            before = words[index - 1] if index > 0 else ""
            if before == "de" and index > 1:  # "13 de outubro"
                before = words[index - 2]
            after = words[index + 1 : index + 4]
            day = _day(before) or (_day(after[0]) if after else None)
            year = next((value for value in map(_year, after) if value is not None), None)
            alone = day is None and year is None
            if alone and word in _AMBIGUOUS_MONTHS and before not in _MONTH_LEADS:
                continue
            return TimeAnchor(year=year, month=month, day=day)
    for word in words:
        year = _year(word)
        if year is not None:
            return TimeAnchor(year=year)
    return None


# --- the plan ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PatternQuery:
    """An aggregation pattern for the keyword signal: facts whose entity_key is LIKE ``entity_pattern``."""

    entity_pattern: str
    attribute_filter: str | None = None


@dataclass(frozen=True, slots=True)
class RetrievalPlan:
    """What to search for, decided from the query text alone (plus which key prefixes exist)."""

    strategy: Strategy = "multi_signal"
    similarity_query: str | None = None
    pattern_queries: tuple[PatternQuery, ...] = ()
    candidate_prefixes: tuple[str, ...] = ()
    broad_query: bool = False
    reason: str = "deterministic"
    max_facts: int = 50
    entities: tuple[str, ...] = ()
    as_of_range: tuple[datetime, datetime] | None = None
    latency_ms: float = 0.0
    keywords: tuple[str, ...] = field(default_factory=tuple)
    # Every significant word of the query (up to LEXICAL_MAX_WORDS): relevant conversations match
    # them by stem (memory_core.read.conversations).
    words: tuple[str, ...] = field(default_factory=tuple)
    # The calendar date the query names, if any: messages said then rank above the others.
    anchor: TimeAnchor | None = None

    def summary(self) -> dict[str, object]:
        """JSON-friendly form for the trace."""
        return {
            "strategy": self.strategy,
            "reason": self.reason,
            "similarity_query": self.similarity_query,
            "pattern_queries": [p.entity_pattern for p in self.pattern_queries],
            "candidate_prefixes": list(self.candidate_prefixes),
            "broad_query": self.broad_query,
            "keywords": list(self.keywords),
            "words": list(self.words),
            "anchor": self.anchor.summary() if self.anchor is not None else None,
            "max_facts": self.max_facts,
            "latency_ms": round(self.latency_ms, 3),
        }


def plan_retrieval(
    query_text: str,
    *,
    max_facts: int = 50,
    keyword_min_chars: int = 3,
    keyword_max_terms: int = 5,
) -> RetrievalPlan:
    """The deterministic plan of ``query_text`` (aggregation prefixes still unchecked: see :func:`finalize_plan`)."""
    started = time.perf_counter()
    if is_small_talk(query_text):
        return RetrievalPlan(
            strategy="skip",
            similarity_query=query_text,
            reason="greeting" if fold_words(query_text) else "empty",
            max_facts=max_facts,
            latency_ms=(time.perf_counter() - started) * 1000.0,
        )
    words = fold_words(query_text)
    folded = " ".join(words)
    broad = _is_broad(folded)
    prefixes = _aggregation_prefixes(words)
    reason = "broad" if broad else "deterministic"
    return RetrievalPlan(
        strategy="multi_signal",
        similarity_query=query_text,
        candidate_prefixes=tuple(prefixes),
        broad_query=broad,
        reason=reason,
        max_facts=max_facts,
        keywords=tuple(keyword_terms(query_text, min_chars=keyword_min_chars, max_terms=keyword_max_terms)),
        words=tuple(keyword_terms(query_text, min_chars=2, max_terms=LEXICAL_MAX_WORDS)),
        anchor=time_anchor(query_text),
        latency_ms=(time.perf_counter() - started) * 1000.0,
    )


def finalize_plan(plan: RetrievalPlan, existing_prefixes: Iterable[str]) -> RetrievalPlan:
    """Keep the aggregation patterns whose prefix exists for the agent (``person:%`` only if persons exist)."""
    existing = set(existing_prefixes)
    patterns = tuple(PatternQuery(f"{prefix}:%") for prefix in plan.candidate_prefixes if prefix in existing)
    reason = plan.reason
    if patterns and not plan.broad_query:
        reason = "aggregation"
    return replace(plan, pattern_queries=patterns, reason=reason)
