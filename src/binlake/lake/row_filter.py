"""source.row-filter: silver holds the rows of a table that match one predicate now.

    source.row-filter: {shop.orders: "tenant_id = 7"}

The predicate is Spark SQL over the table's captured columns, evaluated by Spark on the typed rows
bronze holds. A snapshot row and a binlog change are typed from the same encoded text
(`binlake.lake.bronze.typed`), so the two paths give the predicate the same values and agree by
construction. It is not pushed down into the chunk SELECT: MySQL compares text by the column's
collation ('a' = 'A' under a *_ci collation, trailing spaces ignored under PAD SPACE), Spark by code
point, and the two convert between types differently; the same text run by the server could keep a
row the binlog path drops. The chunk reads every row, and the filter decides in Spark.

A change reaches silver by its row as bronze holds it: the row after the change (an insert's, an
update's, a snapshot row), or before it (a delete's):
- the row matches: the change is applied as without a filter (an upsert; with soft deletes a delete
  is kept as the key's tombstone, with history a version starts);
- it does not (false, or NULL as in a WHERE clause): the row leaves silver outright. Under hard deletes
  that is a delete of the key (`d`); under soft deletes it is `LEAVES`, which removes the key's row,
  tombstone included, and keeps no tombstone of its own: the row was not deleted at the source, and
  silver holds no row outside the filter. Under history (`binlake.lake.history`) it starts no version
  and ends the key's current one, as a hard delete does.
So a row updated out of the filter leaves silver, one updated into it enters, an insert or a
snapshot row that does not match changes nothing, and with soft deletes a delete of a row in the
filter leaves a tombstone where a delete of one outside it leaves nothing. The before image of an
update decides nothing more: it tells whether the row was in silver, and what the after image says
is right either way. Silver applies each key's changes in `_seq` order, the newest winning, and bronze
holds every change (the record a late snapshot row or a replayed older change loses to), so in any
order of arrival and on replays a key's last change decides its row in silver (with history, its
current version):

    the key's last change           hard deletes     soft deletes
    upsert, row matches             the row          the row, _deleted false
    delete, row matched             none             the row, _deleted true (the delete's _seq, _ts)
    any change, row does not match  none             none

With history each change whose row matches starts a version (a delete only under soft deletes) and
every change, matching or not, ends the version before it. Worked example, soft deletes and history,
`tenant = 7`, one key: a snapshot row at 100 (tenant 7), an update at 200 (to tenant 8), one at 300
(back to 7), a delete at 400, an insert at 500 (tenant 8): versions [100, 200), [300, 400) and the
tombstone [400, 500); the key has no current version, and no silver row is live. Either way silver's
live rows (current, not deleted) are the source's rows that match now.

Bronze keeps every change of the table, matching or not: it is the change log silver is derived
from, and a row leaving the filter is known only from a change whose row no longer matches.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from binlake.errors import ConfigError
from binlake.lake.bronze import DATA_OPS, column_types
from binlake.lake.silver_shape import PLAIN, Shape
from binlake.schema import TableSchema

UPSERTS = ("r", "c", "u")
# a change whose row is out of the filter, under soft deletes: silver removes the key's row and keeps
# no tombstone (under hard deletes such a change is a plain `d`). Never written to bronze.
LEAVES = "x"
# the changes `filtered` gives silver
OPS = (*DATA_OPS, LEAVES)


def matches(schema: TableSchema) -> Column:
    """The predicate as a Spark column: true where a row matches, false where it does not or is NULL."""
    assert schema.row_filter
    return F.coalesce(F.expr(schema.row_filter), F.lit(False))


def filtered(changes: DataFrame, schema: TableSchema, shape: Shape = PLAIN) -> DataFrame:
    """Bronze-typed `changes` as silver applies them in `shape`: a change whose row does not match
    leaves silver, as a delete (`d`) under hard deletes, as `LEAVES` under soft ones."""
    if not schema.row_filter:
        return changes
    leaves = F.col("_op").isin(*(DATA_OPS if shape.soft else UPSERTS)) & ~matches(schema)
    return changes.withColumn("_op", F.when(leaves, F.lit(LEAVES if shape.soft else "d")).otherwise(F.col("_op")))


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
