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
from binlake.capture.chunking import plan_ranges
from binlake.capture.context import Context
from binlake.config import Config
from binlake.lake import bronze, silver, split_state
from binlake.schema import TableSchema, qualified
from binlake.source.connection import connect
from binlake.source.dialect import Dialect
from binlake.splits import Split

log = logging.getLogger(__name__)

# splits written to the split state per commit while planning (the resume grain of planning)
PLAN_BATCH = int(os.environ.get("BINLAKE_PLAN_BATCH", "500"))


def plan(cfg: Config, ctx: Context | None = None, on_batch: Callable[[str], None] | None = None) -> None:
    """Plan every captured table into the split state, resuming a half-planned table.

    Splits are stored in batches of whole groups (about PLAN_BATCH splits), so planning holds one
    batch in memory and a crash resumes after the last stored batch. `on_batch(table)` runs after
    each stored batch: `run` reads the batch's groups there, while the rest is still to be planned.
    """
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    state = split_state
    state.ensure(spark, ctx.target.split_state)
    numbers, last = state.planned(spark, ctx.target.split_state)
    group_size = int(cfg.get("snapshot.group-size"))
    ctx.lineage()  # before any chunk's high watermark is taken
    conn = connect(ctx.params)
    try:
        for name, schema in ctx.schemas().items():
            bronze.ensure_table(spark, ctx.target.bronze(name).location, schema)
            silver.ensure_table(spark, ctx.target.silver(name).location, schema)
            tail = last.get(name)
            if tail is not None and tail.end is None:
                continue  # fully planned
            table_no = numbers.get(name, max(numbers.values(), default=0) + 1)
            numbers[name] = table_no
            index = 0 if tail is None else tail.index + 1
            if tail is not None:
                log.info("planning %s resumes at chunk %d, after the %d chunks stored", name, index, index)
            began, reading = time.monotonic(), 0.0
            # Reads interleave only over the rows the table had when planning began: past them,
            # rows inserted meanwhile would have planning chase them at reading speed forever;
            # planned at query speed instead, they end in the open last split, cut again when read.
            interleave_until = table_rows(conn, schema, cfg.chunk_size)
            batch: list[Split] = []
            for start, end in plan_ranges(conn, schema, cfg.chunk_size, None if tail is None else tail.end):
                batch.append(Split(name, table_no, index, start, end, group_size))
                index += 1
                # a batch ends on a group boundary, so every group it holds is complete and readable
                if len(batch) >= PLAN_BATCH and index % group_size == 0:
                    state.add_planned(spark, ctx.target.split_state, batch)
                    faults.point("mid_plan", name)
                    batch = []
                    if on_batch is not None and index * cfg.chunk_size <= interleave_until:
                        t = time.monotonic()
                        on_batch(name)
                        reading += time.monotonic() - t
            state.add_planned(spark, ctx.target.split_state, batch)
            log.info("planned %s: %d splits in %.1fs (and %.1fs reading chunks meanwhile)", name, index,
                     time.monotonic() - began - reading, reading)
            if on_batch is not None:
                on_batch(name)
    finally:
        conn.close()


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

