"""Which candidates informed extraction could not have seen: by the snapshot, within one cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_core.write.reconcile import written_since
from memory_core.write.repository import FactRow

READ_AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
# Taken after the read: transactions below 900 had finished, 900 and 950 were running, 1000 on not begun.
SNAPSHOT = "900:1000:900,950"


def _fact(created_at: datetime, created_xid: int) -> FactRow:
    return FactRow(
        fact_id="f",
        entity_key="user",
        text="Ana lives in Lisbon",
        attribute_key=None,
        valid_from=created_at,
        similarity=0.9,
        created_at=created_at,
        created_xid=created_xid,
    )


def test_a_transaction_running_during_the_read_was_not_seen_even_if_it_began_before_it() -> None:
    began_before = _fact(READ_AT - timedelta(seconds=3), 950)
    assert written_since(began_before, READ_AT, SNAPSHOT)
    assert not written_since(_fact(READ_AT - timedelta(seconds=3), 899), READ_AT, SNAPSHOT)


def test_a_row_restored_from_another_cluster_counts_as_seen_whatever_its_transaction_id() -> None:
    # Restored from a dump: its id comes from the old cluster's counter, beyond this one's.
    restored = _fact(READ_AT - timedelta(days=30), 5_000_000)
    assert not written_since(restored, READ_AT, SNAPSHOT)
    # The same id on a row begun just before the read is one the read may have raced with.
    assert written_since(_fact(READ_AT - timedelta(minutes=5), 5_000_000), READ_AT, SNAPSHOT)


def test_without_a_snapshot_the_clock_decides() -> None:
    assert written_since(_fact(READ_AT + timedelta(seconds=1), 10), READ_AT, None)
    assert not written_since(_fact(READ_AT - timedelta(seconds=1), 10), READ_AT, None)
