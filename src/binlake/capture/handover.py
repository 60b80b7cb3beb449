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

from binlake.capture.failover import await_state, follow
from binlake.errors import RuntimeFailure
from binlake.keys import KeyOrder
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source.binlog_reader import RowChange
from binlake.source.connection import connect
from binlake.source.dialect import Dialect, binlog_head
from binlake.source.gtids import contains, parse_state
from binlake.source.identity import Lineage, identify, verify
from binlake.splits import Split


@dataclass
class TableHandover:
    schema: TableSchema
    starts: list[Any]  # sort keys of split starts, ascending; first is None (-inf)
    hws: list[BinlogPosition]
    max_hw: BinlogPosition
    order: KeyOrder | None = field(default=None, repr=False)
    # before it, no row is emitted whatever its key (asked of every row event: not a min over the splits)
    min_hw: BinlogPosition = field(init=False)

    def __post_init__(self) -> None:
        self.min_hw = min(self.hws)

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

    @property
    def bound(self) -> bool:
        """Whether `bind` has been called (a pickled handover is unbound again)."""
        return self._tables is not None

    def emits_all(self, table: str, at: BinlogPosition) -> bool:
        """Whether every row of `table` at `at` is emitted, whatever its key: past the table's largest
        HW (or a table without splits)."""
        if self._tables is None:
            raise RuntimeError("Handover.bind() must be called before emits_all()")
        found = self._tables.get(table)
        return found is None or at >= found.max_hw

    def passes_all(self, table: str, at: BinlogPosition) -> bool:
        """Whether no row of `table` at `at` is emitted, whatever its key: before every split's HW."""
        if self._tables is None:
            raise RuntimeError("Handover.bind() must be called before passes_all()")
        found = self._tables.get(table)
        return found is not None and at < found.min_hw

    def should_emit(self, change: RowChange) -> bool:
        if self._tables is None:
            raise RuntimeError("Handover.bind() must be called before should_emit()")
        table = self._tables.get(change.table)
        return True if table is None else table.should_emit(change)

    def __getstate__(self) -> dict[str, Any]:
        return {"schemas": self.schemas, "splits": self.splits, "_tables": None}


# -- a micro-batch's range on the server it is read from ---------------------------------------------
# The stream's binlog source reads each micro-batch from its start offset to its end offset. Which of
# the changes there are the batch's to emit depends, besides the rule above, on where the stream
# started and on the servers it was read from (binlake.capture.failover).


@dataclass(frozen=True)
class Skip:
    """Which row changes in a batch's range are not the batch's to hand over."""

    since: int | None  # startup mode timestamp: changes written before it
    applied: Any  # a GTID startup position: the transactions it names as already had
    had: Any  # after a failover: the transactions read from the server before it...
    had_epoch: int | None  # ...as they come again in the epoch of the failover
    only: Any  # a batch planned on the server before a failover, read here by GTID: its own transactions

    def __call__(self, change: Any) -> bool:
        if self.since is not None and change.ts < self.since:
            return True
        if self.applied and contains(self.applied, change.gtid):
            return True
        if self.had and change.epoch == self.had_epoch and contains(self.had, change.gtid):
            return True
        # past the batch's end on the server before the failover: the next batch's
        return self.only is not None and not contains(self.only, change.gtid)


def batch_start(start: dict[str, Any], lineage: Lineage, since: int | None, applied: Any,
                only: Any) -> tuple[BinlogPosition, Skip]:
    """Where a batch from offset `start` begins, and which changes it passes there are not the batch's.
    A batch from a position on the server before a failover reads on from where that position is on
    this one, skipping the transactions binlake had (binlake.source.identity)."""
    at = BinlogPosition.from_dict(start)
    failover = lineage.failover
    had, had_epoch = None, None
    if failover:
        had_epoch = int(failover["epoch"])
        had = parse_state(failover["applied"])
        if at.epoch < had_epoch:
            at = BinlogPosition.from_dict(failover["start"])
    return at, Skip(since, applied, had, had_epoch, only)


def server_moved(conn: Any, params: dict[str, Any], start: dict[str, Any], end: dict[str, Any], lineage: Lineage,
                 gtid_offsets: bool, patience: float) -> tuple[Lineage, tuple[Any, BinlogPosition] | None]:
    """The server restarted, or is another one, since the batch from `start` to `end` was planned. The
    same one must still hold the history up to the batch's start. Under `gtid_offsets`, another one of
    the same replication topology serves the batch planned on the server before it by GTID: from after
    the transactions of the start's state up to the head once it holds the end's, those of the end's
    state (binlake.capture.failover). The lineage to read under, and those GTIDs (parsed) with that
    head (None for the same server)."""
    now, _ = identify(conn)
    if lineage.identity.same(now) or not gtid_offsets or "gtids" not in end:
        same_history(params, start, lineage)
        return lineage, None
    anchor = lineage.anchor(BinlogPosition.from_dict(start), start.get("created"))
    state = None if "gtids" not in start else {"end": BinlogPosition.from_dict(start).to_dict(),
                                               "gtids": start["gtids"],
                                               "complete": bool(start["complete"] and end["complete"])}
    followed = follow(conn, lineage, anchor, now, state, patience)
    await_state(conn, anchor, str(end["gtids"]), Dialect.of(conn), patience)
    head = binlog_head(conn)  # every one of them was written before it
    only = parse_state(str(end["gtids"]))
    return followed, (only, BinlogPosition(head.file, head.pos, followed.epoch))


def before_reopen(params: dict[str, Any], start: dict[str, Any], lineage: Lineage, gtid_offsets: bool) -> None:
    """Before a lost connection is reopened mid-batch: the same server, holding the history up to the
    batch's start. Under `gtid_offsets`, another server fails the batch, whose rows so far came
    from the server before: read again whole (Spark retries the task, a pipeline the flow), it is
    served by GTID there (`server_moved`)."""
    if gtid_offsets:
        conn = connect(params)
        try:
            now, _ = identify(conn)
        finally:
            conn.close()
        if not lineage.identity.same(now):
            raise RuntimeFailure(
                f"source.hostname now leads to {now}, not {lineage.identity} this micro-batch began on: the "
                "batch is read again, from the new server by GTID, when the stream restarts")
    same_history(params, start, lineage)


def same_history(params: dict[str, Any], start: dict[str, Any], lineage: Lineage) -> None:
    """Before a lost connection is reopened: the server still holds the history up to the batch's
    start (binlake.source.identity), or SourceChangedError."""
    anchor = lineage.anchor(BinlogPosition.from_dict(start), start.get("created"))
    conn = connect(params)
    try:
        verify(conn, params, anchor)
    finally:
        conn.close()
