"""One micro-batch of the binlog stream landed: each table's changes appended to its bronze, then
applied to its silver (the batches the driver reads, `binlake.capture.stream_loop`, and Spark's
query's `foreachBatch`).

Bronze grows in binlog order, a batch at a time, so a batch replayed after a crash lands only its
changes past the newest one bronze held when the query began (none, if it landed whole). Silver's
MERGE is idempotent by `_seq` (a batch of inserts bronze held none of is a plain append: see
`binlake.lake.silver.apply`). A batch that changes a table's schema lands with Delta's
idempotent-write options (txnAppId, txnVersion = the batch id; see `binlake.lake.evolve`).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyspark.sql import functions as F

from binlake import faults, stop
from binlake.capture import metrics, signals
from binlake.capture.batch_in_hand import CachedBatch
from binlake.capture.context import Context
from binlake.capture.failover import GtidRecord
from binlake.errors import RuntimeFailure
from binlake.lake import arrow_commit, bronze, silver
from binlake.lake.checkpoint import write_progress
from binlake.lake.evolution import Version
from binlake.lake.compaction import Compaction
from binlake.lake.evolve import apply_batch
from binlake.lake.key_index import KeyIndex
from binlake.lake.marked_merge import apply_marked
from binlake.schema import TableSchema

log = logging.getLogger(__name__)


class MicroBatch:
    """Lands a batch of `binlake_binlog` change rows in bronze and silver: Spark's query's
    `foreachBatch`, and `land_batch` for the batches the driver reads."""

    def __init__(self, ctx: Context, history: dict[str, list[Version]], app: str, gtids: GtidRecord) -> None:
        self.ctx = ctx
        self.history = history  # each table's schema versions, as the batches record new ones
        self.policy = ctx.cfg.get("stream.schema-changes")
        self.app = app  # the stream's id (binlake.lake.checkpoint.stream_id)
        self.gtids = gtids
        # per table: the newest binlog change bronze held before this run appended any (see silver.apply);
        # none in a bronze this process's snapshot created
        self.held: dict[str, Any] = dict.fromkeys(ctx.take_changeless())
        self.indexes: dict[str, KeyIndex] = {}  # per table: where silver's keys live, for marked batches
        self.compaction = Compaction.of(ctx.cfg, ctx.target)

    def __call__(self, whole: Any, batch_id: int) -> None:
        if stop.asked():
            # Asked while Spark planned this batch: it is read again by the next run. A busy stream
            # starts each batch as the last ends, so waiting for a moment between them may wait long.
            raise RuntimeFailure("stopped before this micro-batch")
        began = time.monotonic()
        self.land_batch(CachedBatch(whole), batch_id, began)

    def land_batch(self, batch: Any, batch_id: int, began: float | None = None) -> None:
        """Land `batch` (a `HeldBatch` or `CachedBatch`) as micro-batch `batch_id`, begun at `began`
        (time.monotonic; now by default)."""
        began = time.monotonic() if began is None else began
        try:
            seen, trailers = batch.figures()
            read_s = time.monotonic() - began

            def land(row: Any) -> tuple[float, float]:
                took = self.land(batch, row, batch_id)
                self.compact(row["_table"])
                return took

            # Tables are independent (each its own bronze and silver, each write idempotent), so a
            # batch lands several at once: a Delta commit keeps the driver busy in short bursts, and
            # the batch takes about as long as its slowest tables, not their sum.
            workers = min(len(seen), self.ctx.tables_at_once)
            if workers < 2:
                times = [land(row) for row in seen]
            else:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    times = list(pool.map(land, seen))
            bronze_s, silver_s = sum(b for b, _ in times), sum(s for _, s in times)
            for trailer in map(json.loads, trailers):  # before the batch commits
                if "signal" in trailer:
                    signals.note(self.ctx.target.signals, trailer["signal"], int(trailer["seq"]))
                else:
                    self.gtids.advance(trailer)
            changes = {r["_table"]: int(r["n"]) - int(r["marks"]) for r in seen}  # not the schema marks
            write_progress(self.ctx.target.stream_progress, batch_id,
                           {r["_table"]: (changes[r["_table"]], r["ts"]) for r in seen}, began)
            metrics.batch(changes, began)
            log.info("batch %d: %s (binlog read %.3fs, bronze %.3fs, silver %.3fs)", batch_id,
                     {r["_table"]: int(r["n"]) for r in seen}, read_s, bronze_s, silver_s)
            faults.point("after_batch", str(batch_id))
        finally:
            batch.release()

    def land(self, batch: Any, row: Any, batch_id: int) -> tuple[float, float]:
        """One table's share of the batch into its bronze, then its silver: (bronze s, silver s)."""
        ctx, name = self.ctx, row["_table"]
        b = ctx.target.bronze(name).location
        t = time.monotonic()
        # under lenient and ignore, silver's columns differ from the source's once it changed
        if row["marks"] or (self.policy in ("lenient", "ignore") and len(self.history[name]) > 1):
            self.evolving(name, batch.frame(name), f"binlake-stream-{self.app}-{name}", batch_id, row["oldest"])
            return time.monotonic() - t, 0.0
        schema = self.history[name][-1].schema
        spark = ctx.session()
        if name not in self.held:
            self.held[name] = bronze.newest_change(spark, b)
        # Bronze takes a batch whole or not at all, in binlog order, so it holds every change up
        # to `held`: a batch reaching back to it (the replay of one a crash cut short, or a new
        # checkpoint over an old bronze) lands only what is past it, and any other is new
        held = self.held[name]
        replay = held is not None and held >= row["oldest"]
        if not replay and (took := self.land_arrow(schema, batch, row)) is not None:
            return took
        # bronze and silver each type the table's rows again from the batch's: casts by position,
        # cheaper than caching the typed rows (on 500,000 changes, bronze 6.8 s instead of 11)
        typed = bronze.typed(batch.frame(name), schema)
        bronze.append_batch(typed.where(F.col("_seq") > F.lit(held)) if replay else typed, b)
        # silver only after bronze has committed: a plain append to silver counts on it
        faults.point("mid_stream", name)
        bronze_s = time.monotonic() - t
        t = time.monotonic()
        silver.apply(spark, schema, typed, ctx.target.silver(name).location, b, oldest=row["oldest"],
                     bronze_may_be_newer=replay, inserts_only=not row["others"], shape=ctx.shape)
        return bronze_s, time.monotonic() - t

    def land_arrow(self, schema: TableSchema, batch: Any, row: Any) -> tuple[float, float] | None:
        """A table's changes (no replay) committed to bronze, then silver, by delta-rs
        (`binlake.lake.arrow_commit`): (bronze s, silver s); None, with nothing written, when Spark
        is to write them."""
        name = schema.name
        b, s = self.ctx.target.bronze(name).location, self.ctx.target.silver(name).location
        # every version (SCD type 2) is a Spark MERGE: its ends come from a window over the key's history
        # and a row filter is evaluated by Spark (binlake.lake.row_filter)
        if schema.multiset or self.ctx.shape.versions or schema.row_filter \
                or not arrow_commit.usable(b, schema.names, int(row["n"]), int(row["size"] or 0), stream=True):
            return None
        silver_names = silver.struct(schema, self.ctx.shape).fieldNames()
        if not (arrow_commit.takes(b, bronze.struct(schema).fieldNames())
                and arrow_commit.takes(s, silver_names)):
            return None
        t = time.monotonic()
        changes = batch.typed(name, schema)
        arrow_commit.add_file(b, changes)
        faults.point("mid_stream", name)
        bronze_s = time.monotonic() - t
        shape = self.ctx.shape
        marked = row["others"] and not shape.soft and apply_marked(s, schema, changes, self.index(schema))
        if not marked:  # opened only now: `takes` said delta-rs writes it
            silver.apply_arrow(arrow_commit.writable(s, silver_names), schema, changes,
                               inserts_only=not row["others"], shape=shape)
        return bronze_s, time.monotonic() - t - bronze_s

    def compact(self, name: str) -> None:
        """A compaction step of the table's bronze and silver, when one is due (binlake.lake.compaction),
        in the thread that landed its share of the batch: no other writes the table meanwhile."""
        schema = self.history[name][-1].schema
        for side, step in self.compaction.after_batch(schema, self.index(schema)).items():
            metrics.compacted(name, side, step.at)
        for side in ("bronze", "silver"):
            if (name, side) in self.compaction.live:
                metrics.live_files(name, side, *self.compaction.live[(name, side)])

    def index(self, schema: TableSchema) -> KeyIndex | None:
        """The key index of `schema`'s silver table (binlake.lake.key_index), kept from batch to batch
        while its key stays the same; None for a key of more than one column."""
        if len(schema.key) != 1:
            return None
        held = self.indexes.get(schema.name)
        if held is None or held.key != schema.key[0]:
            held = self.indexes[schema.name] = KeyIndex(schema.key[0])
        return held

    def evolving(self, name: str, rows: Any, app_id: str, batch_id: int, oldest: Any) -> None:
        """A batch whose rows span schema versions, or of a table silver no longer matches column for
        column. The versions it marks are recorded before anything is written: a replay reuses them."""
        ctx, history = self.ctx, self.history
        marks = rows.where(F.col("_op") == "s").orderBy("_seq").select("_row").collect()
        new = [Version.from_dict(json.loads(m["_row"])) for m in marks]
        if new:
            ctx.history(name).record(new)
            history[name] = ctx.history(name).versions()
            for v in new:
                log.warning("%s: schema %s at binlog %s%s", name, "truncated" if v.kind == "truncate" else "changed",
                            v.at, f" (renamed {v.renames})" if v.renames else "")
        apply_batch(ctx.session(), rows, history[name], new, self.policy, ctx.target.bronze(name).location,
                    ctx.target.silver(name).location, app_id, batch_id, oldest, ctx.cfg.get("target.type-changes"),
                    ctx.shape)
