"""A chunk read beside the stream, merged into silver (binlake.capture.side_snapshot): its rows left out
where bronze holds a newer change of their key, the others replacing silver's rows of their keys; and,
once the table's last chunk has landed, silver's rows the snapshot touched nowhere deleted.

Both are ordinary changes to silver, by the micro-batch's own writers: marked where a batch would
rewrite much of a large table (binlake.lake.marked_merge), else delta-rs's MERGE with its `_seq` guard
(`binlake.lake.silver.apply_arrow`). The marked write replaces a key's row whatever its `_seq`, which
holds here: every row it is given is newer than silver's row of its key (see the capture's module)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake.lake import arrow_commit, silver
from binlake.lake.bronze import BINLOG_OPS
from binlake.lake.marked_merge import apply_marked
from binlake.lake.silver_shape import Shape
from binlake.schema import TableSchema


def _seq_after(seq: int) -> str:
    """`_seq > seq` for delta-rs's SQL engine. Not that condition itself: delta-rs writes the statistics
    of a DECIMAL(38,0) column as 9223372036854775807 (the largest 64-bit integer), and its scan, trusting
    them, answers a comparison of `_seq` wrongly (seen: every row older than a value smaller than all of
    them); `coalesce` keeps the comparison to the rows' own values."""
    return f"coalesce(_seq, 0) > CAST('{int(seq)}' AS DECIMAL(38,0))"


def _plain(rows: Any) -> Any:
    """`rows` with the view types delta-rs's SQL engine answers in (string_view) as the plain ones its
    writers take."""
    fields = [pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else
                       pa.binary() if pa.types.is_binary_view(f.type) else f.type) for f in rows.schema]
    return rows.cast(pa.schema(fields))


def changed_since(location: str, key: list[str], seq: int) -> Any:
    """The keys of the binlog changes in the bronze table at `location` after `seq` (a pyarrow Table)."""
    ops = ", ".join(f"'{op}'" for op in BINLOG_OPS)
    names = ", ".join(arrow_commit.quoted(k) for k in key)
    return _plain(arrow_commit.query(location, "bronze", f"SELECT DISTINCT {names} FROM bronze "
                                                         f"WHERE {_seq_after(seq)} AND _op IN ({ops})"))


def without(rows: Any, keys: Any, key: list[str]) -> Any:
    """`rows` whose key is none of `keys`'."""
    if keys.num_rows == 0 or rows.num_rows == 0:
        return rows
    if len(key) == 1:
        return rows.filter(pc.invert(pc.is_in(rows.column(key[0]), value_set=keys.column(key[0]))))
    taken = set(zip(*[keys.column(k).to_pylist() for k in key]))
    keep = [k not in taken for k in zip(*[rows.column(k).to_pylist() for k in key])]
    return rows.filter(pa.array(keep, pa.bool_()))


def untouched(silver_at: str, bronze_at: str, schema: TableSchema, first_chunk: int, since: int) -> Any:
    """Silver's rows whose key the snapshot touched nowhere -- in no chunk read since `first_chunk`, and
    in no binlog change since `since` -- as their deletes (silver's columns and `_op`). A key compares
    by exact value, not by a range of the server's order, so every collation is right."""
    key = list(schema.key)
    names = ", ".join(arrow_commit.quoted(k) for k in key)
    ops = ", ".join(f"'{op}'" for op in BINLOG_OPS)
    touched = _plain(arrow_commit.query(bronze_at, "bronze", f"""SELECT DISTINCT {names} FROM bronze
        WHERE (_op = 'r' AND _chunk >= {int(first_chunk)}) OR (_op IN ({ops}) AND {_seq_after(since - 1)})"""))
    keys = without(_plain(arrow_commit.query(silver_at, "silver", f"SELECT {names}, _seq FROM silver")), touched, key)
    # a delete needs its key and `_seq` only: silver's other columns go empty (read for their types alone)
    shape = _plain(arrow_commit.query(silver_at, "silver", "SELECT * FROM silver LIMIT 0")).schema
    columns = [keys.column(f.name) if f.name in keys.column_names else pa.nulls(keys.num_rows, f.type) for f in shape]
    return pa.Table.from_arrays([*columns, pa.array(["d"] * keys.num_rows, pa.string())],
                                names=[*shape.names, "_op"])


def apply(location: str, schema: TableSchema, changes: Any, index: Any, shape: Shape) -> None:
    """Snapshot rows (`r`) and deletes (`d`), each no older than silver's row of its key, into the silver
    table at `location`: marked when that is the cheaper write, else by delta-rs's MERGE."""
    if changes.num_rows == 0 or apply_marked(location, schema, changes, index):
        return
    table = arrow_commit.writable(location, [f.name for f in silver.struct(schema, shape).fields])
    if table is None:
        raise ValueError(f"{location} is not a silver table delta-rs writes")
    # a row silver holds at the same `_seq` is an older snapshot read at the same high watermark: replaced
    silver.apply_arrow(table, schema, changes, inserts_only=False, shape=shape, ties_win=True)
