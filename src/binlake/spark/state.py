"""The split state: one Delta table, appended to, never updated: a chunk's planned row, then a row
for each status it reaches (see `splits.newest`). Appends are cheap and never conflict."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from binlake.splits import Split, newest

SCHEMA = (
    "table STRING, table_no INT, chunk INT, group_id BIGINT, start STRING, `end` STRING, status STRING, "
    "hw_file STRING, hw_pos BIGINT, rows BIGINT, updated_at TIMESTAMP"
)


def _exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def ensure(spark: SparkSession, path: str) -> None:
    if not _exists(spark, path):
        spark.createDataFrame([], SCHEMA).write.format("delta").mode("ignore").save(path)


def _append(spark: SparkSession, path: str, splits: Iterable[Split], app_id: str | None = None,
            version: int | None = None) -> None:
    """Blind appends: concurrent fan-out tasks never conflict on them, and no row is rewritten."""
    rows = [s.to_dict() for s in splits]
    if not rows:
        return
    df = spark.createDataFrame(rows, SCHEMA.replace(", updated_at TIMESTAMP", "")).withColumn(
        "updated_at", F.current_timestamp()
    )
    writer = df.write.format("delta").mode("append")
    if app_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", version)
    writer.save(path)


def add_planned(spark: SparkSession, path: str, splits: list[Split]) -> None:
    """Append a table's next planned splits. Planning resumes after the last split written, and the
    append is keyed by (table, first chunk), so a retried batch is never written twice."""
    if splits:
        first = splits[0]
        _append(spark, path, splits, f"binlake-plan-{first.table_no}-{first.table}", first.index)


def record(spark: SparkSession, path: str, splits: Iterable[Split]) -> None:
    """Record splits' new status (landed or done); the newest status of a chunk wins on load."""
    _append(spark, path, splits)


def load(spark: SparkSession, path: str, group_size: int, tables: list[str] | None = None) -> dict[str, list[Split]]:
    """All splits by table, in chunk order, each in its newest status."""
    if not _exists(spark, path):
        return {}
    df = spark.read.format("delta").load(path)
    if tables is not None:
        df = df.where(F.col("table").isin(tables))
    return newest((r.asDict() for r in df.collect()), group_size)


def table_numbers(spark: SparkSession, path: str) -> dict[str, int]:
    if not _exists(spark, path):
        return {}
    rows = spark.read.format("delta").load(path).groupBy("table").agg(F.max("table_no").alias("n")).collect()
    return {r["table"]: int(r["n"]) for r in rows}


def last_splits(spark: SparkSession, path: str) -> dict[str, Split]:
    """The highest-numbered split of every table: where planning resumes (no full load)."""
    if not _exists(spark, path):
        return {}
    df = spark.read.format("delta").load(path)
    last = df.groupBy("table").agg(F.max("chunk").alias("chunk"))
    rows = df.join(last, ["table", "chunk"]).collect()
    return {r["table"]: Split.from_dict(r.asDict()) for r in rows}


RETIRED = "retired:"


def retire(spark: SparkSession, path: str, tables: list[str]) -> None:
    """Set aside the chunks of tables that are snapshotted again. Their rows stay, under the name
    `retired:<db.table>`, rather than being deleted: the table's number is part of planning's
    idempotent-append key, and a number used again would have its new plan skipped as written."""
    from delta.tables import DeltaTable

    if tables and _exists(spark, path):
        DeltaTable.forPath(spark, path).update(F.col("table").isin(tables),
                                               {"table": F.concat(F.lit(RETIRED), F.col("table"))})
