"""A Delta round trip through the project's SparkSession: write, MERGE, read back, history."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DecimalType, IntegerType, StringType, StructField, StructType

SCHEMA = StructType([
    StructField("id", IntegerType(), False),
    StructField("name", StringType(), True),
    StructField("total", DecimalType(12, 2), True),
])


def read(spark: SparkSession, path: Path, **options: object) -> DataFrame:
    reader = spark.read.format("delta")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


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

    merged = [(1, "Zoë", Decimal("10.00")), (2, "José", Decimal("25.00")), (4, "山田", Decimal("7.25"))]
    assert_df_equality(read(spark, path), spark.createDataFrame(merged, SCHEMA), ignore_row_order=True,
                       ignore_nullable=True)
    assert_df_equality(read(spark, path, versionAsOf=0), spark.createDataFrame(initial, SCHEMA),
                       ignore_row_order=True, ignore_nullable=True)

    history = DeltaTable.forPath(spark, str(path)).history().orderBy("version").collect()
    assert [(h["version"], h["operation"]) for h in history] == [(0, "WRITE"), (1, "MERGE")]
    metrics = history[1]["operationMetrics"]
    counts = [metrics[f"numTargetRows{what}"] for what in ("Updated", "Deleted", "Inserted")]
    assert counts == ["1", "1", "1"]


def test_group_marks_observed_while_writing_equal_bronze(spark: SparkSession, tmp_path: Path) -> None:
    """A group's append observes each chunk's watermark and row count; a crash recovery reads the same
    marks back from bronze. Chunk 7's rows are there but not its watermark row; chunk 9 is absent."""
    from binlake.lake import bronze
    from binlake.schema import Column, TableSchema

    schema = TableSchema("db", "t", (Column("id", "int", "int(11)", False), Column("v", "varchar", "varchar(9)")),
                         ("id",))
    location = str(tmp_path / "bronze")
    bronze.ensure_table(spark, location, schema)
    changes = spark.createDataFrame(
        [("db.t", "r", Decimal(5), None, "b.1", 40, None, 5, None, str(i), f"v{i}") for i in range(3)]
        + [("db.t", "w", Decimal(5), None, "b.1", 40, None, 5, "b.1:30", None, None)]
        # chunk 6 was read on the server of a later epoch (after a failover): its _seq says so
        + [("db.t", "r", Decimal(10**30 + 6), None, "b.2", 4, None, 6, None, "9", "x"),
           ("db.t", "w", Decimal(10**30 + 6), None, "b.2", 4, None, 6, "b.1:90@1", None, None),
           ("db.t", "r", Decimal(7), None, "b.2", 9, None, 7, None, "10", "y")],
        bronze.flat_changes(schema))
    chunks = [5, 6, 7, 9]
    observed = bronze.append_chunks(bronze.typed_flat(changes, schema), location, chunks)
    assert observed == [{"_chunk": 5, "hw_file": "b.1", "hw_pos": 40, "epoch": 0, "lw": "b.1:30", "rows": 3},
                        {"_chunk": 6, "hw_file": "b.2", "hw_pos": 4, "epoch": 1, "lw": "b.1:90@1", "rows": 1},
                        {"_chunk": 7, "hw_file": None, "hw_pos": None, "epoch": 0, "lw": None, "rows": 1},
                        {"_chunk": 9, "hw_file": None, "hw_pos": None, "epoch": 0, "lw": None, "rows": 0}]
    assert bronze.chunk_marks(spark, location, chunks) == observed
    history = DeltaTable.forPath(spark, location).history().collect()
    assert history[0]["operation"] == "WRITE" and history[0]["operationParameters"]["mode"] == "Append"
