"""Small commits by delta-rs (`binlake.lake.arrow_commit`) into tables Spark reads and writes too:
a new table's first commit as Spark writes it, and silver's rule kept by delta-rs's MERGE over files
Spark's MERGE marked with deletion vectors, with column names DataFusion could misread."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from binlake.lake import arrow_commit, bronze, silver
from binlake.lake.target import CHECKPOINT_INTERVAL, Target
from binlake.schema import Column, TableSchema

from .capture import run_once, stream_once, write_config
from .helpers import execute, fetch, seq

# a column named as the MERGE's aliases were, one DataFusion's parser must take quoted, a composite key
COLUMNS = (
    Column("id", "int", "int(11)", False, in_key=True),
    Column("t", "varchar", "varchar(20)", False, in_key=True),
    Column('a "b". c', "varchar", "varchar(20)"),
    Column("target_", "int", "int(11)"),
    Column("at", "datetime", "datetime(6)", fraction=6),
    Column("geo", "point", "point"),
    Column("vec", "vector", "vector(2)"),
    Column("amount", "decimal", "decimal(10,2)", precision=10, scale=2),
)
SCHEMA = TableSchema("db", "tab", COLUMNS, ("id", "t"))


def _log(location: str, version: int) -> dict[str, Any]:
    actions = [json.loads(line) for line in (Path(location) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]
    return {next(iter(a)): next(iter(a.values())) for a in actions}


def _unmapped(kind: Any) -> Any:
    """A schema (Delta's JSON form) without its column-mapping metadata."""
    if isinstance(kind, dict):
        return {k: _unmapped(v) for k, v in kind.items()
                if k not in ("delta.columnMapping.id", "delta.columnMapping.physicalName")}
    if isinstance(kind, list):
        return [_unmapped(v) for v in kind]
    return kind


def _ids(kind: Any) -> list[int]:
    if isinstance(kind, dict):
        return ([kind["delta.columnMapping.id"]] if "delta.columnMapping.id" in kind else []) + \
            [i for v in kind.values() for i in _ids(v)]
    if isinstance(kind, list):
        return [i for v in kind for i in _ids(v)]
    return []


@pytest.mark.parametrize("side", ["bronze", "silver"])
def test_the_first_commit_is_the_one_spark_writes(spark: Any, tmp_path: Path, side: str) -> None:
    from delta.tables import DeltaTable

    module = bronze if side == "bronze" else silver
    struct, properties = module.struct(SCHEMA), module.PROPERTIES
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    assert arrow_commit.create(ours, struct, properties)
    assert not arrow_commit.create(ours, struct, properties), "a table that exists is left as it is"
    builder = DeltaTable.create(spark).location(theirs).addColumns(struct)
    for key, value in properties.items():
        builder = builder.property(key, value)
    builder.execute()
    mine, spark_own = _log(ours, 0), _log(theirs, 0)
    assert {k: sorted(v) if isinstance(v, list) else v for k, v in mine["protocol"].items()} == \
        {k: sorted(v) if isinstance(v, list) else v for k, v in spark_own["protocol"].items()}
    assert mine["metaData"]["configuration"] == spark_own["metaData"]["configuration"]
    schema, spark_schema = json.loads(mine["metaData"]["schemaString"]), json.loads(spark_own["metaData"]["schemaString"])
    assert _unmapped(schema) == _unmapped(spark_schema)
    ids = _ids(schema)
    assert sorted(ids) == sorted(_ids(spark_schema)) == list(range(1, len(ids) + 1))
    assert spark.read.format("delta").load(ours).schema == spark.read.format("delta").load(theirs).schema


def _row(key: int, op: str, seq: int, text: str = "x") -> dict[str, Any]:
    return {"id": key, "t": f"k{key % 3}", 'a "b". c': f"{text}{key}", "target_": key * 2,
            "at": dt.datetime(1000, 1, 1, 0, 0, key % 60, 123456), "geo": {"wkb": b"\x01\x02", "srid": 4326},
            "vec": [1.5, float(key)], "amount": Decimal(f"{key}.25"), "_op": op, "_seq": Decimal(seq),
            "_ts": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)}


def _changes(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """Rows as the micro-batch hands them over: typed by Spark (its silver columns and `_op`), as Arrow."""
    from pyspark.sql import types as T

    struct = T.StructType(silver.struct(SCHEMA).fields + [T.StructField("_op", T.StringType())])
    return spark.createDataFrame([tuple(r[f.name] for f in struct.fields) for r in rows], struct).toArrow()


def test_silver_kept_by_delta_rs_over_sparks_deletion_vectors(spark: Any, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    location = str(tmp_path / "silver")
    names = silver.struct(SCHEMA).fieldNames()
    assert silver.insert_snapshot_arrow(SCHEMA, _changes(spark, [_row(k, "r", 10) for k in range(40)]).select(names),
                                        location)
    expected = {(k, f"k{k % 3}"): _row(k, "r", 10) for k in range(40)}
    # Spark's MERGE deletes a tenth of the rows: it marks them in a deletion vector, the file stays
    doomed = spark.createDataFrame([(k, f"k{k % 3}") for k in range(0, 40, 10)], "id INT, t STRING")
    DeltaTable.forPath(spark, location).alias("x").merge(doomed.alias("y"), "x.id = y.id AND x.t = y.t") \
        .whenMatchedDelete().execute()
    metrics = DeltaTable.forPath(spark, location).history(1).first()["operationMetrics"]
    assert int(metrics["numTargetDeletionVectorsAdded"]) > 0, metrics
    for k in range(0, 40, 10):
        del expected[(k, f"k{k % 3}")]
    # updates of rows in that file, a delete, an insert, a deleted key back, a stale update, two
    # changes of one key in one batch (the newer one counts)
    batch = [_row(1, "u", 20, "new"), _row(2, "u", 20, "new"), _row(3, "d", 20), _row(100, "c", 20),
             _row(10, "c", 20, "back"), _row(4, "u", 5, "stale"), _row(5, "u", 21, "older"), _row(5, "u", 22, "newest")]
    table = arrow_commit.writable(location, names)
    silver.apply_arrow(table, SCHEMA, _changes(spark, batch), inserts_only=False)
    for r in batch:
        key = (r["id"], r["t"])
        held = expected.get(key)
        if held is not None and held["_seq"] >= r["_seq"]:
            continue
        if r["_op"] == "d":
            expected.pop(key, None)
        else:
            expected[key] = r
    got = {(r["id"], r["t"]): r.asDict(recursive=True) for r in spark.read.format("delta").load(location).collect()}
    assert sorted(got) == sorted(expected)
    for key, r in expected.items():
        assert {n: got[key][n] for n in names if n not in ("at", "_ts")} == \
            {n: r[n] for n in names if n not in ("at", "_ts")}, key
        assert got[key]["at"] == r["at"]
    assert got[(5, "k2")]['a "b". c'] == "newest5" and got[(4, "k1")]['a "b". c'] == "x4"


def test_delta_rs_keeps_the_tables_checkpoint_interval(spark: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "silver")
    names = silver.struct(SCHEMA).fieldNames()
    assert arrow_commit.create(location, silver.struct(SCHEMA), silver.PROPERTIES)
    table = arrow_commit.writable(location, names)
    for k in range(int(CHECKPOINT_INTERVAL)):
        arrow_commit.append(table, _changes(spark, [_row(k, "c", k)]).select(names))
    # a checkpoint within the last interval (delta-rs counts from the version after its first)
    last = json.loads((Path(location) / "_delta_log" / "_last_checkpoint").read_text())["version"]
    assert last >= int(CHECKPOINT_INTERVAL) - 1 and (Path(location) / "_delta_log" / f"{last:020d}.checkpoint.parquet").exists()
    assert spark.read.format("delta").load(location).count() == int(CHECKPOINT_INTERVAL)


def test_a_small_table_of_large_values_is_written_by_spark(dev_db: Any, database: str, spark: Any,
                                                           tmp_path: Path, monkeypatch: Any) -> None:
    """Rows past `ARROW_BYTES` are not held in the driver: the snapshot reads them again by a Spark job,
    and a micro-batch's share of them is landed by Spark, with the same result."""
    from delta.tables import DeltaTable

    monkeypatch.setattr(arrow_commit, "ARROW_BYTES", 2000)
    monkeypatch.setattr(arrow_commit, "STREAM_BYTES", 2000)
    execute(dev_db, database, "CREATE TABLE big (id INT PRIMARY KEY, v TEXT)",
            f"INSERT INTO big SELECT seq, REPEAT('x', 100) FROM {seq(1, 50)}")
    cfg_path = write_config(tmp_path / "binlake.yml", dev_db.running_port(), [f"{database}.big"], tmp_path / "lake",
                            "7130-7134", chunk_size=100)
    cfg = run_once(cfg_path)
    target, name = Target.of(cfg), f"{database}.big"

    def engines(location: str) -> list[str]:
        return [r["engineInfo"] for r in DeltaTable.forPath(spark, location).history().orderBy("version").collect()]

    assert engines(target.silver(name).location)[0].startswith("Apache-Spark")
    first, second = engines(target.bronze(name).location)[:2]
    assert first == "binlake" and second.startswith("Apache-Spark"), (first, second)
    execute(dev_db, database, "UPDATE big SET v = REPEAT('y', 300) WHERE id <= 10", "DELETE FROM big WHERE id = 50")
    stream_once(cfg_path)
    assert engines(target.bronze(name).location)[-1].startswith("Apache-Spark")
    got = sorted(tuple(r) for r in spark.read.format("delta").load(target.silver(name).location).select("id", "v").collect())
    assert got == sorted(fetch(dev_db, database, "SELECT id, v FROM big"))
