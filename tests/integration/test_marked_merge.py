"""Micro-batches applied to a large silver table by marking (binlake.lake.marked_merge): deletion
vectors of binlake's own and one small file of new images per batch, mixed with the other writers a
table meets (delta-rs's copy-on-write MERGE, Spark's MERGE with its own deletion vectors), read back
equal to the expected rows by Spark and by delta-rs, at the newest version and at an older one."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from binlake.lake import arrow_commit, marked_merge, silver
from binlake.lake.table_log import Snapshot
from binlake.lake.key_index import KeyIndex
from binlake.schema import Column, TableSchema

SCHEMA = TableSchema("shop", "accounts", (Column("id", "bigint", "bigint(20)", False, in_key=True),
                                          Column("a name", "varchar", "varchar(40)"),
                                          Column("n", "int", "int(11)")), ("id",))
NAMES = silver.struct(SCHEMA).fieldNames()
ARROW = pa.schema([("id", pa.int64()), ("a name", pa.string()), ("n", pa.int32()), ("_seq", pa.decimal128(38, 0)),
                   ("_ts", pa.timestamp("us", "UTC")), ("_op", pa.string())])
ROWS = 60_000
AT = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _changes(rows: list[tuple[int, str, int, int, str]]) -> pa.Table:
    """Bronze-typed changes (id, name, n, seq, op), as a micro-batch hands them to silver."""
    return pa.Table.from_pylist([{"id": i, "a name": name, "n": n, "_seq": Decimal(seq), "_ts": AT, "_op": op}
                                 for i, name, n, seq, op in rows], ARROW)


def _batch(number: int, expected: dict[int, tuple[str, int]]) -> list[tuple[int, str, int, int, str]]:
    """A batch of changes at random keys: updates, deletes, inserts of new keys and of deleted ones, a
    key changed twice; `expected` (id -> (name, n)) updated as silver should be."""
    rng = random.Random(number)
    rows = []
    seq = 1000 * number
    for i in rng.sample(sorted(expected), 400):
        seq += 1
        if i % 13 == 0:
            rows.append((i, "", 0, seq, "d"))
            del expected[i]
        else:
            rows.append((i, f"name {i} b{number}", number, seq, "u"))
            expected[i] = (f"name {i} b{number}", number)
    for i in [ROWS + 100 * number + j for j in range(20)] + rng.sample(range(0, ROWS, 13), 5):
        if i in expected:
            continue
        seq += 1
        rows.append((i, f"new {i}", number, seq, "c"))
        expected[i] = (f"new {i}", number)
    twice = next(iter(sorted(expected)))
    for n in (1, 2):  # the newest of a key's changes in one batch wins
        seq += 1
        rows.append((twice, f"twice {n}", n, seq, "u"))
    expected[twice] = ("twice 2", 2)
    rng.shuffle(rows)
    return rows


def _delta_rs_rows(location: str, version: int | None = None) -> dict[int, tuple[str, int]]:
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(location) if version is None else DeltaTable(location, version=version)
    found = pa.table(QueryBuilder().register("t", table).execute('SELECT id, "a name", n FROM t').read_all())
    return {r["id"]: (r["a name"], r["n"]) for r in found.to_pylist()}


def _spark_rows(spark: Any, location: str, version: int | None = None) -> dict[int, tuple[str, int]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    rows = reader.load(location).select("id", "a name", "n").collect()
    assert len(rows) == len({r["id"] for r in rows}), "a key twice in silver"
    return {r["id"]: (r["a name"], r["n"]) for r in rows}


def _log_actions(location: str) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted((Path(location) / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if line]


def test_marked_batches_read_back_equal_by_spark_and_delta_rs(spark: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(marked_merge, "MARK_FROM_BYTES", 1)  # every batch of this small table is marked
    location = str(tmp_path / "silver")
    snapshot = _changes([(i, f"name {i}", 0, 1, "r") for i in range(ROWS)]).select(NAMES)
    assert silver.insert_snapshot_arrow(SCHEMA, snapshot, location)
    expected = {i: (f"name {i}", 0) for i in range(ROWS)}
    index = KeyIndex("id")
    versions: list[tuple[int, dict[int, tuple[str, int]]]] = []

    for number in range(1, 4):
        assert marked_merge.apply_marked(location, SCHEMA, _changes(_batch(number, expected)), index)
        versions.append((index.version + 1, dict(expected)))
    index.sync(Snapshot.read(location))
    assert index.rows() == len(expected)  # the index's live rows are silver's
    adds = [a["add"] for a in _log_actions(location) if "add" in a]
    assert any((a.get("deletionVector") or {}).get("storageType") == "u" for a in adds), "no deletion vector written"
    assert _delta_rs_rows(location) == expected

    # the other writers of a silver table: delta-rs's copy-on-write MERGE over the marked files, then
    # Spark's MERGE with deletion vectors of its own; the index follows them by the log
    silver.apply_arrow(arrow_commit.writable(location, NAMES), SCHEMA, _changes(_batch(4, expected)),
                       inserts_only=False)
    spark_batch = spark.createDataFrame(_changes(_batch(5, expected)).to_pandas())
    silver.apply(spark, SCHEMA, spark_batch.withColumn("_seq", F.col("_seq").cast("decimal(38,0)")), location,
                 str(tmp_path / "no-bronze"), bronze_may_be_newer=False)
    for number in range(6, 9):
        assert marked_merge.apply_marked(location, SCHEMA, _changes(_batch(number, expected)), index)

    assert _spark_rows(spark, location) == expected
    assert _delta_rs_rows(location) == expected
    index.sync(Snapshot.read(location))
    assert index.rows() == len(expected)
    version, then = versions[1]
    assert _spark_rows(spark, location, version) == then  # time travel reads the older version whole
    assert _delta_rs_rows(location, version) == then


def test_a_small_table_or_a_batch_in_few_bytes_keeps_the_merge(tmp_path: Path) -> None:
    """Below MARK_FROM_BYTES the batch is left to delta-rs's MERGE: nothing written here."""
    location = str(tmp_path / "silver")
    snapshot = _changes([(i, f"name {i}", 0, 1, "r") for i in range(1000)]).select(NAMES)
    assert silver.insert_snapshot_arrow(SCHEMA, snapshot, location)
    before = sorted(p.name for p in (tmp_path / "silver" / "_delta_log").iterdir())
    assert not marked_merge.apply_marked(location, SCHEMA, _changes([(5, "x", 1, 10, "u")]), KeyIndex("id"))
    assert sorted(p.name for p in (tmp_path / "silver" / "_delta_log").iterdir()) == before


def test_decimals_of_a_marked_batch_read_back_equal_by_spark_and_delta_rs(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A marked batch's file stores a decimal of 18 digits or fewer as a Parquet integer (as Spark and
    delta-rs write it), beside the snapshot's files, which delta-rs wrote: both readers take both."""
    import pyarrow.parquet as pq

    monkeypatch.setattr(marked_merge, "MARK_FROM_BYTES", 1)
    kinds = {"small": (5, 0), "money": (12, 2), "wide": (18, 4), "huge": (38, 9)}
    schema = TableSchema("shop", "prices", (Column("id", "bigint", "bigint(20)", False, in_key=True),
                                            *[Column(n, "decimal", f"decimal({p},{s})", precision=p, scale=s)
                                              for n, (p, s) in kinds.items()]),
                         ("id",))
    arrow = pa.schema([("id", pa.int64()), *[(n, pa.decimal128(p, s)) for n, (p, s) in kinds.items()],
                       ("_seq", pa.decimal128(38, 0)), ("_ts", pa.timestamp("us", "UTC")),
                       ("_op", pa.string())])

    def values(i: int, b: int) -> dict[str, Decimal]:
        sign = -1 if i % 3 == 0 else 1
        return {"small": Decimal(sign * (i * 7 + b) % 99999), "money": Decimal(sign * (i * 1000 + b)) / 100,
                "wide": Decimal(sign * (i * 10**9 + b)) / 10**4,
                "huge": Decimal(sign * (i * 10**20 + b)) / 10**9}

    def changes(keys: range | list[int], b: int, op: str) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, **values(i, b), "_seq": Decimal(1000 * b + n), "_ts": AT,
                                      "_op": op} for n, i in enumerate(keys)], arrow)

    location = str(tmp_path / "silver")
    first = changes(range(20_000), 0, "r").select(silver.struct(schema).fieldNames())
    assert silver.insert_snapshot_arrow(schema, first, location)
    expected = {i: values(i, 0) for i in range(20_000)}
    updated = list(range(0, 20_000, 7))
    assert marked_merge.apply_marked(location, schema, changes(updated, 1, "u"), KeyIndex("id"))
    expected.update({i: values(i, 1) for i in updated})

    added = [a["add"]["path"] for a in _log_actions(location) if "add" in a and a["add"].get("tags")]
    stored = pq.ParquetFile(Path(location) / added[-1]).schema
    assert {stored.column(i).physical_type for i in range(1, 4)} == {"INT32", "INT64"}, stored
    read = spark.read.format("delta").load(location).collect()
    by_spark = {r["id"]: {n: r[n] for n in kinds} for r in read}
    assert by_spark == expected
    from deltalake import DeltaTable, QueryBuilder
    found = pa.table(QueryBuilder().register("t", DeltaTable(location)).execute("SELECT * FROM t").read_all())
    assert {r["id"]: {n: r[n] for n in kinds} for r in found.to_pylist()} == expected


def test_the_index_a_marked_batch_keeps_equals_one_read_from_the_files(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A marked batch hands its new file's keys to the index (KeyIndex.learn) instead of the next batch
    reading them back: each file's keys, rows and marks then equal those of an index read from the table."""
    monkeypatch.setattr(marked_merge, "MARK_FROM_BYTES", 1)
    location = str(tmp_path / "silver")
    assert silver.insert_snapshot_arrow(SCHEMA, _changes([(i, f"name {i}", 0, 1, "r") for i in range(ROWS)])
                                        .select(NAMES), location)
    expected = {i: (f"name {i}", 0) for i in range(ROWS)}
    kept = KeyIndex("id")
    for number in range(1, 6):
        assert marked_merge.apply_marked(location, SCHEMA, _changes(_batch(number, expected)), kept)
    snapshot = Snapshot.read(location)
    kept.sync(snapshot)
    read = KeyIndex("id")
    read.sync(snapshot)
    assert set(kept.files) == set(read.files)
    for path, held in kept.files.items():
        fresh = read.files[path]
        assert held.keys.tolist() == fresh.keys.tolist(), path
        assert (held.rows is None) == (fresh.rows is None) and (held.rows is None or
                                                                held.rows.tolist() == fresh.rows.tolist())
        assert held.marked.rows().tolist() == fresh.marked.rows().tolist() and held.distinct == fresh.distinct
    assert sorted(int(k) for f in kept.files.values() for k in f.keys[f.live]) == sorted(expected)
