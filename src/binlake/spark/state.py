"""The split state: one Delta table, one row per chunk. Every write is an idempotent MERGE."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from binlake.splits import Split

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


def _merge(spark: SparkSession, path: str, rows: list[dict[str, Any]], update_cols: list[str]) -> None:
    from delta.tables import DeltaTable

    if not rows:
        return
    df = spark.createDataFrame(rows, SCHEMA.replace(", updated_at TIMESTAMP", "")).withColumn(
        "updated_at", F.current_timestamp()
    )
    for attempt in range(8):
        try:
            (
                DeltaTable.forPath(spark, path).alias("t")
                .merge(df.alias("s"), "t.table = s.table AND t.chunk = s.chunk")
                .whenMatchedUpdate(set={c: f"s.`{c}`" for c in update_cols})
                .whenNotMatchedInsertAll()
                .execute()
            )
            return
        except Exception as exc:  # concurrent fan-out tasks may conflict on commit; retry
            if "Concurrent" not in type(exc).__name__ and "Concurrent" not in str(exc)[:300] or attempt == 7:
                raise
            time.sleep(0.5 * (attempt + 1))


def add_planned(spark: SparkSession, path: str, splits: Iterable[Split]) -> None:
    """Insert planned splits; a split already present is left as it is (re-planning changes nothing)."""
    _merge(spark, path, [s.to_dict() for s in splits], update_cols=["table"])


def mark_done(spark: SparkSession, path: str, splits: Iterable[Split]) -> None:
    _merge(spark, path, [s.to_dict() for s in splits], update_cols=["status", "hw_file", "hw_pos", "rows", "updated_at"])


def load(spark: SparkSession, path: str, group_size: int, tables: list[str] | None = None) -> dict[str, list[Split]]:
    """All splits by table, in chunk order."""
    if not _exists(spark, path):
        return {}
    df = spark.read.format("delta").load(path)
    if tables is not None:
        df = df.where(F.col("table").isin(tables))
    out: dict[str, list[Split]] = {}
    for r in df.orderBy("table", "chunk").collect():
        out.setdefault(r["table"], []).append(Split.from_dict(r.asDict(), group_size))
    return out


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
