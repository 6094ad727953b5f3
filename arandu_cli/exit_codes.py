"""Exit codes of every ``arandu`` command (documented in the README's "Command line" section)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What the process exit status means; scripts branch on these."""

    OK = 0
    # The work ran but not all of it succeeded: failed messages, a doctor check that failed.
    FAILED = 1
    # Bad options or input: a malformed file line, a 422/413 from the service.
    USAGE = 2
    # The service did not answer (connection refused, timeout) or answered 5xx.
    UNAVAILABLE = 3
    # The API key is missing or wrong (401).
    AUTH = 4
    # The event, fact, import or job does not exist for this agent (404).
    NOT_FOUND = 5
    # The request does not fit the current state (409: retry of an event that is not failed).
    CONFLICT = 6
    # A wait gave up (``--timeout``) while messages were still pending.
    TIMEOUT = 7
    # Interrupted (Ctrl-C); what was sent stays sent and a re-run resumes.
    INTERRUPTED = 130
