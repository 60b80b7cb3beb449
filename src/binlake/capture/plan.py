"""Planning: every captured table cut into chunks (`binlake.capture.chunking`) and stored in the split
state, resumably: a table half planned when a run stopped resumes after its last stored batch.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from binlake import faults
from binlake.capture import side_state
from binlake.capture.chunking import plan_ranges
from binlake.capture.context import Context
from binlake.config import Config
from binlake.lake import bronze, row_filter, silver, split_state
from binlake.schema import TableSchema, qualified
from binlake.source.connection import connect
from binlake.source.dialect import Dialect
from binlake.splits import Split

log = logging.getLogger(__name__)

# splits written to the split state per commit while planning (the resume grain of planning)
PLAN_BATCH = int(os.environ.get("BINLAKE_PLAN_BATCH", "500"))
# while planning feeds reads, a table planned whole is handed over at least this often (seconds)
PLAN_FLUSH_SECONDS = 2.0

# `on_batch(table, whole)`: the table's splits just stored; `whole` holds all of them when this run
# planned the table entire in that batch (never read, so its reader needs no look at bronze), else None
OnBatch = Callable[[str, "list[Split] | None"], None]


def plan(cfg: Config, ctx: Context | None = None, on_batch: OnBatch | None = None) -> None:
    """Plan every captured table into the split state, resuming a half-planned table.

    Splits are stored in batches of whole groups (about PLAN_BATCH splits, of one table or of many
    small ones), so planning holds one batch in memory and a crash resumes after the last stored
    batch. `on_batch` runs for each table of a stored batch: `run` reads the table there, while the
    rest is still to be planned. Without it, planning creates each table's bronze and silver (the
    fan-out's readers append to them); with it, the reads that follow create each table with its
    first rows, one commit instead of two.
    """
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    split_state.ensure(spark, ctx.target.split_state)
    numbers, last = split_state.planned(spark, ctx.target.split_state)
    ctx.lineage()  # before any chunk's high watermark is taken
    stored = _Batches(ctx, on_batch)
    beside = side_state.states(ctx.target.side_snapshots)  # snapshotted beside the stream, not planned here
    conn = connect(ctx.params)
    try:
        for name, schema in ctx.schemas().items():
            if name in beside:
                continue
            row_filter.check(spark, schema)  # refused before anything is read
            if on_batch is None:
                bronze.ensure_table(spark, ctx.target.bronze(name).location, schema)
                silver.ensure_table(spark, ctx.target.silver(name).location, schema, ctx.shape)
            else:  # the reads create it; one from a run cut short must be of this shape
                silver.refuse_other_shape(spark, ctx.target.silver(name).location, ctx.shape)
            tail = last.get(name)
            if tail is not None and tail.end is None:
                continue  # fully planned
            numbers[name] = numbers.get(name, max(numbers.values(), default=0) + 1)
            _plan_table(cfg, conn, schema, numbers[name], tail, stored)
        stored.flush()
    finally:
        conn.close()


def _plan_table(cfg: Config, conn: Any, schema: TableSchema, table_no: int, tail: Split | None,
                stored: _Batches) -> None:
    name, group_size = schema.name, int(cfg.get("snapshot.group-size"))
    index = 0 if tail is None else tail.index + 1
    if tail is not None:
        log.info("planning %s resumes at chunk %d, after the %d chunks stored", name, index, index)
    began, reading = time.monotonic(), stored.reading
    # Reads interleave only over the rows the table had when planning began: past them, rows
    # inserted meanwhile would have planning chase them at reading speed forever; planned at
    # query speed instead, they end in the open last split, cut again when read.
    interleave_until = table_rows(conn, schema, cfg.chunk_size)
    for start, end in plan_ranges(conn, schema, cfg.chunk_size, None if tail is None else tail.end):
        stored.add(Split(name, table_no, index, start, end, group_size))
        index += 1
        # a batch ends on a group boundary, so every group it holds is complete and readable
        if len(stored.splits) >= PLAN_BATCH and index % group_size == 0:
            batch = stored.store()
            faults.point("mid_plan", name)
            stored.hand_over(batch, read=index * cfg.chunk_size <= interleave_until)
    stored.table_done(name, whole=tail is None)
    log.info("planned %s: %d splits in %.1fs (and %.1fs reading chunks meanwhile)", name, index,
             time.monotonic() - began - (stored.reading - reading), stored.reading - reading)


class _Batches:
    """The splits planned and not yet stored, across tables; stored in one append, then handed to
    `on_batch` table by table."""

    def __init__(self, ctx: Context, on_batch: OnBatch | None) -> None:
        self.ctx, self.on_batch = ctx, on_batch
        self.splits: list[Split] = []
        self.whole: set[str] = set()  # tables planned entire within the batch
        self.stored_at = time.monotonic()
        self.reading = 0.0  # seconds spent in on_batch

    def add(self, split: Split) -> None:
        self.splits.append(split)

    def table_done(self, name: str, whole: bool) -> None:
        """A table's planning ended: store the batch if it is big or old enough to hand over."""
        if whole and any(s.table == name and s.index == 0 for s in self.splits):
            self.whole.add(name)
        if len(self.splits) >= PLAN_BATCH or time.monotonic() - self.stored_at >= PLAN_FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        self.hand_over(self.store())

    def store(self) -> tuple[list[Split], set[str]]:
        """Store the batch, keyed by its first split: a retried batch is never written twice."""
        batch, whole = self.splits, self.whole
        self.splits, self.whole, self.stored_at = [], set(), time.monotonic()
        split_state.add_planned(self.ctx.session(), self.ctx.target.split_state, batch)
        return batch, whole

    def hand_over(self, stored: tuple[list[Split], set[str]], read: bool = True) -> None:
        """Hand each table of a stored batch to `on_batch`; with `read` False, all but the last, half
        planned, table."""
        batch, whole = stored
        if self.on_batch is None or not batch:
            return
        by_table: dict[str, list[Split]] = {}
        for s in batch:
            by_table.setdefault(s.table, []).append(s)
        t = time.monotonic()
        for table, splits in by_table.items():
            if table in whole:
                self.on_batch(table, splits)
            elif read or table != batch[-1].table:
                self.on_batch(table, None)
        self.reading += time.monotonic() - t


def table_rows(conn: Any, schema: TableSchema, chunk_size: int) -> int:
    """The table's row count: the server's estimate, counted when that is small (cheap then)."""
    approx = Dialect.of(conn).estimated_rows(conn, schema.database, schema.table)
    with conn.cursor() as cur:
        if approx < 10 * chunk_size:
            cur.execute(f"SELECT COUNT(*) FROM {qualified(schema.database, schema.table)}")
            approx = int(cur.fetchone()[0])
    return approx


def group_ids(cfg: Config, ctx: Context | None = None) -> list[int]:
    """The ids of the groups that still have unfinished chunks (what the fan-out iterates over)."""
    ctx = ctx or Context(cfg)
    found = split_state.open_groups(ctx.session(), ctx.target.split_state, "landed")
    return sorted(g for gs in found.values() for g in gs)

