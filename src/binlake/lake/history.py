"""Silver with every version of a row (`silver.history: 2`, SCD type 2), kept by a Delta MERGE.

A version is a change of a key: it starts at the change's `_seq` (`__START_AT`) and ends at the
`_seq` of the key's next change of any kind (`__END_AT`), NULL while it is current. A hard delete
starts no version, only ends one; a soft delete starts a version with `_deleted` true. A change whose
row is out of the row filter (`binlake.lake.row_filter`: a `d` under hard deletes, `LEAVES` under
soft ones) is such a point too: it starts no version and ends the current one.

Changes of a key may reach silver out of `_seq` order (a batch replayed after a crash, a snapshot row
after a later binlog change of its key), so a version's end is not "the change after it in this
batch" but the next point in the key's whole history. Every such point is in one of three places:
- silver's rows: each version's start, and each end (every end is a change's `_seq`; a hard delete
  or a change out of the filter lives on only as the end of the version before it, and a version
  split later hands its end to the newer half, so the end stays);
- the batch's changes;
- bronze past the batch's oldest change, when bronze may hold changes silver has not been given yet
  (the replay case; `bronze_may_be_newer`, as in `binlake.lake.silver.apply`). A delete (or a change
  out of the filter) that reached silver before any version of its key could end one is there too: a
  change older than it reaches silver only in a replay. Bronze holds every change as the source made
  it, matching or not: each is a point whatever the filter says of it.

So for the keys a batch touches, the MERGE takes the sorted points, gives each version (the batch's
new ones and silver's) the point after its start as its end, inserts the new versions and corrects
the ends that moved. Matched on (key, `__START_AT`), a version is inserted once; applying the same
changes again finds every version and every end in place and changes nothing. Worked example, key 7,
hard deletes: silver holds [100, 300) (300 was a delete); a replayed batch brings an update at 200:
points {100, 200, 300}, so [100, 200) and the new [200, 300).
"""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from binlake import faults
from binlake.lake.bronze import changes_after, sql_name
from binlake.lake.row_filter import LEAVES, OPS
from binlake.lake.silver_shape import DELETED, END, START, Shape
from binlake.schema import TableSchema


def versions_of(data: DataFrame, shape: Shape) -> DataFrame:
    """The versions the changes `data` (bronze-typed, data ops only, filtered) start: one per change, but
    hard deletes and changes out of the filter."""
    made = data.where(~F.col("_op").isin(LEAVES, *([] if shape.soft else ["d"])))
    if shape.soft:
        made = made.withColumn(DELETED, F.col("_op") == "d")
    return made.withColumn(START, F.col("_seq"))


def apply(spark: SparkSession, schema: TableSchema, changes: DataFrame, silver: str, bronze: str, shape: Shape,
          oldest: Any = None, bronze_may_be_newer: bool = True, inserts_only: bool = False) -> None:
    """MERGE bronze-typed `changes` (any of r/c/u/d) into the SCD type 2 silver table at `silver`.

    `oldest`, `bronze_may_be_newer` and `inserts_only` mean what they mean to `binlake.lake.silver.apply`.
    Inserts with nothing newer in bronze, under hard deletes, are appended plainly: a key's insert
    follows its delete (or nothing), which already ended the key's last version.
    """
    from delta.tables import DeltaTable

    data = changes.where(F.col("_op").isin(*OPS))
    if oldest is None:
        oldest = data.agg(F.min("_seq")).first()[0]
    if oldest is None:
        return  # nothing to apply
    names = [sql_name(c.name) for c in schema.columns]
    meta = ["_seq", "_ts", *shape.columns()]
    made = versions_of(data, shape)
    if inserts_only and not bronze_may_be_newer and not shape.soft:
        faults.point("mid_merge", schema.name)
        (made.withColumn(END, F.lit(None).cast(T.DecimalType(38, 0))).select(*names, *meta)
         .write.format("delta").mode("append").save(silver))
        return
    key = [sql_name(k) for k in schema.key]
    touched = data.select(*[F.col(k).alias(f"__k{i}") for i, k in enumerate(key)]).distinct()

    def of_touched(df: DataFrame) -> DataFrame:
        return df.join(touched, [df[k].eqNullSafe(touched[f"__k{i}"]) for i, k in enumerate(key)], "left_semi")

    held = of_touched(spark.read.format("delta").load(silver)).select(*key, START, END)
    points = [data.select(*key, F.col("_seq").alias("__p")), held.select(*key, F.col(START).alias("__p")),
              held.where(F.col(END).isNotNull()).select(*key, F.col(END).alias("__p"))]
    if bronze_may_be_newer:
        newer = changes_after(spark, bronze, oldest)
        points.append(of_touched(newer).select(*key, F.col("_seq").alias("__p")))
    ordered = functools.reduce(DataFrame.unionByName, points).distinct()
    after = ordered.withColumn("__next", F.lead("__p").over(Window.partitionBy(*key).orderBy("__p"))).select(
        *[F.col(k).alias(f"__n{i}") for i, k in enumerate(key)], "__p", "__next")
    # each version once: silver's where it holds it already (a replay), else the batch's new one
    both = made.select(*names, *[c for c in meta if c != END], F.lit(1).alias("__new")).unionByName(
        held.withColumn("__new", F.lit(0)), allowMissingColumns=True)
    pick = Window.partitionBy(*key, START).orderBy("__new")
    every = both.withColumn("__r", F.row_number().over(pick)).where("__r = 1")
    ends = every.join(after, [every[k].eqNullSafe(after[f"__n{i}"]) for i, k in enumerate(key)]
                      + [every[START] == after["__p"]])
    source = ends.where((F.col("__new") == 1) | ~F.col(END).eqNullSafe(F.col("__next"))).select(
        *names, *[c for c in meta if c != END], F.col("__next").alias(END), "__new")
    on = " AND ".join([f"t.{k} <=> s.{k}" for k in key] + [f"t.{START} = s.{START}"])
    values = {n: f"s.{n}" for n in [*names, *meta]}
    faults.point("mid_merge", schema.name)
    (
        DeltaTable.forPath(spark, silver).alias("t").merge(source.alias("s"), on)
        .whenMatchedUpdate(condition=f"NOT (t.{END} <=> s.{END})", set={END: f"s.{END}"})
        .whenNotMatchedInsert(condition="s.__new = 1", values=values)
        .execute()
    )
