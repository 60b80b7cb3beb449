"""The handover rule: which binlog row events the stream emits once the snapshot is done.

A row event at position p for key k is emitted only if p is at or after the high watermark of the
split containing k: anything earlier is already inside that split's snapshot rows. Once p is at or
after the largest HW of the table, every event is emitted without a lookup (the pure binlog phase).

Worked example -- table t, two splits:
    split 0: (-inf, 100)  HW = binlog.000003:500
    split 1: [100, +inf)  HW = binlog.000003:900
    event at 000003:700 for id 42   -> split 0, 700 >= 500  -> emit
    event at 000003:700 for id 150  -> split 1, 700 <  900  -> skip (already in split 1's rows)
    event at 000003:950 for any id  -> past max HW 900      -> emit, no lookup
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from binlake.source.binlog_reader import RowChange
from binlake.capture.chunking import KeyOrder
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.splits import Split


@dataclass
class TableHandover:
    schema: TableSchema
    starts: list[Any]  # sort keys of split starts, ascending; first is None (-inf)
    hws: list[BinlogPosition]
    max_hw: BinlogPosition
    order: KeyOrder | None = field(default=None, repr=False)

    def should_emit(self, change: RowChange) -> bool:
        pos = change.position
        if pos >= self.max_hw:
            return True
        assert self.order is not None
        key = self.order.sort_key(self.order.key_values(change.image))
        i = bisect.bisect_right(self.starts, key, lo=1) - 1
        return pos >= self.hws[i]


class Handover:
    """The emit rule for every captured table, built from the finished splits."""

    def __init__(self, schemas: dict[str, TableSchema], splits: dict[str, list[Split]]) -> None:
        self.schemas = schemas
        self.splits = {t: sorted(s, key=lambda x: x.index) for t, s in splits.items() if s}
        self._tables: dict[str, TableHandover] | None = None

    def start_position(self) -> BinlogPosition | None:
        """min(HW) over all splits: where the single binlog reader starts."""
        hws = [s.hw for ss in self.splits.values() for s in ss if s.hw is not None]
        return min(hws) if hws else None

    def bind(self, conn: Any | None) -> None:
        """Resolve split starts into server order (string keys need the server's collation)."""
        tables = {}
        for name, splits in self.splits.items():
            if any(s.hw is None for s in splits):
                raise ValueError(f"table {name} has unfinished splits; the stream starts after the snapshot")
            order = KeyOrder(self.schemas[name], conn)
            starts = [None] + [order.bound_key(s.start) for s in splits[1:] if s.start is not None]
            hws = [s.hw for s in splits]  # type: ignore[misc]
            tables[name] = TableHandover(self.schemas[name], starts, hws, max(hws), order)  # type: ignore[type-var]
        self._tables = tables

    def should_emit(self, change: RowChange) -> bool:
        if self._tables is None:
            raise RuntimeError("Handover.bind() must be called before should_emit()")
        table = self._tables.get(change.table)
        return True if table is None else table.should_emit(change)

    def __getstate__(self) -> dict[str, Any]:
        return {"schemas": self.schemas, "splits": self.splits, "_tables": None}
