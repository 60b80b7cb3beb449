"""The split state: one Delta table, appended to, never updated: a chunk's planned row, then a row
for each status it reaches (see `splits.newest`). Appends are cheap and never conflict.

A local split state is read and written by delta-rs (`binlake.lake.arrow_commit`), in milliseconds:
Spark took 0.4-0.6 s for each of a run's dozens of small appends and reads, and 3-5 s for the first
of them in a fresh JVM (a 1M-row snapshot spent 17 of its 58 s there). One behind a URI (S3, a
Databricks volume), one from before a column binlake added since, or one with a feature delta-rs does
not write, Spark keeps. Both keep Delta's log protocol and its idempotent appends (`txn`), so either
writer continues a table the other wrote."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from binlake.lake import arrow_commit, storage
from binlake.lake.target import CHECKPOINT_INTERVAL
from binlake.splits import STATUS_RANK, Split, newest

# the columns SCHEMA names, as Arrow types (delta-rs) and Delta's own type names (a table it creates)
COLUMNS = (("table", "string"), ("table_no", "integer"), ("chunk", "integer"), ("group_id", "long"),
           ("start", "string"), ("end", "string"), ("status", "string"), ("hw_file", "string"), ("hw_pos", "long"),
           ("rows", "long"), ("lw_file", "string"), ("lw_pos", "long"), ("epoch", "integer"),
           ("updated_at", "timestamp"))
PROPERTIES = {"delta.checkpointInterval": CHECKPOINT_INTERVAL}

SCHEMA = (
    "table STRING, table_no INT, chunk INT, group_id BIGINT, start STRING, `end` STRING, status STRING, "
    "hw_file STRING, hw_pos BIGINT, rows BIGINT, lw_file STRING, lw_pos BIGINT, epoch INT, updated_at TIMESTAMP"
)


def _exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    if storage.is_local(path):
        return storage.has_commit(path)
    return bool(DeltaTable.isDeltaTable(spark, path))


def read_here(path: str) -> bool:
    """Whether the reads below ask nothing of their Spark session for the split state at `path`: a local
    one delta-rs reads (`arrow_commit.readable`), or one with no commit yet."""
    return storage.is_local(path) and (arrow_commit.readable(path) or not storage.has_commit(path))


def ensure(spark: SparkSession, path: str) -> None:
    from delta.tables import DeltaTable

    if arrow_commit.local(path):
        arrow_commit.ensure(path, _struct(), PROPERTIES)
        return
    storage.clear_uncommitted(path, lambda: spark)
    if not _exists(spark, path):
        (DeltaTable.createIfNotExists(spark).location(path).addColumns(spark.createDataFrame([], SCHEMA).schema)
         .property("delta.checkpointInterval", CHECKPOINT_INTERVAL).execute())


def _struct() -> Any:
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "integer": T.IntegerType(), "long": T.LongType(),
             "timestamp": T.TimestampType()}
    return T.StructType([T.StructField(name, kinds[kind]) for name, kind in COLUMNS])


def _append(spark: SparkSession, path: str, splits: Iterable[Split], app_id: str | None = None,
            version: int | None = None) -> None:
    """Blind appends: concurrent fan-out tasks never conflict on them, and no row is rewritten. With
    `app_id`, the append is skipped when the table has (app_id, `version`) or a later one already."""
    rows = [s.to_dict() for s in splits]
    if not rows:
        return
    table = arrow_commit.writable(path, [name for name, _ in COLUMNS]) if arrow_commit.local(path) else None
    if table is not None:
        _append_here(table, rows, app_id, version)
        return
    df = spark.createDataFrame(rows, SCHEMA.replace(", updated_at TIMESTAMP", "")).withColumn(
        "updated_at", F.current_timestamp()
    )
    # mergeSchema: a split state from before the low watermark (or the epoch) was kept gains its columns
    writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
    if app_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", version)
    writer.save(path)


def _append_here(table: Any, rows: list[dict[str, Any]], app_id: str | None, version: int | None) -> None:
    """`_append` by delta-rs, with Spark's `txnAppId`/`txnVersion` rule for a keyed append."""
    import datetime

    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    commit = None
    if app_id is not None and version is not None:
        held = table.transaction_version(app_id)
        if held is not None and held >= version:
            return  # written before: a retried batch
        commit = CommitProperties(app_transactions=[Transaction(app_id, version)])
    kinds = {"string": pa.string(), "integer": pa.int32(), "long": pa.int64(), "timestamp": pa.timestamp("us", "UTC")}
    now = datetime.datetime.now(datetime.timezone.utc)
    schema = pa.schema([pa.field(name, kinds[kind]) for name, kind in COLUMNS])
    data = pa.Table.from_pylist([{**r, "updated_at": now} for r in rows], schema=schema)
    write_deltalake(table, data, mode="append", commit_properties=commit)


def add_planned(spark: SparkSession, path: str, splits: list[Split]) -> None:
    """Append a table's next planned splits. Planning resumes after the last split written, and the
    append is keyed by (table, first chunk), so a retried batch is never written twice."""
    if splits:
        first = splits[0]
        _append(spark, path, splits, f"binlake-plan-{first.table_no}-{first.table}", first.index)


def add_recut(spark: SparkSession, path: str, splits: list[Split]) -> None:
    """Append the pieces the open last split was cut into (its own index first, with a bound end now).
    Keyed by (table, that index) apart from planning's appends, whose versions it would collide with."""
    if splits:
        first = splits[0]
        _append(spark, path, splits, f"binlake-recut-{first.table_no}-{first.table}", first.index)


def record(spark: SparkSession, path: str, splits: Iterable[Split]) -> None:
    """Record splits' new status (landed or done); the newest status of a chunk wins on load."""
    _append(spark, path, splits)


def load(spark: SparkSession, path: str, group_size: int, tables: list[str] | None = None,
         groups: list[int] | None = None) -> dict[str, list[Split]]:
    """Splits by table, in chunk order, each in its newest status: all of them, or those of `groups`
    (the snapshot loads a window of groups at a time, never a whole huge table's splits)."""
    if arrow_commit.readable(path):
        return newest(_read_here(path, tables, groups), group_size)
    if not _exists(spark, path):
        return {}
    df = spark.read.format("delta").load(path)
    if tables is not None:
        df = df.where(F.col("table").isin(tables))
    if groups is not None:
        df = df.where(F.col("group_id").isin([int(g) for g in groups]))
    return newest((r.asDict() for r in df.collect()), group_size)


def _read_here(path: str, tables: list[str] | None, groups: list[int] | None) -> list[dict[str, Any]]:
    """`load`'s rows of a local split state, read by delta-rs: every column a `Split` reads. Not
    `updated_at`, which is there for people: pyarrow imports pandas to convert a zoned timestamp, which
    took `binlake status` seconds."""
    names = ", ".join(arrow_commit.quoted(name) for name, _ in COLUMNS if name != "updated_at")
    return _sql(path, f"SELECT {names} FROM splits" + _where(tables, groups))


def _where(tables: list[str] | None, groups: list[int] | None = None) -> str:
    where = []
    if tables is not None:
        where.append('"table" IN (' + (", ".join("'" + t.replace("'", "''") + "'" for t in tables) or "NULL") + ")")
    if groups is not None:
        where.append("group_id IN (" + (", ".join(str(int(g)) for g in groups) or "NULL") + ")")
    return " WHERE " + " AND ".join(where) if where else ""


def _sql(path: str, query: str) -> list[dict[str, Any]]:
    """The rows of `query` over the local split state at `path` (the table `splits`), by delta-rs."""
    return arrow_commit.query(path, "splits", query).to_pylist()  # type: ignore[no-any-return]


def _chunk_ranks(spark: SparkSession, path: str, tables: list[str] | None) -> DataFrame:
    """One row per chunk: table, chunk, group_id and the rank of its furthest status (see STATUS_RANK)."""
    df = spark.read.format("delta").load(path)
    if tables is not None:
        df = df.where(F.col("table").isin(tables))
    rank = F.coalesce(*[F.when(F.col("status") == s, F.lit(r)) for s, r in STATUS_RANK.items()], F.lit(0))
    return df.groupBy("table", "chunk").agg(F.max("group_id").alias("group_id"), F.max(rank).alias("rank"))


def groups(spark: SparkSession, path: str, below: str,
           tables: list[str] | None = None) -> tuple[dict[str, list[int]], dict[str, tuple[int, int]]]:
    """Per table, the ids of the groups holding a chunk whose status is short of `below`; and per
    table (chunks planned, chunks landed or done). One Spark job: the driver receives a row per
    group only (a 10^8-row table has under a thousand)."""
    if not _exists(spark, path):
        return {}, {}
    if arrow_commit.readable(path):
        rows: list[Any] = _group_ranks_here(path, tables)
    else:
        landed = F.when(F.col("rank") >= STATUS_RANK["landed"], 1).otherwise(0)
        rows = (_chunk_ranks(spark, path, tables).groupBy("table", "group_id")
                .agg(F.min("rank").alias("least"), F.count("*").alias("n"), F.sum(landed).alias("landed")).collect())
    unfinished: dict[str, list[int]] = {}
    counts: dict[str, tuple[int, int]] = {}
    for r in sorted(rows, key=lambda r: (r["table"], r["group_id"])):
        if r["least"] < STATUS_RANK[below]:
            unfinished.setdefault(r["table"], []).append(int(r["group_id"]))
        n, done = counts.get(r["table"], (0, 0))
        counts[r["table"]] = (n + int(r["n"]), done + int(r["landed"] or 0))
    return unfinished, counts


def _group_ranks_here(path: str, tables: list[str] | None) -> list[dict[str, Any]]:
    """`groups`' rows per (table, group) of a local split state, by delta-rs: the same ranks as `_chunk_ranks`."""
    rank = "CASE status " + " ".join(f"WHEN '{s}' THEN {r}" for s, r in STATUS_RANK.items()) + " ELSE 0 END"
    return _sql(path, f"""
        WITH ranks AS (SELECT "table", chunk, max(group_id) AS group_id, max({rank}) AS rank
                       FROM splits{_where(tables)} GROUP BY "table", chunk)
        SELECT "table", group_id, min(rank) AS least, count(*) AS n,
               sum(CASE WHEN rank >= {STATUS_RANK["landed"]} THEN 1 ELSE 0 END) AS landed
        FROM ranks GROUP BY "table", group_id""")


def open_groups(spark: SparkSession, path: str, below: str, tables: list[str] | None = None) -> dict[str, list[int]]:
    return groups(spark, path, below, tables)[0]


def planned(spark: SparkSession, path: str) -> tuple[dict[str, int], dict[str, Split]]:
    """Per table name, retired ones included: its highest table number, and its highest-numbered
    split, where planning resumes. One aggregate read, no full load. (Every row of a chunk has the
    same bounds but the open last split's once cut again, and that one is never the highest.)"""
    if not _exists(spark, path):
        return {}, {}
    if arrow_commit.readable(path):
        return _planned_here(path)
    df = spark.read.format("delta").load(path)
    rows = (df.groupBy("table").agg(F.max("table_no").alias("n"),
                                    F.max_by(F.struct(*df.columns), F.col("chunk")).alias("last")).collect())
    return ({r["table"]: int(r["n"]) for r in rows},
            {r["table"]: Split.from_dict(r["last"].asDict()) for r in rows})


def _planned_here(path: str) -> tuple[dict[str, int], dict[str, Split]]:
    """`planned` of a local split state, by delta-rs (a row of each table's highest chunk: any of them)."""
    rows = _sql(path, """
        SELECT s.*, m.n AS __n FROM splits s
        JOIN (SELECT "table", max(table_no) AS n, max(chunk) AS c FROM splits GROUP BY "table") m
          ON s."table" = m."table" AND s.chunk = m.c""")
    numbers = {r["table"]: int(r.pop("__n")) for r in rows}
    return numbers, {r["table"]: Split.from_dict(r) for r in rows}


def applied_rows(spark: SparkSession, path: str, table: str) -> int | None:
    """The snapshot rows of `table`'s chunks recorded done (each chunk once, however often recorded),
    or None when a done chunk's count is unknown."""
    if not _exists(spark, path):
        return 0
    if arrow_commit.readable(path):
        row = _sql(path, f"""SELECT sum(r) AS total, count(*) - count(r) AS unknown FROM (
                               SELECT chunk, max("rows") AS r FROM splits
                               WHERE "table" = '{table.replace("'", "''")}' AND status = 'done' GROUP BY chunk)""")[0]
    else:
        row = (spark.read.format("delta").load(path).where((F.col("table") == table) & (F.col("status") == "done"))
               .groupBy("chunk").agg(F.max("rows").alias("r"))
               .agg(F.sum("r").alias("total"), (F.count("*") - F.count("r")).alias("unknown")).first().asDict())
    return None if row["unknown"] else int(row["total"] or 0)


RETIRED = "retired:"


def retire(spark: SparkSession, path: str, tables: list[str]) -> None:
    """Set aside the chunks of tables that are snapshotted again. Their rows stay, under the name
    `retired:<db.table>`, rather than being deleted: the table's number is part of planning's
    idempotent-append key, and a number used again would have its new plan skipped as written."""
    from delta.tables import DeltaTable

    if tables and _exists(spark, path):
        DeltaTable.forPath(spark, path).update(F.col("table").isin(tables),
                                               {"table": F.concat(F.lit(RETIRED), F.col("table"))})
