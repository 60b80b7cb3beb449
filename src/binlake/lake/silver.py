"""Silver: the current state of one source table (SCD type 1), kept by a Delta MERGE.

A change is applied only if it is newer than what silver holds (`_seq`), and only if bronze holds
no newer change of the same key. The second rule keeps a snapshot row that reaches silver after a
later binlog delete of its key from bringing the row back: bronze is the tombstone record, so
silver itself holds only live rows. Applying the same changes twice changes nothing.

With soft deletes (`binlake.lake.silver_shape`) a delete is one more image, the newest `_seq` wins as
for any other, and silver keeps it with `_deleted` true; a change out of the row filter
(`binlake.lake.row_filter.LEAVES`) is the one that removes a key's row, by the same rule. Every
version (SCD type 2) is `binlake.lake.history`'s MERGE.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from binlake import faults
from binlake.errors import ConfigError
from binlake.lake import arrow_commit, history, row_filter, storage
from binlake.lake.bronze import DATA_OPS, column_types, sql_name
from binlake.lake.bronze import changes_after as bronze_changes_after
from binlake.lake.silver_shape import DELETED, END, PLAIN, START, Shape
from binlake.lake.target import CHECKPOINT_INTERVAL
from binlake.schema import TableSchema

SILVER_META = [T.StructField("_seq", T.DecimalType(38, 0)), T.StructField("_ts", T.TimestampType())]
# the ordinal of a row among identical rows of a key-less table (1..count)
DUP = T.StructField("_dup", T.IntegerType())


SHAPE_FIELDS = {DELETED: T.StructField(DELETED, T.BooleanType()), START: T.StructField(START, T.DecimalType(38, 0)),
                END: T.StructField(END, T.DecimalType(38, 0))}


def struct(schema: TableSchema, shape: Shape = PLAIN) -> T.StructType:
    return T.StructType(column_types(schema) + SILVER_META + [SHAPE_FIELDS[n] for n in shape.columns()]
                        + ([DUP] if schema.multiset else []))


def shaped(rows: DataFrame, shape: Shape) -> DataFrame:
    """Bronze-typed `rows` with the columns `shape` adds, each row a version of its own that is current."""
    if shape.soft:
        rows = rows.withColumn(DELETED, F.col("_op") == "d")
    if shape.versions:
        rows = rows.withColumn(START, F.col("_seq")).withColumn(END, F.lit(None).cast(T.DecimalType(38, 0)))
    return rows


def shaped_arrow(rows: Any, shape: Shape) -> Any:
    """`shaped` of an Arrow table."""
    if shape.soft:
        rows = rows.append_column(DELETED, pc.equal(rows.column("_op"), "d"))
    if shape.versions:
        rows = rows.append_column(START, rows.column("_seq"))
        rows = rows.append_column(END, pa.nulls(rows.num_rows, rows.schema.field("_seq").type))
    return rows


# silver's table properties: deletion vectors (a MERGE then marks the rows it replaces instead of
# rewriting every file a batch of scattered keys touches) and column mapping by name (any source
# column name, spaces included, is a valid column)
PROPERTIES = {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name",
              "delta.checkpointInterval": CHECKPOINT_INTERVAL}


def ensure_table(spark: SparkSession, location: str, schema: TableSchema, shape: Shape = PLAIN) -> None:
    """Create silver, empty, unless it exists; one that exists must have been built in `shape`."""
    from delta.tables import DeltaTable

    row_filter.check(spark, schema)
    if arrow_commit.local(location):
        if arrow_commit.ensure(location, struct(schema, shape), PROPERTIES):
            return
    elif not storage.table_exists(spark, location):
        builder = DeltaTable.createIfNotExists(spark).location(location).addColumns(struct(schema, shape))
        for key, value in PROPERTIES.items():
            builder = builder.property(key, value)
        builder.execute()
        return
    _refuse_mismatch(spark, location, shape)


def refuse_other_shape(spark: SparkSession, location: str, shape: Shape) -> None:
    """ConfigError, in one line, when a silver table is at `location` that was built in another
    shape: checked before a run reads anything, for a table whose snapshot was cut short too."""
    if storage.table_exists(spark, location):
        _refuse_mismatch(spark, location, shape)


def _refuse_mismatch(spark: SparkSession, location: str, shape: Shape) -> None:
    """ConfigError when the existing silver table at `location` was built in another shape."""
    wrong = shape.mismatch(location, columns(spark, location))
    if wrong:
        raise ConfigError(wrong)


def columns(spark: SparkSession, location: str) -> list[str]:
    """The columns of the silver table at `location` (a local one read by delta-rs, at once)."""
    if arrow_commit.readable(location):
        from deltalake import DeltaTable

        return [f.name for f in DeltaTable(location).schema().fields]
    return list(spark.read.format("delta").load(location).columns)


def latest_per_key(changes: DataFrame, key: list[str]) -> DataFrame:
    w = Window.partitionBy(*[F.col(sql_name(k)) for k in key]).orderBy(F.col("_seq").desc())
    return changes.withColumn("__n", F.row_number().over(w)).where("__n = 1").drop("__n")


def apply(spark: SparkSession, schema: TableSchema, changes: DataFrame, silver: str, bronze: str,
          oldest: Any = None, bronze_may_be_newer: bool = True, inserts_only: bool = False,
          shape: Shape = PLAIN) -> None:
    """MERGE bronze-typed `changes` (any of r/c/u/d) into the silver table at `silver`. `oldest`, the
    smallest `_seq` among them, saves a pass over `changes` when the caller knows it.

    The stream knows two things that make a micro-batch cheaper. `bronze_may_be_newer=False`: bronze
    holds no change newer than these but their own (it held none past `oldest` when this run began,
    and this run appends in binlog order), so the look at bronze is skipped. `inserts_only`: every
    change is an insert (`c`), so each key occurs once, and silver cannot hold a key the source did
    not have just before its insert, unless silver already holds that insert or a later image of the
    key (a replay); an insert-only MERGE then does the same as the full one, without joining silver's
    rows for updates and deletes. Both at once: silver holds none of these keys -- it is given a change
    only after bronze has it, and bronze held none of these -- so the batch is appended plainly: nothing
    of silver is read, and no idempotent-write version is looked up (a pass over the table's Delta log
    on every commit). A replay of the batch after a crash finds it in bronze and takes the MERGE.
    """
    from delta.tables import DeltaTable

    changes = row_filter.filtered(changes, schema, shape)  # a row out of the filter leaves silver
    if shape.versions:
        history.apply(spark, schema, changes, silver, bronze, shape, oldest, bronze_may_be_newer, inserts_only)
        return
    if schema.multiset:
        apply_multiset(spark, schema, changes, silver, bronze)
        return
    # with soft deletes silver holds deleted keys too, so an insert may meet its key's tombstone,
    # which it replaces: neither shortcut below holds
    inserts_only = inserts_only and not shape.soft and not schema.row_filter  # a filter's deletes
    key = list(schema.key)
    data = changes.where(F.col("_op").isin(*row_filter.OPS))
    latest = data if inserts_only else latest_per_key(data, key)
    if oldest is None:
        oldest = data.agg(F.min("_seq")).first()[0]
    if oldest is None:
        return  # nothing to apply
    if inserts_only and not bronze_may_be_newer:
        faults.point("mid_merge", schema.name)
        names = [F.col(sql_name(c.name)) for c in schema.columns] + [F.col(f.name) for f in SILVER_META]
        latest.select(*names).write.format("delta").mode("append").save(silver)
        return
    source = latest
    if bronze_may_be_newer:
        # only binlog changes can be newer: a key's snapshot row comes from its one chunk, whose HW the
        # stream's changes of that key all follow
        newer = bronze_changes_after(spark, bronze, oldest).select(
            *[F.col(sql_name(k)).alias(f"__k{i}") for i, k in enumerate(key)], F.col("_seq").alias("__s"))
        cond = [latest[sql_name(k)].eqNullSafe(newer[f"__k{i}"]) for i, k in enumerate(key)]
        cond.append(newer["__s"] > latest["_seq"])
        source = latest.join(newer, cond, "left_anti")
    cols = {sql_name(c.name): f"s.{sql_name(c.name)}" for c in schema.columns}
    cols.update({"_seq": "s._seq", "_ts": "s._ts"})
    on = " AND ".join(f"t.{sql_name(k)} <=> s.{sql_name(k)}" for k in key)
    faults.point("mid_merge", schema.name)
    merge = DeltaTable.forPath(spark, silver).alias("t").merge(source.alias("s"), on)
    if shape.soft:  # a delete is one more image, kept as the key's tombstone; a row out of the filter leaves
        cols[DELETED] = "s._op = 'd'"
        leaves = f"s._op = '{row_filter.LEAVES}'"
        (merge.whenMatchedDelete(condition=f"{leaves} AND s._seq > t._seq")
         .whenMatchedUpdate(condition=f"NOT {leaves} AND s._seq > t._seq", set=cols)
         .whenNotMatchedInsert(condition=f"NOT {leaves}", values=cols).execute())
        return
    if inserts_only:
        merge.whenNotMatchedInsert(values=cols).execute()
        return
    (
        merge.whenMatchedDelete(condition="s._op = 'd' AND s._seq > t._seq")
        .whenMatchedUpdate(condition="s._op <> 'd' AND s._seq > t._seq", set=cols)
        .whenNotMatchedInsert(condition="s._op <> 'd'", values=cols)
        .execute()
    )


def latest_arrow(changes: Any, key: list[str]) -> Any:
    """`latest_per_key` of an Arrow table: each key's change with the largest `_seq`."""
    ordered = changes.take(pc.sort_indices(changes, [("_seq", "descending")]))
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for at, k in enumerate(zip(*[ordered.column(c).to_pylist() for c in key])):
        if k not in seen:
            seen.add(k)
            keep.append(at)
    return ordered.take(pa.array(keep, pa.int64()))


def apply_arrow(table: Any, schema: TableSchema, changes: Any, inserts_only: bool, shape: Shape = PLAIN,
                ties_win: bool = False) -> None:
    """`apply` of the bronze-typed Arrow table `changes` to `table`, silver as delta-rs writes it
    (`binlake.lake.arrow_commit`), when bronze holds no change newer than these but their own
    (`bronze_may_be_newer=False`): the same rule and the same conditions as `apply`'s MERGE. With
    `ties_win`, a change replaces a row of the same `_seq` too: a snapshot read at the same high watermark
    as the row's (on a quiet source), which holds the same state, or repairs a silver gone wrong."""
    newer = ">=" if ties_win else ">"
    if shape.versions:
        raise ValueError("silver.history 2 is applied by Spark (binlake.lake.history)")
    data = changes.filter(pc.is_in(changes.column("_op"), pa.array(DATA_OPS)))
    if data.num_rows == 0:
        return
    names = [f.name for f in struct(schema).fields]
    faults.point("mid_merge", schema.name)
    if shape.soft:
        latest = shaped_arrow(latest_arrow(data, list(schema.key)), shape)
        merge, t, s, values = arrow_commit.merge(table, latest.select(names + [DELETED, "_op"]), list(schema.key))
        (merge.when_matched_update(updates=values, predicate=f"{s}._seq {newer} {t}._seq")
         .when_not_matched_insert(updates=values).execute())
        return
    if inserts_only:
        arrow_commit.append(table, data.select(names))
        return
    merge, t, s, values = arrow_commit.merge(table, latest_arrow(data, list(schema.key)).select(names + ["_op"]),
                                             list(schema.key))
    (
        merge.when_matched_delete(predicate=f"{s}._op = 'd' AND {s}._seq {newer} {t}._seq")
        .when_matched_update(updates=values, predicate=f"{s}._op <> 'd' AND {s}._seq {newer} {t}._seq")
        .when_not_matched_insert(updates=values, predicate=f"{s}._op <> 'd'")
        .execute()
    )


def insert_snapshot_arrow(schema: TableSchema, rows: Any, silver: str, shape: Shape = PLAIN,
                          fresh: bool = False) -> bool:
    """`insert_snapshot` of the Arrow table `rows` (bronze columns, `r` rows only) by delta-rs: silver
    created if absent, or known to hold none of them (`fresh`), takes them appended, else by an
    insert-only MERGE. False, and nothing written, when silver is a table delta-rs does not write
    (`arrow_commit.writable`)."""
    if schema.row_filter:
        return False  # Spark evaluates the filter
    names = [f.name for f in struct(schema, shape).fields]
    created = arrow_commit.create(silver, struct(schema, shape), PROPERTIES)
    table = arrow_commit.writable(silver, names)
    if table is None:
        return False
    faults.point("mid_merge", schema.name)
    if rows.num_rows == 0:
        return True
    rows = shaped_arrow(rows, shape)
    if created or fresh:  # nothing to match
        arrow_commit.append(table, rows.select(names))
        return True
    merge, _, _, values = arrow_commit.merge(table, rows.select(names), list(schema.key))
    merge.when_not_matched_insert(updates=values).execute()
    return True


def row_count(spark: SparkSession, location: str) -> int:
    """The rows of the silver table at `location` (0 before it is created): a local one counted by
    delta-rs, else by Spark."""
    if not storage.table_exists(spark, location):
        return 0
    if arrow_commit.readable(location):
        return int(arrow_commit.query(location, "silver", "SELECT count(*) AS n FROM silver").column("n")[0].as_py())
    return int(spark.read.format("delta").load(location).count())


def insert_snapshot(spark: SparkSession, schema: TableSchema, rows: DataFrame, silver: str, bronze: str,
                    shape: Shape = PLAIN, fresh: bool = False) -> None:
    """Snapshot rows (`r`) of landed chunks into silver, locally, before the stream starts.

    Each key is in one chunk and each chunk's rows are in bronze once, and nothing but these chunks
    has reached this silver yet (the stream starts after every chunk is applied; a table snapshotted
    again starts from an empty silver). So a row is inserted unless its key is there already, which
    happens only when the same chunk is applied again after a crash: an insert-only MERGE, with no
    ordering window, no look at bronze and no rewrite of silver's files; a silver not yet created is
    created with the rows, in one commit. When the caller knows no row of these chunks is there
    (`fresh`, see `binlake.capture.snapshot.apply_to_silver`), they are appended: no join with silver at
    all. Key-less tables are recounted (`apply_multiset`) as always.
    In every shape a snapshot row is its key's one version so far, live and current (`shaped`).
    """
    from delta.tables import DeltaTable

    if schema.multiset:
        ensure_table(spark, silver, schema)
        apply_multiset(spark, schema, rows, silver, bronze)
        return
    rows = shaped(row_filter.matching(rows, schema), shape)
    created = not storage.table_exists(spark, silver)
    if fresh or created:  # created with the snapshot's first rows: one commit
        writer = rows.select(*[F.col(sql_name(f.name)) for f in struct(schema, shape).fields]).write.format("delta")
        faults.point("mid_merge", schema.name)
        (writer.options(**PROPERTIES) if created else writer.mode("append")).save(silver)
        return
    cols = {sql_name(c.name): f"s.{sql_name(c.name)}" for c in schema.columns}
    cols.update({n: f"s.{n}" for n in ["_seq", "_ts", *shape.columns()]})
    on = " AND ".join(f"t.{sql_name(k)} <=> s.{sql_name(k)}" for k in schema.key)
    faults.point("mid_merge", schema.name)
    DeltaTable.forPath(spark, silver).alias("t").merge(rows.alias("s"), on).whenNotMatchedInsert(values=cols).execute()


def apply_multiset(spark: SparkSession, schema: TableSchema, changes: DataFrame, silver: str,
                   bronze: str) -> None:
    """Silver of a table whose rows are told apart only by their values (no primary key, a chunk key
    that may repeat): one silver row per source row, identical rows numbered 1..n in `_dup`.

    How many rows hold an image is recomputed from bronze for every image these changes touch:
    the snapshot rows of its chunk (its state at the chunk's HW) plus the binlog inserts minus the
    binlog deletes after that HW -- exactly what the handover lets into bronze, each once. A
    recount, not a running sum, so applying the same changes twice changes nothing. Updates arrive
    as a delete of the old image and an insert of the new one (`schema.key` is every column).
    The MERGE then keeps rows 1..n of each touched image, inserts the missing ones and deletes the
    rest, in one commit.
    """
    from delta.tables import DeltaTable

    names = [sql_name(c) for c in schema.names]
    touched = (changes.where(F.col("_op").isin(*DATA_OPS))
               .select(*[F.col(n).alias(f"__k{i}") for i, n in enumerate(names)]).distinct())

    def of_touched(df: DataFrame) -> DataFrame:
        same = [df[n].eqNullSafe(touched[f"__k{i}"]) for i, n in enumerate(names)]
        return df.join(touched, same, "left_semi")

    log = spark.read.format("delta").load(bronze).where(F.col("_op").isin("r", "c", "d"))
    counted = of_touched(log).groupBy(*names).agg(
        F.sum(F.when(F.col("_op") == "d", -1).otherwise(1)).alias("__n"),
        F.max("_seq").alias("_seq"), F.max("_ts").alias("_ts"))
    held = of_touched(spark.read.format("delta").load(silver)).groupBy(
        *[F.col(n).alias(f"__h{i}") for i, n in enumerate(names)]).agg(F.count("*").alias("__o"))
    cond = [counted[n].eqNullSafe(held[f"__h{i}"]) for i, n in enumerate(names)]
    source = (
        counted.join(held, cond, "left")
        .withColumn("__n", F.greatest(F.col("__n"), F.lit(0)))
        .withColumn("__m", F.greatest(F.col("__n"), F.coalesce(F.col("__o"), F.lit(0))))
        .where("__m > 0")
        .withColumn("_dup", F.explode(F.sequence(F.lit(1), F.col("__m").cast("int"))))
        .withColumn("__keep", F.col("_dup") <= F.col("__n"))
        .select(*names, "_dup", "_seq", "_ts", "__keep")
    )
    cols = {n: f"s.{n}" for n in names}
    cols.update({"_seq": "s._seq", "_ts": "s._ts", "_dup": "s._dup"})
    on = " AND ".join([f"t.{n} <=> s.{n}" for n in names] + ["t._dup = s._dup"])
    faults.point("mid_merge", schema.name)
    (
        DeltaTable.forPath(spark, silver).alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition="NOT s.__keep")
        .whenMatchedUpdate(condition="s.__keep AND NOT (t._seq <=> s._seq)",
                           set={"_seq": "s._seq", "_ts": "s._ts"})
        .whenNotMatchedInsert(condition="s.__keep", values=cols)
        .execute()
    )
