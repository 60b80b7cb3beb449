"""A table's live files from its Delta log (`binlake.lake.table_files`) on tables Spark writes: rows
deleted by deletion vectors (what a MERGE or DELETE leaves in silver) are not counted, the row counts
in a log checkpoint are read, and a table whose files have no row count in the log is read instead.
Each against Spark's own count and `DESCRIBE DETAIL`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from binlake.lake.table_files import TableFiles


def _spark_files(spark: Any, location: str) -> TableFiles:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{location}`").first()
    return TableFiles(spark.read.format("delta").load(location).count(), detail["numFiles"], detail["sizeInBytes"])


def _delete_by_vectors(spark: Any, location: str, where: str) -> None:
    """DELETE by Spark with deletion vectors on; fails unless the DELETE really wrote deletion vectors."""
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{location}` WHERE {where}")
    last = spark.sql(f"DESCRIBE HISTORY delta.`{location}` LIMIT 1").first()
    assert last["operation"] == "DELETE", last
    metrics = last["operationMetrics"]
    vectors = int(metrics["numDeletionVectorsAdded"]) + int(metrics["numDeletionVectorsUpdated"])
    assert vectors > 0 and int(metrics["numRemovedFiles"]) == 0, metrics


def test_rows_marked_by_deletion_vectors_are_not_counted(spark: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    spark.range(0, 1000).selectExpr("id", "id % 7 AS k").repartition(3).write.format("delta").save(location)
    _delete_by_vectors(spark, location, "k = 3")
    _delete_by_vectors(spark, location, "id % 10 = 1")  # a second vector over files that have one
    spark.range(1000, 1100).selectExpr("id", "id % 7 AS k").write.format("delta").mode("append").save(location)
    want = _spark_files(spark, location)
    assert want.rows == 1100 - len({i for i in range(1000) if i % 7 == 3 or i % 10 == 1})
    assert TableFiles.read(location) == want


def test_row_counts_in_a_checkpoint_are_read(spark: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    spark.range(0, 10).write.format("delta").option("delta.checkpointInterval", "2").save(location)
    spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for start in range(10, 50, 10):
        spark.range(start, start + 10).write.format("delta").mode("append").save(location)
    _delete_by_vectors(spark, location, "id % 3 = 0")
    assert list((Path(location) / "_delta_log").glob("*.checkpoint.parquet")), "a checkpoint was written"
    assert TableFiles.read(location) == _spark_files(spark, location)


def test_a_table_with_a_file_without_its_row_count_in_the_log_is_read(spark: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "t")
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        for start in (0, 250):  # a file of ids 0-249, another of 250-499
            spark.range(start, start + 250).coalesce(1).write.format("delta").mode("append").save(location)
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    assert "numRecords" not in "".join(p.read_text() for p in (Path(location) / "_delta_log").glob("*.json"))
    # a file with a deletion vector has its row count in the log (Delta's protocol asks for it), the
    # other file still none: the count is read, with the vector applied
    _delete_by_vectors(spark, location, "id < 50")
    adds = pa.RecordBatchReader.from_stream(DeltaTable(location).get_add_actions()).read_all()
    counts = adds["num_records"].to_pylist()
    assert sorted(counts, key=lambda n: n is None) == [250, None], counts
    assert TableFiles.read(location) == _spark_files(spark, location)
    assert _spark_files(spark, location).rows == 450
