"""The exception hierarchy: one catchable base that is not Python's built-in MemoryError."""

from __future__ import annotations

import pytest

from memory_core.errors import (
    AranduError,
    ExtractionError,
    ReconciliationError,
    ResolutionError,
    RetrievalError,
    UpsertError,
)

STAGE_ERRORS = [ExtractionError, ResolutionError, ReconciliationError, RetrievalError, UpsertError]


@pytest.mark.parametrize("error_type", STAGE_ERRORS)
def test_stage_errors_are_caught_as_arandu_errors(error_type: type[AranduError]) -> None:
    cause = TimeoutError("llm timed out")
    with pytest.raises(AranduError) as caught:
        raise error_type("stage failed") from cause
    assert caught.value.__cause__ is cause
    assert not isinstance(caught.value, MemoryError)  # the built-in out-of-memory error
    assert error_type.stage != AranduError.stage
