"""The fold and the handover rule over canned records (no server: integer keys compare in Python)."""

from __future__ import annotations

from binlake.source.binlog_reader import RowChange, split_key_change
from binlake.source.chunk_reader import Membership, _fold, row_identity
from binlake.keys import KeyOrder
from binlake.capture.handover import Handover
from binlake.offsets import BinlogPosition
from binlake.schema import Column, TableSchema
from binlake.splits import Split

SCHEMA = TableSchema("d", "t", (Column("id", "int", "int(11)", False), Column("v", "varchar", "varchar(10)")), ("id",))


def change(op: str, before: dict | None, after: dict | None, pos: int = 100, row: int = 0) -> RowChange:
    return RowChange("d.t", op, before, after, "b.000001", pos, row, 0)  # type: ignore[arg-type]


def fold_all(split: Split, rows: list[dict], changes: list[RowChange]) -> dict:
    buffer = {row_identity(SCHEMA, r): r for r in rows}
    member = Membership(KeyOrder(SCHEMA), split)
    for c in changes:
        for part in split_key_change(c, SCHEMA.key, lambda a, b: a == b):
            _fold(SCHEMA, buffer, member, part)
    return {r["id"]: r["v"] for r in buffer.values()}


def test_fold_puts_after_images_and_drops_deletes() -> None:
    split = Split("d.t", 1, 1, ("10",), ("20",))
    rows = [{"id": i, "v": "x"} for i in range(10, 20)]
    got = fold_all(split, rows, [
        change("u", {"id": 11, "v": "x"}, {"id": 11, "v": "y"}),
        change("d", {"id": 12, "v": "x"}, None),
        change("c", None, {"id": 12, "v": "again"}),
        change("c", None, {"id": 25, "v": "outside"}),
        change("u", {"id": 13, "v": "x"}, {"id": 30, "v": "moved out"}),
        change("u", {"id": 40, "v": "x"}, {"id": 14, "v": "moved in"}),  # replaces? 14 existed
        change("d", {"id": 15, "v": "x"}, None),
    ])
    assert got[11] == "y" and got[12] == "again" and got[14] == "moved in"
    assert 13 not in got and 15 not in got and 25 not in got and 30 not in got


def test_key_changing_update_becomes_delete_then_insert() -> None:
    parts = split_key_change(change("u", {"id": 1, "v": "a"}, {"id": 2, "v": "a"}), ("id",), lambda a, b: a == b)
    assert [p.op for p in parts] == ["d", "c"]
    assert parts[0].seq < parts[1].seq
    same = split_key_change(change("u", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}), ("id",), lambda a, b: a == b)
    assert [p.op for p in same] == ["u"]


def test_handover_emits_only_after_the_hw_of_the_key_s_split() -> None:
    hw0, hw1 = BinlogPosition("b.000001", 500), BinlogPosition("b.000001", 900)
    splits = [Split("d.t", 1, 0, None, ("100",)).landed_at(hw0, 1), Split("d.t", 1, 1, ("100",), None).landed_at(hw1, 1)]
    h = Handover({"d.t": SCHEMA}, {"d.t": splits})
    h.bind(None)
    assert h.start_position() == hw0
    assert h.should_emit(change("u", {"id": 42}, {"id": 42}, pos=700))
    assert not h.should_emit(change("u", {"id": 150}, {"id": 150}, pos=700))
    assert not h.should_emit(change("u", {"id": 42}, {"id": 42}, pos=499))
    assert h.should_emit(change("u", {"id": 150}, {"id": 150}, pos=900))
    assert h.should_emit(change("c", None, {"id": 100}, pos=950))  # past max HW: no lookup
    assert h.should_emit(RowChange("d.other", "c", None, {"id": 1}, "b.000001", 1, 0, 0))  # not snapshotted


def test_handover_rotation_counts() -> None:
    hw = BinlogPosition("b.000009", 100)
    h = Handover({"d.t": SCHEMA}, {"d.t": [Split("d.t", 1, 0, None, None).landed_at(hw, 0)]})
    h.bind(None)
    late = RowChange("d.t", "c", None, {"id": 1}, "b.000010", 4, 0, 0)
    early = RowChange("d.t", "c", None, {"id": 1}, "b.000009", 99, 0, 0)
    assert h.should_emit(late) and not h.should_emit(early)
