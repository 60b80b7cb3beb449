"""A micro-batch's change rows as the stream lands them: held in the driver as Arrow, or cached by
Spark.

On a local lake the stream reads each batch in the driver (`binlake.capture.stream_loop`) and holds
its rows as Arrow (`HeldBatch`): the figures counted by Arrow, and each table's rows typed by Arrow's
casts (`binlake.lake.arrow_types`, the same values as Spark's) for delta-rs to commit; a table Spark
is to write (a schema change, a replay, a row filter, ...) gets a Spark frame of its rows from the
driver, the Spark session started then if it was not.

Spark's query (a lake behind a URI, or a batch too large to hold in the driver) hands `foreachBatch`
a frame that reads the binlog when asked. Landing it asks several times (each table's figures, then
each table's rows), so it is cached by Spark first (`CachedBatch`): a job to read and count, then a
job per table to type its rows, spilling to disk where it must.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from binlake.lake import arrow_types, bronze
from binlake.schema import TableSchema

# the batch's notes, under the table "": its GTID trailer (g) and the signals it read (x, binlake.capture.signals)
NOTES = ("g", "x")


class CachedBatch:
    """A batch cached by Spark: figures by one aggregation, each table's rows typed by Spark."""

    def __init__(self, whole: Any) -> None:
        self.whole = whole.persist()

    def figures(self) -> tuple[list[Any], list[str]]:
        """Each table's figures (rows with `_table`, `n`, `ts`, `oldest`, `marks`, `others`, `size`)
        and the batch's notes (`NOTES`, under the table "", in a group of their own): one job."""
        op = F.col("_op")
        groups = self.whole.groupBy("_table").agg(
            F.count("*").alias("n"), F.max("_ts").alias("ts"), F.min("_seq").alias("oldest"),
            F.sum(F.when(op == "s", 1).otherwise(0)).alias("marks"),
            F.sum(F.when(op != "c", 1).otherwise(0)).alias("others"),
            F.sum(F.length(F.array_join("_vals", ""))).alias("size"),
            F.collect_list(F.when(op.isin(*NOTES), F.col("_row"))).alias("trailers")).collect()
        return [r for r in groups if not r["trailers"]], [t for r in groups for t in r["trailers"]]

    def frame(self, name: str) -> Any:
        return self.whole.where((F.col("_table") == name) & ~F.col("_op").isin(*NOTES))

    def typed(self, name: str, schema: TableSchema) -> pa.Table:
        return bronze.typed(self.frame(name), schema).toArrow()

    def release(self) -> None:
        self.whole.unpersist()


class HeldBatch:
    """A batch collected into the driver as Arrow (`bronze.CHANGES`'s columns)."""

    def __init__(self, rows: pa.Table, session: Callable[[], Any]) -> None:
        self.rows, self.session = rows, session  # Spark's session, started only when a table needs it
        self.tables: dict[str, pa.Table] = {}

    def figures(self) -> tuple[list[dict[str, Any]], list[str]]:
        """`CachedBatch.figures`, counted by Arrow."""
        op = self.rows.column("_op")
        notes = pc.is_in(op, pa.array(NOTES))
        # a batch of one table and no notes (the common one) is taken whole: no copy filtered out of it
        noted = pc.any(notes).as_py()
        trailers = self.rows.filter(notes).column("_row").to_pylist() if noted else []
        changes = self.rows.filter(pc.invert(notes)) if noted else self.rows
        names = pc.unique(changes.column("_table")).to_pylist()
        out = []
        for name in names:
            rows = self.tables[name] = changes if len(names) == 1 else \
                changes.filter(pc.equal(changes.column("_table"), name))
            ops = rows.column("_op")
            out.append({
                "_table": name, "n": rows.num_rows, "ts": pc.max(rows.column("_ts")).as_py(),
                "oldest": pc.min(rows.column("_seq")).as_py(),
                "marks": pc.sum(pc.equal(ops, "s").cast(pa.int64())).as_py(),
                "others": pc.sum(pc.not_equal(ops, "c").cast(pa.int64())).as_py(),
                "size": pc.sum(pc.binary_length(pc.list_flatten(rows.column("_vals")))).as_py() or 0,
            })
        return out, trailers

    def frame(self, name: str) -> Any:
        return self.session().createDataFrame(self.tables[name], schema=bronze.CHANGES)

    def typed(self, name: str, schema: TableSchema) -> pa.Table:
        """The table's rows typed for bronze by Arrow, or by Spark where Arrow does not type them."""
        typer = arrow_types.typer(schema)
        flat = arrow_types.flat_of_changes(self.tables[name], len(schema.columns)) if typer else None
        if typer is not None and flat is not None:
            try:
                return typer(flat)
            except pa.ArrowInvalid:  # a text Arrow's cast does not read: Spark's cast decides
                pass
        return bronze.typed(self.frame(name), schema).toArrow()

    def release(self) -> None:
        self.tables.clear()
