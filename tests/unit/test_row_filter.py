"""source.row-filter without a server: the setting as written, what it is refused with, and silver's
MERGE under it on real Delta tables: a row updated out of the filter leaves, one updated into it
enters, NULL matches nothing, and any order of arrival or a replay ends in the same table; with soft
deletes a delete of a row in the filter is a tombstone and any change of one outside it removes the
key, and with history such a change ends the current version and starts none."""

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
SHAPES = {"plain": Shape(), "soft": Shape("soft", 1), "history": Shape("hard", 2), "both": Shape("soft", 2)}


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


def test_a_filter_is_kept_in_every_shape_but_refused_without_a_unique_key() -> None:
    keyless = TableSchema("d", "t", SCHEMA.columns, (), row_filter="tenant = 7")
    for shape in SHAPES.values():
        assert shape.filter_refusal(SCHEMA) is None
        assert "source.row-filter for d.t: the table has no unique key" in (shape.filter_refusal(keyless) or "")
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


def silver_after(spark, tmp_path, batches, shape=SHAPES["plain"], story=None, seen=None):  # type: ignore[no-untyped-def]
    """Silver's rows after `batches` applied in turn, each landed in bronze first; or, given the whole
    `story`, with bronze holding all of it from the start (a replay, or rows arriving out of order).
    With `seen`, a list, silver's rows after each batch are appended to it."""
    b, s = str(tmp_path / "bronze"), str(tmp_path / "silver")
    bronze.ensure_table(spark, b, SCHEMA)
    silver.ensure_table(spark, s, SCHEMA, shape)
    if story is not None:
        changes(spark, story).write.format("delta").mode("append").save(b)
    for batch in batches:
        df = changes(spark, batch)
        if story is None:
            df.write.format("delta").mode("append").save(b)
        silver.apply(spark, SCHEMA, df, s, b, shape=shape)
        if seen is not None:
            seen.append(silver_rows(spark, s, shape))
    return silver_rows(spark, s, shape)


def silver_rows(spark, s, shape):  # type: ignore[no-untyped-def]
    if shape.plain:
        return {r["id"]: (r["v"], r["tenant"]) for r in spark.read.format("delta").load(s).collect()}
    return sorted(tuple(int(v) if isinstance(v, decimal.Decimal) else v for v in r)
                  for r in spark.read.format("delta").load(s).drop("_ts").collect())


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_silver_holds_the_rows_that_match_now_whatever_the_batches(spark, tmp_path, cut) -> None:  # type: ignore[no-untyped-def]
    want = {1: ("e", 7), 3: ("n", 7)}
    assert silver_after(spark, tmp_path / "one", [HISTORY]) == want
    # in two batches, the second one replayed, and its changes in another order
    second = list(reversed(HISTORY[cut:]))
    assert silver_after(spark, tmp_path / f"two{cut}", [HISTORY[:cut], second, second]) == want
    # each change a batch of its own: each step of key 1 in and out (once: the cut plays no part in it),
    # one table through four batches, not four tables
    if cut == 1:
        seen: list = []  # type: ignore[type-arg]
        silver_after(spark, tmp_path / "step", [[change] for change in HISTORY[:4]], seen=seen)
        assert [rows.get(1) for rows in seen] == [("a", 7), None, ("c", 7), None]


def test_a_late_snapshot_row_in_the_filter_loses_to_a_newer_change_out_of_it(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the binlog's move out lands first; the snapshot row of the same key, older, arrives after it
    assert silver_after(spark, tmp_path, [[("u", 110, 1, "b", 8)], [("r", 100, 1, "a", 7)]]) == {}
    ops = [r["_op"] for r in row_filter.filtered(changes(spark, HISTORY), SCHEMA).orderBy("id", "_seq").collect()]
    assert ops == ["r", "d", "u", "d", "u", "d", "d", "c"]
    assert list(itertools.chain(*row_filter.matching(changes(spark, HISTORY), SCHEMA).orderBy("id", "_seq").select("_seq").collect())) == \
        [100, 120, 140, 150]


# key 1: in, updated out, back in, deleted in the filter, inserted again in it; key 2: out, deleted
# out of it; key 3: inserted in, deleted, inserted again out of it; key 4: in, updated to NULL; key 5:
# out, updated into it; key 6: in, deleted
KEPT = [("r", 100, 1, "a", 7), ("u", 110, 1, "b", 8), ("u", 120, 1, "c", 7), ("d", 130, 1, "c", 7),
        ("c", 140, 1, "e", 7), ("r", 100, 2, "x", 6), ("d", 125, 2, "x", 6), ("c", 150, 3, "n", 7),
        ("d", 160, 3, "n", 7), ("c", 170, 3, "m", 8), ("r", 100, 4, "p", 7), ("u", 115, 4, "q", None),
        ("r", 100, 5, "s", 8), ("u", 135, 5, "t", 7), ("r", 100, 6, "k", 7), ("d", 145, 6, "k", 7)]
# each shape's silver after KEPT: (id, v, tenant, _seq, [_deleted], [__START_AT, __END_AT])
KEPT_SILVER = {
    "soft": [(1, "e", 7, 140, False), (5, "t", 7, 135, False), (6, "k", 7, 145, True)],
    "history": [(1, "a", 7, 100, 100, 110), (1, "c", 7, 120, 120, 130), (1, "e", 7, 140, 140, None),
                (3, "n", 7, 150, 150, 160), (4, "p", 7, 100, 100, 115), (5, "t", 7, 135, 135, None),
                (6, "k", 7, 100, 100, 145)],
    "both": [(1, "a", 7, 100, False, 100, 110), (1, "c", 7, 120, False, 120, 130), (1, "c", 7, 130, True, 130, 140),
             (1, "e", 7, 140, False, 140, None), (3, "n", 7, 150, False, 150, 160),
             (3, "n", 7, 160, True, 160, 170), (4, "p", 7, 100, False, 100, 115),
             (5, "t", 7, 135, False, 135, None), (6, "k", 7, 100, False, 100, 145),
             (6, "k", 7, 145, True, 145, None)],
}


def test_with_soft_deletes_a_change_out_of_the_filter_leaves_and_a_delete_in_it_stays(spark) -> None:  # type: ignore[no-untyped-def]
    ops = {shape: [r["_op"] for r in row_filter.filtered(changes(spark, KEPT), SCHEMA, SHAPES[shape])
                   .orderBy("id", "_seq").collect()] for shape in ("plain", "soft")}
    assert ops["plain"] == ["r", "d", "u", "d", "c", "d", "d", "c", "d", "d", "r", "d", "d", "u", "r", "d"]
    assert ops["soft"] == ["r", "x", "u", "d", "c", "x", "x", "c", "d", "x", "r", "x", "x", "u", "r", "d"]


@pytest.mark.parametrize("shape", ["soft", "history", "both"])
def test_kept_deletes_and_history_hold_the_rows_in_the_filter_in_any_order(spark, tmp_path, shape) -> None:  # type: ignore[no-untyped-def]
    """In order; then with bronze holding the whole story, the snapshot rows after every later change
    of their keys, the binlog changes in two pieces in either order, one piece applied again."""
    want = KEPT_SILVER[shape]
    assert silver_after(spark, tmp_path / "in-order", [KEPT], SHAPES[shape]) == want
    snapshot = [c for c in KEPT if c[0] == "r"]
    binlog = [c for c in KEPT if c[0] != "r"]
    early, late = binlog[::2], binlog[1::2]
    for n, pieces in enumerate([[late, early, snapshot, late], [early, snapshot, late, snapshot, early]]):
        assert silver_after(spark, tmp_path / f"order{n}", pieces, SHAPES[shape], KEPT) == want, n
