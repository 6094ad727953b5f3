"""A batched answer's parts sorted by the item they answer, and why an item has none."""

from __future__ import annotations

from pydantic import BaseModel

from memory_core.cognition.llm.numbered_answers import sort_numbered


class _Part(BaseModel):
    index: int
    text: str


def test_each_item_gets_its_one_readable_part_or_the_reason_it_has_none() -> None:
    parts = [
        {"index": 1, "text": "first"},
        _Part(index=2, text="second, already parsed"),
        {"index": 3, "text": "third"},
        {"index": 3, "text": "third again"},
        {"index": 4},  # no text: unusable, but its number is readable
        {"index": 9, "text": "a number no item has"},
        {"text": "no number at all"},
    ]

    answers = sort_numbered(parts, _Part, 5, missing="none", unusable="bad", repeated="twice")

    assert {index: part.text for index, part in answers.usable.items()} == {1: "first", 2: "second, already parsed"}
    assert answers.errors[:2] == ["none", "none"]  # the caller clears these when it accepts the parts
    assert answers.errors[2] == "twice"
    assert str(answers.errors[3]).startswith("bad: ")
    assert answers.errors[4] == "none"


def test_an_unreadable_and_a_readable_part_for_one_item_count_as_two() -> None:
    answers = sort_numbered(
        [{"index": 1}, {"index": 1, "text": "fine"}], _Part, 1, missing="none", unusable="bad", repeated="twice"
    )
    assert answers.usable == {}
    assert answers.errors == ["twice"]
