"""The deterministic planner (R1): same query, same plan, no database, no LLM."""

from __future__ import annotations

import pytest

from memory_core.read.planner import LEXICAL_MAX_WORDS, finalize_plan, is_small_talk, keyword_terms, plan_retrieval


@pytest.mark.parametrize(
    "query",
    [
        "oi",
        "Oi!",
        "olá",
        "Olá, tudo bem?",
        "bom dia",
        "Boa noite!",
        "boa tarde pessoal",
        "e aí, como vai?",
        "obrigado",
        "Muito obrigada!",
        "valeu",
        "hello",
        "Hi there!",
        "hi",
        "hey, how are you?",
        "Good morning",
        "thanks",
        "Thank you!",
        "ok",
        "👋",
        "   ",
    ],
)
def test_greetings_and_small_talk_are_skipped(query: str) -> None:
    plan = plan_retrieval(query)
    assert plan.strategy == "skip"
    assert plan.reason in ("greeting", "empty")
    assert plan.similarity_query == query


@pytest.mark.parametrize(
    "query",
    [
        "Onde o Marcos Tavares mora?",
        "oi, onde a Ana trabalha?",
        "hiking trails",
        "oito horas",
        "bom dia Rafael, qual é o meu aniversário?",
        "thanks for telling me where Ana lives, what is her job?",
        "What is Hi-Fi?",
    ],
)
def test_real_questions_are_not_small_talk(query: str) -> None:
    assert not is_small_talk(query)
    assert plan_retrieval(query).strategy == "multi_signal"


def test_similarity_query_is_always_the_original_query() -> None:
    query = "  Onde o Marcos Tavares MORA?? "
    plan = plan_retrieval(query)
    assert plan.similarity_query == query
    assert plan.reason == "deterministic"
    assert not plan.broad_query
    assert plan.pattern_queries == ()


def test_the_plan_is_deterministic() -> None:
    query = "quem são meus amigos e o que você sabe sobre mim?"
    assert plan_retrieval(query).summary() | {"latency_ms": 0} == plan_retrieval(query).summary() | {"latency_ms": 0}


@pytest.mark.parametrize(
    ("query", "prefix"),
    [
        ("quem são meus amigos?", "person"),
        ("Quem são os meus amigos?", "person"),
        ("my friends", "person"),
        ("who are my friends?", "person"),
        ("all my pets", "pet"),
        ("meus projetos", "project"),
        ("quais empresas eu conheço?", "organization"),
        ("list my places", "place"),
    ],
)
def test_aggregation_queries_name_candidate_prefixes(query: str, prefix: str) -> None:
    plan = plan_retrieval(query)
    assert prefix in plan.candidate_prefixes
    assert plan.pattern_queries == ()  # nothing is known to exist yet


@pytest.mark.parametrize("query", ["where did Ana meet her friends?", "Qual o time de futebol do Bruno?", "people"])
def test_category_words_without_a_possessive_or_quantifier_are_not_aggregation(query: str) -> None:
    assert plan_retrieval(query).candidate_prefixes == ()


def test_aggregation_patterns_only_for_prefixes_that_exist() -> None:
    plan = plan_retrieval("quem são meus amigos?")
    without_people = finalize_plan(plan, {"place", "organization"})
    assert without_people.pattern_queries == ()
    assert without_people.reason == "deterministic"
    with_people = finalize_plan(plan, {"person", "place"})
    assert [p.entity_pattern for p in with_people.pattern_queries] == ["person:%"]
    assert with_people.reason == "aggregation"


@pytest.mark.parametrize(
    "query",
    [
        "tell me everything",
        "Tell me everything you know about me",
        "what do you know about me?",
        "o que você sabe sobre mim?",
        "O que vc sabe sobre o Marcos?",
        "me conta tudo",
        "me conte tudo sobre a Ana",
        "resume tudo",
        "Resuma tudo o que sabe",
        "summarize everything",
    ],
)
def test_broad_queries(query: str) -> None:
    plan = plan_retrieval(query)
    assert plan.strategy == "multi_signal"
    assert plan.broad_query
    assert plan.reason == "broad"
    assert plan.similarity_query == query


def test_keyword_terms_follow_the_seeds_rules() -> None:
    # Words longer than 2 characters, function words dropped, at most 5, folded, no duplicates.
    assert keyword_terms("Onde o Marcos Tavares mora?") == ["marcos", "tavares", "mora"]
    assert keyword_terms("a b cd efg efg Hij klm nop qrs tuv") == ["efg", "hij", "klm", "nop", "qrs"]
    # Accents are kept (facts are matched as written, and in folded form too); "são" is a verb too.
    assert keyword_terms("Série A da Vertix em São Paulo") == ["série", "vertix", "paulo"]


def test_the_words_of_relevant_conversations_are_every_significant_word_of_the_query() -> None:
    # Two letters are enough ("tv"), the planner's function words are dropped, each word once,
    # in the query's order, beyond the keywords' five: messages are matched on all of them.
    plan = plan_retrieval("Onde o Marcos viu a TV da Ana em Recife e depois em Olinda e Marcos?", max_facts=50)
    assert plan.keywords == ("marcos", "viu", "ana", "recife", "depois")
    # Short function words the planner keeps ("da", "em") are left to the stemmers' stop words.
    assert plan.words == ("marcos", "viu", "tv", "da", "ana", "em", "recife", "depois", "olinda")
    assert plan.summary()["words"] == list(plan.words)
    many = " ".join(f"word{number}" for number in range(LEXICAL_MAX_WORDS + 10))
    assert plan_retrieval(many, max_facts=50).words == tuple(f"word{n}" for n in range(LEXICAL_MAX_WORDS))


def test_keyword_terms_never_carry_sql_wildcards() -> None:
    terms = keyword_terms("100% of foo_bar\\baz' OR 1=1; --")
    assert terms == ["100", "foo", "bar", "baz"]
    assert all("%" not in t and "_" not in t and "\\" not in t and "'" not in t for t in terms)
