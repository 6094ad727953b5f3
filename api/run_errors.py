"""What an API client sees of a run's stored error: its class and a short message.

A pipeline or job run keeps up to 4,000 characters of the exception that failed it
(``pipeline_runs.error``, ``job_runs.error``), for operators: the worker's log has it too. For a
database error that text holds the statement and its parameters (SQLAlchemy appends ``[SQL:
...]`` and ``[parameters: ...]``), and any exception may carry a server's address or a
provider's reply. The events, lookup and jobs routes answer with :func:`client_error` of it
instead: the exception's class and the first line of its message, at most
:data:`MAX_CLIENT_ERROR_CHARS` characters, and for database errors no message at all.
"""

from __future__ import annotations

import re

__all__ = ["MAX_CLIENT_ERROR_CHARS", "client_error"]

MAX_CLIENT_ERROR_CHARS = 200

# "ClassName: message" (the workers store type(error).__name__ first); dotted names allowed.
_CLASS_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): ")
# SQLAlchemy's and the DB-API's error classes (their text carries SQL, parameters, hosts).
_DATABASE_CLASSES = frozenset(
    {
        "DBAPIError",
        "DatabaseError",
        "DataError",
        "IntegrityError",
        "InterfaceError",
        "InternalError",
        "NotSupportedError",
        "OperationalError",
        "PendingRollbackError",
        "ProgrammingError",
        "StatementError",
    }
)
_DATABASE_MESSAGE = "a database error (operators find the full text in the worker's log)"


def client_error(stored: str | None) -> str | None:
    """``stored`` as an API client sees it: ``"<class>: <first line, shortened>"``, no SQL, no parameters."""
    if not stored:
        return stored
    match = _CLASS_PREFIX.match(stored)
    name = match.group(1) if match else None
    message = stored[match.end() :] if match else stored
    if (name is not None and name.rsplit(".", 1)[-1] in _DATABASE_CLASSES) or _looks_like_database_text(message):
        return f"{name or 'DatabaseError'}: {_DATABASE_MESSAGE}"
    first_line = message.strip().splitlines()[0] if message.strip() else ""
    text = f"{name}: {first_line}" if name else first_line
    if len(text) > MAX_CLIENT_ERROR_CHARS:
        text = text[: MAX_CLIENT_ERROR_CHARS - 1].rstrip() + "…"
    return text


def _looks_like_database_text(message: str) -> bool:
    # A database error wrapped in another exception's text still shows SQLAlchemy's markers.
    return "[SQL:" in message or "[parameters:" in message or message.lstrip().startswith("(psycopg")
