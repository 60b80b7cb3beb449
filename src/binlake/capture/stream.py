"""The binlog stream as a Structured Streaming query: binlake_binlog -> foreachBatch -> bronze + silver.

Each micro-batch appends to bronze what bronze does not hold yet: bronze grows in binlog order, a
batch at a time, so a batch replayed after a crash lands only its changes past the newest one bronze
held when the query began (none, if it landed whole). It then MERGEs into silver, which is
idempotent by `_seq` (a batch of inserts bronze held none of is a plain append: see silver.apply).
A batch that changes a table's schema lands with Delta's idempotent-write options (txnAppId,
txnVersion = the batch id; see spark.evolve). Offsets live in the checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from binlake.lake import bronze, silver
from binlake import faults, stop
from binlake.errors import ConfigError, PositionGoneError, RuntimeFailure, raised_in_spark
from binlake.lake.evolution import Version
from binlake.offsets import BinlogPosition
from binlake.source.identity import Anchor, Lineage
from binlake.capture.startup import SNAPSHOT_MODES, Start

if TYPE_CHECKING:
    from binlake.capture.pipeline import Context

log = logging.getLogger(__name__)

# the name of the observed metrics in the streaming query's progress
PROGRESS_METRICS = "binlake"


def stream_id(checkpoint: str) -> str:
    """A stable id for this checkpoint: the idempotent-append key must change if the checkpoint does,
    or a fresh stream's batch ids 0, 1, ... would be skipped as already written."""
    path = Path(checkpoint)
    path.mkdir(parents=True, exist_ok=True)
    f = path / "binlake-stream-id"
    if not f.exists():
        f.write_text(uuid.uuid4().hex)
    return f.read_text().strip()


def committed_end(checkpoint: str) -> dict[str, Any] | None:
    """The end offset of the last committed micro-batch in the checkpoint, as stored: the position
    and its file's creation time (see binlake.source.identity)."""
    commits = Path(checkpoint) / "commits"
    offsets = Path(checkpoint) / "offsets"
    if not commits.is_dir():
        return None
    done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    for n in done:
        f = offsets / str(n)
        if f.exists():
            return dict(json.loads(f.read_text().strip().splitlines()[-1]))
    return None


def committed_offset(checkpoint: str) -> BinlogPosition | None:
    """The end position of the last committed micro-batch in the checkpoint, if any."""
    end = committed_end(checkpoint)
    return None if end is None else BinlogPosition.from_dict(end)


def resume_position(ctx: Context) -> BinlogPosition | None:
    """Where the stream will read from next: the end of its last committed micro-batch, or, before
    the first one, the lowest high watermark of the snapshot's chunks."""
    from binlake.lake import split_state as state

    done = committed_offset(ctx.target.checkpoint)
    if done is not None:
        return done
    if ctx.cfg.get("stream.startup-mode") not in SNAPSHOT_MODES:
        stored = ctx.target.stream_start
        return Start.from_dict(json.loads(stored.read_text())).position if stored.exists() else None
    splits = state.load(ctx.session(), ctx.target.split_state, ctx.cfg.get("snapshot.group-size"),
                        list(ctx.schemas()))
    return min((s.hw for ss in splits.values() for s in ss if s.hw is not None), default=None)


def resume_anchor(ctx: Context, lineage: Lineage) -> Anchor | None:
    """`resume_position` with what identifies its history."""
    end = committed_end(ctx.target.checkpoint)
    if end is not None:
        return lineage.anchor(BinlogPosition.from_dict(end), end.get("created"))
    position = resume_position(ctx)
    return None if position is None else lineage.anchor(position)


def binlog_job(ctx: Context, schemas: dict[str, Any], splits: dict[str, Any], start: BinlogPosition,
               until: BinlogPosition | None = None, since: int | None = None,
               applied: dict[str, int] | None = None, patterns: list[str] | None = None,
               versions: dict[str, list[Version]] | None = None, gtid_trailer: bool = False,
               gtid_offsets: bool = False) -> dict[str, Any]:
    """The `job` option of the binlake_binlog source (everything but the password); with `until`, the
    source offers nothing past that position; with `patterns` (source.tables), a table that comes to
    match them stops the batch that meets it (NewTableError), for the caller to capture it; with
    `versions` (each table's schema versions), the source follows schema changes under
    stream.schema-changes, and without them stops at any (`fail`); with `gtid_trailer`, each batch ends
    with a row of the GTIDs it passed (`_op` 'g', for binlake.capture.failover); with `gtid_offsets`, each
    offset carries the GTID state at its position instead, and the source fails over by it (the
    Lakeflow pipeline, whose stream has no driver code of binlake's to keep a record)."""
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
    }


def run_stream(ctx: Context, until_caught_up: bool) -> None:
    from pyspark.sql import functions as F

    from binlake.capture.pipeline import current_position
    from binlake.lake import split_state as state

    spark = ctx.session()
    schemas = ctx.schemas()
    mode = ctx.cfg.get("stream.startup-mode")
    if mode == "snapshot":
        raise ConfigError("stream.startup-mode is 'snapshot', which stops after the snapshot; binlake stream needs "
                          "another mode: use binlake run (or binlake snapshot), or set stream.startup-mode")
    from_snapshot = mode in SNAPSHOT_MODES
    splits = (state.load(spark, ctx.target.split_state, ctx.cfg.get("snapshot.group-size"), list(schemas))
              if from_snapshot else {})
    unplanned = [n for n in schemas if from_snapshot and not splits.get(n)]
    if unplanned:
        raise RuntimeFailure(f"{', '.join(unplanned)} matches source.tables but has no snapshot yet; the stream "
                             "starts after a table's snapshot: run binlake run (or binlake snapshot)")
    pending = sum(1 for ss in splits.values() for s in ss if s.status != "done")
    if pending:
        raise RuntimeFailure(f"{pending} snapshot chunks are not read into bronze and silver yet; the stream starts "
                             "after the snapshot: run binlake snapshot (or binlake run)")
    for name, schema in schemas.items():
        bronze.ensure_table(spark, ctx.target.bronze(name).location, schema)
        silver.ensure_table(spark, ctx.target.silver(name).location, schema)
    hws = [s.hw for ss in splits.values() for s in ss if s.hw is not None]
    since, applied = None, None
    if from_snapshot:
        start = min(hws) if hws else current_position(ctx)
    else:
        chosen = _startup(ctx)
        start, since, applied = chosen.position, chosen.since, chosen.applied
    checkpoint = ctx.target.checkpoint
    app = stream_id(checkpoint)
    target = current_position(ctx) if until_caught_up else None
    policy = ctx.cfg.get("stream.schema-changes")
    history = ctx.versions()
    job = binlog_job(ctx, schemas, splits, start, target, since, applied, ctx.cfg.tables,
                     None if policy == "fail" else history, gtid_trailer=True)
    gtids = _gtid_record(ctx, start)
    progress_file = ctx.target.stream_progress
    # per table: the newest binlog change bronze held before this run appended any (see silver.apply)
    held: dict[str, Any] = {}

    def each_batch(whole: Any, batch_id: int) -> None:
        if stop.asked():
            # Asked while Spark planned this batch: it is read again by the next run. A busy stream
            # starts each batch as the last ends, so waiting for a moment between them may wait long.
            raise RuntimeFailure("stopped before this micro-batch")
        whole.persist()
        try:
            began = time.monotonic()
            df = whole.where(F.col("_op") != "g")
            seen = df.groupBy("_table").agg(F.count("*").alias("n"), F.max("_ts").alias("ts"),
                                            F.min("_seq").alias("oldest"),
                                            F.sum(F.when(F.col("_op") == "s", 1).otherwise(0)).alias("marks"),
                                            F.sum(F.when(F.col("_op") != "c", 1).otherwise(0)).alias("others")).collect()
            read_s = time.monotonic() - began

            def land(row: Any) -> tuple[float, float]:
                """One table's share of the batch into its bronze, then its silver: (bronze s, silver s)."""
                name = row["_table"]
                rows = df.where(F.col("_table") == name)
                b = ctx.target.bronze(name).location
                t = time.monotonic()
                # under lenient and ignore, silver's columns differ from the source's once it changed
                if row["marks"] or (policy in ("lenient", "ignore") and len(history[name]) > 1):
                    _evolving(ctx, name, rows, history, policy, f"binlake-stream-{app}-{name}", batch_id, row["oldest"])
                    return time.monotonic() - t, 0.0
                schema = history[name][-1].schema
                if name not in held:
                    held[name] = bronze.newest_change(spark, b)
                typed = bronze.typed(rows, schema)
                # Bronze takes a batch whole or not at all, in binlog order, so it holds every change up
                # to `held`: a batch reaching back to it (the replay of one a crash cut short, or a new
                # checkpoint over an old bronze) lands only what is past it, and any other is new
                replay = held[name] is not None and held[name] >= row["oldest"]
                bronze.append_batch(typed.where(F.col("_seq") > F.lit(held[name])) if replay else typed, b)
                # silver only after bronze has committed: a plain append to silver counts on it
                faults.point("mid_stream", name)
                bronze_s = time.monotonic() - t
                t = time.monotonic()
                silver.apply(spark, schema, typed, ctx.target.silver(name).location, b, oldest=row["oldest"],
                             bronze_may_be_newer=replay, inserts_only=not row["others"])
                return bronze_s, time.monotonic() - t

            # Tables are independent (each its own bronze and silver, each write idempotent), so a
            # batch lands several at once: a Delta commit keeps the driver busy in short bursts, and
            # the batch takes about as long as its slowest tables, not their sum.
            workers = min(len(seen), ctx.cfg.parallelism)
            if workers < 2:
                times = [land(row) for row in seen]
            else:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    times = list(pool.map(land, seen))
            bronze_s, silver_s = sum(b for b, _ in times), sum(s for _, s in times)
            for trailer in whole.where(F.col("_op") == "g").select("_row").collect():
                gtids.advance(json.loads(trailer["_row"]))  # before the batch commits
            _write_progress(progress_file, batch_id, {r["_table"]: (int(r["n"]), r["ts"]) for r in seen}, began)
            log.info("batch %d: %s (binlog read %.1fs, bronze %.1fs, silver %.1fs)", batch_id,
                     {r["_table"]: int(r["n"]) for r in seen}, read_s, bronze_s, silver_s)
            faults.point("after_batch", str(batch_id))
        finally:
            whole.unpersist()

    reader = (spark.readStream.format("binlake_binlog").option("job", json.dumps(job))
              .option("password", ctx.params["password"]).load())
    # Spark's own progress reports (query.lastProgress, StreamingQueryListener) carry the binlog
    # position as each batch's endOffset, and these metrics: changes read and the newest event time,
    # from which a monitor computes seconds behind the source
    reader = reader.observe(PROGRESS_METRICS, F.count_if(F.col("_op") != "g").alias("changes"),
                            F.max("_ts").alias("last_event_ts"), F.min("_ts").alias("first_event_ts"))
    writer = reader.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint)
    def stopped_at() -> str:
        return f"stopped at {committed_offset(checkpoint) or start}"

    with stop.between_batches(stopped_at):
        if until_caught_up:
            # Not Trigger.AvailableNow: after a crash it replays the pending batch and stops there.
            # The source offers nothing past `target` (the head now), so once a batch ending there is
            # committed no other batch can start, and stopping cannot cut one short.
            assert target is not None
            query = writer.trigger(processingTime="0 seconds").start()
            while query.isActive and not stop.asked():
                done = committed_offset(checkpoint)
                if (done is not None and done >= target) or start >= target:
                    break
                _await(query, 0.2)
        else:
            query = writer.trigger(processingTime=f"{int(ctx.cfg.get('stream.trigger-seconds'))} seconds").start()
            while query.isActive and not stop.asked():
                _await(query, 1)
        if stop.asked():
            _stop_between_batches(query)
            raise stop.stopped()
        if query.isActive:  # caught up: no batch can start past `target`, so none is cut short
            query.stop()
        _await(query)


def _evolving(ctx: Context, name: str, rows: Any, history: dict[str, list[Version]], policy: Any, app_id: str,
              batch_id: int, oldest: Any) -> None:
    """A batch whose rows span schema versions, or of a table silver no longer matches column for column.
    The versions it marks are recorded before anything is written: a replay reuses them."""
    from pyspark.sql import functions as F

    from binlake.lake.evolution import Version
    from binlake.lake.evolve import apply_batch

    marks = rows.where(F.col("_op") == "s").orderBy("_seq").select("_row").collect()
    new = [Version.from_dict(json.loads(m["_row"])) for m in marks]
    if new:
        ctx.history(name).record(new)
        history[name] = ctx.history(name).versions()
        for v in new:
            log.warning("%s: schema %s at binlog %s%s", name, "truncated" if v.kind == "truncate" else "changed",
                        v.at, f" (renamed {v.renames})" if v.renames else "")
    apply_batch(ctx.session(), rows, history[name], new, policy, ctx.target.bronze(name).location,
                ctx.target.silver(name).location, app_id, batch_id, oldest, ctx.cfg.get("target.type-changes"))


def _gtid_record(ctx: Context, start: BinlogPosition) -> Any:
    """The GTID record (binlake.capture.failover), holding the state at the position the stream reads on from:
    read from the server when it does not (the stream's first start, or a target from before it)."""
    from binlake.capture.failover import GtidRecord, state_at
    from binlake.source.reconnect import retrying
    from binlake.source.connection import connect
    from binlake.source.dialect import Dialect

    record = GtidRecord(ctx.target.gtid_record)
    position = committed_offset(ctx.target.checkpoint) or start
    if record.at(position) is None and position.epoch == ctx.lineage().epoch:
        def read() -> tuple[str, bool]:
            conn = connect(ctx.params)
            try:
                return state_at(conn, Dialect.of(conn), position)
            finally:
                conn.close()

        record.put(position, *retrying(ctx.params, float(ctx.cfg.get("source.reconnect-timeout")),
                                       "reading the GTID state", read))
    return record


def _startup(ctx: Context) -> Start:
    from binlake.source.connection import connect
    from binlake.capture.startup import resolve

    conn = connect(ctx.params)
    try:
        return resolve(ctx.cfg, conn, ctx.dialect, ctx.target.stream_start)
    finally:
        conn.close()


def _stop_between_batches(query: Any) -> None:
    """Stop once no micro-batch runs: an idle stream at once, a busy one when the next batch begins
    (each_batch refuses it)."""
    if query.isActive:
        while query.isActive and query.status.get("isTriggerActive"):
            time.sleep(0.05)
        query.stop()
    _await(query)


def _await(query: Any, timeout: float | None = None) -> None:
    """Wait for the query to end (or `timeout` seconds); a failure becomes one line: the binlake error a
    reader raised, else the first cause, never a JVM trace."""
    from pyspark.errors import StreamingQueryException

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


def _write_progress(path: Path, batch_id: int, tables: dict[str, tuple[int, Any]], began: float) -> None:
    """Rows and newest event per table, and `head_at`: the wall time this batch began. Every batch
    ends at the head the server had when Spark planned it, just before: once the batch commits, the
    stream holds every change the source had at about that time, for idle tables too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"tables": {}}
    for name, (n, ts) in tables.items():
        t = old["tables"].setdefault(name, {"rows": 0})
        t["rows"] = int(t.get("rows", 0)) + n
        t["last_event"] = int(ts) if ts is not None else t.get("last_event")
    old["batch"] = batch_id
    old["head_at"] = time.time() - (time.monotonic() - began)
    old["updated"] = time.time()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(old))
    tmp.replace(path)
