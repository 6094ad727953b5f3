"""The erasure plan (memory_core.maintenance.erasure): which tables, in which order, with which condition.

Pure functions over a described schema; the erasure itself runs against the real database in
tests/api/test_erasure_api.py.
"""

from __future__ import annotations

from memory_core.maintenance.erasure import ForeignKey, plan_erasure


def _key(child: str, parent: str, on_delete: str = "c", column: str = "parent_id") -> ForeignKey:
    return ForeignKey(child, parent, on_delete, (column,), ("id",))


def test_children_come_before_the_tables_they_reference() -> None:
    keys = [
        _key("runs", "events", column="event_id"),
        _key("facts", "events", "n", column="source_event_id"),
        _key("links", "facts", column="fact_id"),
        _key("facts", "facts", "n", column="supersedes_fact_id"),  # a self reference does not order anything
        _key("entities", "observations", "n", column="community_id"),
    ]
    order = [
        step.table for step in plan_erasure(["events", "facts", "links", "runs", "entities", "observations"], keys)
    ]

    assert sorted(order) == ["entities", "events", "facts", "links", "observations", "runs"]
    assert order.index("links") < order.index("facts") < order.index("events")
    assert order.index("runs") < order.index("events")
    assert order.index("entities") < order.index("observations")


def test_tables_without_an_agent_column_are_reached_through_cascading_keys_only() -> None:
    keys = [
        _key("runs", "events", column="event_id"),
        _key("outputs", "runs", column="event_id"),
        _key("output_notes", "outputs", column="output_id"),  # a dependent of a dependent
        _key("audit", "events", "n", column="event_id"),  # SET NULL: its rows live on
    ]
    plan = {step.table: step.condition for step in plan_erasure(["events", "runs"], keys)}

    assert set(plan) == {"events", "runs", "outputs", "output_notes"}
    assert plan["events"] == '("agent_id" = :agent)'
    assert plan["outputs"] == '(("event_id") IN (SELECT "id" FROM "runs" WHERE ("agent_id" = :agent)))'
    assert plan["output_notes"].startswith('(("output_id") IN (SELECT "id" FROM "outputs" WHERE ')
    order = [step.table for step in plan_erasure(["events", "runs"], keys)]
    assert order.index("output_notes") < order.index("outputs") < order.index("runs") < order.index("events")


def test_a_cycle_of_references_still_erases_every_table() -> None:
    keys = [_key("a", "b", "n"), _key("b", "a", "n"), _key("c", "a", "n")]
    order = [step.table for step in plan_erasure(["a", "b", "c"], keys)]

    assert order[0] == "c"
    assert sorted(order) == ["a", "b", "c"]


def test_names_are_quoted() -> None:
    keys = [ForeignKey('we"ird', "events", "c", ("event id",), ("id",))]
    plan = {step.table: step.condition for step in plan_erasure(["events"], keys)}

    assert plan['we"ird'] == '(("event id") IN (SELECT "id" FROM "events" WHERE ("agent_id" = :agent)))'
