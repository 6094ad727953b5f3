"""Structured outputs: the ``response_format`` a skill asks for, built from its pydantic output model.

A skill asks for ``{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``
when its output model can be written as an OpenAI *strict* schema, else for JSON mode
(``{"type": "json_object"}``). What a provider does with it, and how it falls back when the
endpoint refuses it, is the provider's business (:mod:`memory_core.providers.openai_llm`,
:mod:`memory_core.providers.anthropic_llm`); the skill always validates the answer itself, with
tolerant parsing (:class:`~memory_core.cognition.llm_skill.LLMSkill`).

Strict schemas require every property, ``additionalProperties: false`` on every object and no
``default``. The ``openai`` package's own converter (``to_strict_json_schema``, what its
``parse`` helpers use) does the first two; defaults are removed here. A model with a free-form
mapping (``dict[str, str]``: an object whose keys are not known in advance) cannot be strict:
such a skill keeps JSON mode. Every call pays for the schema's characters, so it is then written
short with the same meaning: a definition used once in place of its ``$ref``, a nullable scalar as a
type list (``["string", "null"]``, strict mode's documented form).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from memory_core.providers.protocols import schema_instruction

__all__ = [
    "JSON_MODE",
    "compact_schema",
    "json_schema_format",
    "response_format_for",
    "schema_instruction",
    "strict_json_schema",
]

JSON_MODE: dict[str, str] = {"type": "json_object"}

_DEFS_PREFIX = "#/$defs/"

# OpenAI's rule for a json_schema name.
_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_-]")


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any] | None:
    """``model``'s JSON schema in OpenAI's strict form, or ``None`` when it cannot be strict."""
    try:
        from openai.lib._pydantic import to_strict_json_schema  # the SDK's converter, used by its parse helpers
    except ImportError:  # pragma: no cover - openai is a dependency; a trimmed install keeps JSON mode
        return None
    try:
        schema = to_strict_json_schema(model)
    except (TypeError, ValueError):
        return None
    # String lengths are keywords strict mode refuses (the whole request would be refused, and the
    # provider would fall back to JSON mode for every skill); the answer is still validated against them.
    _drop_keys(schema, ("default", "title", "minLength", "maxLength"))
    if not _is_strict(schema):
        return None
    # Every call pays for the schema's characters: the same schema, written shorter.
    _inline_single_use(schema)
    _fold_nullable(schema)
    return schema


def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema without titles (a prompt pays for every token of it)."""
    schema = model.model_json_schema()
    _drop_keys(schema, ("title",))
    return schema


def _drop_keys(node: Any, names: tuple[str, ...]) -> None:
    """Remove the keywords ``names`` from every schema of ``node`` (defaults, titles, string lengths).

    Titles only repeat property names; only keyword positions are touched (a property may be named "title").
    """
    if isinstance(node, dict):
        for name in names:
            node.pop(name, None)
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for child in value.values():
                    _drop_keys(child, names)
            else:
                _drop_keys(value, names)
    elif isinstance(node, list):
        for value in node:
            _drop_keys(value, names)


def _references(node: Any, counts: dict[str, int]) -> None:
    """Count, into ``counts``, the ``$ref`` of every definition in ``node``."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS_PREFIX):
            name = ref.removeprefix(_DEFS_PREFIX)
            counts[name] = counts.get(name, 0) + 1
        for value in node.values():
            _references(value, counts)
    elif isinstance(node, list):
        for value in node:
            _references(value, counts)


def _inline_single_use(schema: dict[str, Any]) -> None:
    """Write each definition referenced once in place of its ``$ref`` (its name, twice, was pure overhead).

    Definitions used several times, or by themselves (recursive models), stay in ``$defs``.
    """
    definitions = schema.get("$defs")
    if not isinstance(definitions, dict):
        return
    counts: dict[str, int] = {}
    _references(schema, counts)
    recursive: set[str] = set()
    for name, definition in definitions.items():
        own: dict[str, int] = {}
        _references(definition, own)
        if own.get(name):
            recursive.add(name)
    single = {name for name, count in counts.items() if count == 1 and name in definitions and name not in recursive}
    if not single:
        return

    def replace(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.removeprefix(_DEFS_PREFIX) in single and len(node) == 1:
                return replace(definitions[ref.removeprefix(_DEFS_PREFIX)])
            return {key: replace(value) for key, value in node.items()}
        if isinstance(node, list):
            return [replace(value) for value in node]
        return node

    kept = {name: definition for name, definition in definitions.items() if name not in single}
    body = replace({key: value for key, value in schema.items() if key != "$defs"})
    kept = {name: replace(definition) for name, definition in kept.items()}
    schema.clear()
    if kept:
        schema["$defs"] = kept
    schema.update(body)


def _fold_nullable(node: Any) -> None:
    """``{"anyOf": [{"type": T}, {"type": "null"}]}`` written as ``{"type": [T, "null"]}`` (strict mode's own form)."""
    if isinstance(node, dict):
        branches = node.get("anyOf")
        if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
            other = branches[0] if branches[1] == {"type": "null"} else branches[1]
            if isinstance(other, dict) and set(other) == {"type"} and isinstance(other["type"], str):
                del node["anyOf"]
                node["type"] = [other["type"], "null"]
        for value in node.values():
            _fold_nullable(value)
    elif isinstance(node, list):
        for value in node:
            _fold_nullable(value)


def _is_strict(node: Any) -> bool:
    """Whether every object of the schema is closed (``additionalProperties: false``) and fully required."""
    if isinstance(node, list):
        return all(_is_strict(value) for value in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" or "properties" in node:
        if node.get("additionalProperties", False) is not False:
            return False
        if set(node.get("required", [])) != set(node.get("properties", {})):
            return False
    return all(_is_strict(value) for key, value in node.items() if key != "required")


def json_schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` asking for a strict JSON schema named after the skill."""
    return {
        "type": "json_schema",
        "json_schema": {"name": _NAME_CHARACTERS.sub("_", name)[:64], "schema": schema, "strict": True},
    }


def response_format_for(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """What a skill named ``name`` answering ``model`` asks for: a strict schema when possible, else JSON mode."""
    schema = strict_json_schema(model)
    if schema is None:
        return dict(JSON_MODE)
    return json_schema_format(name, schema)
