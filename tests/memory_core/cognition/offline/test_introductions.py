"""Self-introductions and greetings: a name is an alias of the speaker, never a tautology like "Hi, Sam is Sam."."""

from __future__ import annotations

import pytest

from tests.memory_core.cognition.offline.conftest import Extract

# The introductions the issue quotes, in English and Portuguese, and a few other wordings.
INTRODUCTIONS = [
    "Hi, I'm Sam.",
    "Hello, my name is Sam.",
    "Oi, eu sou o Sam.",
    "Olá, meu nome é Sam.",
    "Oi, me chamo Sam.",
    "My name is Sam.",
    "Call me Sam.",
]


@pytest.mark.parametrize("message", INTRODUCTIONS)
def test_introducing_oneself_by_one_s_own_name_stores_no_fact(extract: Extract, message: str) -> None:
    output = extract(message, speaker="Sam")
    assert output.facts == []  # not "Hi, Sam is Sam." nor "Hello, Sam's name is Sam."
    assert [(entity.name, entity.type) for entity in output.entities] == [("Sam", "person")]


@pytest.mark.parametrize(
    ("message", "fact"),
    [
        ("Hi, I'm Sam.", "User's name is Sam."),
        ("Hello, my name is Sam.", "User's name is Sam."),
        ("Call me Sam.", "User's name is Sam."),
        ("Oi, eu sou o Sam.", "O nome de user é Sam."),
        ("Meu nome é Sam.", "O nome de user é Sam."),
        ("Me chamo Sam.", "O nome de user é Sam."),
    ],
)
def test_a_speaker_known_by_another_name_gets_the_name_as_an_alias_and_one_name_fact(
    extract: Extract, message: str, fact: str
) -> None:
    output = extract(message, speaker="user")
    assert [(f.subject, f.text, f.attribute_key) for f in output.facts] == [("user", fact, "personal.name")]
    # One entity, the speaker, with the name as an alias: "Sam" is not someone else.
    assert [(entity.name, entity.aliases) for entity in output.entities] == [("user", ["Sam"])]


def test_the_introduction_is_stated_once_in_one_wording(extract: Extract) -> None:
    output = extract("Hi, I'm Sam. My name is Sam. Call me Sam.", speaker="user")
    assert [fact.text for fact in output.facts] == ["User's name is Sam."]


@pytest.mark.parametrize(
    ("message", "fact"),
    [
        ("I'm Sam and I have a cat named Luna.", "Sam has a cat named Luna."),
        ("Hi, I'm Sam and I live in Lisbon.", "Sam lives in Lisbon."),
        ("Oi, eu sou o Sam e moro em Lisboa.", "Sam mora em Lisboa."),
    ],
)
def test_what_follows_an_introduction_is_still_a_fact(extract: Extract, message: str, fact: str) -> None:
    output = extract(message, speaker="Sam")
    assert [f.text for f in output.facts] == [fact]


@pytest.mark.parametrize(
    ("message", "fact"),
    [
        ("Hi, I moved to Porto last year.", "Sam moved to Porto last year (2024)."),
        ("Oi, eu moro em Lisboa.", "Sam mora em Lisboa."),
        ("Hi, I'm tired today.", "Sam is tired today (15 June 2025)."),
    ],
)
def test_a_greeting_before_a_comma_is_left_out_of_the_fact(extract: Extract, message: str, fact: str) -> None:
    assert [f.text for f in extract(message, speaker="Sam").facts] == [fact]


@pytest.mark.parametrize("message", ["Sam is Sam.", "Sam é o Sam."])
def test_a_fact_whose_subject_and_object_are_one_entity_is_not_stored(extract: Extract, message: str) -> None:
    assert extract(message, speaker="Ana").facts == []


def test_the_copula_alone_is_not_taken_for_a_name_without_a_greeting(extract: Extract) -> None:
    # "I'm Brazilian" names no one: it stays a plain fact about the speaker.
    assert [f.text for f in extract("I'm Brazilian.", speaker="Sam").facts] == ["Sam is Brazilian."]
