"""Bronze: the append-only change log of one source table, full row images plus `_` metadata.

Both capture paths hand Spark generic change rows of text: the table, the operation, the sequence,
where in the binlog it came from, and the row's encoded values (see `schema.Column.encode`) -- in
`_vals`, the columns in order, for the binlog (`CHANGES`; rows from before `_vals` carry a JSON object
in `_row`), as columns `_c0.._cN` for the snapshot (`flat_changes`). `typed` and `typed_flat` turn them
into the table's typed columns by the same casts, so the snapshot and the binlog give identical values.
Operations: `r` snapshot read, `c` insert, `u` update, `d` delete (row image before the delete), and
`w`: one watermark row per snapshot chunk carrying its high watermark in `_file`/`_pos` and its low
watermark in `_lw` (all source columns NULL) -- the record that the chunk landed, written in the same
commit as its rows. `_lw` is NULL on every other row.
"""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from binlake import valuetypes
from binlake.lake import arrow_commit, storage
from binlake.lake.target import CHECKPOINT_INTERVAL
from binlake.offsets import EPOCH_FACTOR
from binlake.schema import Column, TableSchema

CHANGE_META = (
    "_table STRING, _op STRING, _seq DECIMAL(38,0), _ts BIGINT, _file STRING, _pos BIGINT, _gtid STRING, _chunk INT, "
    "_lw STRING"
)
CHANGES = CHANGE_META + ", _row STRING, _vals ARRAY<STRING>"
JSON_OPTIONS = {"mode": "FAILFAST", "maxStringLen": str(2**31 - 1)}


def flat_changes(schema: TableSchema) -> str:
    """The snapshot source's rows: one table, so its encoded values come as columns `_c0.._cN`
    (positional: any source name works) instead of one JSON object."""
    return CHANGE_META + "".join(f", _c{i} STRING" for i in range(len(schema.columns)))
META_FIELDS = [
    T.StructField("_op", T.StringType()),
    T.StructField("_seq", T.DecimalType(38, 0)),
    T.StructField("_ts", T.TimestampType()),
    T.StructField("_file", T.StringType()),
    T.StructField("_pos", T.LongType()),
    T.StructField("_gtid", T.StringType()),
    T.StructField("_chunk", T.IntegerType()),
    T.StructField("_lw", T.StringType()),
]
DATA_OPS = ("r", "c", "u", "d")
BINLOG_OPS = ("c", "u", "d")


def sql_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_SIMPLE: dict[str, T.DataType] = {
    "tinyint": T.ByteType(), "smallint": T.ShortType(), "int": T.IntegerType(), "bigint": T.LongType(),
    "float": T.FloatType(), "double": T.DoubleType(), "boolean": T.BooleanType(), "date": T.DateType(),
    "timestamp": T.TimestampType(), "timestamp_ntz": T.TimestampNTZType(), "string": T.StringType(),
    "binary": T.BinaryType(),
}


_COMPLEX: dict[str, T.DataType] = {
    valuetypes.SPATIAL_SPARK_TYPE: T.StructType([T.StructField("wkb", T.BinaryType()),
                                                 T.StructField("srid", T.IntegerType())]),
    valuetypes.VECTOR_SPARK_TYPE: T.ArrayType(T.FloatType()),
}


def spark_type(ddl: str) -> T.DataType:
    """The Spark type of `Column.spark_type()`, built without asking a session (pipelines forbid it)."""
    if ddl in _COMPLEX:
        return _COMPLEX[ddl]
    if ddl.startswith("decimal("):
        p, s = ddl[len("decimal("):-1].split(",")
        return T.DecimalType(int(p), int(s))
    return _SIMPLE[ddl]


def column_types(schema: TableSchema) -> list[T.StructField]:
    return [T.StructField(c.name, spark_type(c.spark_type()), True) for c in schema.columns]


def struct(schema: TableSchema) -> T.StructType:
    return T.StructType(column_types(schema) + META_FIELDS)


def typed(changes: DataFrame, schema: TableSchema) -> DataFrame:
    """Generic change rows (`CHANGES`) of one table -> the bronze columns. A row's `_vals` holds its
    columns' texts in the order of the schema version it was read under, which is `schema`; a row
    without `_vals` (one written before binlake had it, in a Databricks pipeline's binlog table) is
    read from the JSON object in its `_row`, by name."""
    payload = T.StructType([T.StructField(c.name, T.StringType()) for c in schema.columns])
    # Jackson refuses strings over 20 M characters (a 15 MB BLOB in base64) and from_json would
    # quietly give NULLs; FAILFAST turns any malformed row into an error instead of a NULL row
    # (never `changes.columns` here: a pipeline builds this frame where analysing it is refused)
    by_name = F.from_json("_row", payload, JSON_OPTIONS)
    vals, n = F.col("_vals"), len(schema.columns)
    # a row's values and the schema it is typed by must match column for column: a count that differs is
    # an error, never values shifted into the wrong columns
    checked = F.when(F.size(vals) == n, vals).when(vals.isNotNull(), F.raise_error(F.concat(
        F.lit(f"a change row of {schema.name} holds "), F.size(vals).cast("string"),
        F.lit(f" values; its schema has {n} columns"))))
    parsed = changes.withColumn("__v", checked).withColumn("__r", F.when(vals.isNull(), by_name))
    each = [F.when(F.col("__v").isNotNull(), F.col("__v")[i]).otherwise(F.col("__r").getField(c.name))
            for i, c in enumerate(schema.columns)]
    return _typed(parsed, schema, each)


def typed_flat(changes: DataFrame, schema: TableSchema) -> DataFrame:
    """Snapshot rows (`flat_changes`) -> the bronze columns, by the same casts as `typed`."""
    return _typed(changes, schema, [F.col(f"_c{i}") for i in range(len(schema.columns))])


def typed_value(column: Column, text: Any) -> Any:
    """An encoded value (`Column.encode`), a Spark column of text, as the column's Spark value."""
    if column.is_binary:
        return F.unbase64(text)
    if column.data_type in valuetypes.SPATIAL_TYPES:  # "<srid>:<base64 WKB>"
        return F.when(text.isNotNull(), F.struct(F.unbase64(F.substring_index(text, ":", -1)).alias("wkb"),
                                                 F.substring_index(text, ":", 1).cast("int").alias("srid")))
    if column.data_type == "vector":  # a JSON array
        return F.from_json(text, spark_type(column.spark_type()), JSON_OPTIONS)
    return text.cast(spark_type(column.spark_type()))


def _typed(changes: DataFrame, schema: TableSchema, raw: list[Any]) -> DataFrame:
    cols = [typed_value(col, text).alias(col.name) for col, text in zip(schema.columns, raw)]
    meta = [
        F.col("_op"), F.col("_seq"), F.timestamp_seconds("_ts").alias("_ts"), F.col("_file"), F.col("_pos"),
        F.col("_gtid"), F.col("_chunk"), F.col("_lw"),
    ]
    return changes.select(*cols, *meta)


# bronze's table properties: column mapping by name, so any source column name, spaces included, is valid
PROPERTIES = {"delta.columnMapping.mode": "name", "delta.checkpointInterval": CHECKPOINT_INTERVAL}


def ensure_table(spark: SparkSession, location: str, schema: TableSchema) -> None:
    """Create bronze, empty, unless it exists."""
    from delta.tables import DeltaTable

    if arrow_commit.local(location):
        arrow_commit.ensure(location, struct(schema), PROPERTIES)
    elif not storage.table_exists(spark, location):
        builder = DeltaTable.createIfNotExists(spark).location(location).addColumns(struct(schema))
        for key, value in PROPERTIES.items():
            builder = builder.property(key, value)
        builder.execute()


def append_chunks(df: DataFrame, location: str, chunks: list[int]) -> list[dict[str, Any]]:
    """Write a group's snapshot rows in one commit: a blind append, which reads nothing of bronze
    (and creates it, when this is the table's first read).
    The snapshot reads a chunk only when bronze holds none of its rows (it asks `chunk_marks` before
    each window of groups, and a commit lands all of a group or none of it). Returns each chunk's
    marks as `chunk_marks` does, observed while the rows were written."""
    from pyspark.sql import Observation

    marks = Observation()
    watermarks = F.collect_list(F.when(F.col("_op") == "w", F.struct("_chunk", "_file", "_pos", "_lw", "_seq"))).alias("w")
    rows = [F.count_if((F.col("_chunk") == int(c)) & (F.col("_op") == "r")).alias(f"rows_{int(c)}") for c in chunks]
    writer = df.observe(marks, watermarks, *rows).write.format("delta").mode("append").option("mergeSchema", "true")
    if not storage.table_exists(df.sparkSession, location):  # created with its first chunks: one commit
        writer = writer.options(**PROPERTIES)
    writer.save(location)
    seen = marks.get
    found = {w["_chunk"]: (w["_file"], w["_pos"], w["_lw"]) for w in seen["w"]}
    seqs = {w["_chunk"]: w["_seq"] for w in seen["w"]}
    return [_mark(int(c), *found.get(int(c), (None, None, None)), seen[f"rows_{int(c)}"], seqs.get(int(c)))
            for c in chunks]


def append_batch(df: DataFrame, location: str, app_id: str | None = None, version: int | None = None) -> None:
    """Append a stream micro-batch. With `app_id` and `version`, exactly once: Delta skips an
    (app_id, version) it already has, after a pass over the table's log to find it -- the stream's
    plain batches need none (their caller drops what bronze holds, see capture.micro_batch)."""
    writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
    if app_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", version)
    writer.save(location)


def arrow_marks(rows: Any, chunks: list[int]) -> list[dict[str, Any]]:
    """`chunk_marks` of chunks whose rows are the Arrow table `rows` (their bronze columns)."""
    ops, numbers = rows.column("_op").to_pylist(), rows.column("_chunk").to_pylist()
    counts = {int(c): 0 for c in chunks}
    for op, chunk in zip(ops, numbers):
        if op == "r":
            counts[chunk] += 1
    found = {w["_chunk"]: w for w in rows.filter(pc.equal(rows.column("_op"), "w"))
             .select(["_chunk", "_file", "_pos", "_lw", "_seq"]).to_pylist()}
    return [_mark(c, *((w["_file"], w["_pos"], w["_lw"]) if (w := found.get(c)) else (None, None, None)),
                  counts[c], w["_seq"] if w else None) for c in counts]


def chunk_marks(spark: SparkSession, location: str, chunks: list[int]) -> list[dict[str, Any]]:
    """Per chunk: its watermark row's positions (`hw_file` None: no watermark row in bronze; `lw` the
    low watermark as text, None in a bronze written before binlake kept it) and its count of
    snapshot rows."""
    if not storage.table_exists(spark, location):  # the first read creates bronze
        return [_mark(int(c), None, None, None, 0) for c in chunks]
    if arrow_commit.readable(location):
        found = _marks_here(location, chunks)
        return [_mark(int(c), r["hw_file"], r["hw_pos"], r["lw"], r["rows"], r["seq"]) if (r := found.get(int(c)))
                else _mark(int(c), None, None, None, 0) for c in chunks]
    watermark = F.col("_op") == "w"
    table = spark.read.format("delta").load(location)
    lw = F.col("_lw") if "_lw" in table.columns else F.lit(None).cast("string")  # a bronze from before `_lw`
    found = {r["_chunk"]: r.asDict() for r in (
        table.where(F.col("_chunk").isin([int(c) for c in chunks]))
        .groupBy("_chunk").agg(F.max(F.when(watermark, F.col("_file"))).alias("hw_file"),
                               F.max(F.when(watermark, F.col("_pos"))).alias("hw_pos"),
                               F.max(F.when(watermark, lw)).alias("lw"),
                               F.count_if(F.col("_op") == "r").alias("rows"),
                               F.max(F.when(watermark, F.col("_seq"))).alias("seq")).collect())}
    return [_mark(int(c), r["hw_file"], r["hw_pos"], r["lw"], r["rows"], r["seq"]) if (r := found.get(int(c)))
            else _mark(int(c), None, None, None, 0) for c in chunks]


def _marks_here(location: str, chunks: list[int]) -> dict[int, dict[str, Any]]:
    """`chunk_marks`' rows of a local bronze, by delta-rs (a Spark job costs a fresh JVM seconds)."""
    from deltalake import DeltaTable

    lw = "_lw" if "_lw" in [f.name for f in DeltaTable(location).schema().fields] else "CAST(NULL AS VARCHAR)"
    numbers = ", ".join(str(int(c)) for c in chunks) or "NULL"
    query = f"""SELECT _chunk, max(CASE WHEN _op = 'w' THEN _file END) AS hw_file,
                       max(CASE WHEN _op = 'w' THEN _pos END) AS hw_pos, max(CASE WHEN _op = 'w' THEN {lw} END) AS lw,
                       count(CASE WHEN _op = 'r' THEN 1 END) AS rows, max(CASE WHEN _op = 'w' THEN _seq END) AS seq
                FROM bronze WHERE _chunk IN ({numbers}) GROUP BY _chunk"""
    rows = arrow_commit.query(location, "bronze", query).to_pylist()
    return {int(r["_chunk"]): r for r in rows}


def _mark(chunk: int, hw_file: str | None, hw_pos: int | None, lw: str | None, rows: int,
          seq: Any = None) -> dict[str, Any]:
    """One chunk's marks: its watermark row's positions (`hw_file` None: none; the epoch from its `_seq`)
    and its snapshot rows."""
    epoch = int(seq) // EPOCH_FACTOR if seq is not None else 0
    return {"_chunk": chunk, "hw_file": hw_file, "hw_pos": hw_pos, "epoch": epoch, "lw": lw, "rows": rows}


# the `_seq` statistics delta-rs writes for every file (it saturates a DECIMAL(38,0)'s to the largest
# 64-bit integer); no change's `_seq` is so small (binlake.offsets.event_seq: 10**20 at least)
DELTA_RS_SEQ_STAT = 2**63 - 1


def changes_after(spark: SparkSession, location: str, seq: Any) -> DataFrame:
    """The binlog changes (c/u/d) in the bronze table at `location` after `seq`, by Spark.

    Bronze grows in `_seq` order, so Delta's data skipping passes over every file older than `seq` by
    its statistics -- and would pass over every file delta-rs wrote too (a snapshot's groups, a table
    with a nested column, a stream batch written before binlake wrote its own), whose `_seq` statistics say
    DELTA_RS_SEQ_STAT, smaller than any `seq`: a replayed batch would then miss a newer change there
    (a later delete, and the batch's older image of the key would come back). `_seq = DELTA_RS_SEQ_STAT`,
    true of no change, is true within such a file's statistics, so no such file is skipped; a file
    with real statistics still is."""
    stat = F.lit(DELTA_RS_SEQ_STAT).cast(T.DecimalType(38, 0))
    return spark.read.format("delta").load(location).where(
        ((F.col("_seq") > F.lit(seq)) | (F.col("_seq") == stat)) & F.col("_op").isin(*BINLOG_OPS))


def newest_change(spark: SparkSession, location: str) -> Any:
    """The largest `_seq` of a binlog change (c/u/d) in bronze, or None. A local table whose features
    delta-rs's SQL engine reads is asked there: the stream's first batch after a restart asks for
    every table it touches, and a Spark job costs about 0.3 s a table."""
    if arrow_commit.readable(location):
        ops = ", ".join(f"'{op}'" for op in BINLOG_OPS)
        found = arrow_commit.query(location, "bronze", f"SELECT max(_seq) AS newest FROM bronze WHERE _op IN ({ops})")
        return found.column("newest")[0].as_py()
    df = spark.read.format("delta").load(location).where(F.col("_op").isin(*BINLOG_OPS))
    return df.agg(F.max("_seq")).first()[0]
