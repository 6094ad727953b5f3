"""The parts of a batched answer, each numbered after the item it answers (1..count).

A batched call (extraction of several messages, decisions on several facts) asks the model to
number each part. A part is usable when it parses and its number is answered exactly once; the
others leave their item with the reason, and the item goes to its single call afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["NumberedAnswers", "sort_numbered"]

PartT = TypeVar("PartT", bound=BaseModel)


@dataclass
class NumberedAnswers(Generic[PartT]):
    """``usable``: number -> its part, answered once and parsed. ``errors``: per item (from 0), why
    it has no usable part; the caller sets ``None`` where it accepts one."""

    usable: dict[int, PartT]
    errors: list[str | None]


def sort_numbered(
    parts: list[Any], part_model: type[PartT], count: int, *, missing: str, unusable: str, repeated: str
) -> NumberedAnswers[PartT]:
    """``parts`` (parsed parts or raw dicts, each with an ``index``) sorted by the item they answer.

    ``missing``, ``unusable`` and ``repeated`` say why an item has no part: none answered it, its
    part does not parse (``unusable: <the first problem>``), or it was answered more than once.
    A part numbered outside 1..count has no item to be attributed to and is dropped.
    """
    errors: list[str | None] = [missing] * count
    answered: dict[int, int] = {}
    parsed: dict[int, PartT] = {}
    for raw in parts:
        try:
            part = raw if isinstance(raw, part_model) else part_model.model_validate(raw)
        except ValidationError as error:
            # Which item it was for is known only if the number itself is readable.
            index = raw.get("index") if isinstance(raw, dict) else None
            if isinstance(index, int) and 1 <= index <= count:
                errors[index - 1] = f"{unusable}: {error.errors()[0]['msg']}"
                answered[index] = answered.get(index, 0) + 1
            continue
        index = part.index  # type: ignore[attr-defined]  # every part model numbers its item
        if not isinstance(index, int) or not 1 <= index <= count:
            continue
        answered[index] = answered.get(index, 0) + 1
        parsed[index] = part
    usable: dict[int, PartT] = {}
    for index, part in parsed.items():
        if answered[index] > 1:
            errors[index - 1] = repeated
        else:
            usable[index] = part
    return NumberedAnswers(usable=usable, errors=errors)
