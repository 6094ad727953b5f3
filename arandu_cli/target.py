"""Which API the command talks to and with which key: ``--url`` / ``--api-key`` and their defaults.

The defaults come from the same settings as the service, so on the machine that runs it
``arandu`` needs no options: ``ARANDU_URL`` else ``http://ARANDU_API_HOST:ARANDU_API_PORT``;
``ARANDU_API_KEY`` else the first of ``ARANDU_API_KEYS``, else the key ``./ops/dev`` generated
into ``$ARANDU_HOME/dev-api-key``. The host and port of a running ``./ops/dev`` come from its
record (:mod:`arandu_cli.dev_stack`) when the environment does not give them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import typer

from arandu_cli.dev_stack import DevStackRecord, overrides_from, read_record
from arandu_cli.exit_codes import ExitCode
from arandu_cli.output import fail
from arandu_client import (
    ApiError,
    AranduClient,
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ServerError,
    TransportError,
)
from memory_core.settings import Settings, SettingsError, load_settings

# Listening on every interface means "reach me on this machine" for a local client.
_ANY_ADDRESS = {"0.0.0.0", "::", ""}  # noqa: S104 - compared against, never bound
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Target:
    """The API base URL and key given on the command line or in the environment (None: use defaults)."""

    url: str | None
    api_key: str | None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def resolved(self) -> tuple[str, str | None]:
        """The URL and key to use, filling what was not given from the service's settings."""
        url, key = self.url, self.api_key
        if url and key:
            return url, key
        settings = load_cli_settings()
        return url or default_url(settings), key or default_api_key(settings)

    def client(self) -> AranduClient:
        """A client of the API (the caller closes it)."""
        url, key = self.resolved()
        return AranduClient(url, key, timeout=self.timeout_s)


def load_cli_settings() -> Settings:
    """The service's settings from the environment, completed by ``./ops/dev``'s record; a bad variable exits 2."""
    return load_cli_settings_and_stack()[0]


def load_cli_settings_and_stack() -> tuple[Settings, DevStackRecord | None]:
    """The settings, and the ``./ops/dev`` record they were completed from (None: none was used).

    What the environment does not set comes from ``$ARANDU_HOME/dev-stack.json`` when ``./ops/dev``
    wrote one there, so every command finds the stack it runs (its database, broker and ports),
    not the defaults on localhost.
    """
    try:
        settings = load_settings()
        record = read_record(settings.home)
        overrides = overrides_from(record) if record is not None else {}
        if record is None or not overrides:
            return settings, None
        return load_settings(**overrides), record
    except SettingsError as error:
        fail(str(error))
        raise typer.Exit(ExitCode.USAGE) from None


def default_url(settings: Settings) -> str:
    """``http://<api host>:<api port>``, with a wildcard host replaced by 127.0.0.1."""
    host = "127.0.0.1" if settings.api_host in _ANY_ADDRESS else settings.api_host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.api_port}"


def default_api_key(settings: Settings) -> str | None:
    """The first configured API key, else the dev stack's generated key, else None."""
    if settings.api_keys:
        return settings.api_keys[0]
    dev_key = settings.home / "dev-api-key"
    try:
        return dev_key.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def describe_api_error(error: ApiError) -> str:
    """The service's message and every field it named, on one line."""
    parts = [error.message]
    named = [
        f"{item.field}: {item.message}" for item in error.details if item.field and item.field not in error.message
    ]
    if named:
        parts.append("(" + "; ".join(named[:10]) + (f"; and {len(named) - 10} more" if len(named) > 10 else "") + ")")
    return " ".join(parts)


@contextmanager
def api_errors(target: Target) -> Iterator[None]:
    """Turn the client's errors into one clear line on stderr and the documented exit code."""
    try:
        yield
    except TransportError as error:
        url = target.url or "the default URL"
        fail(f"cannot reach the arandu API ({error}); is it running? Set --url or ARANDU_URL (now: {url})")
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    except AuthenticationError:
        fail("the API refused the key (401): pass --api-key or set ARANDU_API_KEY to a key from ARANDU_API_KEYS")
        raise typer.Exit(ExitCode.AUTH) from None
    except PermissionDeniedError as error:
        fail(f"the API refused this key (403): {describe_api_error(error)}")
        raise typer.Exit(ExitCode.AUTH) from None
    except NotFoundError as error:
        fail(describe_api_error(error))
        raise typer.Exit(ExitCode.NOT_FOUND) from None
    except ConflictError as error:
        fail(describe_api_error(error))
        raise typer.Exit(ExitCode.CONFLICT) from None
    except (InvalidRequestError, PayloadTooLargeError) as error:
        fail(describe_api_error(error))
        raise typer.Exit(ExitCode.USAGE) from None
    except ServerError as error:
        extra = f" (error id {error.error_id}: see the API log)" if error.error_id else ""
        fail(f"the API failed: {error.status} {error.message}{extra}")
        raise typer.Exit(ExitCode.UNAVAILABLE) from None
    except ApiError as error:
        fail(f"{error.status}: {describe_api_error(error)}")
        raise typer.Exit(ExitCode.FAILED) from None


@contextmanager
def connected(target: Target) -> Iterator[AranduClient]:
    """A client whose errors become exit codes; closed at the end of the block."""
    with api_errors(target):
        client = target.client()
        try:
            yield client
        finally:
            client.close()
