"""Reading one chunk without locks: low watermark, SELECT, high watermark, fold the gap.

    1. LW := current binlog position
    2. SELECT the chunk's rows into a buffer keyed by row identity
    3. HW := current binlog position
    4. if HW > LW: fold every row event of this table between LW and HW whose key lies in the chunk
       into the buffer -- insert/update put the after image, delete drops the key
    5. the buffer is now exactly the chunk's state at HW

Rows written while the SELECT runs may or may not be in its result; either way the fold replays
them on top, and because the fold applies them in binlog order the buffer ends at HW's state.
`Hooks` let tests run SQL exactly after LW, after the SELECT and before HW to force those races.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from binlake import faults
from binlake.binlog_reader import RowChange, read_changes, split_key_change
from binlake.chunking import KeyOrder, range_predicate
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema, qualified
from binlake.schema_changes import Guard
from binlake.source import connect, master_position, select_rows
from binlake.splits import Split

log = logging.getLogger(__name__)

Hook = Callable[[], None]


@dataclass
class Hooks:
    after_low_watermark: Hook | None = None
    after_select: Hook | None = None
    before_high_watermark: Hook | None = None


@dataclass
class ChunkResult:
    split: Split
    lw: BinlogPosition
    hw: BinlogPosition
    rows: list[dict[str, str | None]]  # encoded rows (schema.Column.encode), state at hw
    seconds: float = 0.0
    folded_events: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Membership:
    """Is a key inside `[start, end)` of a split? Compared in the server's order (see KeyOrder)."""

    def __init__(self, order: KeyOrder, split: Split) -> None:
        self.order = order
        self.lo = None if split.start is None else order.bound_key(split.start)
        self.hi = None if split.end is None else order.bound_key(split.end)

    def __contains__(self, row: dict[str, Any]) -> bool:
        k = self.order.sort_key(self.order.key_values(row))
        return (self.lo is None or k >= self.lo) and (self.hi is None or k < self.hi)


def row_identity(schema: TableSchema, row: dict[str, Any]) -> tuple[Any, ...]:
    """The buffer key of a row: its primary key, or every column when the table has none."""
    cols = [schema.column(k) for k in schema.primary_key] if schema.primary_key else list(schema.columns)
    return tuple(c.encode(row.get(c.name)) for c in cols)


def select_chunk(params: dict[str, Any], schema: TableSchema, split: Split) -> list[dict[str, str | None]]:
    """The chunk's rows as they are now, encoded: no watermarks (what `verify` compares against)."""
    where, args = range_predicate(schema, split.start, split.end)
    sql = f"SELECT {schema.select_list()} FROM {qualified(schema.database, schema.table)} WHERE {where}"
    return [schema.encode_row(dict(zip(schema.names, values))) for values in select_rows(params, sql, args)]


def read_chunk(
    params: dict[str, Any],
    schema: TableSchema,
    split: Split,
    server_id: int,
    hooks: Hooks | None = None,
    is_mariadb: bool = True,
) -> ChunkResult:
    hooks = hooks or Hooks()
    began = time.monotonic()
    conn = connect(params)
    try:
        lw = master_position(conn)
        log.info("split %s: low watermark %s", split.id, lw)
        faults.point("after_low_watermark", split.id)
        if hooks.after_low_watermark:
            hooks.after_low_watermark()
        where, args = range_predicate(schema, split.start, split.end)
        cols = schema.select_list()
        buffer: dict[tuple[Any, ...], dict[str, Any]] = {}
        names = schema.names
        sql = f"SELECT {cols} FROM {qualified(schema.database, schema.table)} WHERE {where}"
        for values in select_rows(params, sql, args):
            row = dict(zip(names, values))
            ident = row_identity(schema, row)
            if not schema.primary_key and ident in buffer:
                buffer[ident]["__count"] = buffer[ident].get("__count", 1) + 1
            else:
                buffer[ident] = row
        log.info("split %s: selected %d rows", split.id, len(buffer))
        if hooks.after_select:
            hooks.after_select()
        if hooks.before_high_watermark:
            hooks.before_high_watermark()
        hw = master_position(conn)
        log.info("split %s: high watermark %s", split.id, hw)
        faults.point("before_fold", split.id)
        folded = 0
        if hw > lw:
            member = Membership(KeyOrder(schema, conn), split)
            guard = Guard.on({schema.name: schema}, conn)
            for change in read_changes(params, server_id, lw, hw, lambda d, t: d == schema.database and t == schema.table,
                                       is_mariadb=is_mariadb, ddl=True):
                if not isinstance(change, RowChange):
                    guard.check(change)
                    continue
                for part in split_key_change(change, schema.key, operator.eq):
                    folded += 1
                    _fold(schema, buffer, member, part)
            log.info("split %s: folded %d row changes between %s and %s", split.id, folded, lw, hw)
    finally:
        conn.close()
    rows = []
    for row in buffer.values():
        encoded = schema.encode_row(row)
        rows.extend([encoded] * int(row.get("__count", 1)))
    return ChunkResult(split, lw, hw, rows, time.monotonic() - began, folded)


def _fold(schema: TableSchema, buffer: dict[tuple[Any, ...], dict[str, Any]], member: Membership, change: Any) -> None:
    if change.before is not None and change.op in ("u", "d"):
        ident = row_identity(schema, change.before)
        if ident in buffer:
            if not schema.primary_key and buffer[ident].get("__count", 1) > 1:
                buffer[ident]["__count"] -= 1
            else:
                del buffer[ident]
    if change.after is not None and change.after in member:
        ident = row_identity(schema, change.after)
        if not schema.primary_key and ident in buffer:
            buffer[ident]["__count"] = buffer[ident].get("__count", 1) + 1
        else:
            buffer[ident] = dict(change.after)
