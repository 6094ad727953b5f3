"""Settings: defaults that work offline, and bad values named by their environment variable."""

from __future__ import annotations

import pytest

from memory_core.settings import (
    EmbeddingProviderName,
    LLMProviderName,
    SettingsError,
    load_settings,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("ARANDU_") or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)


def test_defaults_run_offline_with_hashing_embeddings() -> None:
    settings = load_settings()
    assert settings.llm is LLMProviderName.OFFLINE
    assert settings.embedder is EmbeddingProviderName.HASHING
    assert settings.dimensions == 384
    assert settings.api_port == 8000
    assert settings.flower_port == 5555
    assert settings.home.name == ".arandu"


def test_values_are_read_from_arandu_prefixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARANDU_API_PORT", "9001")
    monkeypatch.setenv("ARANDU_API_KEYS", " key-one, key-two ,,")
    monkeypatch.setenv("ARANDU_LOG_LEVEL", "debug")
    settings = load_settings()
    assert settings.api_port == 9001
    assert settings.api_keys == ("key-one", "key-two")
    assert settings.log_level.value == "DEBUG"


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ARANDU_API_PORT", "eighty", "ARANDU_API_PORT"),
        ("ARANDU_API_PORT", "70000", "ARANDU_API_PORT"),
        ("ARANDU_FLOWER_PORT", "-1", "ARANDU_FLOWER_PORT"),
        ("ARANDU_LLM_PROVIDER", "gpt", "ARANDU_LLM_PROVIDER"),
        ("ARANDU_EMBEDDING_PROVIDER", "magic", "ARANDU_EMBEDDING_PROVIDER"),
        ("ARANDU_EMBEDDING_DIMENSIONS", "0", "ARANDU_EMBEDDING_DIMENSIONS"),
        ("ARANDU_LLM_TIMEOUT_S", "soon", "ARANDU_LLM_TIMEOUT_S"),
        ("ARANDU_LOG_LEVEL", "chatty", "ARANDU_LOG_LEVEL"),
        ("ARANDU_DATABASE_URL", "mysql://root@localhost/db", "ARANDU_DATABASE_URL"),
        ("ARANDU_BROKER_URL", "http://localhost", "ARANDU_BROKER_URL"),
        ("ARANDU_RETRIEVAL_EF_SEARCH", "10", "ARANDU_RETRIEVAL_EF_SEARCH"),
        ("ARANDU_RETRIEVAL_CONCURRENCY", "-1", "ARANDU_RETRIEVAL_CONCURRENCY"),
    ],
)
def test_bad_value_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=expected):
        load_settings()


def test_openai_key_fallback_selects_openai_for_llm_and_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = load_settings()
    assert settings.llm is LLMProviderName.OPENAI
    assert settings.resolved_llm_api_key == "sk-test"
    assert settings.embedder is EmbeddingProviderName.OPENAI
    assert settings.dimensions == 1536


def test_arandu_llm_key_wins_over_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    monkeypatch.setenv("ARANDU_LLM_API_KEY", "sk-own")
    assert load_settings().resolved_llm_api_key == "sk-own"


def test_openai_provider_without_key_is_refused_unless_a_local_endpoint_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARANDU_LLM_PROVIDER", "openai")
    with pytest.raises(SettingsError, match="ARANDU_LLM_API_KEY"):
        load_settings()
    monkeypatch.setenv("ARANDU_LLM_BASE_URL", "http://127.0.0.1:11434/v1")
    settings = load_settings()
    assert settings.llm is LLMProviderName.OPENAI
    # A keyless local LLM does not switch embeddings to OpenAI: they stay offline.
    assert settings.embedder is EmbeddingProviderName.HASHING


def test_production_refuses_to_start_without_api_keys_and_flower_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARANDU_ENV", "production")
    with pytest.raises(SettingsError, match="ARANDU_API_KEYS"):
        load_settings()
    monkeypatch.setenv("ARANDU_API_KEYS", "k1")
    with pytest.raises(SettingsError, match="ARANDU_FLOWER_PASSWORD"):
        load_settings()
    monkeypatch.setenv("ARANDU_FLOWER_PASSWORD", "s3cret")
    monkeypatch.setenv("ARANDU_DATABASE_URL", "postgresql+psycopg://arandu:Xk2-9fq_Lw@db:5432/arandu")
    assert load_settings().env.value == "production"


def test_plain_postgresql_url_gets_the_psycopg_driver() -> None:
    settings = load_settings(database_url="postgresql://u:p@db:5432/arandu")
    assert settings.sqlalchemy_url == "postgresql+psycopg://u:p@db:5432/arandu"


def test_chunks_are_64_events_whatever_the_skills_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().chunk_size == 64
    monkeypatch.setenv("ARANDU_LLM_PROVIDER", "openai")
    monkeypatch.setenv("ARANDU_LLM_BASE_URL", "http://127.0.0.1:11434/v1")
    assert load_settings().chunk_size == 64
    monkeypatch.setenv("ARANDU_PIPELINE_CHUNK_SIZE", "40")
    assert load_settings().chunk_size == 40
    monkeypatch.setenv("ARANDU_PIPELINE_CHUNK_SIZE", "0")
    with pytest.raises(SettingsError, match="ARANDU_PIPELINE_CHUNK_SIZE"):
        load_settings()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://postgres@localhost:5432/arandu",  # the built-in default: no password
        "postgresql+psycopg://arandu:@postgres:5432/arandu",  # compose's blank POSTGRES_PASSWORD
        "postgresql+psycopg://arandu:arandu@postgres:5432/arandu",  # compose's old silent fallback
        "postgresql://postgres:postgres@db.example.com/arandu",
    ],
)
def test_production_refuses_an_empty_or_default_database_password(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("ARANDU_ENV", "production")
    monkeypatch.setenv("ARANDU_API_KEYS", "k1")
    monkeypatch.setenv("ARANDU_FLOWER_PASSWORD", "s3cret")
    monkeypatch.setenv("ARANDU_DATABASE_URL", url)
    with pytest.raises(SettingsError, match=r"ARANDU_DATABASE_URL.*password"):
        load_settings()
    # Development keeps working with the defaults.
    monkeypatch.setenv("ARANDU_ENV", "dev")
    assert load_settings().database_url == url


def test_production_accepts_a_database_password_of_its_own_or_a_unix_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARANDU_ENV", "production")
    monkeypatch.setenv("ARANDU_API_KEYS", "k1")
    monkeypatch.setenv("ARANDU_FLOWER_PASSWORD", "s3cret")
    for url in (
        "postgresql+psycopg://arandu:Xk2-9fq_Lw@postgres:5432/arandu",
        "postgresql+psycopg://arandu@/arandu?host=/var/run/postgresql",  # peer authentication, no password
    ):
        monkeypatch.setenv("ARANDU_DATABASE_URL", url)
        assert load_settings().database_url == url
