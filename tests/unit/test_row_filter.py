"""source.row-filter without a server: the setting as written, what it is refused with, and silver's
MERGE under it on real Delta tables: a row updated out of the filter leaves, one updated into it
enters, NULL matches nothing, and any order of arrival or a replay ends in the same table."""

from __future__ import annotations

import dataclasses
import decimal
import itertools
from pathlib import Path

import pytest

from binlake import config
from binlake.errors import ConfigError
from binlake.lake import bronze, row_filter, silver
from binlake.lake.silver_shape import Shape
from binlake.schema import Column, TableSchema

SCHEMA = TableSchema("d", "t", (Column("id", "int", "int(11)", False), Column("v", "varchar", "varchar(10)"),
                                Column("tenant", "int", "int(11)")), ("id",), row_filter="tenant = 7")


def test_the_setting_is_read_from_the_file_and_as_text(tmp_path: Path) -> None:
    path = tmp_path / "binlake.yml"
    path.write_text("source:\n  row-filter: {shop.orders: 'tenant_id = 7 AND region IS NOT NULL'}\n")
    assert config.load(path, env={}).get("source.row-filter") == {"shop.orders": "tenant_id = 7 AND region IS NOT NULL"}
    assert config.load(None, ["source.row-filter={shop.o: \"a = 'x'\"}"], env={}).get("source.row-filter") == \
        {"shop.o": "a = 'x'"}
    assert config.load(None, ["source.row-filter="], env={}).get("source.row-filter") == {}
    for text in ("source:\n  row-filter: {shop.o: ''}\n", "source:\n  row-filter: [a]\n"):
        path.write_text(text)
        with pytest.raises(ConfigError, match=r"^source\.row-filter is .*; binlake needs a mapping of 'db\.table' to "
                                              r"one SQL predicate"):
            config.load(path, env={})


def test_a_filter_is_refused_where_silver_cannot_keep_it_yet() -> None:
    assert Shape().filter_refusal(SCHEMA) is None
    assert "silver.deletes: soft, silver.history: 1: binlake keeps a filtered table with hard deletes and SCD " \
        "type 1 only" in (Shape("soft", 1).filter_refusal(SCHEMA) or "")
    assert Shape("hard", 2).filter_refusal(SCHEMA) is not None
    keyless = TableSchema("d", "t", SCHEMA.columns, (), row_filter="tenant = 7")
    assert "has no unique key" in (Shape().filter_refusal(keyless) or "")
    assert TableSchema.from_dict(SCHEMA.to_dict()) == SCHEMA


def changes(spark, rows):  # type: ignore[no-untyped-def]
    raw = spark.createDataFrame(
        [("d.t", op, decimal.Decimal(seq), 0, "b.000001", 0, None, None, None, None,
          [str(k), v, None if t is None else str(t)])
         for op, seq, k, v, t in rows],
        bronze.CHANGES,
    )
    return bronze.typed(raw, SCHEMA)


def test_an_invalid_predicate_is_refused_in_one_line(spark) -> None:  # type: ignore[no-untyped-def]
    row_filter.check(spark, SCHEMA)
    for predicate, why in [("tenant = ", (r"^source\.row-filter for d\.t is 'tenant = ' \(.*\); binlake needs one "
                                          r"Spark SQL predicate over the table's captured columns \(id, v, tenant\), "
                                          r"like tenant_id = 7: fix the predicate$")),
                           ("ssn = 1", r"is 'ssn = 1' \(.*ssn.*\)"),
                           ("tenant + 1", r"is 'tenant \+ 1', a int value, not true or false")]:
        with pytest.raises(ConfigError, match=why) as caught:
            row_filter.check(spark, dataclasses.replace(SCHEMA, row_filter=predicate))
        assert "\n" not in caught.value.message


# a key's changes: snapshot row in the filter, moved out, moved back in, to NULL, back in, deleted,
# inserted again outside it; key 2 never in it; key 3 inserted into it
HISTORY = [("r", 100, 1, "a", 7), ("u", 110, 1, "b", 8), ("u", 120, 1, "c", 7), ("u", 130, 1, "d", None),
           ("u", 140, 1, "e", 7), ("r", 100, 2, "x", 6), ("u", 125, 2, "y", 8), ("c", 150, 3, "n", 7)]


def silver_after(spark, tmp_path, batches):  # type: ignore[no-untyped-def]
    b, s = str(tmp_path / "bronze"), str(tmp_path / "silver")
    bronze.ensure_table(spark, b, SCHEMA)
    silver.ensure_table(spark, s, SCHEMA)
    for batch in batches:
        df = changes(spark, batch)
        df.write.format("delta").mode("append").save(b)
        silver.apply(spark, SCHEMA, df, s, b)
    return {r["id"]: (r["v"], r["tenant"]) for r in spark.read.format("delta").load(s).collect()}


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_silver_holds_the_rows_that_match_now_whatever_the_batches(spark, tmp_path, cut) -> None:  # type: ignore[no-untyped-def]
    want = {1: ("e", 7), 3: ("n", 7)}
    assert silver_after(spark, tmp_path / "one", [HISTORY]) == want
    # in two batches, the second one replayed, and its changes in another order
    second = list(reversed(HISTORY[cut:]))
    assert silver_after(spark, tmp_path / f"two{cut}", [HISTORY[:cut], second, second]) == want
    # each change a batch of its own: each step of key 1 in and out
    steps = [silver_after(spark, tmp_path / f"step{cut}", [HISTORY[:n]]).get(1) for n in (1, 2, 3, 4)]
    if cut == 1:
        assert steps == [("a", 7), None, ("c", 7), None]


def test_a_late_snapshot_row_in_the_filter_loses_to_a_newer_change_out_of_it(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the binlog's move out lands first; the snapshot row of the same key, older, arrives after it
    assert silver_after(spark, tmp_path, [[("u", 110, 1, "b", 8)], [("r", 100, 1, "a", 7)]]) == {}
    ops = [r["_op"] for r in row_filter.filtered(changes(spark, HISTORY), SCHEMA).orderBy("id", "_seq").collect()]
    assert ops == ["r", "d", "u", "d", "u", "d", "d", "c"]
    assert list(itertools.chain(*row_filter.matching(changes(spark, HISTORY), SCHEMA).orderBy("id", "_seq").select("_seq").collect())) == \
        [100, 120, 140, 150]
