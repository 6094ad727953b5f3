"""What the stages store for each other: every embedding once per fact, packed, and read back exactly.

Stage outputs are jsonb rows every later stage reads; embeddings are most of their bytes. They
are stored as base64 of float32 (memory_core.write.schemas.pack_embedding), the reconcile output
leaves them to the extract output, and outputs stored before (JSON lists, a vector per decision)
still apply.
"""

from __future__ import annotations

import base64
import struct
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from pydantic import ValidationError
from sqlalchemy import text

from memory_core.write.context import build_write_context
from memory_core.write.intake import IncomingMessage, accept_messages
from memory_core.write.pipeline import run_extract, run_reconcile, run_resolve, run_upsert
from memory_core.write.schemas import PreparedFact
from tests.workers.conftest import WritePath

START = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def _floats(packed: str) -> list[float]:
    raw = base64.b64decode(packed)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def _vector(text: str) -> list[float]:
    return [float(value) for value in text.strip("[]").split(",")]


def _accept(context: Any, agent: str, messages: list[str]) -> list[Any]:
    with context.sessions.begin() as session:
        return accept_messages(
            session,
            agent,
            [
                IncomingMessage(message=m, speaker_name="Rafael", occurred_at=START + timedelta(days=i))
                for i, m in enumerate(messages)
            ],
        )


def test_each_facts_embedding_is_stored_once_packed_and_becomes_its_vector(write_path: WritePath) -> None:
    context = build_write_context(write_path.settings)
    agent = f"{write_path.agent_id}-packed"
    try:
        accepted = _accept(context, agent, ["I live in Lisbon.", "My sister Julia is a doctor."])
        for stage in (run_extract, run_resolve, run_reconcile, run_upsert):
            for item in accepted:
                assert stage(context, item.event_id) == "completed"
        outputs = {
            (str(row["event_id"]), row["stage"]): row["output"]
            for row in write_path.memory.rows(
                "SELECT o.event_id, o.stage, o.output FROM pipeline_stage_outputs o "
                "JOIN pipeline_runs r ON r.event_id = o.event_id WHERE r.agent_id = :a",
                a=agent,
            )
        }
        facts = write_path.memory.rows(
            "SELECT fact_text, CAST(embedding_vec AS text) AS vec, source_event_id FROM memory_facts "
            "WHERE agent_id = :a",
            a=agent,
        )
        assert len(facts) >= 2
        for fact in facts:
            extract = outputs[(str(fact["source_event_id"]), "extract")]
            reconcile = outputs[(str(fact["source_event_id"]), "reconcile")]
            stored = [f for f in extract["facts"] if f["text"] == fact["fact_text"]]
            assert len(stored) == 1, (fact["fact_text"], extract["facts"])
            packed = stored[0]["embedding"]
            assert isinstance(packed, str)
            assert len(_floats(packed)) == write_path.settings.dimensions
            # The vector column holds exactly what the extract output packed.
            assert _vector(fact["vec"]) == pytest.approx(_floats(packed), rel=1e-6, abs=1e-7)
            # Reconcile's decisions point at the fact by index and carry no copy of its vector.
            assert all(decision.get("embedding") is None for decision in reconcile["decisions"])
        for (_, stage), output in outputs.items():
            if stage == "resolve":
                assert all(isinstance(e.get("embedding"), str | None) for e in output["entities"])
    finally:
        context.close()


def test_outputs_stored_before_with_lists_of_numbers_still_apply(write_path: WritePath) -> None:
    context = build_write_context(write_path.settings)
    agent = f"{write_path.agent_id}-legacy"
    try:
        (item,) = _accept(context, agent, ["I work at Acme Corp."])
        for stage in (run_extract, run_resolve, run_reconcile):
            assert stage(context, item.event_id) == "completed"
        # Rewrite the outputs as an earlier version stored them: vectors as JSON lists, and a
        # copy of each fact's vector in its reconcile decision.
        rows = {
            row["stage"]: row["output"]
            for row in write_path.memory.rows(
                "SELECT stage, output FROM pipeline_stage_outputs WHERE event_id = :e", e=str(item.event_id)
            )
        }
        vectors = [_floats(fact["embedding"]) for fact in rows["extract"]["facts"]]
        assert vectors
        for fact, vector in zip(rows["extract"]["facts"], vectors, strict=True):
            fact["embedding"] = vector
        for entity in rows["resolve"]["entities"]:
            if entity.get("embedding"):
                entity["embedding"] = _floats(entity["embedding"])
        for decision in rows["reconcile"]["decisions"]:
            decision["embedding"] = vectors[decision["index"]]
        with context.sessions.begin() as session:
            for stage, output in rows.items():
                session.execute(
                    text(
                        "UPDATE pipeline_stage_outputs SET output = CAST(:o AS jsonb) "
                        "WHERE event_id = :e AND stage = :s"
                    ),
                    {"o": orjson.dumps(output).decode(), "e": str(item.event_id), "s": stage},
                )
        assert run_upsert(context, item.event_id) == "completed"
        (fact,) = write_path.memory.rows(
            "SELECT CAST(embedding_vec AS text) AS vec FROM memory_facts "
            "WHERE agent_id = :a AND fact_text LIKE '%Acme%'",
            a=agent,
        )
        assert _vector(fact["vec"]) == pytest.approx(vectors[0], rel=1e-6, abs=1e-7)
    finally:
        context.close()


def test_a_damaged_packed_embedding_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="base64"):
        PreparedFact.model_validate({"subject": "me", "text": "x", "embedding": "not base64!"})
    with pytest.raises(ValidationError, match="whole number of float32"):
        PreparedFact.model_validate({"subject": "me", "text": "x", "embedding": base64.b64encode(b"abcde").decode()})
    fact = PreparedFact(subject="me", text="x", embedding=[0.5, -0.25])
    assert PreparedFact.model_validate(fact.model_dump(mode="json")).embedding == [0.5, -0.25]
