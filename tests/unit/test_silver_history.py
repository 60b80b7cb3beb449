"""Soft deletes and every version (SCD type 2) on real Delta tables: the same changes give the same
silver in any order of arrival and however often they are applied (a replay), and each key's
versions chain by `_seq`."""

from __future__ import annotations

import decimal
import itertools

import pytest

from binlake.errors import ConfigError
from binlake.lake import bronze, silver
from binlake.lake.silver_shape import Shape
from binlake.schema import Column, TableSchema

from .test_silver_merge import SCHEMA, changes

SOFT, HISTORY, BOTH = Shape("soft", 1), Shape("hard", 2), Shape("soft", 2)


def setup(spark, tmp_path, shape):  # type: ignore[no-untyped-def]
    b, s = str(tmp_path / "bronze"), str(tmp_path / "silver")
    bronze.ensure_table(spark, b, SCHEMA)
    silver.ensure_table(spark, s, SCHEMA, shape)
    return b, s


def land(spark, b, s, rows, shape, to_bronze=True):  # type: ignore[no-untyped-def]
    df = changes(spark, rows)
    if to_bronze:
        df.write.format("delta").mode("append").save(b)
    silver.apply(spark, SCHEMA, df, s, b, shape=shape)


def rows_of(spark, s):  # type: ignore[no-untyped-def]
    out = []
    for r in spark.read.format("delta").load(s).collect():
        d = r.asDict()
        out.append(tuple(int(v) if isinstance(v, decimal.Decimal) else v for k, v in sorted(d.items()) if k != "_ts"))
    return sorted(out, key=repr)


# key 1: snapshot, update, delete, insert again; key 2: snapshot then delete; key 3: insert, update
STORY = [("r", 100, 1, "snap", 0), ("r", 100, 2, "snap", 0), ("u", 150, 1, "u1", None), ("d", 160, 2, "snap", None),
         ("d", 170, 1, "u1", None), ("c", 180, 1, "back", None), ("c", 190, 3, "new", None), ("u", 200, 3, "new2", None)]


def test_soft_deletes_keep_the_tombstone_and_a_reinsert_revives(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path, SOFT)
    land(spark, b, s, STORY[:5], SOFT)
    got = {r["id"]: (r["v"], int(r["_seq"]), r["_deleted"]) for r in spark.read.format("delta").load(s).collect()}
    assert got == {1: ("u1", 170, True), 2: ("snap", 160, True)}
    land(spark, b, s, STORY[5:], SOFT)
    got = {r["id"]: (r["v"], int(r["_seq"]), r["_deleted"]) for r in spark.read.format("delta").load(s).collect()}
    assert got == {1: ("back", 180, False), 2: ("snap", 160, True), 3: ("new2", 200, False)}


def test_history_chains_versions_by_seq(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path, HISTORY)
    land(spark, b, s, STORY, HISTORY)
    got = sorted((r["id"], r["v"], int(r["__START_AT"]), r["__END_AT"] and int(r["__END_AT"]))
                 for r in spark.read.format("delta").load(s).collect())
    # a hard delete ends key 1's and key 2's version and starts none
    assert got == [(1, "back", 180, None), (1, "snap", 100, 150), (1, "u1", 150, 170), (2, "snap", 100, 160),
                   (3, "new", 190, 200), (3, "new2", 200, None)]


def test_history_with_soft_deletes_keeps_the_delete_as_a_version(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path, BOTH)
    land(spark, b, s, STORY, BOTH)
    got = sorted((r["id"], int(r["__START_AT"]), r["__END_AT"] and int(r["__END_AT"]), r["_deleted"])
                 for r in spark.read.format("delta").load(s).collect())
    assert got == [(1, 100, 150, False), (1, 150, 170, False), (1, 170, 180, True), (1, 180, None, False),
                   (2, 100, 160, False), (2, 160, None, True), (3, 190, 200, False), (3, 200, None, False)]


@pytest.mark.parametrize("shape", [SOFT, HISTORY, BOTH], ids=["soft", "history", "both"])
def test_the_live_rows_are_each_key_s_current_image(spark, tmp_path, shape) -> None:  # type: ignore[no-untyped-def]
    # what status counts and verify compares: key 2 deleted, keys 1 and 3 at their newest values
    b, s = setup(spark, tmp_path, shape)
    land(spark, b, s, STORY, shape)
    live = spark.read.format("delta").load(s).where(shape.live())
    assert sorted((r["id"], r["v"]) for r in live.collect()) == [(1, "back"), (3, "new2")]
    assert Shape().live() is None


@pytest.mark.parametrize("shape", [SOFT, HISTORY, BOTH], ids=["soft", "history", "both"])
def test_any_order_of_arrival_and_any_replay_gives_the_same_silver(spark, tmp_path, shape) -> None:  # type: ignore[no-untyped-def]
    """Bronze holds the whole story (it is written before silver); silver is given it in pieces, in
    several orders, each piece possibly twice: the result is always the one of the story in order."""
    b, s = setup(spark, tmp_path / "in-order", shape)
    land(spark, b, s, STORY, shape)
    want = rows_of(spark, s)
    pieces = [STORY[5:], STORY[:2], STORY[2:5]]  # the snapshot rows after later changes of their keys
    for n, order in enumerate(itertools.islice(itertools.permutations(pieces), 2)):
        b, s = setup(spark, tmp_path / f"order{n}", shape)
        changes(spark, STORY).write.format("delta").mode("append").save(b)
        for piece in [*order, order[0]]:  # the first piece replayed at the end
            land(spark, b, s, piece, shape, to_bronze=False)
        assert rows_of(spark, s) == want, order


def test_history_inserts_with_nothing_newer_are_appended_and_a_replay_adds_nothing(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path, HISTORY)
    land(spark, b, s, STORY[:5], HISTORY)
    inserts = changes(spark, STORY[5:7])
    silver.apply(spark, SCHEMA, inserts, s, b, bronze_may_be_newer=False, inserts_only=True, shape=HISTORY)
    inserts.write.format("delta").mode("append").save(b)
    silver.apply(spark, SCHEMA, inserts, s, b, bronze_may_be_newer=True, inserts_only=True, shape=HISTORY)
    got = sorted((r["id"], int(r["__START_AT"]), r["__END_AT"] and int(r["__END_AT"]))
                 for r in spark.read.format("delta").load(s).collect())
    assert got == [(1, 100, 150), (1, 150, 170), (1, 180, None), (2, 100, 160), (3, 190, None)]


def test_a_silver_built_in_another_shape_is_refused(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, s = setup(spark, tmp_path, SOFT)
    with pytest.raises(ConfigError, match=r"built with silver.deletes: soft, silver.history: 1; the configuration now "
                                          r"says silver.deletes: hard, silver.history: 2"):
        silver.ensure_table(spark, s, SCHEMA, HISTORY)
    silver.ensure_table(spark, s, SCHEMA, SOFT)


def test_a_keyless_table_is_refused_with_soft_deletes_or_history() -> None:
    keyless = TableSchema("d", "log", (Column("v", "varchar", "varchar(10)"),), (), ("v",), False)
    assert keyless.multiset
    for shape in (SOFT, HISTORY, BOTH):
        assert "d.log has no unique key" in (shape.refusal(keyless) or "")
    assert Shape().refusal(keyless) is None
