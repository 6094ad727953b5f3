"""Structured outputs: strict schemas from the output models, the probe and its fallbacks, Claude's tool use.

Every request goes over real HTTP to the local stubs, through the real SDKs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, Field

from memory_core.cognition import LLMSkill
from memory_core.cognition.llm import build_llm_write_skills
from memory_core.cognition.llm_skill import JSON_MODE
from memory_core.cognition.maintenance_models import FactLine, SummaryInput
from memory_core.cognition.maintenance_skills import build_llm_maintenance_skills
from memory_core.cognition.models import EmotionInput, ExtractionInput
from memory_core.cognition.structured import response_format_for, strict_json_schema
from memory_core.providers import OpenAIChatProvider
from memory_core.providers.anthropic_llm import AnthropicChatProvider
from memory_core.read.rerank import LLMRerankSkill, RerankCandidate, RerankInput, RerankOutput
from tests.support.anthropic_stub import AnthropicStub
from tests.support.openai_stub import OpenAIStub, StubReply


class Pet(BaseModel):
    """A pet."""

    name: str
    species: str = "dog"
    age: int | None = None


class Household(BaseModel):
    """Who lives where."""

    city: str
    pets: list[Pet] = Field(default_factory=list)


class Tagged(BaseModel):
    """Free-form keys: no strict schema can say them."""

    tags: dict[str, str] = Field(default_factory=dict)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def household_skill(provider: Any) -> LLMSkill[str, Household]:
    return LLMSkill(
        name="find_household",
        system_prompt="Find where the user lives and their pets.",
        render_user=lambda message: f"Message: {message}",
        output_model=Household,
        provider=provider,
    )


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {key for value in node.values() for key in _keys(value)}
    if isinstance(node, list):
        return {key for value in node for key in _keys(value)}
    return set()


def test_strict_schemas_close_every_object_require_every_property_and_drop_defaults() -> None:
    schema = strict_json_schema(Household)
    assert schema is not None
    objects = list(_objects(schema))
    assert len(objects) == 2  # Household and Pet
    for item in objects:
        assert item["additionalProperties"] is False
        assert set(item["required"]) == set(item["properties"])
    assert "default" not in _keys(schema)
    # Free-form mappings cannot be strict: such a skill keeps JSON mode.
    assert strict_json_schema(Tagged) is None
    assert response_format_for("tagger", Tagged) == JSON_MODE
    asked = response_format_for("find household!", Household)
    assert asked["type"] == "json_schema"
    assert asked["json_schema"]["name"] == "find_household_"
    assert asked["json_schema"]["strict"] is True


class Move(BaseModel):
    """Two places (one definition used twice) and an optional note."""

    origin: Pet
    destination: Pet
    note: str | None = None


class Chain(BaseModel):
    """A recursive model: its definition must keep its name."""

    label: str
    next: Chain | None = None


def test_strict_schemas_are_written_short_and_mean_the_same() -> None:
    # Every call pays for the schema's characters: a definition used once is written in place,
    # a nullable field as a type list; shared and recursive definitions stay in $defs.
    household = strict_json_schema(Household)
    assert household is not None
    assert "$defs" not in household
    pet = household["properties"]["pets"]["items"]
    assert pet["properties"]["age"] == {"type": ["integer", "null"]}
    assert set(pet["required"]) == {"name", "species", "age"}
    move = strict_json_schema(Move)
    assert move is not None
    assert set(move["$defs"]) == {"Pet"}
    assert move["properties"]["origin"] == move["properties"]["destination"] == {"$ref": "#/$defs/Pet"}
    assert move["properties"]["note"] == {"type": ["string", "null"]}
    chain = strict_json_schema(Chain)
    assert chain is not None
    assert "Chain" in chain["$defs"]
    assert strict_mode_violations(chain) == []
    for schema in (household, move, chain):
        assert strict_mode_violations(schema) == []


def test_the_schema_is_sent_and_a_refusal_falls_back_to_json_mode_once(stub: OpenAIStub) -> None:
    provider = OpenAIChatProvider(api_key="sk-test", model="gpt-stub", base_url=stub.base_url, timeout_s=5)
    skill = household_skill(provider)
    stub.enqueue_chat('{"city": "Porto", "pets": [{"name": "Rex", "species": "dog", "age": null}]}')
    assert skill.run("I live in Porto with Rex.").output.pets[0].name == "Rex"
    [first] = stub.chat_requests
    assert first.body["response_format"]["json_schema"]["schema"] == strict_json_schema(Household)
    assert provider.format_level == "json_schema"

    # An Ollama / vLLM build without structured outputs: 400 to json_schema.
    stub.reset()
    stub.refused_formats = {"json_schema"}
    second = OpenAIChatProvider(api_key="sk-test", model="llama3", base_url=stub.base_url, timeout_s=5)
    skill = household_skill(second)
    stub.enqueue_chat('{"city": "Lisboa", "pets": []}', '{"city": "Braga", "pets": []}')
    assert skill.run("I live in Lisboa.").output.city == "Lisboa"
    assert skill.run("I live in Braga.").output.city == "Braga"
    sent = [request.body.get("response_format", {}).get("type") for request in stub.chat_requests]
    # Probed once: the refused request, then JSON mode for this call and every later one.
    assert sent == ["json_schema", "json_object", "json_object"]
    assert second.format_level == "json_object"


def test_a_server_without_json_mode_gets_no_response_format_and_tolerant_parsing(stub: OpenAIStub) -> None:
    stub.refused_formats = {"json_schema", "json_object"}
    provider = OpenAIChatProvider(api_key="sk-test", model="tiny", base_url=stub.base_url, timeout_s=5)
    skill = household_skill(provider)
    stub.enqueue_chat('Here you go: {"city": "Faro", "pets": []} Anything else?')
    outcome = skill.run("I live in Faro.")
    assert outcome.output.city == "Faro"
    sent = [request.body.get("response_format", {}).get("type") for request in stub.chat_requests]
    assert sent == ["json_schema", "json_object", None]
    assert provider.format_level == "none"
    # Only the request that was answered is a call.
    assert outcome.usage.calls == 1


def test_other_request_errors_are_not_mistaken_for_a_refused_format(stub: OpenAIStub) -> None:
    provider = OpenAIChatProvider(api_key="sk-test", model="gpt-stub", base_url=stub.base_url, timeout_s=5)
    stub.enqueue_chat(StubReply.error(400, "max_tokens is too large for this model"))
    with pytest.raises(Exception, match="max_tokens"):
        household_skill(provider).run("I live in Évora.")
    assert provider.format_level == "json_schema"
    assert len(stub.chat_requests) == 1


def test_claude_answers_through_a_forced_tool_with_the_same_schema() -> None:
    with AnthropicStub(api_key="sk-ant-test") as claude_stub:
        claude_stub.enqueue_messages('{"city": "Coimbra", "pets": [{"name": "Mia", "species": "cat", "age": 3}]}')
        provider = AnthropicChatProvider(
            api_key="sk-ant-test", model="claude-stub", base_url=claude_stub.base_url, timeout_s=5
        )
        outcome = household_skill(provider).run("I live in Coimbra with my cat Mia.")
        [request] = claude_stub.message_requests
    assert outcome.output.pets[0].species == "cat"
    [tool] = request.body["tools"]
    assert tool["input_schema"] == strict_json_schema(Household)
    assert request.body["tool_choice"] == {"type": "tool", "name": tool["name"]}
    # No "answer only JSON" instruction: the tool's schema says it all.
    assert "no markdown code fences" not in json.dumps(request.body["system"])


class _Recorder:
    """A provider that records the messages and answers an empty object."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, str]]] = []

    def complete(self, messages: list[dict[str, str]], **_: Any) -> Any:
        from memory_core.providers.protocols import LLMResult, TokenUsage

        self.sent.append(messages)
        return LLMResult(text="{}", usage=TokenUsage(calls=1, model="m"), model="m")


def _llm_skills(root: Any, seen: set[int] | None = None) -> Iterator[LLMSkill[Any, Any]]:
    """Every LLMSkill reachable from ``root`` (bundles, fallbacks, composite skills)."""
    seen = seen if seen is not None else set()
    if id(root) in seen or isinstance(root, str | int | float | bool | type(None)):
        return
    seen.add(id(root))
    if isinstance(root, LLMSkill):
        yield root
        return
    for value in getattr(root, "__dict__", {}).values():
        yield from _llm_skills(value, seen)


def test_every_skill_sends_a_byte_identical_system_message_first_and_the_variable_part_last() -> None:
    provider = _Recorder()
    bundles = [
        build_llm_write_skills(provider),
        build_llm_maintenance_skills(provider),
        LLMRerankSkill(provider),
    ]
    skills = [skill for bundle in bundles for skill in _llm_skills(bundle)]
    assert len({skill.name for skill in skills}) >= 12
    when = datetime(2025, 6, 15, 14, 30, tzinfo=UTC)
    inputs: dict[type[BaseModel], tuple[Any, Any]] = {
        ExtractionInput: (
            ExtractionInput(message="Eu moro em Lisboa.", speaker_name="Rafael", occurred_at=when),
            ExtractionInput(message="My dog Rex is three.", speaker_name="Ana", occurred_at=when.replace(year=2024)),
        ),
        EmotionInput: (EmotionInput(text="I am so happy today!"), EmotionInput(text="This is awful.")),
        SummaryInput: (
            SummaryInput(subject="Ana", facts=[FactLine(fact_id="1", text="Ana lives in Porto.")]),
            SummaryInput(subject="Rex", facts=[FactLine(fact_id="2", text="Rex is a dog.")]),
        ),
        RerankInput: (
            RerankInput(query="Where?", candidates=[RerankCandidate(id=1, text="Ana lives in Porto.")]),
            RerankInput(query="Who?", candidates=[RerankCandidate(id=1, text="Rex is a dog.")]),
        ),
    }
    for skill in skills:
        # Built once per skill, from its prompt and output schema only: the stable prefix providers cache.
        assert skill.system_message.startswith(skill.system_prompt.rstrip())
        for input_type, (one, other) in inputs.items():
            try:
                first, second = skill.build_messages(one), skill.build_messages(other)
            except (AttributeError, TypeError, ValueError):
                continue  # the skill takes another input
            assert [message["role"] for message in first] == ["system", "user"], skill.name
            assert first[0]["content"] == second[0]["content"] == skill.system_message, skill.name
            assert first[1]["content"] != second[1]["content"], (skill.name, input_type)
    assert isinstance(RerankOutput(), BaseModel)


# -- OpenAI's strict-mode rules, checked on every skill's schema ------------------------------

# Keywords strict mode accepts (OpenAI "Supported schemas"); anything else (default, allOf, oneOf,
# not, patternProperties, minProperties...) makes the endpoint refuse the request.
_STRICT_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf",
        "$ref", "$defs", "description", "title", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "pattern", "format",
    }
)  # fmt: skip
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_MAX_DEPTH = 10
_MAX_PROPERTIES = 5_000


def strict_mode_violations(schema: dict[str, Any]) -> list[str]:
    """Every way ``schema`` breaks OpenAI's strict structured-output rules (empty when it is accepted)."""
    problems: list[str] = []
    if schema.get("type") != "object" or "anyOf" in schema:
        problems.append("the root must be an object, not anyOf")
    definitions = schema.get("$defs", {})
    counted = 0

    def visit(node: Any, path: str, depth: int) -> None:
        nonlocal counted
        if not isinstance(node, dict):
            problems.append(f"{path}: not a schema")
            return
        problems.extend(f"{path}: keyword {key!r}" for key in node if key not in _STRICT_KEYWORDS)
        if "$ref" in node:
            name = str(node["$ref"]).removeprefix("#/$defs/")
            if name not in definitions:
                problems.append(f"{path}: $ref {node['$ref']!r} resolves to nothing")
            return
        kinds = node.get("type")
        for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
            if kind not in _JSON_TYPES:
                problems.append(f"{path}: type {kind!r}")
        if "anyOf" in node:
            for index, branch in enumerate(node["anyOf"]):
                visit(branch, f"{path}.anyOf[{index}]", depth)
            return
        if kinds is None and "enum" not in node and "const" not in node:
            problems.append(f"{path}: no type")
        if kinds == "object" or "properties" in node:
            if depth > _MAX_DEPTH:
                problems.append(f"{path}: nested deeper than {_MAX_DEPTH} objects")
            if node.get("additionalProperties") is not False:
                problems.append(f"{path}: additionalProperties must be false")
            properties = node.get("properties", {})
            if sorted(node.get("required", [])) != sorted(properties):
                problems.append(f"{path}: every property must be required")
            counted += len(properties)
            for name, child in properties.items():
                visit(child, f"{path}.{name}", depth + 1)
        if kinds == "array":
            visit(node.get("items"), f"{path}[]", depth)
        if len(node.get("enum", [])) > 1_000:
            problems.append(f"{path}: more than 1,000 enum values")

    visit({key: value for key, value in schema.items() if key != "$defs"}, "$", 1)
    for name, definition in definitions.items():
        visit(definition, f"$defs.{name}", 2)
    if counted > _MAX_PROPERTIES:
        problems.append(f"{counted} properties, more than {_MAX_PROPERTIES}")
    return problems


def test_the_strict_mode_checker_catches_what_openai_refuses() -> None:
    loose = {
        "type": "object",
        "properties": {"a": {"type": "string", "default": "x"}, "b": {"allOf": [{"type": "string"}]}},
        "required": ["a"],
        "additionalProperties": {"type": "string"},
    }
    found = strict_mode_violations(loose)
    assert any("'default'" in problem for problem in found)
    assert any("'allOf'" in problem for problem in found)
    assert any("additionalProperties" in problem for problem in found)
    assert any("every property must be required" in problem for problem in found)
    assert strict_mode_violations(strict_json_schema(Household) or {}) == []
    # A free-form mapping (what informed extraction's profiles were) cannot be made strict.
    assert any("additionalProperties" in problem for problem in strict_mode_violations(Tagged.model_json_schema()))


def test_every_skill_sends_a_schema_strict_mode_accepts() -> None:
    provider = _Recorder()
    bundles = [build_llm_write_skills(provider), build_llm_maintenance_skills(provider), LLMRerankSkill(provider)]
    skills = {skill.name: skill for bundle in bundles for skill in _llm_skills(bundle)}
    # Informed extraction (single and batched) answered profiles as a free-form mapping, which kept it in
    # JSON mode; they are strict now, like every other skill.
    assert {"extract_informed", "extract_batch", "reconcile", "reconcile_batch"} <= set(skills)
    for name, skill in skills.items():
        asked = skill.response_format
        assert asked["type"] == "json_schema", name
        assert asked["json_schema"]["strict"] is True
        assert strict_mode_violations(asked["json_schema"]["schema"]) == [], name


INFORMED_ANSWER = {
    "entities": [
        {"name": "Rafael", "type": "person", "aliases": []},
        {"name": "Lisboa", "type": "place", "aliases": []},
    ],
    "facts": [
        {
            "subject": "Rafael",
            "text": "Rafael mora em Lisboa",
            "attribute_key": "location.residence",
            "importance_category": "relationship_change",
            "confidence_level": "explicit_statement",
            "replaces": 1,
        }
    ],
    "relations": [{"source": "Rafael", "target": "Lisboa", "type": "lives_in"}],
    "updated_profiles": [{"entity": "Rafael", "profile": "Rafael lives in Lisbon."}],
    "emotion": {"emotion": "calm", "intensity": 0.2, "energy": "low"},
}


def _moving_input() -> ExtractionInput:
    from memory_core.cognition.models import KnownEntity, KnownFact

    return ExtractionInput(
        message="Mudei pra Lisboa!",
        speaker_name="Rafael",
        occurred_at=datetime(2025, 6, 15, 14, 30, tzinfo=UTC),
        known_entities=[
            KnownEntity(
                name="Rafael",
                canonical_key="person:rafael",
                display_name="Rafael",
                entity_type="person",
                facts=[KnownFact(fact_id="f-porto", text="Rafael mora no Porto", attribute_key="location.residence")],
            )
        ],
    )


def test_informed_extraction_in_strict_mode_then_json_mode_then_tolerant_parsing(stub: OpenAIStub) -> None:
    from memory_core.cognition.llm.extraction import InformedExtractionSkill

    provider = OpenAIChatProvider(api_key="sk-test", model="gpt-stub", base_url=stub.base_url, timeout_s=5)
    skill = InformedExtractionSkill(provider)
    stub.enqueue_chat(json.dumps(INFORMED_ANSWER))
    strict = skill.run(_moving_input()).output
    assert strict.facts[0].replaces_fact_id == "f-porto"
    assert strict.updated_profiles == {"Rafael": "Rafael lives in Lisbon."}
    [request] = stub.chat_requests
    schema = request.body["response_format"]["json_schema"]["schema"]
    assert strict_mode_violations(schema) == []
    # The schema is sent once: not also in the prompt.
    assert "JSON Schema" not in request.body["messages"][0]["content"]

    # A server refusing json_schema: JSON mode, the schema now written into the system message, and an
    # answer in the older shape (profiles as a mapping, facts without every field) still understood.
    stub.reset()
    stub.refused_formats = {"json_schema"}
    fallback = InformedExtractionSkill(
        OpenAIChatProvider(api_key="sk-test", model="llama3", base_url=stub.base_url, timeout_s=5)
    )
    legacy = {
        **INFORMED_ANSWER,
        "facts": [{"subject": "Rafael", "text": "Rafael mora em Lisboa", "replaces": 1}],
        "updated_profiles": {"Rafael": "Rafael lives in Lisbon."},
    }
    stub.enqueue_chat(json.dumps(legacy))
    output = fallback.run(_moving_input()).output
    assert output.facts[0].replaces_fact_id == "f-porto"
    assert output.facts[0].importance_category is None
    assert output.updated_profiles == {"Rafael": "Rafael lives in Lisbon."}
    refused, answered = stub.chat_requests
    assert refused.body["response_format"]["type"] == "json_schema"
    assert answered.body["response_format"] == {"type": "json_object"}
    system = answered.body["messages"][0]["content"]
    assert system.startswith(skill.llm.system_message)
    assert json.dumps(schema, separators=(",", ":")) in system

    # No JSON mode either: the object is found in the prose around it.
    stub.reset()
    stub.refused_formats = {"json_schema", "json_object"}
    bare = InformedExtractionSkill(
        OpenAIChatProvider(api_key="sk-test", model="tiny", base_url=stub.base_url, timeout_s=5)
    )
    stub.enqueue_chat("Here is what I found:\n" + json.dumps(INFORMED_ANSWER) + "\nHope it helps!")
    assert bare.run(_moving_input()).output.facts[0].text == "Rafael mora em Lisboa"
    assert "response_format" not in stub.chat_requests[-1].body


def test_claude_extracts_through_a_tool_with_the_strict_schema() -> None:
    from memory_core.cognition.llm.extraction import InformedExtractionSkill

    with AnthropicStub(api_key="sk-ant-test") as claude_stub:
        claude_stub.enqueue_messages(json.dumps(INFORMED_ANSWER))
        provider = AnthropicChatProvider(
            api_key="sk-ant-test", model="claude-stub", base_url=claude_stub.base_url, timeout_s=5
        )
        skill = InformedExtractionSkill(provider)
        output = skill.run(_moving_input()).output
        [request] = claude_stub.message_requests
    assert output.facts[0].replaces_fact_id == "f-porto"
    [tool] = request.body["tools"]
    assert tool["input_schema"] == skill.llm.response_format["json_schema"]["schema"]
    assert request.body["tool_choice"] == {"type": "tool", "name": "extract_informed"}
    assert request.body["system"] == skill.llm.system_message
