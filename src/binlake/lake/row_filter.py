"""source.row-filter: silver holds the rows of a table that match one predicate now.

    source.row-filter: {shop.orders: "tenant_id = 7"}

The predicate is Spark SQL over the table's captured columns, evaluated by Spark on the typed rows
bronze holds. A snapshot row and a binlog change are typed from the same encoded text
(`binlake.lake.bronze.typed`), so the two paths give the predicate the same values and agree by
construction. It is not pushed down into the chunk SELECT: MySQL compares text by the column's
collation ('a' = 'A' under a *_ci collation, trailing spaces ignored under PAD SPACE), Spark by code
point, and the two convert between types differently; the same text run by the server could keep a
row the binlog path drops. The chunk reads every row, and the filter decides in Spark.

A change reaches silver by the row as it is after the change (its after image):
- the row matches: an upsert, as without a filter;
- it does not (false, or NULL as in a WHERE clause): a delete of the key.
So a row updated out of the filter leaves silver, one updated into it enters, and an insert or a
snapshot row that does not match deletes a key silver does not hold: nothing. The before image of an
update decides nothing more: it tells whether the row was in silver, and the delete or upsert of the
after image is right either way. Silver applies each key's changes in `_seq` order, the newest
winning, and bronze holds every change (the record a late snapshot row loses to), so in any order of
arrival and on replays a key's last change decides: its row is in silver exactly when the source's
row matches now.

Bronze keeps every change of the table, matching or not: it is the change log silver is derived
from, and a row leaving the filter is known only from a change whose row no longer matches.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from binlake.errors import ConfigError
from binlake.lake.bronze import column_types
from binlake.schema import TableSchema

UPSERTS = ("r", "c", "u")


def matches(schema: TableSchema) -> Column:
    """The predicate as a Spark column: true where a row matches, false where it does not or is NULL."""
    assert schema.row_filter
    return F.coalesce(F.expr(schema.row_filter), F.lit(False))


def filtered(changes: DataFrame, schema: TableSchema) -> DataFrame:
    """Bronze-typed `changes` as silver applies them: an upsert whose row does not match is a delete."""
    if not schema.row_filter:
        return changes
    leaves = F.col("_op").isin(*UPSERTS) & ~matches(schema)
    return changes.withColumn("_op", F.when(leaves, F.lit("d")).otherwise(F.col("_op")))


def matching(rows: DataFrame, schema: TableSchema) -> DataFrame:
    """The rows that match (all of them without a filter)."""
    return rows.where(matches(schema)) if schema.row_filter else rows


def check(spark: SparkSession, schema: TableSchema) -> None:
    """ConfigError, in one line, unless the filter is a predicate Spark can evaluate over the table's
    captured columns."""
    if not schema.row_filter:
        return
    given = schema.row_filter
    needs = (f"binlake needs one Spark SQL predicate over the table's captured columns "
             f"({', '.join(schema.names)}), like tenant_id = 7")
    try:
        empty = spark.createDataFrame([], T.StructType(column_types(schema)))
        found = empty.select(F.expr(given).alias("m")).schema["m"].dataType
    except Exception as exc:  # noqa: BLE001 - a parse or analysis error: its first line says where
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(f"source.row-filter for {schema.name} is {given!r} ({why}); {needs}: fix the "
                          "predicate") from None
    if not isinstance(found, (T.BooleanType, T.NullType)):
        raise ConfigError(f"source.row-filter for {schema.name} is {given!r}, a {found.simpleString()} value, not "
                          f"true or false; {needs}: fix the predicate")
