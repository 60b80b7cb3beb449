from __future__ import annotations

import pytest

from binlake.keys import lexicographic, lexicographic_params
from binlake.schema import Column, TableSchema
from binlake.splits import Split, group_id


def test_split_refuses_empty_range_and_round_trips() -> None:
    with pytest.raises(ValueError):
        Split("d.t", 1, 0, ("5",), ("5",))
    s = Split("d.t", 2, 17, ("10", "a"), ("20", "b"), group_size=8)
    again = Split.from_dict(s.to_dict(), group_size=8)
    assert again == s and again.group == group_id(2, 17, 8) == 2_000_002


def test_done_split_needs_hw() -> None:
    with pytest.raises(ValueError):
        Split("d.t", 1, 0, None, None, status="done")


def test_lexicographic_expansion_for_composite_keys() -> None:
    assert lexicographic(["a"], ">=") == "`a` >= %s"
    sql = lexicographic(["a", "b", "c"], ">=")
    assert sql == "(`a` > %s OR (`a` = %s AND (`b` > %s OR (`b` = %s AND `c` >= %s))))"
    assert lexicographic(["a", "b"], "<") == "(`a` < %s OR (`a` = %s AND `b` < %s))"
    assert lexicographic_params([1, 2, 3]) == [1, 1, 2, 2, 3]


def test_lexicographic_matches_tuple_order() -> None:
    # evaluate the generated predicate in Python for every pair in a small grid
    def holds(sql: str, row: tuple[int, int], bound: tuple[int, int]) -> bool:
        expr = sql.replace("`a`", str(row[0])).replace("`b`", str(row[1])).replace("OR", "or").replace("AND", "and")
        for v in lexicographic_params(list(bound)):
            expr = expr.replace("%s", str(v), 1)
        expr = expr.replace(" = ", " == ")
        return bool(eval(expr))

    grid = [(x, y) for x in range(3) for y in range(3)]
    for row in grid:
        for bound in grid:
            assert holds(lexicographic(["a", "b"], ">="), row, bound) == (row >= bound)
            assert holds(lexicographic(["a", "b"], "<"), row, bound) == (row < bound)


def test_identifiers_are_quoted() -> None:
    assert lexicographic(["we`ird col"], "<") == "`we``ird col` < %s"


def test_schema_round_trip() -> None:
    schema = TableSchema("d", "t", (Column("id", "int", "int(11)", False),), ("id",))
    assert TableSchema.from_dict(schema.to_dict()) == schema


def test_newest_status_of_each_chunk_wins_whatever_the_row_order() -> None:
    from binlake.offsets import BinlogPosition
    from binlake.splits import newest

    planned = [Split("d.t", 1, i, None if i == 0 else (str(i * 10),), None if i == 2 else (str(i * 10 + 10),))
               for i in range(3)]
    hw = BinlogPosition("mysql-bin.000001", 400)
    lw = BinlogPosition("mysql-bin.000001", 250)
    rows = [planned[1].landed_at(hw, 5, lw).applied().to_dict(), *(s.to_dict() for s in planned),
            planned[0].landed_at(hw, 7).to_dict()]
    got = newest(rows, 8)["d.t"]
    assert [(s.index, s.status) for s in got] == [(0, "landed"), (1, "done"), (2, "planned")]
    assert got[0].hw == hw and got[0].rows == 7 and got[0].lw is None
    assert got[1].lw == lw and got[2].lw is None
