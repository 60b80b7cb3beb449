from __future__ import annotations

import pytest

from binlake.offsets import BinlogPosition, event_seq, file_index, row_slot, snapshot_seq


def test_file_names_compare_by_numeric_suffix() -> None:
    assert file_index("mysql-bin.1000000") == 1_000_000
    assert BinlogPosition("mysql-bin.999999", 900) < BinlogPosition("mysql-bin.1000000", 4)
    assert "mysql-bin.999999" > "mysql-bin.1000000"  # why the numeric comparison matters


def test_seq_orders_rotation_position_and_rows_inside_one_event() -> None:
    a = event_seq("b.000001", 4_000_000_000, row_slot(0))
    b = event_seq("b.000002", 4, row_slot(0))
    assert a < b
    one_event = [event_seq("b.000002", 500, row_slot(i)) for i in range(5)]
    assert one_event == sorted(one_event) and len(set(one_event)) == 5
    assert event_seq("b.000002", 500, row_slot(4)) < event_seq("b.000002", 501, row_slot(0))


def test_snapshot_row_ranks_between_events_before_and_at_hw() -> None:
    hw = BinlogPosition("b.000003", 1000)
    before = event_seq("b.000003", 999, row_slot(10_000))
    at = event_seq("b.000003", 1000, row_slot(0))
    assert before < snapshot_seq(hw) < at
    assert event_seq("b.000002", 10**9, row_slot(3)) < snapshot_seq(hw)


def test_key_change_halves_order_delete_before_insert() -> None:
    d = event_seq("b.1", 10, row_slot(7))
    c = event_seq("b.1", 10, row_slot(7, second_half=True))
    assert d < c < event_seq("b.1", 10, row_slot(8))


def test_position_round_trip_and_validation() -> None:
    p = BinlogPosition("mysql-bin.000042", 1234)
    assert BinlogPosition.from_dict(p.to_dict()) == p
    with pytest.raises(ValueError):
        BinlogPosition("nosuffix", 4)
    with pytest.raises(ValueError):
        row_slot(10**9)
