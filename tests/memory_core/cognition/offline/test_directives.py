"""The procedural-memory rule twins: detection (English directives from English and Portuguese), judge, block."""

from __future__ import annotations

import pytest

from memory_core.cognition.offline.directives import compose_block, detect_directives, judge_contradiction


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Oi! Por favor, responda sempre em português.", ["Always answer in Portuguese."]),
        ("I want you to reply in Spanish from now on", ["Always answer in Spanish."]),
        ("Não me chame de senhor, por favor.", ['Do not call the user "senhor".']),
        ("Don't call me sir anymore!", ['Do not call the user "sir".']),
        ("Me chame de Rafa.", ['Call the user "Rafa".']),
        ("Seja mais conciso. Não use emojis.", ["Keep answers brief.", "Do not use emojis."]),
        ("Never ask me about my ex.", ["Never ask the user about the user's ex."]),
        ("Stop sending me links.", ["Do not send the user links."]),
        # Habits, facts and small talk are not instructions to the assistant.
        ("I always use the bus to work.", []),
        ("I speak in English at work.", []),
        ("Don't worry about it, thanks!", []),
        ("Hi, how are you?", []),
    ],
)
def test_detection_writes_directives_in_english(message: str, expected: list[str]) -> None:
    assert [directive.text for directive in detect_directives(message, "Rafael")] == expected


def test_the_assistant_gives_no_directives_to_itself() -> None:
    assert detect_directives("Always answer in Portuguese.", "assistant") == []


@pytest.mark.parametrize(
    ("new", "existing", "contradicts"),
    [
        ("Always answer in English.", "Always answer in Portuguese.", True),
        ('Do not call the user "Rafa".', 'Call the user "Rafa".', True),
        ("Always use emojis.", "Do not use emojis.", True),
        ("Keep answers brief and concise.", "Keep answers brief.", False),
        ("Do not use emojis.", "Always answer in Portuguese.", False),
    ],
)
def test_the_judge_rules(new: str, existing: str, contradicts: bool) -> None:
    assert judge_contradiction(new, existing).contradicts is contradicts


def test_the_block_keeps_the_order_and_the_budget() -> None:
    directives = ["Always answer in Portuguese.", "Do not use emojis."]
    block = compose_block("You are Lia.", directives, 300)
    assert block.splitlines() == [
        "You are Lia.",
        "",
        "Follow these instructions learned from the user:",
        "- Always answer in Portuguese.",
        "- Do not use emojis.",
    ]
    # A tight budget drops the header before it drops a directive, and never overflows.
    assert compose_block("", directives, 8) == "- Always answer in Portuguese."
    assert compose_block("", directives, 1) == ""
    assert compose_block("", [], 300) == ""
