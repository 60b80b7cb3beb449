"""Bronze's columns typed from the snapshot's texts by Arrow, without Spark: the same values
`binlake.lake.bronze.typed_flat`'s casts give, for the types where Arrow's cast is proven to give them.

A snapshot chunk arrives as texts (`Column.encode`: `_c0.._cN`, see `bronze.flat_changes`). Spark
casts each text to its column's type (`Column.spark_type`). Arrow's casts from text read the same
forms into the same values: integers, decimals (the server's text has the column's scale), FLOAT and
DOUBLE (the shortest text that reads back to the same value, which any correctly rounding reader
reads back: Java's and Arrow's both round correctly), `true`/`false`, ISO dates and timestamps
(`YYYY-MM-DD HH:MM:SS.ffffff`, `+00:00` for a TIMESTAMP), and base64 for binary columns. A text
Arrow cannot read raises, and the caller types that read by Spark instead.

Spatial and vector columns (a struct, a list parsed from JSON) are left to Spark: `typer` gives None
for a table that has one. `tests/integration/test_arrow_types.py` holds every type of both servers
to identical values on both paths.

Worked example: a `DATETIME(3)` column's text `2024-02-29 23:59:59.999000` becomes the timestamp
without time zone 2024-02-29T23:59:59.999 (`timestamp[us]`), a `TIMESTAMP` column's
`2038-01-19 03:14:07.000000+00:00` the instant 2038-01-19T03:14:07Z (`timestamp[us, tz=UTC]`, Spark's
session time zone), a `BIGINT UNSIGNED`'s `18446744073709551615` the `decimal(20,0)` of that value.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake import valuetypes
from binlake.schema import Column, TableSchema

# `Column.spark_type` -> the Arrow type Spark hands over for it (`DataFrame.toArrow`)
_SIMPLE: dict[str, Any] = {
    "tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(), "bigint": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"), "string": pa.string(),
    "binary": pa.binary(),
}
_MICROS = pa.timestamp("us", tz="UTC")

Typer = Callable[[pa.Table], pa.Table]


def arrow_type(column: Column) -> Any:
    """The Arrow type of `column` in bronze, or None where Spark types it (spatial, vector)."""
    ddl = column.spark_type()
    if ddl in (valuetypes.SPATIAL_SPARK_TYPE, valuetypes.VECTOR_SPARK_TYPE):
        return None
    if ddl.startswith("decimal("):
        p, s = ddl[len("decimal("):-1].split(",")
        return pa.decimal128(int(p), int(s))
    return _SIMPLE[ddl]


def typer(schema: TableSchema) -> Typer | None:
    """How a snapshot read of `schema` (`bronze.flat_changes` as a pyarrow Table) becomes bronze's
    columns, or None when a column's type is Spark's to cast."""
    kinds = [arrow_type(c) for c in schema.columns]
    if any(k is None for k in kinds):
        return None
    names = [c.name for c in schema.columns]

    def typed(flat: pa.Table) -> pa.Table:
        values = [_value(flat.column(f"_c{i}"), kind) for i, kind in enumerate(kinds)]
        seconds = flat.column("_ts").cast(pa.int64())
        meta = [flat.column("_op"), flat.column("_seq"), pc.multiply(seconds, 1_000_000).cast(pa.int64()).cast(_MICROS),
                flat.column("_file"), flat.column("_pos"), flat.column("_gtid"), flat.column("_chunk"),
                flat.column("_lw")]
        return pa.Table.from_arrays(values + meta, names=names + ["_op", "_seq", "_ts", "_file", "_pos", "_gtid",
                                                                  "_chunk", "_lw"])

    return typed


def flat_of_changes(changes: pa.Table, width: int) -> pa.Table | None:
    """A micro-batch's change rows of one table (`bronze.CHANGES` as Arrow: each row's texts in its
    `_vals`, in its schema's order) as a snapshot read's flat rows (`_c0.._cN`), which `typer`
    types; None, for Spark to type them (and refuse a row whose count of values is not the schema's),
    unless every row holds exactly `width` values."""
    import numpy as np

    vals = changes.column("_vals").combine_chunks()
    counts = pc.min_max(pc.list_value_length(vals)).as_py()
    if vals.null_count or (len(vals) and counts != {"min": width, "max": width}):
        return None
    values = pc.list_flatten(vals)
    columns = [values.take(pa.array(np.arange(i, len(values), width))) for i in range(width)]
    meta = [n for n in changes.column_names if n not in ("_table", "_row", "_vals")]
    return pa.Table.from_arrays([changes.column(n) for n in meta] + columns,
                                names=meta + [f"_c{i}" for i in range(width)])


def _value(texts: Any, kind: Any) -> Any:
    """A column of texts as `kind`: Arrow's cast, or base64 decoded for binary."""
    if kind == pa.string():
        return texts
    if kind == pa.binary():
        return pa.array([None if t is None else binascii.a2b_base64(t) for t in texts.to_pylist()], pa.binary())
    return pc.cast(texts, kind)
