"""What the snapshot's and the binlog's readers hand on (to Spark, or to the driver's stream): Arrow
record batches of bronze's flat change rows, bounded in rows and bytes, and the connection settings
each reader opens its connections with."""

from __future__ import annotations

import functools
import json
from typing import Any

import pyarrow as pa


def connection_params(options: dict[str, str]) -> dict[str, Any]:
    """The job's connection settings with the password, which travels in an option of its own."""
    p = dict(_connection(options["job"]))
    p["password"] = options.get("password", "")
    return p


@functools.lru_cache(maxsize=4)
def _connection(job: str) -> dict[str, Any]:
    """The connection settings of the job `job` (its JSON, which holds every chunk of a large table:
    parsed once, not at each batch's three calls)."""
    return dict(json.loads(job)["connection"])


# rows per Arrow batch handed to Spark: columnar batches, not one pickled tuple per row
BATCH_ROWS = 8192


# and at most about this many bytes of values: an Arrow string column holds at most 2 GiB, and
# 8192 rows of 16 MB LONGBLOBs would hold 128 GiB
BATCH_BYTES = 64 * 1024 * 1024


# columns whose values can be megabytes; only these are measured, narrow rows cost nothing
WIDE_TYPES = {"tinyblob", "blob", "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext", "json",
              "varchar", "varbinary"}


def meta_fields() -> list[tuple[str, Any]]:
    """The Arrow fields of bronze's meta columns, first in every batch either source hands to Spark."""
    return [("_table", pa.string()), ("_op", pa.string()), ("_seq", pa.decimal128(38, 0)), ("_ts", pa.int64()),
            ("_file", pa.string()), ("_pos", pa.int64()), ("_gtid", pa.string()), ("_chunk", pa.int32()),
            ("_lw", pa.string())]


def arrow_batch(fields: list[tuple[str, Any]], columns: list[Any]) -> Any:
    """One Arrow record batch of `columns` (lists of values, or Arrow arrays of the field's type)
    typed by `fields`."""
    return pa.RecordBatch.from_arrays([c if isinstance(c, pa.Array) else pa.array(c, type=t)
                                       for c, (_, t) in zip(columns, fields)], names=[n for n, _ in fields])


def constants(values: list[Any], fields: list[tuple[str, Any]], count: int) -> list[Any]:
    """Arrow arrays of `count` times each of `values`, typed by `fields`: a chunk's meta columns,
    the same on every row, built without a Python list each (a list of 8,192 decimals took a
    millisecond to convert)."""
    return [pa.repeat(pa.scalar(v, type=t), count) for v, (_, t) in zip(values, fields)]

