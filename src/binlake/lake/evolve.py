"""A micro-batch of one table whose rows span schema versions, into bronze and silver.

The binlog source marks each new version in the change stream with a row of `_op` "s" at the version's
`_seq` (see `binlake.lake.evolution`): rows before the marker were encoded under the previous version, rows
after it under the new one. Each stretch is typed with its own version, then
- bronze takes them all: every column it ever saw, each row image as written (one idempotent append);
- silver is altered to the policy's columns (`silver_columns`), its older rows get the defaults of
  columns added since, a TRUNCATE deletes what came before it, and the rows, lifted to silver's
  columns, are merged as usual. With soft deletes or history (`binlake.lake.silver_shape`) a TRUNCATE
  is a delete of every row live at it instead (`_truncate_kept`), so tombstones and versions stay.
Every step is idempotent, so a batch replayed after a crash at any point ends in the same state.
"""

from __future__ import annotations

import decimal
import functools
import logging
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from binlake import faults
from binlake.errors import SchemaChangedError
from binlake.lake import bronze, silver
from binlake.lake.evolution import Policy, Version
from binlake.lake.silver_shape import DELETED, END, PLAIN, START, Shape
from binlake.schema import Column, TableSchema

log = logging.getLogger(__name__)

TypeChanges = Literal["rewrite", "widen"]
TYPE_WIDENING = "typeWidening"


def silver_columns(policy: Policy, versions: list[Version]) -> TableSchema:
    """The schema silver has after `versions` under `policy`: the last version's (`evolve`), every
    column any version had (`lenient`), or the first version's (`ignore`)."""
    first, last = versions[0].schema, versions[-1].schema
    if policy in ("evolve", "fail"):
        return last
    if policy == "ignore":
        for v in versions[1:]:
            for c in v.schema.columns:
                if c.name in first.names and first.column(c.name).spark_type() != c.spark_type():
                    raise SchemaChangedError(
                        f"column {c.name!r} of captured table {first.name} is now {c.column_type}; silver keeps "
                        f"{first.column(c.name).column_type} under stream.schema-changes: ignore, and its values "
                        "may not fit: set stream.schema-changes: evolve, or snapshot the table again"
                    )
        return first
    columns: dict[str, Column] = {}
    for v in versions:
        for c in v.schema.columns:
            columns[c.name] = c
    return TableSchema(last.database, last.table, tuple(columns.values()), last.primary_key, last.chunk_key,
                       last.chunk_key_unique, last.choice, last.row_filter)


def _widens(old: T.DataType, new: T.DataType) -> bool:
    """Whether Delta's type widening turns `old` into `new` without losing a value."""
    ints = [T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType()]
    if old in ints and new in ints:
        return ints.index(new) >= ints.index(old)
    if isinstance(old, T.FloatType) and isinstance(new, T.DoubleType):
        return True
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if old in ints and isinstance(new, T.DecimalType):
        digits = {T.ByteType(): 3, T.ShortType(): 5, T.IntegerType(): 10, T.LongType(): 20}[old]
        return new.precision - new.scale >= digits
    return False


def _table(location: str) -> str:
    return f"delta.`{location}`"


def align(spark: SparkSession, location: str, wanted: list[T.StructField], renames: list[tuple[str, str]],
          drop: bool, what: str, type_changes: TypeChanges = "rewrite") -> None:
    """Alter the Delta table at `location` to hold `wanted` columns: renames first (old -> new, while
    the old is there and the new is not), then added columns, widened types, and with `drop` the
    columns no longer wanted. Each statement checks the table's schema first, so re-running is a no-op.

    A type widens with Delta's type widening, a change of metadata; with `type_changes` `rewrite` the
    table then drops that feature, which rewrites the files written at the old type, so that readers
    without type widening (delta-rs, Polars, DuckDB) still read the table. The drop is checked on
    its own, so a crash between the two is mended by the replay."""
    def fields() -> dict[str, T.DataType]:
        return {f.name: f.dataType for f in spark.read.format("delta").load(location).schema.fields}

    have = fields()
    for old, new in renames:
        if old in have and new not in have:
            spark.sql(f"ALTER TABLE {_table(location)} RENAME COLUMN {bronze.sql_name(old)} TO {bronze.sql_name(new)}")
            have = fields()
    missing = [f for f in wanted if f.name not in have]
    if missing:
        spec = ", ".join(f"{bronze.sql_name(f.name)} {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE {_table(location)} ADD COLUMNS ({spec})")
    for f in wanted:
        old_type = have.get(f.name)
        if old_type is None or old_type == f.dataType:
            continue
        if not _widens(old_type, f.dataType):
            raise SchemaChangedError(
                f"column {f.name!r} of captured table {what} is {old_type.simpleString()} and the source's is now "
                f"{f.dataType.simpleString()}, which Delta cannot widen it to; snapshot the table again "
                f"(binlake resnapshot {what}), or set stream.schema-changes: fail to stop at such changes"
            )
        spark.sql(f"ALTER TABLE {_table(location)} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
        spark.sql(f"ALTER TABLE {_table(location)} ALTER COLUMN {bronze.sql_name(f.name)} TYPE "
                  f"{f.dataType.simpleString()}")
    if drop:
        gone = [n for n in have if not n.startswith("_") and n not in {f.name for f in wanted}]
        if gone:
            spark.sql(f"ALTER TABLE {_table(location)} DROP COLUMNS ({', '.join(bronze.sql_name(n) for n in gone)})")
    if type_changes == "rewrite" and TYPE_WIDENING in features(spark, location):
        log.warning("%s: rewriting %s at its columns' new types (target.type-changes: rewrite)", what, location)
        spark.sql(f"ALTER TABLE {_table(location)} DROP FEATURE {TYPE_WIDENING}")


def features(spark: SparkSession, location: str) -> list[str]:
    """The table features of the Delta table at `location`."""
    detail = spark.sql(f"DESCRIBE DETAIL {_table(location)}").select("tableFeatures").first()
    return list(detail["tableFeatures"] or []) if detail is not None else []


def value(column: Column, text: str | None) -> Any:
    """An encoded value (`Column.encode`) as a typed literal, cast as bronze casts it."""
    if text is None:
        return F.lit(None).cast(bronze.spark_type(column.spark_type()))
    return bronze.typed_value(column, F.lit(text))


def apply_batch(spark: SparkSession, rows: DataFrame, history: list[Version], new: list[Version], policy: Policy,
                bronze_at: str, silver_at: str, app_id: str, batch_id: int, oldest: Any,
                type_changes: TypeChanges = "rewrite", shape: Shape = PLAIN) -> None:
    """`rows`: one table's change rows of a micro-batch (`bronze.CHANGES`), markers included; `history`:
    its versions up to the batch's end, `new` the ones this batch marks (both in order)."""
    base = history[len(history) - len(new) - 1] if new else history[-1]
    stretches = _stretches(rows, [base, *new])
    # bronze: every column any version had, each at its newest type
    latest: dict[str, T.StructField] = {}
    for schema, _ in stretches:
        for f in bronze.column_types(schema):
            latest[f.name] = f
    align(spark, bronze_at, list(latest.values()), [], False, base.schema.name, type_changes)
    parts = [typed.select(*[F.col(bronze.sql_name(c)).cast(latest[c].dataType).alias(c) for c in schema.names],
                          *[F.col(f.name) for f in bronze.META_FIELDS])
             for schema, typed in stretches]
    marks = rows.where(F.col("_op") == "s")
    parts.append(bronze.typed(marks, TableSchema(base.schema.database, base.schema.table, (), ())))
    log_rows = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    bronze.append_batch(log_rows, bronze_at, app_id, batch_id)
    faults.point("mid_evolve", base.schema.name)

    # silver
    target = silver_columns(policy, history)
    evolve = policy in ("evolve", "fail")
    renames = [(o, n) for v in history for o, n in v.renames.items()] if evolve else []
    align(spark, silver_at, bronze.column_types(target), renames, evolve, target.name, type_changes)
    follow = [] if policy == "ignore" else new
    # A TRUNCATE empties silver of every row before it; the batch's rows before it are gone too. "Before"
    # includes `_seq` equal to the change's: a snapshot row read at a high watermark that is the DDL's
    # own position (nothing happened in between) was read before it, and no binlog row shares a DDL's _seq.
    first = max((i + 1 for i, v in enumerate(follow) if v.kind == "truncate"), default=0)
    lifted = [_lift(typed, i, [base, *new], target, policy) for i, (_, typed) in enumerate(stretches)]
    if first and not shape.plain:
        _truncate_kept(spark, target, lifted[:first], follow[first - 1].seq, silver_at, bronze_at, oldest, shape)
    elif first:
        _delta(spark, silver_at).delete(F.col("_seq") <= _seq(follow[first - 1].seq))
    for v in follow:
        for name, text in v.defaults.items():
            if text is not None and name in target.names:
                (_delta(spark, silver_at).update(condition=(F.col("_seq") <= _seq(v.seq)) & F.col(bronze.sql_name(name)).isNull(),
                                                 set={bronze.sql_name(name): value(target.column(name), text)}))
    if lifted[first:]:
        silver.apply(spark, target, functools.reduce(DataFrame.unionByName, lifted[first:]), silver_at, bronze_at,
                     oldest, shape=shape)


def _truncate_kept(spark: SparkSession, target: TableSchema, before: list[DataFrame], at: int, silver_at: str,
                   bronze_at: str, oldest: Any, shape: Shape) -> None:
    """A TRUNCATE at `_seq` `at` where silver keeps deletes or versions: the batch's rows before it
    applied, then a delete at `at` of every row still live there (its last image; `_ts` NULL: the
    binlog's schema marker carries no time). A replay finds no row live before `at` any more."""
    if before:
        silver.apply(spark, target, functools.reduce(DataFrame.unionByName, before), silver_at, bronze_at,
                     oldest, shape=shape)
    held = spark.read.format("delta").load(silver_at)
    live = held.where(F.col(START if shape.versions else "_seq") < _seq(at))
    if shape.versions:
        live = live.where(F.col(END).isNull())
    if shape.soft:
        live = live.where(~F.col(DELETED))
    deletes = live.select(*[F.col(bronze.sql_name(c)) for c in target.names], _seq(at).alias("_seq"),
                          F.lit(None).cast(T.TimestampType()).alias("_ts"), F.lit("d").alias("_op"))
    silver.apply(spark, target, deletes, silver_at, bronze_at, at, shape=shape)


def _seq(seq: int) -> Any:
    """A `_seq` literal: sequence numbers pass 2^63, so never a Spark long."""
    return F.lit(decimal.Decimal(seq)).cast(T.DecimalType(38, 0))


def _delta(spark: SparkSession, location: str) -> Any:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, location)


def _stretches(rows: DataFrame, versions: list[Version]) -> list[tuple[TableSchema, DataFrame]]:
    """The data rows between consecutive markers, each typed with the version they were written under."""
    data = rows.where(F.col("_op").isin(*bronze.BINLOG_OPS))
    out = []
    for i, v in enumerate(versions):
        part = data
        if i > 0:
            part = part.where(F.col("_seq") >= _seq(v.seq))
        if i + 1 < len(versions):
            part = part.where(F.col("_seq") < _seq(versions[i + 1].seq))
        out.append((v.schema, bronze.typed(part, v.schema)))
    return out


def _lift(typed: DataFrame, i: int, versions: list[Version], target: TableSchema, policy: Policy) -> DataFrame:
    """Rows typed under `versions[i]` as silver's `target` columns: a column renamed since (under
    `evolve`) from its old name, a column added since with the default older rows got, else NULL."""
    have = versions[i].schema.names
    later = versions[i + 1:]
    cols = []
    for c in target.columns:
        name = c.name
        if policy in ("evolve", "fail"):
            for v in reversed(later):
                name = next((o for o, n in v.renames.items() if n == name), name)
        spark_type = bronze.spark_type(c.spark_type())
        if name in have:
            cols.append(F.col(bronze.sql_name(name)).cast(spark_type).alias(c.name))
            continue
        default = next((v.defaults[c.name] for v in later if v.defaults.get(c.name) is not None), None)
        cols.append(value(c, default).alias(c.name) if policy != "ignore" else F.lit(None).cast(spark_type).alias(c.name))
    return typed.select(*cols, *[F.col(f.name) for f in bronze.META_FIELDS])
