"""The binlog source's change rows: a data row's values in `_vals` (built natively or in Python, the
same Arrow column either way), typed by position, and a row from before `_vals` typed from its `_row`
JSON by name to the same values."""

from __future__ import annotations

import decimal
import json
import random
from typing import Any

import pytest

from binlake.lake import bronze
from binlake.schema import Column, TableSchema
from binlake.source import rowtext

SCHEMA = TableSchema("d", "t", (Column("id", "int", "int(11)", False), Column("v", "varchar", "varchar(10)"),
                                Column("at", "datetime", "datetime(6)", fraction=6),
                                Column("n", "decimal", "decimal(12,2)", precision=12, scale=2)),
                     ("id",))


def _rows(seed: int, n: int) -> list[list[str | None] | None]:
    rnd = random.Random(seed)
    texts = ["", "a", "é😀", "x" * 300, "\"q\" \\ \t", "0"]
    return [None if rnd.random() < 0.1 else [rnd.choice([*texts, None]) for _ in range(rnd.randint(0, 6))]
            for _ in range(n)]


def _taken(values: rowtext.RowValues, rows: list[Any], cuts: list[int]) -> list[Any]:
    for r in rows:
        values.push(r)
    out = []
    for k in cuts:
        part = values.take(k)
        part.validate(full=True)
        out.append(part.to_pylist())
    return out


def test_the_native_values_are_the_python_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    if not rowtext.available():
        pytest.skip("the native row encoding is not built here")
    rows = _rows(7, 3000)
    cuts = [0, 1, 999, 1500, 500]  # takes that split what was pushed, down to nothing left
    native = _taken(rowtext.RowValues(), rows, cuts)
    monkeypatch.setattr(rowtext, "_rowtext", None)
    python = _taken(rowtext.RowValues(), rows, cuts)
    assert native == python
    assert [r for part in native for r in part] == rows


def _changes(spark: Any, rows: list[tuple[str | None, list[str | None] | None]]) -> Any:
    return spark.createDataFrame([("d.t", "c", decimal.Decimal(i), 0, "b.000001", 0, None, None, None, text, vals)
                                  for i, (text, vals) in enumerate(rows)], bronze.CHANGES)


def test_values_by_position_and_json_by_name_give_the_same_row(spark: Any) -> None:
    images = [["1", "ab", "2024-02-29 10:11:12.000001", "-12.50"], ["2", None, None, "0.00"], ["3", "", None, None]]
    by_position = _changes(spark, [(None, v) for v in images])
    by_name = _changes(spark, [(json.dumps(dict(zip(SCHEMA.names, v))), None) for v in images])
    got = [bronze.typed(df, SCHEMA).drop("_seq").collect() for df in (by_position, by_name)]
    assert got[0] == got[1]
    first = got[0][0]
    assert (first["id"], first["v"], first["n"]) == (1, "ab", decimal.Decimal("-12.50"))


@pytest.mark.parametrize("values", [["1", "ab", None], ["1", "ab", None, "1.00", "x"]])
def test_values_that_do_not_match_the_schema_s_columns_are_an_error(spark: Any, values: list[str | None]) -> None:
    wrong = _changes(spark, [(None, values)])
    with pytest.raises(Exception, match=f"a change row of d.t holds {len(values)} values; its schema has 4 columns"):
        bronze.typed(wrong, SCHEMA).collect()
