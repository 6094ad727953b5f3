"""The service-wide MemoryConfig: seeds' defaults < the file of ARANDU_MEMORY_CONFIG < ARANDU_MEMORY__ variables,
every bad value named with where it came from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory_core.config import MemoryConfig
from memory_core.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("ARANDU_") or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)


def test_without_configuration_the_memory_config_is_the_seeds_defaults_at_the_embedders_width() -> None:
    memory = load_settings().memory
    assert memory.model_dump(exclude={"embedding_dimensions"}) == MemoryConfig().model_dump(
        exclude={"embedding_dimensions"}
    )
    assert memory.embedding_dimensions == 384


def test_variables_set_any_field_in_its_own_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARANDU_MEMORY__TIMEZONE", "America/Sao_Paulo")
    monkeypatch.setenv("ARANDU_MEMORY__ENABLE_RERANKER", "false")
    monkeypatch.setenv("ARANDU_MEMORY__RERANKER_TIMEOUT_SEC", "2.5")
    monkeypatch.setenv("ARANDU_MEMORY__SCORE_WEIGHTS", '{"semantic": 0.9, "recency": 0.1}')
    monkeypatch.setenv("ARANDU_MEMORY__EXTRA_SELF_REFERENCES", '["yo", "moi"]')
    memory = load_settings().memory
    assert memory.timezone == "America/Sao_Paulo"
    assert memory.enable_reranker is False
    assert memory.reranker_timeout_sec == 2.5
    assert memory.score_weights == {"semantic": 0.9, "recency": 0.1, "importance": 0.0}
    assert memory.extra_self_references == frozenset({"yo", "moi"})


@pytest.mark.parametrize("name", ["memory.toml", "memory.yaml", "memory.yml"])
def test_a_file_sets_fields_below_the_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name.endswith(".toml"):
        path.write_text('timezone = "Europe/Lisbon"\ntopk_facts = 7\n[score_weights]\nsemantic = 1.0\n')
    else:
        path.write_text("timezone: Europe/Lisbon\ntopk_facts: 7\nscore_weights:\n  semantic: 1.0\n")
    monkeypatch.setenv("ARANDU_MEMORY_CONFIG", str(path))
    monkeypatch.setenv("ARANDU_MEMORY__TOPK_FACTS", "4")
    settings = load_settings()
    assert settings.memory.timezone == "Europe/Lisbon"
    assert settings.memory.topk_facts == 4  # the variable wins over the file
    assert settings.memory.score_weights["semantic"] == 1.0
    assert settings.memory_config == path


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"ARANDU_MEMORY__TIMEZONE": "Mars/Olympus"}, "ARANDU_MEMORY__TIMEZONE"),
        ({"ARANDU_MEMORY__TOPK_FACTS": "many"}, "ARANDU_MEMORY__TOPK_FACTS"),
        ({"ARANDU_MEMORY__TOPK_FACT": "5"}, "ARANDU_MEMORY__TOPK_FACT"),
        ({"ARANDU_MEMORY__SCORE_WEIGHTS": "semantic=1"}, "ARANDU_MEMORY__SCORE_WEIGHTS"),
        ({"ARANDU_MEMORY__SCORE_WEIGHTS": '{"semantic": -1}'}, "ARANDU_MEMORY__SCORE_WEIGHTS"),
        # A pair checked together is named by the variable that was set.
        ({"ARANDU_MEMORY__HOT_TIER_RATIO": "0.9"}, "ARANDU_MEMORY__HOT_TIER_RATIO"),
        ({"ARANDU_MEMORY__EMBEDDING_DIMENSIONS": "1536"}, "ARANDU_MEMORY__EMBEDDING_DIMENSIONS"),
        ({"ARANDU_MEMORY_CONFIG": "/nonexistent/memory.toml"}, "ARANDU_MEMORY_CONFIG=/nonexistent/memory.toml"),
    ],
)
def test_a_bad_variable_is_named(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str) -> None:
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError, match="invalid settings") as caught:
        load_settings()
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("memory.toml", "topk_facts = 0\n", ": topk_facts"),
        ("memory.toml", "topk_facts = \n", "cannot be read"),
        ("memory.yaml", "- a list\n", "MemoryConfig fields"),
        ("memory.yaml", "reranker_weigth: 0.5\n", ": reranker_weigth"),
        ("memory.json", "{}", "must end in .toml, .yaml or .yml"),
    ],
)
def test_a_bad_file_is_named_with_the_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, text: str, named: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    monkeypatch.setenv("ARANDU_MEMORY_CONFIG", str(path))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert f"ARANDU_MEMORY_CONFIG={path}" in str(caught.value)
    assert named in str(caught.value)
