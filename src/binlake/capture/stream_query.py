"""The binlog stream as a Structured Streaming query: `binlake_binlog` -> foreachBatch -> bronze +
silver (`binlake.capture.micro_batch`). Offsets are binlog positions and live in the checkpoint
(`binlake.lake.checkpoint`); the query runs until caught up with the head at its start, or until
stopped (`binlake.stop`).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from binlake import stop
from binlake.capture import metrics, side_snapshot, side_state
from binlake.capture.context import Context, current_position
from binlake.capture.failover import GtidRecord, state_at
from binlake.capture.heartbeat import Heartbeat
from binlake.capture.micro_batch import MicroBatch
from binlake.capture.stream_loop import StreamLoop
from binlake.capture.startup import SNAPSHOT_MODES, Start, resolve
from binlake.errors import ConfigError, PositionGoneError, RuntimeFailure, raised_in_spark
from binlake.lake import arrow_commit, bronze, silver, split_state
from binlake.lake.checkpoint import committed_end, committed_offset, stream_id
from binlake.lake.evolution import Version
from binlake.offsets import BinlogPosition
from binlake.source.connection import connect
from binlake.source.dialect import Dialect
from binlake.splits import Split

log = logging.getLogger(__name__)

# the name of the observed metrics in the streaming query's progress
PROGRESS_METRICS = "binlake"


def binlog_job(ctx: Context, schemas: dict[str, Any], splits: dict[str, Any], start: BinlogPosition,
               until: BinlogPosition | None = None, since: int | None = None,
               applied: dict[str, int] | None = None, patterns: list[str] | None = None,
               versions: dict[str, list[Version]] | None = None, gtid_trailer: bool = False,
               gtid_offsets: bool = False, signal_table: str | None = None) -> dict[str, Any]:
    """The `job` option of the binlake_binlog source (everything but the password); with `until`, the
    source offers nothing past that position; with `patterns` (source.tables), a table that comes to
    match them stops the batch that meets it (NewTableError), for the caller to capture it; with
    `versions` (each table's schema versions), the source follows schema changes under
    stream.schema-changes, and without them stops at any (`fail`); with `gtid_trailer`, each batch ends
    with a row of the GTIDs it passed (`_op` 'g', for binlake.capture.failover); with `gtid_offsets`, each
    offset carries the GTID state at its position instead, and the source fails over by it (the
    Lakeflow pipeline, whose stream has no driver code of binlake's to keep a record); with `signal_table`,
    the rows inserted there come as the batch's signals (binlake.capture.signals)."""
    return {
        "schema_changes": "fail" if versions is None else ctx.cfg.get("stream.schema-changes"),
        "versions": {n: [v.to_dict() for v in vs] for n, vs in (versions or {}).items()},
        "until": None if until is None else until.to_dict(),
        "connection": ctx.public_params(),
        "schemas": {n: s.to_dict() for n, s in schemas.items()},
        "splits": {n: [s.to_dict() for s in ss] for n, ss in splits.items()},
        "server_id": ctx.cfg.server_ids.pick(0),
        "start": start.to_dict(),
        "since": since,
        "applied": applied,
        "patterns": patterns,
        "reconnect_timeout": int(ctx.cfg.get("source.reconnect-timeout")),
        "lineage": ctx.lineage().to_dict(),
        "failover": ctx.lineage().failover,
        "gtid_trailer": gtid_trailer,
        "gtid_offsets": gtid_offsets,
        "signal_table": signal_table,
    }


def run_stream(ctx: Context, until_caught_up: bool) -> None:
    """Stream the binlog into bronze and silver from where the snapshot (or the startup mode) left it;
    with `until_caught_up`, until the head the server had when it began."""
    spark = ctx.session()
    schemas = ctx.schemas()
    splits = _snapshot_splits(ctx)
    for name, schema in schemas.items():
        bronze.ensure_table(spark, ctx.target.bronze(name).location, schema)
        silver.ensure_table(spark, ctx.target.silver(name).location, schema, ctx.shape)
    start, since, applied = _start(ctx, splits)
    checkpoint = ctx.target.checkpoint
    app = stream_id(ctx.target.checkpoint_files)
    target = ctx.retrying("asking for the binlog head", lambda: current_position(ctx)) if until_caught_up else None
    history = ctx.versions()

    handed = {**splits, **side_snapshot.handover_splits(ctx)}

    def job(until: BinlogPosition | None) -> dict[str, Any]:
        return binlog_job(ctx, schemas, handed, start, until, since, applied, ctx.cfg.tables,
                          None if ctx.cfg.get("stream.schema-changes") == "fail" else history, gtid_trailer=True,
                          signal_table=ctx.cfg.get("source.signal-table"))

    each_batch = MicroBatch(ctx, history, app, _gtid_record(ctx, start))
    metrics.streaming(list(schemas), ctx.target.stream_progress)
    if not arrow_commit.local(checkpoint):  # a lake behind a URI: Spark's query alone
        _drive(ctx, _query(ctx, job(target), each_batch), start, target)
        return
    loop = StreamLoop(ctx, job(target), each_batch, start)
    while True:
        with stop.between_batches(lambda: f"stopped at {committed_offset(ctx.target.checkpoint_files) or start}"):
            large = loop.run(target, float(ctx.cfg.get("stream.trigger-seconds")))
        if large is None:
            return
        # a batch too large to hold here, planned in the checkpoint: Spark's query replays it
        until = BinlogPosition.from_dict(large)
        _drive(ctx, _query(ctx, job(until), each_batch), start, until)


def _query(ctx: Context, job: dict[str, Any], each_batch: MicroBatch) -> Any:
    """Spark's streaming query of `job`, its batches landed by `each_batch`, not started."""
    reader = (ctx.session().readStream.format("binlake_binlog").option("job", json.dumps(job))
              .option("password", ctx.params["password"]).load())
    # Spark's own progress reports (query.lastProgress, StreamingQueryListener) carry the binlog
    # position as each batch's endOffset, and these metrics: changes read and the newest event time,
    # from which a monitor computes seconds behind the source
    reader = reader.observe(PROGRESS_METRICS, F.count_if(F.col("_op") != "g").alias("changes"),
                            F.max("_ts").alias("last_event_ts"), F.min("_ts").alias("first_event_ts"))
    return reader.writeStream.foreachBatch(each_batch).option("checkpointLocation", ctx.target.checkpoint)


def _snapshot_splits(ctx: Context) -> dict[str, list[Split]]:
    """The captured tables' chunks, whose high watermarks the stream hands over at (none in a mode
    without a snapshot); a table not snapshotted yet, or chunks not read yet, stop the stream."""
    mode = ctx.cfg.get("stream.startup-mode")
    if mode == "snapshot":
        raise ConfigError("stream.startup-mode is 'snapshot', which stops after the snapshot; binlake stream needs "
                          "another mode: use binlake run (or binlake snapshot), or set stream.startup-mode")
    if mode not in SNAPSHOT_MODES:
        return {}
    schemas = ctx.schemas()
    splits = split_state.load(ctx.session(), ctx.target.split_state, ctx.cfg.get("snapshot.group-size"),
                              list(schemas))
    beside = side_state.states(ctx.target.side_snapshots)
    unplanned = [n for n in schemas if not splits.get(n) and n not in beside]
    if unplanned and (any(splits.values()) or committed_offset(ctx.target.checkpoint_files) is not None):
        # the stream has a place to start from: tables new to it are snapshotted beside it
        unplanned = side_snapshot.adopt(ctx, unplanned)
    if unplanned:
        raise RuntimeFailure(f"{', '.join(unplanned)} matches source.tables but has no snapshot yet; the stream "
                             "starts after a table's snapshot: run binlake run (or binlake snapshot)")
    pending = sum(1 for ss in splits.values() for s in ss if s.status != "done")
    if pending:
        raise RuntimeFailure(f"{pending} snapshot chunks are not read into bronze and silver yet; the stream starts "
                             "after the snapshot: run binlake snapshot (or binlake run)")
    return splits


def _start(ctx: Context, splits: dict[str, list[Split]]) -> tuple[BinlogPosition, int | None, Any]:
    """Where the stream begins, with the changes there it passes over (a startup mode's timestamp, and
    the GTIDs it names as had): after a snapshot, its lowest high watermark."""
    if ctx.cfg.get("stream.startup-mode") in SNAPSHOT_MODES:
        hws = [s.hw for ss in splits.values() for s in ss if s.hw is not None]
        return (min(hws) if hws else ctx.retrying("asking for the binlog head", lambda: current_position(ctx))), None, None
    chosen = ctx.retrying("resolving the startup position", lambda: _startup(ctx))
    return chosen.position, chosen.since, chosen.applied


def _drive(ctx: Context, writer: Any, start: BinlogPosition, target: BinlogPosition | None) -> None:
    """Start the query and wait: until a batch ending at `target` has committed, or until stopped."""
    checkpoint = ctx.target.checkpoint_files

    def stopped_at() -> str:
        return f"stopped at {committed_offset(checkpoint) or start}"

    with stop.between_batches(stopped_at):
        if target is not None:
            # Not Trigger.AvailableNow: after a crash it replays the pending batch and stops there.
            # The source offers nothing past `target` (the head now), so once a batch ending there is
            # committed no other batch can start, and stopping cannot cut one short.
            query = writer.trigger(processingTime="0 seconds").start()
            while query.isActive and not stop.asked():
                done = committed_offset(checkpoint)
                if (done is not None and done >= target) or start >= target:
                    break
                _await(query, 0.2)
                metrics.looked(query)
        else:
            query = writer.trigger(processingTime=f"{int(ctx.cfg.get('stream.trigger-seconds'))} seconds").start()
            heartbeat = Heartbeat(ctx.target.stream_progress, float(ctx.cfg.get("stream.heartbeat-seconds")))
            while query.isActive and not stop.asked():
                _await(query, 1)
                metrics.looked(query)
                _beat(query, heartbeat, lambda: committed_end(checkpoint) or start.to_dict())
        if stop.asked():
            _stop_between_batches(query)
            raise stop.stopped()
        if query.isActive:  # caught up: no batch can start past `target`, so none is cut short
            query.stop()
        _await(query)


def _beat(query: Any, heartbeat: Heartbeat, position: Any) -> None:
    """The heartbeat of Spark's query (binlake.capture.heartbeat): caught up when its last trigger
    found no data and none runs now."""
    try:
        status = query.status
    except Exception:  # noqa: BLE001 - the query ending under us: its end says so
        return
    if str(status.get("message", "")).startswith("Initializing") or status.get("isTriggerActive"):
        return
    heartbeat.beat(position(), caught_up=not status.get("isDataAvailable"))


def _gtid_record(ctx: Context, start: BinlogPosition) -> GtidRecord:
    """The GTID record (binlake.capture.failover), holding the state at the position the stream reads on from:
    read from the server when it does not (the stream's first start, or a target from before it)."""
    record = GtidRecord(ctx.target.gtid_record)
    position = committed_offset(ctx.target.checkpoint_files) or start
    if record.at(position) is None and position.epoch == ctx.lineage().epoch:
        def read() -> tuple[str, bool]:
            conn = connect(ctx.params)
            try:
                return state_at(conn, Dialect.of(conn), position)
            finally:
                conn.close()

        record.put(position, *ctx.retrying("reading the GTID state", read))
    return record


def _startup(ctx: Context) -> Start:
    conn = connect(ctx.params)
    try:
        return resolve(ctx.cfg, conn, ctx.dialect, ctx.target.stream_start)
    finally:
        conn.close()


def _stop_between_batches(query: Any) -> None:
    """Stop once no micro-batch runs: an idle stream at once, a busy one when the next batch begins
    (MicroBatch refuses it)."""
    if query.isActive:
        while query.isActive and query.status.get("isTriggerActive"):
            time.sleep(0.05)
        query.stop()
    _await(query)


def _await(query: Any, timeout: float | None = None) -> None:
    """Wait for the query to end (or `timeout` seconds); a failure becomes one line: the binlake error a
    reader raised, else the first cause, never a JVM trace."""
    try:
        if timeout is None:
            query.awaitTermination()
        else:
            query.awaitTermination(timeout)
    except StreamingQueryException as exc:
        if stop.asked():  # the stop reached Spark too (systemd stops every process of a service)
            raise stop.stopped() from None
        raised = raised_in_spark(exc)
        if raised is not None:
            raise raised from None
        lines = str(exc).splitlines()
        gone = next((ln for ln in lines if "has been purged from the server" in ln), None)
        if gone is not None:
            raise PositionGoneError(gone[gone.index("binlog file"):].strip()) from None
        cause = next((ln.strip() for ln in lines if "Error" in ln or "binlake" in ln), str(exc)[:300])
        raise RuntimeFailure(f"stream failed: {cause[:500]}") from None

