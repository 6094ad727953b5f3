"""The write pipeline's finer decisions, stage by stage in this process on the real PostgreSQL.

Where the LLM decides (which entity an ambiguous name is, whether a message retracts a fact)
a scripted skill answers; the embedder is steered so each case lands where the seeds draw the
line (semantic dedup > 0.85, the fuzzy band 0.50-0.85). What is checked is what a user sees:
the stored facts and entities, their counts and strengths, the event's result.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_core.cognition.models import (
    DisambiguationInput,
    DisambiguationOutput,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    ExtractionInput,
    ExtractionOutput,
    ReconcileInput,
    ReconcileOutput,
)
from memory_core.cognition.offline import build_offline_write_skills
from memory_core.cognition.skill import Skill, SkillOutcome
from memory_core.cognition.write_skills import WriteSkills
from memory_core.settings import Settings
from memory_core.write.context import WriteContext, build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert
from tests.support.fixed_embedder import MappedEmbedder, unit_vector
from tests.workers.memory_queries import MemoryInspector

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
DIMS = 384


def _near(cosine: float, axis: int = 0, other: int = 1) -> list[float]:
    """A unit vector whose cosine with the unit vector of ``axis`` is ``cosine``."""
    return unit_vector(DIMS, (axis, cosine), (other, (1.0 - cosine * cosine) ** 0.5))


class ExtractionByMessage:
    """An extraction skill that answers each message with the output the test wrote for it."""

    name = "extract_informed"

    def __init__(self, outputs: dict[str, ExtractionOutput]) -> None:
        self.outputs = outputs

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        """The scripted output of this message."""
        return SkillOutcome(output=self.outputs[skill_input.message].model_copy(deep=True))


@dataclass
class Disambiguator:
    """The LLM's answer to "which of these is the mention?", by mention; records the questions."""

    answers: dict[str, str | None]
    calls: list[DisambiguationInput] = field(default_factory=list)
    name: str = "disambiguate"

    def run(self, skill_input: DisambiguationInput, /) -> SkillOutcome[DisambiguationOutput]:
        """The scripted match for the mention."""
        self.calls.append(skill_input)
        return SkillOutcome(output=DisambiguationOutput(match=self.answers[skill_input.mention]))


@dataclass
class Reconciler:
    """Answers ``decide(input)`` for every reconciliation it is asked; records the questions."""

    decide: Callable[[ReconcileInput], ReconcileOutput]
    calls: list[ReconcileInput] = field(default_factory=list)
    name: str = "reconcile"

    def run(self, skill_input: ReconcileInput, /) -> SkillOutcome[ReconcileOutput]:
        """The decision, from the test's rule."""
        self.calls.append(skill_input)
        return SkillOutcome(output=self.decide(skill_input))


@dataclass
class Pipeline:
    """Stages run here, one message after the other, for one agent."""

    context: WriteContext
    memory: MemoryInspector
    agent_id: str = field(default_factory=lambda: f"agent-{uuid.uuid4().hex[:10]}")

    def write(self, message: str, at: datetime, **overrides: Any) -> str:
        """Accept ``message`` (with ``overrides`` as its config_overrides) and run every stage; the event id."""
        options = {"config_overrides": overrides} if overrides else {}
        with self.context.sessions.begin() as session:
            [accepted] = accept_messages(
                session,
                self.agent_id,
                [IncomingMessage(message=message, speaker_name="Rafael", occurred_at=at, options=options)],
            )
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            assert stage(self.context, accepted.event_id) == "completed"
        return str(accepted.event_id)

    def result(self, event_id: str) -> dict[str, Any]:
        """The run's status and result, as ``GET /v1/events/{id}`` shows them."""
        [row] = self.memory.rows("SELECT status, result FROM pipeline_runs WHERE event_id = :e", e=event_id)
        assert row["status"] == "done"
        return dict(row["result"])

    def facts(self, *, active: bool = False) -> dict[str, dict[str, Any]]:
        """Facts by text (every version, or only the active ones)."""
        rows = self.memory.active_facts(self.agent_id) if active else self.memory.all_facts(self.agent_id)
        return {row["fact_text"]: row for row in rows}


@pytest.fixture
def pipeline_for(write_settings: Settings) -> Iterator[Callable[..., Pipeline]]:
    """Build a :class:`Pipeline` with the given skills (the others offline) and embedder."""
    built: list[WriteContext] = []
    memory = MemoryInspector(write_settings.database_url)

    def make(
        *,
        extract: Skill[ExtractionInput, ExtractionOutput],
        disambiguate: Skill[DisambiguationInput, DisambiguationOutput] | None = None,
        reconcile: Skill[ReconcileInput, ReconcileOutput] | None = None,
        vectors: dict[str, list[float]] | None = None,
        kind: str = "offline",
    ) -> Pipeline:
        offline = build_offline_write_skills()
        skills = WriteSkills(
            kind=kind,
            extract_informed=extract,
            extract_blind=extract,
            disambiguate=disambiguate or offline.disambiguate,
            reconcile=reconcile or offline.reconcile,
            tag_emotion=offline.tag_emotion,
        )
        context = build_write_context(
            write_settings, skills=skills, embedder=MappedEmbedder(vectors or {}), pool_size=2
        )
        built.append(context)
        return Pipeline(context=context, memory=memory)

    yield make
    for context in built:
        context.close()
    memory.close()


def _facts_of(*facts: ExtractedFact, entities: Sequence[ExtractedEntity] = (), **more: Any) -> ExtractionOutput:
    return ExtractionOutput(
        entities=[ExtractedEntity(name="Rafael", type="person"), *entities], facts=list(facts), **more
    )


# --- W9 semantic dedup ---------------------------------------------------------------------


def test_near_duplicate_facts_of_one_message_keep_the_first_wording(pipeline_for: Callable[..., Pipeline]) -> None:
    message = "Adoro café, amo mesmo café. E chá também."
    extraction = ExtractionByMessage(
        {
            message: _facts_of(
                ExtractedFact(subject="Rafael", text="Rafael adora café"),
                ExtractedFact(subject="Rafael", text="Rafael ama café"),
                ExtractedFact(subject="Rafael", text="Rafael gosta de chá"),
            )
        }
    )
    vectors = {
        "Rafael adora café": unit_vector(DIMS, (0, 1.0)),
        "Rafael ama café": _near(0.90),  # > 0.85: the same fact said twice
        "Rafael gosta de chá": _near(0.80, other=2),  # <= 0.85 from both: another fact
    }
    strict = pipeline_for(extract=extraction, vectors=vectors)
    event = strict.write(message, T0)
    assert sorted(strict.facts()) == ["Rafael adora café", "Rafael gosta de chá"]
    assert len(strict.result(event)["facts_added"]) == 2

    # semantic_dedup_threshold is the line: at 0.95 the two wordings are two facts.
    lenient = pipeline_for(extract=extraction, vectors=vectors)
    lenient.write(message, T0, semantic_dedup_threshold=0.95)
    assert sorted(lenient.facts()) == ["Rafael adora café", "Rafael ama café", "Rafael gosta de chá"]


# --- W10 fuzzy band and LLM disambiguation --------------------------------------------------


def test_fuzzy_band_asks_the_llm_and_follows_its_answer(pipeline_for: Callable[..., Pipeline]) -> None:
    guilherme = ExtractedEntity(name="Guilherme Maturana", type="person")
    messages = {
        "O Guilherme Maturana é meu sócio.": _facts_of(
            ExtractedFact(subject="Guilherme Maturana", text="Guilherme Maturana é sócio do Rafael"),
            entities=[guilherme],
        ),
        "O G. Maturana fechou o contrato.": _facts_of(
            ExtractedFact(subject="G. Maturana", text="G. Maturana fechou o contrato"),
            entities=[ExtractedEntity(name="G. Maturana", type="person")],
        ),
        "O Gabriel Matos ligou.": _facts_of(
            ExtractedFact(subject="Gabriel Matos", text="Gabriel Matos ligou para o Rafael"),
            entities=[ExtractedEntity(name="Gabriel Matos", type="person")],
        ),
        "A Gilda Moura mandou flores.": _facts_of(
            ExtractedFact(subject="Gilda Moura", text="Gilda Moura mandou flores"),
            entities=[ExtractedEntity(name="Gilda Moura", type="person")],
        ),
        "O Gui Mat respondeu.": _facts_of(
            ExtractedFact(subject="Gui Mat", text="Gui Mat respondeu"),
            entities=[ExtractedEntity(name="Gui Mat", type="person")],
        ),
    }
    vectors = {
        "Guilherme Maturana": unit_vector(DIMS, (0, 1.0)),
        "G. Maturana": _near(0.70),  # in the band: the LLM decides, and says it is Guilherme
        "Gabriel Matos": _near(0.60, other=2),  # in the band: the LLM says it is someone new
        "Gilda Moura": _near(0.30, other=3),  # below 0.50: new, nobody is asked
        "Gui Mat": _near(0.75, other=4),  # in the band, but LLM resolution is off for this message
        **{facts.facts[0].text: unit_vector(DIMS, (10 + i, 1.0)) for i, facts in enumerate(messages.values())},
    }
    judge = Disambiguator({"G. Maturana": "person:guilherme_maturana", "Gabriel Matos": None})
    pipeline = pipeline_for(extract=ExtractionByMessage(messages), disambiguate=judge, vectors=vectors, kind="llm")
    at = iter(T0 + timedelta(hours=hour) for hour in range(10))
    first, second, third, fourth = (pipeline.write(message, next(at)) for message in list(messages)[:4])
    pipeline.write("O Gui Mat respondeu.", next(at), enable_llm_resolution=False)

    assert [call.mention for call in judge.calls] == ["G. Maturana", "Gabriel Matos"]
    asked = judge.calls[0]
    assert [c.canonical_key for c in asked.candidates] == ["person:guilherme_maturana"]
    assert asked.candidates[0].similarity == pytest.approx(0.70, abs=1e-3)
    assert asked.message == "O G. Maturana fechou o contrato."

    facts = pipeline.facts()
    assert facts["G. Maturana fechou o contrato"]["entity_key"] == "person:guilherme_maturana"
    assert facts["Gabriel Matos ligou para o Rafael"]["entity_key"] == "person:gabriel_matos"
    assert facts["Gilda Moura mandou flores"]["entity_key"] == "person:gilda_moura"
    assert facts["Gui Mat respondeu"]["entity_key"] == "person:gui_mat"
    entities = pipeline.memory.entities(pipeline.agent_id)
    assert {"person:guilherme_maturana", "person:gabriel_matos", "person:gilda_moura", "person:gui_mat"} <= set(
        entities
    )
    assert "person:g_maturana" not in entities
    assert entities["person:guilherme_maturana"]["fact_count"] == 2
    # The name the LLM matched is now an alias: next time it resolves without asking.
    assert pipeline.memory.aliases(pipeline.agent_id)["g. maturana"] == "person:guilherme_maturana"
    assert all(pipeline.result(event)["success"] for event in (first, second, third, fourth))


# --- W18 attribute keys ---------------------------------------------------------------------


def test_attribute_keys_follow_the_canonicalisation_chain_with_the_deployments_keys(
    pipeline_for: Callable[..., Pipeline],
) -> None:
    message = "Sobre mim: café, espresso, xícaras, Grêmio, bicicleta, design."
    proposed = {
        "Rafael bebe café coado": "preference.coffee",  # exact: a deployment key
        "Rafael prefere espresso": "Fav Drink",  # punctuation variant of a deployment alias
        "Rafael coleciona xícaras": "hobbies.coffee",  # suffix of exactly one known key
        "Rafael torce para o Grêmio": "sport.team",  # open catalogue: a deployment namespace
        "Rafael tem uma bicicleta": "zzz.stuff",  # unknown namespace: the key is dropped
        "Rafael trabalha como designer": "job",  # built-in alias
    }
    extraction = ExtractionByMessage(
        {message: _facts_of(*(ExtractedFact(subject="Rafael", text=t, attribute_key=k) for t, k in proposed.items()))}
    )
    vectors = {text: unit_vector(DIMS, (index, 1.0)) for index, text in enumerate(proposed)}
    pipeline = pipeline_for(extract=extraction, vectors=vectors)
    pipeline.write(
        message,
        T0,
        extra_attribute_keys=["preference.coffee"],
        attribute_aliases={"fav_drink": "preference.coffee"},
        extra_namespaces=["sport"],
    )
    keys = {text: row["attribute_key"] for text, row in pipeline.facts().items()}
    assert keys == {
        "Rafael bebe café coado": "preference.coffee",
        "Rafael prefere espresso": "preference.coffee",
        "Rafael coleciona xícaras": "preference.coffee",
        "Rafael torce para o Grêmio": "sport.team",
        "Rafael tem uma bicicleta": None,  # the fact is kept, only its key is dropped
        "Rafael trabalha como designer": "work.occupation",
    }
    registry = {
        row["key"]: (row["status"], row["seen_count"])
        for row in pipeline.memory.rows(
            "SELECT key, status, seen_count FROM memory_attribute_registry WHERE agent_id = :a", a=pipeline.agent_id
        )
    }
    assert registry == {
        "preference.coffee": ("active", 1),
        "sport.team": ("proposed", 1),
        "work.occupation": ("active", 1),
    }


# --- W13/W14 DELETE, W16 cascade and reinforcement, W18 corrections ----------------------------


def _acme(text: str, *, relation: bool) -> ExtractionOutput:
    return _facts_of(
        ExtractedFact(subject="Rafael", text=text, attribute_key="work.employer"),
        entities=[ExtractedEntity(name="Acme", type="organization")],
        relations=[ExtractedRelation(source="Rafael", target="Acme", type="works_at")] if relation else [],
    )


def test_a_retraction_the_llm_judges_delete_closes_the_fact_and_its_edge(
    pipeline_for: Callable[..., Pipeline],
) -> None:
    said = "Trabalho na Acme."
    retracted = "Não trabalho mais na Acme."
    extraction = ExtractionByMessage(
        {
            said: _acme("Rafael trabalha na Acme", relation=True),
            retracted: _acme("Rafael não trabalha mais na Acme", relation=False),
        }
    )
    vectors = {"Rafael trabalha na Acme": unit_vector(DIMS, (0, 1.0)), "Rafael não trabalha mais na Acme": _near(0.8)}

    def retract(question: ReconcileInput) -> ReconcileOutput:
        return ReconcileOutput(action="DELETE", target_fact_id=question.existing[0].fact_id, reason="retracted")

    judge = Reconciler(retract)
    pipeline = pipeline_for(extract=extraction, reconcile=judge, vectors=vectors, kind="llm")
    pipeline.write(said, T0)
    assert judge.calls == []  # nothing similar yet: the fast path adds without asking
    later = T0 + timedelta(days=30)
    event = pipeline.write(retracted, later)

    assert len(judge.calls) == 1
    assert judge.calls[0].existing[0].similarity == pytest.approx(0.8, abs=1e-3)
    facts = pipeline.facts()
    assert list(facts) == ["Rafael trabalha na Acme"]  # the retraction closes, it adds nothing
    closed = facts["Rafael trabalha na Acme"]
    assert closed["valid_to"] == later
    assert closed["invalidated_at"] is not None
    assert pipeline.facts(active=True) == {}
    [edge] = pipeline.memory.relationships(pipeline.agent_id)
    assert (edge["rel_type"], edge["valid_to"]) == ("works_at", later)
    result = pipeline.result(event)
    assert [change["fact_id"] for change in result["facts_deleted"]] == [str(closed["id"])]
    assert result["facts_added"] == []
    assert result["facts_updated"] == []


def test_repeating_a_relation_reinforces_its_strength_up_to_the_cap(pipeline_for: Callable[..., Pipeline]) -> None:
    messages = [f"Trabalho na Acme ({n})." for n in range(6)]
    extraction = ExtractionByMessage({m: _acme("Rafael trabalha na Acme", relation=True) for m in messages})
    pipeline = pipeline_for(extract=extraction)
    strengths = []
    for day, message in enumerate(messages):
        pipeline.write(message, T0 + timedelta(days=day))
        [edge] = pipeline.memory.relationships(pipeline.agent_id)
        strengths.append(round(edge["strength"], 6))
    # 0.8 when first said, +0.05 with each repetition, never past relationship_max_strength (1.0).
    assert strengths == [0.8, 0.85, 0.9, 0.95, 1.0, 1.0]
    [fact] = pipeline.facts().values()
    assert fact["reinforcement_count"] == 5
    assert fact["last_confirmed_at"] == T0 + timedelta(days=5)


def test_corrections_are_counted_on_the_value_that_was_replaced(pipeline_for: Callable[..., Pipeline]) -> None:
    cities = {
        "Moro em São Paulo.": "Rafael mora em São Paulo",
        "Agora moro no Rio.": "Rafael mora no Rio",
        "Me mudei para Curitiba.": "Rafael mora em Curitiba",
        "Morei em Recife antes de tudo.": "Rafael morava em Recife",
        "Ainda moro em Curitiba.": "Rafael mora em Curitiba",
    }
    extraction = ExtractionByMessage(
        {
            message: _facts_of(ExtractedFact(subject="Rafael", text=text, attribute_key="location.residence"))
            for message, text in cities.items()
        }
    )
    offline = build_offline_write_skills().reconcile

    def judge(question: ReconcileInput) -> ReconcileOutput:
        # The first move is judged an UPDATE; later ones ADD and the single-valued slot rule
        # supersedes (what an LLM that missed the conflict leaves behind).
        if "Rio" in question.new_text:
            return ReconcileOutput(action="UPDATE", target_fact_id=question.existing[0].fact_id)
        outcome = offline.run(question)
        assert outcome.output is not None
        return outcome.output if outcome.output.action == "NOOP" else ReconcileOutput(action="ADD")

    pipeline = pipeline_for(extract=extraction, reconcile=Reconciler(judge))
    days = [0, 10, 20, 30]
    events = [
        pipeline.write(message, T0 + timedelta(days=day)) for day, message in zip(days, list(cities)[:3], strict=False)
    ]
    late = pipeline.write("Morei em Recife antes de tudo.", T0 - timedelta(days=100))  # arrives last, said first
    again = pipeline.write("Ainda moro em Curitiba.", T0 + timedelta(days=40))  # a repetition corrects nothing

    counts = {text: row["user_correction_count"] for text, row in pipeline.facts().items()}
    assert counts == {
        "Rafael morava em Recife": 1,
        "Rafael mora em São Paulo": 1,
        "Rafael mora no Rio": 1,
        "Rafael mora em Curitiba": 0,
    }
    assert list(pipeline.facts(active=True)) == ["Rafael mora em Curitiba"]

    # Each message's result names what it corrected (the seeds' CorrectionResult).
    ids = {text: str(row["id"]) for text, row in pipeline.facts().items()}
    reported = {event: pipeline.result(event)["corrections"] for event in [*events, late, again]}
    assert reported[events[0]] == {"corrections_detected": 0, "corrected_keys": [], "facts_corrected_ids": []}
    assert reported[events[1]] == {
        "corrections_detected": 1,
        "corrected_keys": ["location.residence"],
        "facts_corrected_ids": [ids["Rafael mora em São Paulo"]],
    }
    assert reported[events[2]]["facts_corrected_ids"] == [ids["Rafael mora no Rio"]]
    assert reported[late]["facts_corrected_ids"] == [ids["Rafael morava em Recife"]]
    assert reported[again]["corrections_detected"] == 0
