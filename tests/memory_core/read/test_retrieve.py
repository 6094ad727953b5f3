"""retrieve() against the real PostgreSQL: the seeds' read examples, filters, time travel, safety."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from memory_core.config import ConfigOverrideError
from memory_core.read.context import ReadContext
from memory_core.read.pipeline import RetrievalRequestError, retrieve
from tests.memory_core.read.conftest import NOW, MemoryBuilder
from tests.memory_core.read.scripted import ScriptedReranker

SCORE_KEYS = {"semantic", "keyword", "recency", "importance", "confidence", "formula", "pattern", "graph", "message"}


def _texts(result: Any) -> list[str]:
    return [fact.fact_text for fact in result.facts]


def _marcos(memory: MemoryBuilder) -> dict[str, str]:
    marcos = memory.entity("Marcos Tavares", aliases=["Marcos"])
    carolina = memory.entity("Carolina")
    vertix = memory.entity("Vertix", "organization")
    porto_alegre = memory.entity("Porto Alegre", "place")
    ids = {
        "lives": memory.fact("Marcos Tavares mora em Porto Alegre", marcos, links=[porto_alegre]),
        "job": memory.fact("Marcos Tavares é gerente de produto na Vertix", marcos, links=[vertix]),
        "married": memory.fact("Marcos Tavares é casado com a Carolina", marcos, links=[carolina]),
        "architect": memory.fact("Carolina é arquiteta", carolina),
        "other": memory.fact("Ana gosta de jazz", "person:ana"),
    }
    memory.relationship(marcos, porto_alegre, "lives_in", evidence_fact_id=ids["lives"])
    memory.relationship(marcos, vertix, "works_at", evidence_fact_id=ids["job"])
    memory.relationship(marcos, carolina, "partner_of", evidence_fact_id=ids["married"])
    return ids


def test_marcos_tavares_query_lifecycle(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ids = _marcos(memory)
    query = "Onde o Marcos Tavares mora?"

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, verbose=True)

    # Stage 1: deterministic plan, query passed through unchanged, entity resolved by name.
    trace = result.trace
    assert trace is not None
    assert trace["plan"]["strategy"] == "multi_signal"
    assert trace["plan"]["similarity_query"] == query
    assert not trace["plan"]["broad_query"]
    assert trace["plan"]["pattern_queries"] == []
    assert [e["key"] for e in trace["entities"]["resolved"]] == ["person:marcos_tavares"]
    sources = trace["retrieval"]["entities_sources"]
    assert sources["deterministic"] == ["person:marcos_tavares"]
    assert set(sources["expansion"]) == {"person:carolina", "organization:vertix", "place:porto_alegre"}
    # Stage 2: three signals; the residence fact leads.
    assert trace["retrieval"]["per_signal"]["semantic"] >= 1
    assert trace["retrieval"]["per_signal"]["keyword"] >= 3
    assert trace["retrieval"]["per_signal"]["graph"] >= 4
    assert result.facts[0].fact_id == ids["lives"]
    assert ids["other"] not in {f.fact_id for f in result.facts}
    # "Carolina é arquiteta" comes through the graph only (two entities away from the query's words).
    architect = next(f for f in result.facts if f.fact_id == ids["architect"])
    assert architect.scores["graph"] > 0
    assert architect.scores["keyword"] == 0
    # Offline: no reranker, the formula is the score.
    assert trace["rerank"]["applied"] is False
    assert all("reranker" not in f.scores and f.score == f.scores["formula"] for f in result.facts)
    assert result.context.startswith("Known facts:\n- Marcos Tavares mora em Porto Alegre\n")
    assert result.total_candidates == 4
    assert result.duration_ms > 0

    # Stage 4 with an LLM: the seeds' reranker answer keeps only what answers the question.
    reranker = ScriptedReranker({"Marcos Tavares mora em Porto Alegre": 1.0}, default=0.0)
    reranked = retrieve(
        dataclasses.replace(read_ctx, reranker=reranker), agent_id=memory.agent_id, query=query, verbose=True
    )
    assert _texts(reranked) == ["Marcos Tavares mora em Porto Alegre"]
    assert reranked.facts[0].scores["reranker"] == 1.0
    assert reranked.facts[0].score == pytest.approx(reranked.facts[0].scores["formula"])
    assert reranked.context == "Known facts:\n- Marcos Tavares mora em Porto Alegre"
    assert reranked.trace is not None
    assert reranked.trace["rerank"]["vetoed"] == 3


def test_vertix_facts_are_found_through_secondary_entity_links(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    vertix = memory.entity("Vertix", "organization")
    clara = memory.entity("Clara Rezende")
    ricardo = memory.entity("Ricardo Gomes")
    ambev = memory.entity("Ambev", "organization")
    expected = {
        memory.fact("Clara Rezende saiu da Vertix", clara, links=[vertix]),
        memory.fact("A Vertix recebeu uma Série A de R$ 20 milhões", vertix),
        memory.fact("Ricardo Gomes é cofundador da Vertix", ricardo, links=[vertix]),
        memory.fact("A Vertix assinou contrato com a Ambev", vertix, links=[ambev]),
    }
    memory.fact("Clara Rezende adora café coado", clara)

    result = retrieve(read_ctx, agent_id=memory.agent_id, query="O que aconteceu com a Vertix?", verbose=True)

    found = {f.fact_id: f for f in result.facts}
    assert expected <= set(found)
    assert all(found[fact_id].scores["graph"] > 0 for fact_id in expected)
    # Clara's other fact may come along by spreading activation (same entity), but ranks below.
    weakest = min(found[fact_id].score for fact_id in expected)
    assert all(f.score < weakest for f in result.facts if f.fact_id not in expected)
    assert result.trace is not None
    assert result.trace["entities"]["entities_sources"]["deterministic"] == ["organization:vertix"]


def test_football_team_question_is_vetoed_to_zero_facts(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    bruno = memory.entity("Bruno Almeida")
    memory.fact("Bruno Almeida corre maratonas", bruno)
    memory.fact("Bruno Almeida desenvolveu um modelo de ML para detecção de fraude", bruno)
    memory.fact("Bruno Almeida trabalha na Orion Tech", bruno)
    query = "Qual o time de futebol do Bruno Almeida?"

    offline = retrieve(read_ctx, agent_id=memory.agent_id, query=query)
    assert len(offline.facts) == 3  # the formula alone cannot tell marathons from football

    reranker = ScriptedReranker({}, default=0.0)
    result = retrieve(dataclasses.replace(read_ctx, reranker=reranker), agent_id=memory.agent_id, query=query)
    assert result.facts == []
    assert "Known facts:" not in result.context
    assert len(reranker.calls) == 1
    assert len(reranker.calls[0].candidates) == 3

    relevant = ScriptedReranker({"Bruno Almeida desenvolveu um modelo de ML para detecção de fraude": 1.0}, default=0.0)
    developed = retrieve(
        dataclasses.replace(read_ctx, reranker=relevant), agent_id=memory.agent_id, query="O que o Bruno desenvolveu?"
    )
    assert _texts(developed) == ["Bruno Almeida desenvolveu um modelo de ML para detecção de fraude"]


class _Explodes:
    """Stands in for the database, the embedder and the LLM: any use is a test failure."""

    calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _Explodes.calls += 1
        raise AssertionError("greetings must not touch the database, the embedder or the LLM")

    def embed_one(self, text: str) -> list[float] | None:
        return self()

    @property
    def name(self) -> str:
        return "rerank"

    def run(self, skill_input: Any, /) -> Any:
        return self()


@pytest.mark.parametrize("greeting", ["oi", "Olá!", "bom dia", "boa noite", "hello", "hi", "thanks", "obrigado"])
def test_greetings_do_no_work_at_all(read_ctx: ReadContext, greeting: str) -> None:
    exploding = _Explodes()
    ctx = dataclasses.replace(read_ctx, sessions=exploding, embedder=exploding, reranker=exploding)  # type: ignore[arg-type]
    _Explodes.calls = 0
    result = retrieve(ctx, agent_id="agent-x", query=greeting, verbose=True)
    assert _Explodes.calls == 0
    assert result.facts == []
    assert result.events == []
    assert result.context == ""
    assert result.warnings == []
    assert result.trace is not None
    assert result.trace["plan"]["strategy"] == "skip"
    assert result.config_effective["topk_facts"] == 20


def test_aggregation_uses_person_prefix_only_when_person_entities_exist(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    query = "quem são meus amigos?"
    lisbon = memory.entity("Lisboa", "place")
    memory.fact("Lisboa fica em Portugal", lisbon)
    without = retrieve(read_ctx, agent_id=memory.agent_id, query=query, verbose=True)
    assert without.trace is not None
    assert without.trace["plan"]["pattern_queries"] == []
    assert without.trace["plan"]["reason"] == "deterministic"

    pedro = memory.entity("Pedro")
    joana = memory.entity("Joana")
    memory.fact("Pedro é amigo do Rafael desde a escola", pedro)
    memory.fact("Joana joga vôlei com o Rafael", joana)
    with_people = retrieve(read_ctx, agent_id=memory.agent_id, query=query, verbose=True)
    assert with_people.trace is not None
    assert with_people.trace["plan"]["pattern_queries"] == ["person:%"]
    assert with_people.trace["plan"]["reason"] == "aggregation"
    assert {"Pedro é amigo do Rafael desde a escola", "Joana joga vôlei com o Rafael"} <= set(_texts(with_people))
    assert "Lisboa fica em Portugal" not in _texts(with_people)


def test_scores_keys_speaker_and_provenance(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    event = memory.event("A Ana trabalha na Stone", speaker="Pedro", message_id="msg-1")
    memory.fact("Ana trabalha na Stone", ana, speaker="Pedro", source_event_id=event)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Stone")
    fact = result.facts[0]
    assert set(fact.scores) == SCORE_KEYS
    assert all(0.0 <= value <= 1.0 for value in fact.scores.values())
    assert fact.speaker == "Pedro"
    assert fact.source_event_id == event
    assert fact.message_id == "msg-1"
    assert fact.entity_key == "person:ana"
    assert fact.valid_to is None
    assert f"[{fact.speaker}] {fact.fact_text}" == "[Pedro] Ana trabalha na Stone"


def test_context_sections_events_patterns_and_no_profiles(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    rafael = memory.entity("Rafael", profile="SECRET PROFILE TEXT", summary="Rafael is a developer.")
    jazz = memory.fact("Rafael adora jazz e vai a shows de jazz todo mês", rafael)
    memory.observation("Rafael tends to talk about music on Fridays", supporting_fact_ids=[jazz])
    memory.observation("Unrelated insight about gardening", supporting_fact_ids=[])
    long_message = "Fui a um show de jazz incrível ontem à noite com o Rafael, " + "jazz e mais jazz " * 30
    memory.event(long_message, occurred_at=datetime(2026, 3, 28, 21, 0, tzinfo=UTC))
    memory.event("Comprei pão", occurred_at=datetime(2026, 3, 27, 9, 0, tzinfo=UTC))

    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Rafael gosta de jazz?")
    context = result.context
    assert context.startswith("Known facts:\n- Rafael adora jazz e vai a shows de jazz todo mês\n")
    assert "\n\nObserved patterns:\n- Rafael tends to talk about music on Fridays" in context
    assert "gardening" not in context
    assert "\n\nRelevant conversations:\n- (2026-03-28) Rafael: Fui a um show de jazz" in context
    event_line = next(line for line in context.splitlines() if line.startswith("- (2026-03-28)"))
    assert event_line.endswith("...")
    assert len(event_line) <= len("- (2026-03-28) Rafael: ") + 300
    assert "Comprei pão" not in context
    assert "SECRET PROFILE" not in context
    assert "Rafael is a developer." not in context
    assert [e.text[:20] for e in result.events] == [long_message[:20]]


def test_context_budget_is_proportional(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    for i in range(40):
        memory.fact(f"Ana visitou o museu número {i} e escreveu uma longa resenha sobre a exposição de arte", ana)
    small = retrieve(
        read_ctx,
        agent_id=memory.agent_id,
        query="Que museus a Ana visitou?",
        config_overrides={"context_max_tokens": 100, "topk_facts": 40},
        verbose=True,
    )
    assert len(small.facts) == 40
    assert len(small.context) <= 100 * 4 * 1.2
    assert small.trace is not None
    assert small.trace["compress"]["omitted_facts"] > 0
    large = retrieve(read_ctx, agent_id=memory.agent_id, query="Que museus a Ana visitou?")
    assert len(large.facts) == 20
    assert large.context.count("\n- ") == 20


def test_time_travel_returns_the_fact_valid_at_that_instant(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    rafael = memory.entity("Rafael")
    moved = datetime(2024, 6, 1, tzinfo=UTC)
    memory.fact("Rafael mora em Lisboa", rafael, valid_from=datetime(2023, 1, 1, tzinfo=UTC), valid_to=moved)
    memory.fact("Rafael mora no Porto", rafael, valid_from=moved)
    query = "Onde o Rafael mora?"

    def lives(**kwargs: Any) -> set[str]:
        result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, **kwargs)
        return {text for text in _texts(result) if "mora" in text}

    assert lives() == {"Rafael mora no Porto"}
    assert lives(as_of=datetime(2024, 1, 1, tzinfo=UTC)) == {"Rafael mora em Lisboa"}
    assert lives(as_of=moved) == {"Rafael mora no Porto"}  # valid_from <= t < valid_to
    assert lives(as_of=moved - timedelta(seconds=1)) == {"Rafael mora em Lisboa"}
    assert lives(as_of=datetime(2022, 1, 1)) == set()  # naive datetimes are UTC; nothing known yet
    window = (datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 12, 31, tzinfo=UTC))
    assert lives(as_of=window) == {"Rafael mora em Lisboa", "Rafael mora no Porto"}


def test_entity_keys_filter_or_logic_aliases_and_unknown_key_warning(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    pedro = memory.entity("Pedro Menezes", aliases=["Pedro"])
    ana = memory.entity("Ana Silva", aliases=["Ana"])
    carla = memory.entity("Carla")
    pedro_job = memory.fact("Pedro Menezes trabalha como engenheiro na Stone", pedro)
    ana_job = memory.fact("Ana Silva trabalha como designer", ana)
    both = memory.fact("Ana Silva trabalha com o Pedro Menezes", ana, links=[pedro])
    carla_job = memory.fact("Carla trabalha como médica", carla)
    query = "trabalho, onde trabalha?"

    result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, entity_keys=["person:pedro", "person:unknown"])
    assert {f.fact_id for f in result.facts} == {pedro_job, both}
    assert result.warnings == ["entity_key 'person:unknown' not found (not canonical, no matching alias)"]

    either = retrieve(read_ctx, agent_id=memory.agent_id, query=query, entity_keys=["person:pedro_menezes", "ana"])
    assert {f.fact_id for f in either.facts} == {pedro_job, ana_job, both}
    assert either.warnings == []

    nobody = retrieve(read_ctx, agent_id=memory.agent_id, query=query, entity_keys=["person:nobody"])
    assert nobody.facts == []
    assert nobody.warnings == ["entity_key 'person:nobody' not found (not canonical, no matching alias)"]

    unfiltered = retrieve(read_ctx, agent_id=memory.agent_id, query=query)
    assert carla_job in {f.fact_id for f in unfiltered.facts}


def test_retrieval_counters_are_incremented_for_returned_facts_only(
    read_ctx: ReadContext, memory: MemoryBuilder
) -> None:
    ana = memory.entity("Ana")
    returned = memory.fact("Ana toca violino na orquestra", ana)
    other = memory.fact("O céu estava nublado", "concept:weather")
    for _ in range(2):
        result = retrieve(read_ctx, agent_id=memory.agent_id, query="Ana toca violino?")
        assert returned in {f.fact_id for f in result.facts}
        assert other not in {f.fact_id for f in result.facts}
    # Counts are queued and written behind the request; flushing is what the background thread does.
    assert read_ctx.flush_bookkeeping() is True
    rows = {
        str(row.id): row
        for row in memory.rows(
            "SELECT f.id, COALESCE(u.times_retrieved, 0) AS times_retrieved, u.last_retrieved_at "
            "FROM memory_facts f LEFT JOIN memory_fact_usage u ON u.fact_id = f.id WHERE f.agent_id = :agent"
        )
    }
    assert rows[returned].times_retrieved == 2
    assert rows[returned].last_retrieved_at is not None
    assert rows[returned].last_retrieved_at >= NOW - timedelta(minutes=5)
    assert rows[other].times_retrieved == 0
    assert rows[other].last_retrieved_at is None


@pytest.mark.parametrize(
    "query", ["100%", "%", "%%%", "_", "foo_bar", "50% off_", "'; DROP TABLE memory_facts; --", "\\", "a\\%b"]
)
def test_keyword_search_is_safe_with_wildcards_and_quotes(
    read_ctx: ReadContext, memory: MemoryBuilder, query: str
) -> None:
    thing = memory.entity("Loja", "organization")
    memory.fact("A loja deu 100% de desconto", thing)
    memory.fact("O arquivo foo_bar.txt sumiu", thing)
    memory.fact("Nada a ver com nada", thing)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, verbose=True)
    assert result.trace is not None
    assert result.trace["degraded"] == []
    keyword_hits = {f.fact_text for f in result.facts if f.scores["keyword"] > 0}
    assert "Nada a ver com nada" not in keyword_hits
    if query == "100%":
        assert keyword_hits == {"A loja deu 100% de desconto"}
    assert memory.rows("SELECT count(*) AS n FROM memory_facts WHERE agent_id = :agent")[0].n == 3


def test_keyword_matches_accented_words_as_written_or_folded(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    vertix = memory.entity("Vertix", "organization")
    accented = memory.fact("A Vertix recebeu uma Série A", vertix)
    plain = memory.fact("A Vertix prepara a Serie B", vertix)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Série")
    keyword = {f.fact_id: f.scores["keyword"] for f in result.facts}
    assert keyword == {accented: 1.0, plain: 1.0}


def test_a_keyword_matches_where_a_word_starts_not_inside_one(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    rafael = memory.entity("Rafael")
    home = memory.fact("Rafael mora em Porto Alegre", rafael)
    housing = memory.fact("Rafael procura uma moradia (mora de aluguel)", rafael)
    partner = memory.fact("A namorada de Rafael adora jazz", rafael)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Onde o Rafael mora?")
    keyword = {f.fact_id: f.scores["keyword"] for f in result.facts}
    # "mora" starts a word of the first two; inside "namorada" it is not the word asked about.
    assert keyword[home] == keyword[housing] > keyword[partner] > 0
    assert result.facts[0].fact_id in {home, housing}


def test_agents_are_isolated(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    memory.fact("Ana mora em Recife", ana)
    memory.event("A Ana mora em Recife")
    other = dataclasses.replace(memory, agent_id=memory.agent_id + "-b")

    mine = retrieve(read_ctx, agent_id=memory.agent_id, query="Onde a Ana mora?")
    assert _texts(mine) == ["Ana mora em Recife"]
    theirs = retrieve(read_ctx, agent_id=other.agent_id, query="Onde a Ana mora?", entity_keys=["person:ana"])
    assert theirs.facts == []
    assert theirs.events == []
    assert theirs.context == ""
    assert theirs.warnings == ["entity_key 'person:ana' not found (not canonical, no matching alias)"]
    unfiltered = retrieve(read_ctx, agent_id=other.agent_id, query="Onde a Ana mora? Recife")
    assert unfiltered.facts == []
    assert unfiltered.events == []


def test_session_filter_keeps_one_conversation(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    marcos = memory.entity("Marcos")
    work = memory.event("No trabalho o Marcos usa Python", session_id="work")
    home = memory.event("Em casa o Marcos usa Linux", session_id="personal")
    memory.fact("Marcos usa Python no trabalho", marcos, source_event_id=work)
    memory.fact("Marcos usa Linux em casa", marcos, source_event_id=home)
    query = "O que o Marcos usa?"
    assert set(_texts(retrieve(read_ctx, agent_id=memory.agent_id, query=query))) == {
        "Marcos usa Python no trabalho",
        "Marcos usa Linux em casa",
    }
    work_only = retrieve(read_ctx, agent_id=memory.agent_id, query=query, session_id="work")
    assert _texts(work_only) == ["Marcos usa Python no trabalho"]
    assert [e.event_id for e in work_only.events] == [work]


def test_min_confidence_filters_and_config_overrides(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    memory.fact("Ana talvez se mude para Berlim", ana, confidence=0.4)
    memory.fact("Ana mora em Munique", ana, confidence=0.95)
    memory.fact("Ana tem um gato", ana, confidence=0.95)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Ana")
    assert "Ana talvez se mude para Berlim" not in _texts(result)
    permissive = retrieve(
        read_ctx,
        agent_id=memory.agent_id,
        query="Ana",
        config_overrides={"min_confidence": 0.3, "topk_facts": 2, "made_up_knob": 1},
    )
    assert len(permissive.facts) == 2
    assert permissive.config_effective["min_confidence"] == 0.3
    assert permissive.config_effective["topk_facts"] == 2
    assert permissive.warnings == ["unknown config override 'made_up_knob' ignored"]
    everything = retrieve(read_ctx, agent_id=memory.agent_id, query="Ana", config_overrides={"min_confidence": 0.3})
    assert "Ana talvez se mude para Berlim" in _texts(everything)


def test_min_confidence_filters_on_the_decayed_confidence(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    ana = memory.entity("Ana")
    said = NOW - timedelta(days=400)  # all said long ago; what counts is when memory learnt or heard it again
    old = memory.fact("Ana toca violino", ana, confidence=0.60, valid_from=said)
    fresh = memory.fact("Ana toca piano", ana, confidence=0.60, valid_from=said)
    confirmed = memory.fact(
        "Ana toca flauta", ana, confidence=0.60, valid_from=said, last_confirmed_at=NOW - timedelta(days=1)
    )
    # Stored four weeks ago: 0.60 x 0.95 ** 4 = 0.49 < min_confidence 0.55 unless confirmed since.
    memory.execute(
        "UPDATE memory_facts SET created_at = :at WHERE id = ANY(CAST(:ids AS uuid[]))",
        at=NOW - timedelta(weeks=4),
        ids=[old, confirmed],
    )
    for query in ("Que instrumentos a Ana toca?", "Ana"):  # semantic/keyword, and the entity's links
        result = retrieve(read_ctx, agent_id=memory.agent_id, query=query, config_overrides={"enable_reranker": False})
        assert sorted(_texts(result)) == ["Ana toca flauta", "Ana toca piano"], query
        shown = {fact.fact_text: fact.scores["confidence"] for fact in result.facts}
        assert shown["Ana toca piano"] == pytest.approx(0.60, abs=1e-3)
        assert shown["Ana toca flauta"] == pytest.approx(0.60 * 0.95 ** (1 / 7), abs=1e-3)
    without_decay = retrieve(
        read_ctx, agent_id=memory.agent_id, query="Ana", config_overrides={"confidence_decay_per_week": 1.0}
    )
    assert "Ana toca violino" in _texts(without_decay)
    assert {fresh, confirmed} <= {fact.fact_id for fact in without_decay.facts}


def test_bad_input_raises(read_ctx: ReadContext) -> None:
    with pytest.raises(ConfigOverrideError) as error:
        retrieve(read_ctx, agent_id="a", query="q", config_overrides={"topk_facts": "5"})
    assert error.value.field == "topk_facts"
    with pytest.raises(RetrievalRequestError):
        retrieve(read_ctx, agent_id="  ", query="q")
    with pytest.raises(RetrievalRequestError):
        retrieve(read_ctx, agent_id="a", query="q", as_of=(NOW, NOW - timedelta(days=1)))
    with pytest.raises(RetrievalRequestError):
        retrieve(read_ctx, agent_id="a", query="q", as_of="yesterday")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="entity_keys"):
        retrieve(read_ctx, agent_id="a", query="q", entity_keys="person:ana")


def test_without_embeddings_keyword_and_graph_still_answer(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    class BrokenEmbedder:
        dimensions = 384

        def embed(self, texts: list[str]) -> list[list[float]]:
            raise ConnectionError("embedding service down")

        def embed_one(self, text: str) -> list[float] | None:
            raise ConnectionError("embedding service down")

    ana = memory.entity("Ana")
    memory.fact("Ana mora em Recife", ana)
    ctx = dataclasses.replace(read_ctx, embedder=BrokenEmbedder())
    result = retrieve(ctx, agent_id=memory.agent_id, query="Onde a Ana mora?", verbose=True)
    assert _texts(result) == ["Ana mora em Recife"]
    assert result.facts[0].scores["semantic"] == 0.0
    assert result.warnings == ["embedding failed (ConnectionError); semantic search and relevant conversations are off"]
    assert result.trace is not None
    assert result.trace["degraded"] == ["embedding"]


def test_database_failure_degrades_to_an_empty_result(read_ctx: ReadContext) -> None:
    def broken_sessions() -> Any:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    ctx = dataclasses.replace(read_ctx, sessions=broken_sessions)  # type: ignore[arg-type]
    result = retrieve(ctx, agent_id="agent-x", query="Onde a Ana mora?")
    assert result.facts == []
    assert result.context == ""
    assert result.warnings == ["retrieval failed (OperationalError); no facts could be retrieved"]


def test_broad_query_is_cluster_first(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    rafael = memory.entity("Rafael")
    work = [
        memory.fact("Rafael trabalha na Acme", rafael, importance=0.9),
        memory.fact("Rafael lidera o time de dados", rafael, importance=0.8),
    ]
    memory.fact("Rafael mora em Lisboa", rafael, importance=0.7)
    memory.cluster("Work", "Rafael is a data engineer at Acme.", work, importance=0.9)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="me conta tudo", verbose=True)
    assert result.trace is not None
    assert result.trace["plan"]["broad_query"] is True
    assert len(result.facts) == 3
    lines = result.context.splitlines()
    assert lines[0] == "Known facts:"
    assert lines[1] == "- Work: Rafael is a data engineer at Acme."
    assert set(lines[2:4]) == {"  - Rafael trabalha na Acme", "  - Rafael lidera o time de dados"}
    assert lines[4] == "- Rafael mora em Lisboa"


def test_verbose_trace_reports_every_stage(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    _marcos(memory)
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Onde o Marcos mora?", verbose=True)
    trace = result.trace
    assert trace is not None
    for key in ("plan", "entities", "retrieval", "rank", "spreading", "rerank", "compress", "bookkeeping"):
        assert key in trace
    assert trace["retrieval"]["vector_strategy"] == "exact"
    assert set(trace["retrieval"]["per_signal"]) == {"semantic", "keyword", "graph", "broad"}
    assert {"entities", "signals", "rank", "spreading", "rerank", "compress", "bookkeeping"} <= set(trace["timings_ms"])
    assert trace["entities"]["resolved"][0]["method"] in ("alias", "display_name", "slug")
    assert retrieve(read_ctx, agent_id=memory.agent_id, query="Onde o Marcos mora?").trace is None


def test_reads_what_the_write_pipeline_wrote(read_ctx: ReadContext, memory: MemoryBuilder) -> None:
    from memory_core.write.context import build_write_context
    from memory_core.write.intake import IncomingMessage, accept_messages
    from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert

    write = build_write_context(read_ctx.settings, embedder=read_ctx.embedder, pool_size=2)
    messages = [
        "A Vertix recebeu uma Série A de R$ 20 milhões.",
        "A Clara Rezende saiu da Vertix.",
        "O Ricardo Gomes é cofundador da Vertix.",
        "Eu moro em Porto Alegre.",
    ]
    start = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    try:
        with write.sessions.begin() as session:
            accepted = accept_messages(
                session,
                memory.agent_id,
                [
                    IncomingMessage(message=m, speaker_name="Rafael", occurred_at=start + timedelta(days=i))
                    for i, m in enumerate(messages)
                ],
            )
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            for item in accepted:
                assert stage(write, item.event_id) == "completed"
    finally:
        write.close()

    result = retrieve(read_ctx, agent_id=memory.agent_id, query="O que aconteceu com a Vertix?", verbose=True)
    texts = _texts(result)
    assert "A Clara Rezende saiu da Vertix." in texts
    assert "O Ricardo Gomes é cofundador da Vertix." in texts
    assert "Rafael mora em Porto Alegre." not in texts
    clara = next(f for f in result.facts if f.fact_text == "A Clara Rezende saiu da Vertix.")
    assert clara.entity_key == "person:clara_rezende"
    assert clara.scores["graph"] > 0
    assert clara.speaker == "Rafael"
    assert clara.source_event_id is not None


def test_a_failing_optional_stage_degrades_without_breaking_the_rest(
    read_ctx: ReadContext, memory: MemoryBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import text

    from memory_core.read import pipeline

    def broken_spreading(session: Any, *args: Any, **kwargs: Any) -> Any:
        session.execute(text("SELECT 1 / 0"))  # aborts the read transaction

    monkeypatch.setattr(pipeline, "spread_activation", broken_spreading)
    ana = memory.entity("Ana")
    fact = memory.fact("Ana corre maratonas", ana)
    memory.observation("Ana trains on weekends", supporting_fact_ids=[fact])
    result = retrieve(read_ctx, agent_id=memory.agent_id, query="Ana corre?", verbose=True)
    assert _texts(result) == ["Ana corre maratonas"]
    assert result.warnings == ["spreading failed (DataError); related facts were not added"]
    assert "Observed patterns:\n- Ana trains on weekends" in result.context  # later stages still ran
    assert result.trace is not None
    assert result.trace["degraded"] == ["spreading"]


def test_bookkeeping_never_fails_the_retrieval(read_ctx: ReadContext) -> None:
    from memory_core.read.bookkeeping import record_retrievals

    class BrokenSessions:
        def begin(self) -> Any:
            raise OperationalError("UPDATE", {}, Exception("read-only replica"))

    broken: Any = BrokenSessions()
    assert record_retrievals(broken, "agent-x", ["00000000-0000-0000-0000-000000000001"]) is False
    assert record_retrievals(read_ctx.sessions, "agent-x", []) is True
