"""The binlog stream on a local lake, driven by binlake in the driver: the `binlake_binlog` source's
own reader (`binlake.capture.binlog_batches.BinlogReader`) asked for offsets and rows directly, each
micro-batch landed from Arrow (`binlake.capture.micro_batch`), with Spark's checkpoint kept in
Spark's own format (`binlake.lake.checkpoint`), so that either resumes the other.

Why not Spark's query here: on 2 cores, the 500,000-change burst of `make bench` spent about 8 s
before its first batch (the Python data source's schema lookup, the streaming source's runner and
the read task's worker, each a Python process importing binlake) and about half its 8-11 s binlog
read handing Arrow batches to the JVM, caching and counting them, then back to Python for delta-rs.
Read here, the rows go from the decoder to Arrow to delta-rs without leaving the process.

The protocol is Spark's micro-batch protocol: a batch's end offset (the server's head, at a
transaction boundary) is written to the offset log before anything is read; the batch is read and
landed; then it is written to the commit log and the reader told (`commit`). A batch planned and not
committed (a run cut short) is read again with the same offsets, as Spark replays it.

A batch too large to hold in the driver (more than `HELD_BYTES` of binlog; a backlog after a long
stop), or one reaching onto another server (a failover, whose bytes the first server cannot tell),
is planned, then left to Spark's query, which replays it from the checkpoint as it would after a
crash, caching and spilling it to disk; the loop goes on after it. A lake behind a URI (a cluster,
object storage) streams with Spark's query alone.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from typing import Any

import pyarrow as pa

from binlake import stop
from binlake.capture import metrics
from binlake.capture.batch_in_hand import HeldBatch
from binlake.capture.binlog_batches import BinlogRange, BinlogReader
from binlake.capture.heartbeat import Heartbeat
from binlake.capture.context import Context, current_position
from binlake.capture.micro_batch import MicroBatch
from binlake.capture.side_snapshot import SideSnapshots
from binlake.errors import BinlakeError, RuntimeFailure
from binlake.lake import checkpoint
from binlake.lake.retention import Retention
from binlake.offsets import BinlogPosition
from binlake.source.connection import connect
from binlake.source.dialect import binlog_bytes

log = logging.getLogger(__name__)

# the most binlog a batch read here spans: its rows take a few times its bytes in the driver (the
# bench's burst, 99 MB of binlog for 500,000 changes, peaked at about 1.4 GB of Python); 0 leaves
# every batch with changes to Spark's query
HELD_BYTES = int(os.environ.get("BINLAKE_STREAM_HELD_BYTES", str(128 * 1024 * 1024)))


class StreamLoop:
    """The stream's micro-batches from `start` (the query's start, as Spark's `initialOffset`)."""

    def __init__(self, ctx: Context, job: dict[str, Any], each_batch: MicroBatch, start: BinlogPosition) -> None:
        self.ctx, self.each_batch, self.start = ctx, each_batch, start
        self.reader = BinlogReader({"job": json.dumps(job), "password": ctx.params["password"]})
        self.reader.keeps = True  # each batch is read right after it is planned, here
        self.files = ctx.target.checkpoint_files
        self.heartbeat = Heartbeat(ctx.target.stream_progress, float(ctx.cfg.get("stream.heartbeat-seconds")))
        self.retention = Retention.of(ctx.cfg, ctx.target, list(ctx.schemas()))
        self.side = SideSnapshots(ctx, lambda name: each_batch.history[name][-1].schema, each_batch.index)

    def run(self, target: BinlogPosition | None, every: float) -> dict[str, Any] | None:
        """Land batches until one ending at `target` has committed (None: until stopped) and no snapshot
        beside the stream runs, a batch starting every `every` seconds at most. The end offset of a batch
        too large to hold, planned and left for Spark's query to replay, or None when done."""
        batch_id, begin, planned = checkpoint.pending(self.files)
        if begin is None:
            begin = self.start.to_dict()
        elif planned is None:
            self.reader.commit(begin)  # as Spark tells a restarted source where it stands
        log.info("streaming from %s in the driver, batch %d", BinlogPosition.from_dict(begin), batch_id)
        while not stop.asked():
            if target is not None and batch_id > 0 and BinlogPosition.from_dict(begin) >= target:
                if not self._guarded(lambda: self.side.step(BinlogPosition.from_dict(begin))):
                    return None
                # a snapshot beside the stream runs: its chunks land once the stream has passed their high
                # watermarks, so the stream goes on to the head of now, until the snapshot is done
                target = self._guarded(lambda: self.ctx.retrying("asking for the binlog head",
                                                                  lambda: current_position(self.ctx)))
                self.reader.job["until"] = target.to_dict()
            began = time.monotonic()
            end = planned if planned is not None else self._guarded(lambda: self.reader.latestOffset(begin))
            found = BinlogPosition.from_dict(end) > BinlogPosition.from_dict(begin)
            metrics.found(found)
            # a checkpoint's first batch is committed even when empty, as Spark's query runs its batch 0:
            # the checkpoint then holds where the stream stands from the start, on a quiet source too; and
            # so is a batch planned empty (by Spark's query, stopped before its commit), as Spark would
            # replay it: else it would stay planned, and the stream never pass it
            if found or batch_id == 0 or planned is not None:
                if planned is None:
                    checkpoint.plan_batch(self.files, batch_id, end, lambda: checkpoint.query_conf(self.ctx.session()))
                if found and not self._holdable(begin, end):
                    log.info("batch %d spans more binlog than the driver holds: Spark's query reads it", batch_id)
                    return end
                landed = found and self._guarded(lambda: self._land(batch_id, begin, end, began))
                checkpoint.commit_batch(self.files, batch_id)
                self.reader.commit(end)
                batch_id, begin, planned = batch_id + 1, end, None
                if not landed:  # nothing to land, or the binlog moved in tables binlake does not capture
                    self.heartbeat.beat(begin, caught_up=not found)
            else:
                self.heartbeat.beat(begin, caught_up=True)
            self._clean()
            # a snapshot beside the stream lands its chunks between batches: looked at again soon
            beside = self._guarded(lambda: self.side.step(BinlogPosition.from_dict(begin)))
            if target is None or not found:
                wait = max(0.0, every - (time.monotonic() - began)) if target is None else 0.2
                _pause(min(wait, 0.1) if beside else wait)
        raise stop.stopped()

    def _land(self, batch_id: int, begin: dict[str, Any], end: dict[str, Any], began: float) -> bool:
        """Read and land the batch; whether it held any row to land."""
        batches = list(self.reader.read(BinlogRange(begin, end)))
        if batches:
            self.each_batch.land_batch(HeldBatch(pa.Table.from_batches(batches), self.ctx.session), batch_id, began)
        return bool(batches)

    def _clean(self) -> None:
        """One table's retention pass between two batches, when one is due (binlake.lake.retention)."""
        self.retention.sources = list(self.ctx.schemas())
        done = self.retention.run_one()
        if done is not None and done.waiting_bytes is not None:
            metrics.waiting(done.location, done.waiting_bytes)

    def _holdable(self, begin: dict[str, Any], end: dict[str, Any]) -> bool:
        """Whether the batch from `begin` to `end` spans at most HELD_BYTES of one server's binlog."""
        a, b = BinlogPosition.from_dict(begin), BinlogPosition.from_dict(end)
        if a.epoch != b.epoch:
            return False
        if a.file == b.file:
            return b.pos - a.pos <= HELD_BYTES

        def span() -> int | None:
            conn = connect(self.ctx.params)
            try:
                return binlog_bytes(conn, a, b)
            finally:
                conn.close()

        spanned = self.ctx.retrying("measuring the binlog", span)
        return spanned is not None and spanned <= HELD_BYTES

    def _guarded(self, call: Any) -> Any:
        """`call()`, an error other than binlake's one line, as Spark's query would end with it; the
        trace of either goes to the run's log (`Target.spark_log`), where Spark's query leaves its own."""
        try:
            return call()
        except BinlakeError as exc:
            self._trace(exc)
            raise
        except Exception as exc:  # noqa: BLE001 - one line, not a trace
            self._trace(exc)
            cause = " ".join(str(exc).split())[:400]
            raise RuntimeFailure(f"stream failed: {type(exc).__name__}: {cause}") from exc

    def _trace(self, exc: BaseException) -> None:
        try:
            with open(self.ctx.target.spark_log, "a") as out:
                out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR binlake stream: "
                          + "".join(traceback.format_exception(exc)))
        except OSError:  # the log is a help, never a second failure
            pass


def _pause(seconds: float) -> None:
    """Wait `seconds`, or until a stop is asked."""
    until = time.monotonic() + seconds
    while not stop.asked() and time.monotonic() < until:
        time.sleep(min(0.1, max(0.0, until - time.monotonic())))
