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


def test_a_later_epoch_ranks_after_every_position_of_the_server_before() -> None:
    """After a failover the new server's files may be numbered lower: its positions still rank after."""
    old = BinlogPosition("mysql-bin.2147483647", 1_073_741_824)  # the highest file MySQL numbers
    new = BinlogPosition("binlog.000001", 4, epoch=1)
    assert old < new and old.seq(9_999) < new.seq(0)
    assert event_seq(old.file, old.pos, row_slot(10**6)) < event_seq(new.file, new.pos, row_slot(0), new.epoch)
    assert new.seq(0) < 10**38  # DECIMAL(38,0)
    assert BinlogPosition.from_dict(new.to_dict()) == new and BinlogPosition.parse(str(new)) == new
    assert old.to_dict() == {"file": old.file, "pos": old.pos}  # epoch 0: the form stored before epochs
    assert str(new) == "binlog.000001:4@1"


def test_gtid_state_follows_the_transactions_read() -> None:
    from binlake.source.gtids import Seen, advance, lacking

    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    seen = Seen()
    for n in (5, 6, 8):
        seen.add(f"{uuid}:{n}")
    seen.add(f"{uuid}:tg:2")
    state = advance(f"{uuid}:1-4", seen.text())
    assert state == f"{uuid}:1-6:8,{uuid}:tg:2" and seen.complete
    assert lacking(state, f"{uuid}:1-9,{uuid}:tg:1-5") == ("", True)
    assert lacking(state, f"{uuid}:1-6,{uuid}:tg:1-2") == (f"{uuid}:8", True)  # a replica behind
    assert lacking(state, "2174b383-5441-11e8-b90a-c80aa9429562:1-100")[1] is False  # another topology
    # a server UUID whose digits read like a MariaDB GTID (`1-8094-02`) is still a MySQL set
    odd = "32a63223-eaad-11f1-8094-02fc00000001"
    assert lacking(f"{odd}:1-4", f"{odd}:1-3") == (f"{odd}:4", True)
    assert advance(f"{odd}:1-3", f"{odd}:4") == f"{odd}:1-4"
    mariadb = Seen()
    for gtid in ("0-1-5", "1-2-3", "0-1-6"):
        mariadb.add(gtid)
    assert advance("0-1-2,2-3-4", mariadb.text()) == "0-1-6,1-2-3,2-3-4"
    assert lacking("0-1-6,1-2-3", "0-2-4,1-2-9") == ("0-1-6", True)
    assert lacking("0-1-6", "1-2-9") == ("0-1-6", False)
    anonymous = Seen()
    anonymous.add(None)
    assert not anonymous.complete
