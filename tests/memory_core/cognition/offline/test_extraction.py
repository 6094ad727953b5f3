"""Offline extraction: what a user would check in the facts, entities and relations of a message."""

from __future__ import annotations

import pytest

from memory_core.cognition.models import ExtractedEntity, ExtractedFact, ExtractionOutput, KnownEntity
from memory_core.cognition.offline.extraction import OfflineExtractionSkill
from tests.memory_core.cognition.offline.conftest import Extract


def _entity(output: ExtractionOutput, name: str) -> ExtractedEntity:
    matches = [entity for entity in output.entities if entity.name == name]
    assert matches, f"no entity {name!r} in {[e.name for e in output.entities]}"
    return matches[0]


def _relations(output: ExtractionOutput) -> set[tuple[str, str, str]]:
    return {(relation.source, relation.type, relation.target) for relation in output.relations}


def _only_fact(output: ExtractionOutput) -> ExtractedFact:
    assert len(output.facts) == 1, [fact.text for fact in output.facts]
    return output.facts[0]


# --- Portuguese residence --------------------------------------------------------------


def test_portuguese_residence_resolves_the_speaker_and_keeps_the_wording(extract: Extract) -> None:
    output = extract("Eu moro em São Paulo.")
    fact = _only_fact(output)
    assert fact.subject == "Rafael"
    assert fact.text == "Rafael mora em São Paulo."
    assert fact.attribute_key == "location.residence"
    assert fact.confidence_level == "explicit_statement"
    assert _entity(output, "São Paulo").type == "place"
    assert _entity(output, "Rafael").type == "person"
    assert ("Rafael", "lives_in", "São Paulo") in _relations(output)


def test_moving_in_portuguese_fills_the_residence_slot(extract: Extract) -> None:
    output = extract("Me mudei para o Rio de Janeiro.")
    fact = _only_fact(output)
    assert fact.text == "Rafael se mudou para o Rio de Janeiro."
    assert fact.attribute_key == "location.residence"
    assert fact.importance_category == "relationship_change"
    assert _entity(output, "Rio de Janeiro").type == "place"
    assert _relations(output) == {("Rafael", "lives_in", "Rio de Janeiro")}


def test_pronoun_dropped_first_person_verbs_are_the_speakers(extract: Extract) -> None:
    output = extract("Moro em Lisboa e trabalho na Vertix.")
    texts = [fact.text for fact in output.facts]
    assert texts == ["Rafael mora em Lisboa.", "Rafael trabalha na Vertix."]
    assert [fact.attribute_key for fact in output.facts] == ["location.residence", "work.employer"]
    assert {fact.subject for fact in output.facts} == {"Rafael"}
    assert _relations(output) == {("Rafael", "lives_in", "Lisboa"), ("Rafael", "works_at", "Vertix")}


# --- English residence and employment ----------------------------------------------------


def test_english_move_and_job_give_both_slots_and_relations(extract: Extract) -> None:
    output = extract("I moved to Berlin last year and I work at Acme Corp.")
    keys = {fact.attribute_key for fact in output.facts}
    assert {"location.residence", "work.employer"} <= keys
    assert all(fact.subject == "Rafael" for fact in output.facts)
    assert all("Rafael" in fact.text and " I " not in f" {fact.text} " for fact in output.facts)
    assert "Rafael works at Acme Corp." in [fact.text for fact in output.facts]
    assert _entity(output, "Berlin").type == "place"
    assert _entity(output, "Acme Corp").type == "organization"
    assert _relations(output) == {("Rafael", "lives_in", "Berlin"), ("Rafael", "works_at", "Acme Corp")}


def test_english_first_person_forms_are_rewritten(extract: Extract) -> None:
    output = extract("I'm a nurse. I've been working at Google for five years. My dad taught me chess.")
    texts = [fact.text for fact in output.facts]
    assert texts == [
        "Rafael is a nurse.",
        "Rafael has been working at Google for five years.",
        "Rafael's dad taught Rafael chess.",
    ]
    assert output.facts[0].attribute_key == "work.occupation"
    assert output.facts[1].attribute_key == "work.employer"


def test_present_tense_verbs_after_i_take_an_s(extract: Extract) -> None:
    output = extract("I really enjoy playing tennis on weekends. I study medicine. I watch movies every Friday.")
    assert [fact.text for fact in output.facts] == [
        "Rafael really enjoys playing tennis on weekends.",
        "Rafael studies medicine.",
        "Rafael watches movies every Friday.",
    ]


# --- the seeds' Clara Rezende example ---------------------------------------------------


def test_clara_rezende_changes_jobs(extract: Extract) -> None:
    output = extract(
        "Clara Rezende saiu da Vertix e foi pra Orion Tech como head de engenharia. "
        "O Thiago Nogueira a contratou pessoalmente."
    )
    types = {entity.name: entity.type for entity in output.entities}
    assert types == {
        "Clara Rezende": "person",
        "Vertix": "organization",
        "Orion Tech": "organization",
        "Thiago Nogueira": "person",
    }
    assert [fact.subject for fact in output.facts] == ["Clara Rezende", "Thiago Nogueira"]
    assert output.facts[0].text.startswith("Clara Rezende saiu da Vertix")
    assert output.facts[0].attribute_key == "work.employer"
    assert output.facts[1].text == "O Thiago Nogueira a contratou pessoalmente."
    relations = _relations(output)
    assert ("Clara Rezende", "works_at", "Orion Tech") in relations
    assert ("Clara Rezende", "former_employee_of", "Vertix") in relations
    assert "Rafael" not in types  # the speaker says nothing about themself here


def test_leaving_an_employer_in_english(extract: Extract) -> None:
    output = extract("I left Google last month and joined Stripe.")
    fact = _only_fact(output)
    assert fact.attribute_key == "work.employer"
    assert _relations(output) == {("Rafael", "former_employee_of", "Google"), ("Rafael", "works_at", "Stripe")}


@pytest.mark.parametrize(
    "message",
    ["I don't work at Acme anymore.", "I no longer work at Acme.", "Não trabalho mais na Acme."],
)
def test_no_longer_working_somewhere(extract: Extract, message: str) -> None:
    output = extract(message)
    fact = _only_fact(output)
    assert fact.attribute_key == "work.employer"
    assert _relations(output) == {("Rafael", "former_employee_of", "Acme")}


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ("I no longer like jazz.", "Rafael no longer likes jazz."),
        ("I no longer work at Acme.", "Rafael no longer works at Acme."),
        ("I really like jazz.", "Rafael really likes jazz."),
        ("I hardly ever drink coffee.", "Rafael hardly ever drinks coffee."),
    ],
)
def test_the_verb_after_an_adverb_is_put_in_the_third_person(extract: Extract, message: str, text: str) -> None:
    assert _only_fact(extract(message)).text == text


@pytest.mark.parametrize(
    ("message", "key"),
    [
        ("I don't like jazz.", "preference.dislike"),
        ("Eu não gosto de jazz.", "preference.dislike"),
        ("I no longer like jazz.", "preference.like"),
        ("I don't like jazz anymore.", "preference.like"),
        ("Eu não gosto mais de jazz.", "preference.like"),
    ],
)
def test_a_negated_like_is_a_dislike_but_a_retracted_one_keeps_the_like_slot(
    extract: Extract, message: str, key: str
) -> None:
    assert _only_fact(extract(message)).attribute_key == key


def test_liking_one_thing_more_than_another_is_not_a_retraction(extract: Extract) -> None:
    assert _only_fact(extract("Eu gosto mais de jazz do que de rock.")).attribute_key != "preference.like"


def test_a_negated_residence_keeps_the_slot_but_makes_no_relation(extract: Extract) -> None:
    output = extract("Ana no longer lives in Paris.")
    fact = _only_fact(output)
    assert fact.subject == "Ana"
    assert fact.attribute_key == "location.residence"
    assert output.relations == []


def test_plans_are_goals_not_a_new_residence(extract: Extract) -> None:
    output = extract("I'm going to move to Lisbon next year.")
    fact = _only_fact(output)
    assert fact.attribute_key == "goal.plan"
    assert output.relations == []


# --- aliases, hints, known entities -------------------------------------------------------


def test_parenthetical_alias_is_one_entity_with_the_longer_name(extract: Extract) -> None:
    output = extract("Meu amigo Guili (Guilherme Maturana) trabalha na Vertix")
    guilherme = _entity(output, "Guilherme Maturana")
    assert guilherme.type == "person"
    assert guilherme.aliases == ["Guili"]
    assert not [entity for entity in output.entities if entity.name == "Guili"]
    fact = _only_fact(output)
    assert fact.subject == "Guilherme Maturana"
    assert fact.attribute_key == "work.employer"
    assert "Rafael" in fact.text
    assert "Guili" in fact.text
    relations = _relations(output)
    assert ("Rafael", "friend_of", "Guilherme Maturana") in relations
    assert ("Guilherme Maturana", "works_at", "Vertix") in relations


def test_alias_in_either_order(extract: Extract) -> None:
    output = extract("Guilherme Maturana (Guili) mora em Curitiba.")
    assert _entity(output, "Guilherme Maturana").aliases == ["Guili"]
    assert _relations(output) == {("Guilherme Maturana", "lives_in", "Curitiba")}


def test_relational_hint_is_dropped_from_the_entity(extract: Extract) -> None:
    output = extract("Carol (namorada do Rafael) adora jazz")
    carol = _entity(output, "Carol")
    assert carol.type == "person"
    assert not [entity for entity in output.entities if "namorada" in entity.name]
    fact = _only_fact(output)
    assert fact.subject == "Carol"
    assert fact.attribute_key == "preference.like"
    assert ("Rafael", "partner_of", "Carol") in _relations(output)


def test_known_alias_maps_to_the_known_entity(extract: Extract) -> None:
    known = [
        KnownEntity(
            name="Guili",
            canonical_key="person:guilherme_maturana",
            display_name="Guilherme Maturana",
            entity_type="person",
        )
    ]
    output = extract("O guili agora trabalha na Orion Tech.", known=known)
    fact = _only_fact(output)
    assert fact.subject == "Guilherme Maturana"
    guilherme = _entity(output, "Guilherme Maturana")
    assert guilherme.type == "person"
    assert "guili" in [alias.lower() for alias in guilherme.aliases]
    assert ("Guilherme Maturana", "works_at", "Orion Tech") in _relations(output)


def test_blind_extraction_ignores_known_entities(extract: Extract) -> None:
    known = [
        KnownEntity(name="Guili", canonical_key="person:g", display_name="Guilherme Maturana", entity_type="person")
    ]
    output = extract("O Guili trabalha na Orion Tech.", known=known, name="extract_blind")
    assert _only_fact(output).subject == "Guili"


def test_a_longer_name_around_a_known_one_is_someone_else(extract: Extract) -> None:
    known = [KnownEntity(name="Ana", canonical_key="person:ana_souza", display_name="Ana Souza", entity_type="person")]
    output = extract("Ana Paula mora em Recife. Ana mora em Natal.", known=known)
    assert [fact.subject for fact in output.facts] == ["Ana Paula", "Ana Souza"]


# --- family, partners, friends, pets -------------------------------------------------------


def test_my_sister_ana_is_a_doctor(extract: Extract) -> None:
    output = extract("My sister Ana is a doctor.")
    fact = _only_fact(output)
    assert fact.subject == "Ana"
    assert fact.text == "Rafael's sister Ana is a doctor."
    assert fact.attribute_key == "work.occupation"
    assert ("Rafael", "sibling_of", "Ana") in _relations(output)


def test_minha_esposa_se_chama_ana(extract: Extract) -> None:
    output = extract("Minha esposa se chama Ana")
    fact = _only_fact(output)
    assert fact.text == "A esposa de Rafael se chama Ana"
    assert fact.subject == "Rafael"
    assert fact.attribute_key == "relationship.partner"
    assert _relations(output) == {("Rafael", "partner_of", "Ana")}


@pytest.mark.parametrize(
    ("message", "relation", "key"),
    [
        ("My wife Ana loves to cook.", ("Rafael", "partner_of", "Ana"), "preference.like"),
        ("Sarah é minha esposa.", ("Rafael", "partner_of", "Sarah"), "relationship.partner"),
        ("I'm married to Beatriz.", ("Rafael", "partner_of", "Beatriz"), "relationship.partner"),
        ("Sou casado com a Beatriz há dez anos.", ("Rafael", "partner_of", "Beatriz"), "relationship.partner"),
        ("Meu namorado Lucas é engenheiro.", ("Rafael", "partner_of", "Lucas"), "work.occupation"),
        ("Ana é minha irmã.", ("Rafael", "sibling_of", "Ana"), "family.sibling"),
        ("My brother Pedro lives in Porto.", ("Rafael", "sibling_of", "Pedro"), "location.residence"),
        ("Meu irmão Pedro mora no Porto.", ("Rafael", "sibling_of", "Pedro"), "location.residence"),
        ("My mom Maria lives in Recife.", ("Maria", "parent_of", "Rafael"), "location.residence"),
        ("Minha mãe se chama Maria.", ("Maria", "parent_of", "Rafael"), "family.parent"),
        ("Meu pai João é médico.", ("João", "parent_of", "Rafael"), "work.occupation"),
        ("My daughter Sofia started school.", ("Rafael", "parent_of", "Sofia"), "family.parent"),
        ("Minha filha se chama Sofia.", ("Rafael", "parent_of", "Sofia"), "family.child"),
        ("My friend Tom plays guitar.", ("Rafael", "friend_of", "Tom"), "relationship.friend"),
        ("Minha amiga Júlia adora vinho.", ("Rafael", "friend_of", "Júlia"), "preference.like"),
    ],
)
def test_family_partner_and_friend_words(
    extract: Extract, message: str, relation: tuple[str, str, str], key: str | None
) -> None:
    output = extract(message)
    assert relation in _relations(output)
    named = relation[2] if relation[0] == "Rafael" else relation[0]
    assert _entity(output, named).type == "person"
    assert _only_fact(output).attribute_key == key


def test_naming_a_partner_in_passing_does_not_claim_the_partner_slot(extract: Extract) -> None:
    output = extract("Hoje fui ao cinema com minha namorada Júlia.")
    fact = _only_fact(output)
    assert fact.text == "Hoje (15 de junho de 2025) Rafael foi ao cinema com a namorada de Rafael, Júlia."
    assert fact.attribute_key is None
    assert fact.importance_category == "specific_event"
    assert ("Rafael", "partner_of", "Júlia") in _relations(output)


@pytest.mark.parametrize(
    ("message", "pet"),
    [
        ("I have a dog named Rex", "Rex"),
        ("my dog Rex loves the beach", "Rex"),
        ("We adopted a cat named Luna.", "Luna"),
        ("Meu cachorro Rex é muito bonzinho.", "Rex"),
        ("Minha gata Mia dorme o dia todo.", "Mia"),
        ("Tenho um cachorro chamado Thor.", "Thor"),
    ],
)
def test_pets_by_name(extract: Extract, message: str, pet: str) -> None:
    output = extract(message)
    assert _entity(output, pet).type == "pet"
    assert ("Rafael", "owns", pet) in _relations(output)


def test_owning_a_pet_fills_the_pet_attribute(extract: Extract) -> None:
    fact = _only_fact(extract("I have a dog named Rex"))
    assert fact.subject == "Rafael"
    assert fact.text == "Rafael has a dog named Rex"
    assert fact.attribute_key == "pet"


# --- occupations, likes, education ----------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "subject", "text"),
    [
        ("Ana é designer", "Ana", "Ana é designer"),
        ("I am a nurse", "Rafael", "Rafael is a nurse"),
        ("sou engenheiro", "Rafael", "Rafael é engenheiro"),
        ("I work as a data scientist.", "Rafael", "Rafael works as a data scientist."),
        ("A Bia trabalha como analista de dados.", "Bia", "A Bia trabalha como analista de dados."),
    ],
)
def test_occupations(extract: Extract, message: str, subject: str, text: str) -> None:
    fact = _only_fact(extract(message))
    assert (fact.subject, fact.text, fact.attribute_key) == (subject, text, "work.occupation")


def test_is_a_with_no_profession_is_not_an_occupation(extract: Extract) -> None:
    fact = _only_fact(extract("Berlin is a beautiful city."))
    assert fact.attribute_key is None


def test_likes_relate_only_to_named_things(extract: Extract) -> None:
    jazz = extract("Eu gosto de jazz.")
    assert _only_fact(jazz).attribute_key == "preference.like"
    assert _only_fact(jazz).importance_category == "stable_preference"
    assert jazz.relations == []
    beatles = extract("I love the Beatles.")
    assert _only_fact(beatles).attribute_key == "preference.like"
    assert _relations(beatles) == {("Rafael", "likes", "Beatles")}


@pytest.mark.parametrize("message", ["I don't like jazz.", "Não gosto de futebol.", "Odeio acordar cedo."])
def test_dislikes(extract: Extract, message: str) -> None:
    assert _only_fact(extract(message)).attribute_key == "preference.dislike"


def test_would_like_is_not_a_preference(extract: Extract) -> None:
    assert _only_fact(extract("I would like to visit Japan someday.")).attribute_key != "preference.like"


@pytest.mark.parametrize(
    ("message", "school"),
    [("Eu estudo medicina na USP.", "USP"), ("I study law at Harvard University.", "Harvard University")],
)
def test_education(extract: Extract, message: str, school: str) -> None:
    output = extract(message)
    assert _only_fact(output).attribute_key == "education.school"
    assert _entity(output, school).type == "organization"
    assert ("Rafael", "studies_at", school) in _relations(output)


def test_graduation_is_a_milestone(extract: Extract) -> None:
    fact = _only_fact(extract("Me formei na Unicamp em 2018."))
    assert fact.text == "Rafael se formou na Unicamp em 2018."
    assert fact.importance_category == "biographical_milestone"


# --- what is and is not a fact ---------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "oi",
        "hi",
        "hello!",
        "thanks!",
        "ok",
        "lol",
        "Olá!",
        "obrigado",
        "obrigada!",
        "valeu",
        "bom dia",
        "boa noite",
        "tudo bem?",
        "how are you?",
        "kkkkk",
        "Oi, tudo bem?",
        "Thank you so much!",
        "👍",
    ],
)
def test_small_talk_yields_nothing(extract: Extract, message: str) -> None:
    output = extract(message)
    assert output == ExtractionOutput()


@pytest.mark.parametrize(
    "message", ["Where do you live?", "Você sabe onde a Ana mora?", "Can you remind me to call mom?"]
)
def test_questions_and_requests_yield_no_facts(extract: Extract, message: str) -> None:
    assert extract(message).facts == []


def test_a_plain_sentence_without_pattern_is_still_the_speakers_fact(extract: Extract) -> None:
    output = extract("Went hiking yesterday with the kids.")
    fact = _only_fact(output)
    assert fact.subject == "Rafael"
    assert fact.text == "Rafael went hiking yesterday (14 June 2025) with the kids."
    assert fact.attribute_key is None
    assert fact.importance_category == "specific_event"
    assert [entity.name for entity in output.entities] == ["Rafael"]


def test_every_informative_sentence_becomes_a_fact(extract: Extract) -> None:
    output = extract("Oi! Hoje o dia foi corrido no trabalho. A reunião com o cliente atrasou duas horas. Valeu!")
    assert [fact.text for fact in output.facts] == [
        "Hoje (15 de junho de 2025) o dia foi corrido no trabalho.",
        "A reunião com o cliente atrasou duas horas.",
    ]
    assert {fact.subject for fact in output.facts} == {"Rafael"}


def test_he_and_she_refer_to_the_person_just_mentioned(extract: Extract) -> None:
    output = extract("My sister Ana lives in Rio. She is a lawyer.")
    assert [fact.subject for fact in output.facts] == ["Ana", "Ana"]
    assert output.facts[1].text == "Ana is a lawyer."
    assert output.facts[1].attribute_key == "work.occupation"


def test_compound_subjects_share_the_relation(extract: Extract) -> None:
    output = extract("João e Maria moram em Belo Horizonte.")
    assert {("João", "lives_in", "Belo Horizonte"), ("Maria", "lives_in", "Belo Horizonte")} <= _relations(output)


def test_remember_that_keeps_the_statement(extract: Extract) -> None:
    fact = _only_fact(extract("Remember that my sister's birthday is on May 3."))
    assert fact.text == "Rafael's sister's birthday is on May 3."


def test_portuguese_object_pronoun_and_possessive(extract: Extract) -> None:
    assert _only_fact(extract("Ana me contratou em 2019.")).text == "Ana contratou Rafael em 2019."
    assert _only_fact(extract("Ela me ligou ontem.")).text == "Ela ligou para Rafael ontem (14 de junho de 2025)."
    assert _only_fact(extract("O carro é meu.")).text == "O carro é de Rafael."


def test_hedges_lower_the_confidence(extract: Extract) -> None:
    weak = _only_fact(extract("I think Ana moved to Lisbon."))
    assert weak.confidence_level == "weak_inference"
    assert weak.subject == "Ana"
    assert _only_fact(extract("Talvez eu me mude para Lisboa.")).confidence_level == "speculation"
    assert _only_fact(extract("Acho que o Pedro se mudou para Curitiba.")).confidence_level == "weak_inference"


def test_facts_stay_in_the_message_language(extract: Extract) -> None:
    portuguese = extract("Eu trabalho na Vertix desde 2020.")
    english = extract("I have worked at Vertix since 2020.")
    assert _only_fact(portuguese).text == "Rafael trabalha na Vertix desde 2020."
    assert _only_fact(english).text == "Rafael has worked at Vertix since 2020."


# --- invariants ---------------------------------------------------------------------------------


_MESSAGES = [
    "Eu moro em São Paulo com minha esposa Ana e nossa filha Sofia.",
    "Rafael mora em Curitiba.",
    "My friend Rafael lives in Lisbon.",
    "Guilherme Maturana (Guili) e eu trabalhamos na Vertix.",
    "I love Rafael.",
]


@pytest.mark.parametrize("message", _MESSAGES)
def test_no_relation_points_at_its_own_source(extract: Extract, message: str) -> None:
    output = extract(message)
    for relation in output.relations:
        assert relation.source.lower() != relation.target.lower()
    names = {entity.name for entity in output.entities}
    for relation in output.relations:
        assert {relation.source, relation.target} <= names


@pytest.mark.parametrize("message", _MESSAGES)
def test_output_is_deterministic(extract: Extract, message: str) -> None:
    assert extract(message).model_dump() == extract(message).model_dump()


def test_max_facts_is_respected(extract: Extract) -> None:
    message = " ".join(f"Eu visitei a cidade número {n} ontem." for n in range(10))
    assert len(extract(message, max_facts=3).facts) == 3


def test_the_speakers_own_name_is_the_speaker(extract: Extract) -> None:
    output = extract("Rafael mora em Curitiba.")
    assert _only_fact(output).subject == "Rafael"
    assert [entity.name for entity in output.entities].count("Rafael") == 1


def test_output_round_trips_through_json(extract: Extract) -> None:
    output = extract("Meu amigo Guili (Guilherme Maturana) trabalha na Vertix e mora em Lisboa.")
    assert ExtractionOutput.model_validate_json(output.model_dump_json()) == output


def test_skill_names_and_empty_input() -> None:
    assert OfflineExtractionSkill().name == "extract_informed"
    assert OfflineExtractionSkill("extract_blind").name == "extract_blind"
    from datetime import UTC, datetime

    from memory_core.cognition.models import ExtractionInput

    outcome = OfflineExtractionSkill().run(
        ExtractionInput(message="   ", speaker_name="Rafael", occurred_at=datetime(2025, 1, 1, tzinfo=UTC))
    )
    assert outcome.output == ExtractionOutput()
    assert outcome.usage.is_zero
    assert not outcome.used_fallback
    assert outcome.duration_ms >= 0.0


@pytest.mark.parametrize("message", ["Pode ser que eu mude para Lisboa.", "Maybe I'll move to Berlin."])
def test_speculation_is_a_plan_without_relation(extract: Extract, message: str) -> None:
    output = extract(message)
    fact = _only_fact(output)
    assert fact.attribute_key == "goal.plan"
    assert fact.confidence_level == "speculation"
    assert output.relations == []


def test_the_speaker_in_a_compound_subject_with_an_unnamed_relative(extract: Extract) -> None:
    output = extract("Eu e minha esposa moramos em Lisboa.")
    assert _relations(output) == {("Rafael", "lives_in", "Lisboa")}
    assert _only_fact(output).attribute_key == "location.residence"


def test_an_unnamed_relatives_residence_is_not_the_speakers(extract: Extract) -> None:
    output = extract("My sister lives in Rio.")
    fact = _only_fact(output)
    assert fact.subject == "Rafael"
    assert fact.attribute_key == "family.sibling"
    assert output.relations == []


def test_contractions_and_acronyms(extract: Extract) -> None:
    output = extract("We're going to a LGBTQ support group yesterday.")
    names = {entity.name: entity.type for entity in output.entities}
    assert "We're" not in names
    assert names["LGBTQ"] == "organization"


# --- conversational replies and openers --------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "Love that! Tell me more.",
        "Good question, let me check.",
        "That sounds tough. Hang in there!",
        "That sounds wonderful!",
        "Happy to help! Anything else on your mind?",
        "Congratulations, that's great news!",
        "Sounds good to me.",
        "Hmm, let me think about it.",
        "Got it, I'll keep that in mind.",
        "Haha that's funny.",
        "Nice, good to know.",
        "Interesting!",
        "Adorei! Me conta mais.",
        "Boa pergunta, deixa eu ver.",
        "Entendi, vou lembrar disso.",
        "Fico feliz em ajudar! Mais alguma coisa?",
        "Parabéns, que notícia ótima!",
        "Hmm, deixa eu pensar.",
        "Legal, bom saber.",
        "Show, pode ser.",
        "Que fase, hein. Força!",
        "That sounds like a great plan!",
        "Sounds like a really fun idea.",
        "So exciting!",
        "Parece um ótimo plano!",
        "Que ideia ótima!",
    ],
)
def test_a_reply_that_says_nothing_new_is_not_remembered(extract: Extract, message: str) -> None:
    # An assistant's acknowledgements would otherwise become facts about it ("assistant loves that").
    assert extract(message, speaker="assistant") == ExtractionOutput()


@pytest.mark.parametrize(
    ("message", "fact"),
    [
        ("I really like hiking.", ("Rafael", "Rafael really likes hiking.")),
        ("Ana has a fun idea for her bakery.", ("Ana", "Ana has a fun idea for her bakery.")),
    ],
)
def test_reaction_words_in_a_sentence_that_tells_something_keep_it(
    extract: Extract, message: str, fact: tuple[str, str]
) -> None:
    found = _only_fact(extract(message))
    assert (found.subject, found.text) == fact


@pytest.mark.parametrize(
    ("message", "speaker", "expected", "opener"),
    [
        (
            "Fun fact: my parrot Kiwi learned a new trick today!",
            "Henry",
            ("Kiwi", "Henry's parrot Kiwi learned a new trick today (15 June 2025)!"),
            "Fun",
        ),
        ("Guess what, I moved to Lisbon.", "Noah", ("Noah", "Noah moved to Lisbon."), "Guess"),
        ("Hmm, Ana moved to Lisbon.", "Noah", ("Ana", "Ana moved to Lisbon."), "Hmm"),
        (
            "Olha só: eu moro em Goiânia, perto do centro.",
            "Isabela",
            ("Isabela", "Isabela mora em Goiânia, perto do centro."),
            "Olha",
        ),
        ("Sabia que eu moro em Goiânia.", "Isabela", ("Isabela", "Isabela mora em Goiânia."), "Sabia"),
        (
            "Big news: I'm moving to Boston in the spring!",
            "Isla",
            ("Isla", "Isla is moving to Boston in the spring!"),
            "Big",
        ),
        (
            "Ah, novidade: vou me mudar pra Recife no começo do ano!",
            "Ana",
            ("Ana", "Ana vai se mudar pra Recife no começo do ano!"),
            "Novidade",
        ),
        ("Beleza, a Carol mora em Niterói.", "Ana", ("Carol", "A Carol mora em Niterói."), "Beleza"),
    ],
)
def test_a_conversational_opener_is_not_a_name_and_not_part_of_the_fact(
    extract: Extract, message: str, speaker: str, expected: tuple[str, str], opener: str
) -> None:
    output = extract(message, speaker=speaker)
    assert opener not in {entity.name for entity in output.entities}
    fact = _only_fact(output)
    assert (fact.subject, fact.text) == expected


def test_an_opener_does_not_hide_a_question(extract: Extract) -> None:
    assert extract("Sabia que eu moro em Goiânia?", speaker="Isabela").facts == []


def test_an_opener_before_a_relative_keeps_the_relation(extract: Extract) -> None:
    output = extract("Sabia que meu irmão Diego começou a trabalhar na Shopify.", speaker="Camila")
    assert "Sabia" not in {entity.name for entity in output.entities}
    assert ("Diego", "works_at", "Shopify") in _relations(output)


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ("Vou me mudar para Lisboa.", "Rafael vai se mudar para Lisboa."),
        ("Quero me casar com a Ana.", "Rafael quer se casar com a Ana."),
        ("Eu acho que ela me ama.", "Rafael acha que ela ama Rafael."),
        ("Preciso me organizar melhor com o trabalho.", "Rafael precisa se organizar melhor com o trabalho."),
        ("Meu plano é me mudar para Lisboa.", "O plano de Rafael é se mudar para Lisboa."),
        ("Minha mãe quer me mudar de escola.", "A mãe de Rafael quer mudar Rafael de escola."),
    ],
)
def test_me_after_the_speakers_own_verb_is_reflexive(extract: Extract, message: str, text: str) -> None:
    assert _only_fact(extract(message)).text == text
