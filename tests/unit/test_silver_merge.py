"""Silver MERGE semantics on real Delta tables: newest `_seq` wins, replays change nothing, and a
snapshot row that arrives after a later delete of its key does not bring it back."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from chispa import assert_df_equality

from binlake.lake import arrow_commit, bronze, silver
from binlake.lake.table_log import Snapshot
from binlake.schema import Column, TableSchema

SCHEMA = TableSchema("d", "t", (Column("id", "int", "int(11)", False), Column("v", "varchar", "varchar(10)")), ("id",))


def changes(spark, rows):  # type: ignore[no-untyped-def]
    raw = spark.createDataFrame(
        [("d.t", op, decimal.Decimal(seq), 0, "b.000001", 0, None, chunk, None, None, [str(k), v])
         for op, seq, k, v, chunk in rows],
        bronze.CHANGES,
    )
    return bronze.typed(raw, SCHEMA)


def setup(spark, tmp_path):  # type: ignore[no-untyped-def]
    b, s = str(tmp_path / "bronze"), str(tmp_path / "silver")
    bronze.ensure_table(spark, b, SCHEMA)
    silver.ensure_table(spark, s, SCHEMA)
    return b, s


def land(spark, b, s, rows):  # type: ignore[no-untyped-def]
    df = changes(spark, rows)
    df.write.format("delta").mode("append").save(b)
    silver.apply(spark, SCHEMA, df, s, b)


def current(spark, s):  # type: ignore[no-untyped-def]
    return {r["id"]: (r["v"], int(r["_seq"])) for r in spark.read.format("delta").load(s).collect()}


def test_newest_seq_wins_within_and_across_batches(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path)
    land(spark, b, s, [("r", 100, 1, "snap", 0), ("r", 100, 2, "snap", 0), ("u", 150, 1, "u1", None),
                       ("u", 140, 1, "older", None)])
    assert current(spark, s) == {1: ("u1", 150), 2: ("snap", 100)}
    land(spark, b, s, [("d", 200, 2, "snap", None), ("c", 210, 3, "new", None), ("u", 120, 1, "stale", None)])
    assert current(spark, s) == {1: ("u1", 150), 3: ("new", 210)}


def test_applying_the_same_batch_twice_changes_nothing(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path)
    batch = [("r", 100, 1, "a", 0), ("c", 150, 2, "b", None), ("d", 160, 1, "a", None), ("c", 170, 1, "back", None)]
    land(spark, b, s, batch)
    before = spark.read.format("delta").load(s)
    snapshot = before.collect()
    silver.apply(spark, SCHEMA, changes(spark, batch), s, b)
    after = spark.read.format("delta").load(s)
    assert_df_equality(spark.createDataFrame(snapshot, before.schema), after, ignore_row_order=True)


def test_snapshot_row_after_later_delete_does_not_resurrect(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path)
    land(spark, b, s, [("d", 300, 7, "x", None), ("u", 310, 8, "stream", None)])
    assert current(spark, s) == {8: ("stream", 310)}
    land(spark, b, s, [("r", 200, 7, "snap", 3), ("r", 200, 8, "snap", 3), ("r", 200, 9, "snap", 3)])
    assert current(spark, s) == {8: ("stream", 310), 9: ("snap", 200)}


def test_insert_only_batches_replay_and_meet_newer_images_like_the_full_merge(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The stream's cheaper MERGE for a batch of inserts bronze may hold (a replay): applied twice it changes nothing, and a replayed
    insert of a key silver holds a later image of leaves that image."""
    b, s = setup(spark, tmp_path)
    land(spark, b, s, [("r", 100, 1, "snap", 0)])
    inserts = changes(spark, [("c", 200, 2, "two", None), ("c", 210, 3, "three", None)])
    for _ in range(2):
        silver.apply(spark, SCHEMA, inserts, s, b, inserts_only=True)
        assert current(spark, s) == {1: ("snap", 100), 2: ("two", 200), 3: ("three", 210)}
    silver.apply(spark, SCHEMA, changes(spark, [("u", 300, 2, "later", None)]), s, b, bronze_may_be_newer=False)
    silver.apply(spark, SCHEMA, inserts, s, b, inserts_only=True)
    assert current(spark, s) == {1: ("snap", 100), 2: ("later", 300), 3: ("three", 210)}


def test_a_batch_of_inserts_bronze_held_nothing_of_is_a_plain_append_and_its_replay_adds_nothing(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A stream batch of inserts that bronze held nothing newer than is a plain append to silver (no
    MERGE). Replayed after a crash, the batch is in bronze by then (bronze is written first), so the
    stream says bronze may be newer: the MERGE finds every key and commits nothing."""
    from delta.tables import DeltaTable

    def last_operation() -> tuple[str, str | None]:
        h = DeltaTable.forPath(spark, s).history(1).collect()[0]
        return h["operation"], (h["operationParameters"] or {}).get("mode")

    b, s = setup(spark, tmp_path)
    land(spark, b, s, [("r", 100, 1, "snap", 0)])
    inserts = changes(spark, [("c", 200, 2, "two", None), ("c", 210, 3, "three", None)])
    silver.apply(spark, SCHEMA, inserts, s, b, bronze_may_be_newer=False, inserts_only=True)
    assert last_operation() == ("WRITE", "Append")
    assert current(spark, s) == {1: ("snap", 100), 2: ("two", 200), 3: ("three", 210)}
    inserts.write.format("delta").mode("append").save(b)
    silver.apply(spark, SCHEMA, inserts, s, b, bronze_may_be_newer=True, inserts_only=True)
    assert last_operation() == ("WRITE", "Append"), "the replay's MERGE found every key: nothing to commit"
    assert spark.read.format("delta").load(s).count() == 3
    assert current(spark, s) == {1: ("snap", 100), 2: ("two", 200), 3: ("three", 210)}


def test_newest_binlog_change_in_bronze(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b, s = setup(spark, tmp_path)
    assert bronze.newest_change(spark, b) is None
    changes(spark, [("r", 900, 1, "snap", 0)]).write.format("delta").mode("append").save(b)
    assert bronze.newest_change(spark, b) is None, "a snapshot row is not a binlog change"
    changes(spark, [("u", 300, 1, "a", None), ("d", 350, 1, "a", None)]).write.format("delta").mode("append").save(b)
    assert bronze.newest_change(spark, b) == 350


def test_a_replay_meets_a_later_delete_in_a_delta_rs_bronze_file(spark: Any, tmp_path: Path) -> None:
    """delta-rs writes every file's `_seq` statistics as 2**63 - 1, smaller than any change's: a replay's
    look at bronze must not skip such a file by them, or the batch's insert comes back after its delete."""
    import json

    from deltalake import DeltaTable

    b, s = setup(spark, tmp_path)
    seq = 10**20  # a binlog change's `_seq` is 10**20 at least (binlake.offsets.event_seq)
    batch = [("c", seq + 100, 1, "a", None)]
    land(spark, b, s, batch)
    delete = changes(spark, [("d", seq + 200, 1, "a", None)])
    table = DeltaTable(b)
    arrow_commit.append(table, delete.toArrow().cast(pa.schema(table.schema().to_arrow())))
    silver.apply(spark, SCHEMA, delete, s, b)
    assert current(spark, s) == {}
    commits = sorted((tmp_path / "bronze" / "_delta_log").glob("*.json"))
    actions = [json.loads(line) for f in commits for line in f.read_text().splitlines()]
    stats = [json.loads(a["add"]["stats"]) for a in actions if "add" in a]
    seq_column = Snapshot.read(b).physical_names["_seq"]
    assert stats[-1]["maxValues"][seq_column] == bronze.DELTA_RS_SEQ_STAT  # what the replay's look meets
    silver.apply(spark, SCHEMA, changes(spark, batch), s, b)  # the first batch again, as after a crash
    assert current(spark, s) == {}
