"""A Delta round trip through the project's SparkSession: write, MERGE, read back, history."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import DecimalType, IntegerType, StringType, StructField, StructType

SCHEMA = StructType([
    StructField("id", IntegerType(), False),
    StructField("name", StringType(), True),
    StructField("total", DecimalType(12, 2), True),
])


def rows(spark: SparkSession, path: Path, **options: object) -> list[tuple[object, ...]]:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(tuple(r) for r in reader.load(str(path)).collect())


def test_write_merge_read_history(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "orders"
    initial = [(1, "Zoë", Decimal("10.00")), (2, "José", Decimal("20.50")), (3, "Ana", Decimal("3.00"))]
    spark.createDataFrame(initial, SCHEMA).write.format("delta").save(str(path))

    changes = spark.createDataFrame(
        [(2, "José", Decimal("25.00"), "u"), (3, None, None, "d"), (4, "山田", Decimal("7.25"), "c")],
        "id INT, name STRING, total DECIMAL(12,2), op STRING",
    )
    (
        DeltaTable.forPath(spark, str(path)).alias("t")
        .merge(changes.alias("s"), "t.id = s.id")
        .whenMatchedDelete(condition="s.op = 'd'")
        .whenMatchedUpdate(set={"name": "s.name", "total": "s.total"})
        .whenNotMatchedInsert(condition="s.op != 'd'",
                              values={"id": "s.id", "name": "s.name", "total": "s.total"})
        .execute()
    )

    assert rows(spark, path) == [(1, "Zoë", Decimal("10.00")), (2, "José", Decimal("25.00")),
                                 (4, "山田", Decimal("7.25"))]
    assert rows(spark, path, versionAsOf=0) == sorted(initial)

    history = DeltaTable.forPath(spark, str(path)).history().orderBy("version").collect()
    assert [(h["version"], h["operation"]) for h in history] == [(0, "WRITE"), (1, "MERGE")]
    metrics = history[1]["operationMetrics"]
    counts = [metrics[f"numTargetRows{what}"] for what in ("Updated", "Deleted", "Inserted")]
    assert counts == ["1", "1", "1"]
