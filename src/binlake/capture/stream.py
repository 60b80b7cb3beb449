"""The stream step: the binlog streamed from where the snapshot (or the startup mode) left it, and
what stops a stream and is followed by binlake itself -- a new table to capture, a table to snapshot
again, a purged binlog or a changed source under their settings, a failover to a replica.

Before each start the stored position is checked: a file the server has purged is PositionGoneError,
a server that no longer holds its history is SourceChangedError (`binlake.source.identity`) -- unless
it is another server of the same replication topology, which the stream fails over to
(`binlake.capture.failover`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from binlake.capture import failover, metrics, resnapshot, side_snapshot
from binlake.capture.context import Context
from binlake.capture.plan import plan
from binlake.capture.side_state import DONE
from binlake.capture.snapshot import snapshot
from binlake.capture.startup import SNAPSHOT_MODES, Start
from binlake.capture.stream_query import run_stream
from binlake.config import Config
from binlake.errors import (
    NewTableError,
    PositionGoneError,
    RuntimeFailure,
    SchemaChangedError,
    SourceChangedError,
)
from binlake.lake import split_state
from binlake.lake.checkpoint import committed_end, committed_offset
from binlake.offsets import BinlogPosition
from binlake.source.binlog_dump import gone_error
from binlake.source.connection import connect
from binlake.source.identity import Anchor, Lineage, ServerIdentity, identify, verify
from binlake.source.schema_changes import CREATED
from binlake.source.validation import check_server_ids

log = logging.getLogger(__name__)


def stream(cfg: Config, until_caught_up: bool = False, ctx: Context | None = None) -> None:
    """Stream the binlog from the stored position. A position the server has purged is an error
    (exit code 1), or with `stream.on-purged: resnapshot` a fresh snapshot of the captured tables
    followed by the stream from its handover -- never a silent skip of the missing changes."""
    if ctx is None:  # `run` passes its context, having checked the server ids before planning
        check_server_ids(cfg)
        ctx = Context(cfg)
    attempt = 0
    resnapshots: dict[str, int] = {}
    while attempt < 3:
        checked = False
        try:
            # a source restarting right after the snapshot is ridden out here as it is in the reads
            ctx.retrying("checking the stored position", lambda: check_position(ctx))
            checked = True
            run_stream(ctx, until_caught_up)
            return
        except NewTableError as new:
            capture_new_tables(ctx, new)
        except SchemaChangedError as changed:
            metrics.error(changed)  # one the stream recovers from: counted, kept as the last error
            resnapshot.after_change(ctx, changed, resnapshots)
        except SourceChangedError as changed:
            metrics.error(changed)
            attempt += 1
            if checked:  # met while streaming: the check before the next start fails over, or refuses
                ctx.forget_lineage()
                continue
            if cfg.get("stream.on-source-change") != "resnapshot" or cfg.get("stream.startup-mode") != "initial":
                raise
            log.warning("%s; stream.on-source-change is resnapshot: snapshotting %s again",
                        changed.message.split(";")[0], ", ".join(ctx.schemas()))
            resnapshot.everything(ctx)
        except PositionGoneError as gone:
            metrics.error(gone)
            attempt += 1
            if cfg.get("stream.on-purged") != "resnapshot" or cfg.get("stream.startup-mode") != "initial":
                raise
            log.warning("%s; stream.on-purged is resnapshot: snapshotting %s again", gone.message,
                        ", ".join(ctx.schemas()))
            resnapshot.everything(ctx)
    raise RuntimeFailure("the binlog was purged, or the source changed, again during each of 3 fresh snapshots; "
                         "binlake needs binlogs kept longer than a snapshot takes (binlog_expire_logs_seconds) "
                         "and one source server while it takes one: check the server")


def capture_new_tables(ctx: Context, new: NewTableError) -> None:
    """A table came to match source.tables while streaming. The micro-batch that met its CREATE (or
    RENAME) failed uncommitted; the stream restarts and replays that batch with the table captured. The
    table is snapshotted beside the stream (binlake.capture.side_snapshot), which passes its changes
    before the snapshot began: a `CREATE TABLE ... AS SELECT` of a million rows is read in chunks
    beside the stream rather than landed by it in one batch, the other tables waiting. Where that
    cannot take it, a created table needs no snapshot -- the binlog holds every row it ever had from
    its CREATE on, which the replay streams -- and a renamed one is planned and snapshotted before the
    stream restarts, the handover then passing only its changes before each chunk's high watermark."""
    known = set(ctx.schemas())
    ctx.forget_schemas()
    added = sorted(set(ctx.schemas()) - known)
    if not added:
        # gone again by now (created and dropped): the replay's guard finds it missing and passes on;
        # the same table twice would loop, so that is the error it is
        if new.message in ctx.new_seen:
            raise new
        ctx.new_seen.add(new.message)
        return
    log.warning("capturing new tables %s (%s)", ", ".join(added), new.message.split(";")[0])
    if ctx.cfg.get("stream.startup-mode") not in SNAPSHOT_MODES:
        return  # the stream's start needs no snapshot of any table
    created = CREATED in new.message
    rest = side_snapshot.adopt(ctx, added, "created while streaming" if created else "renamed into source.tables")
    if rest and created:  # the binlog holds every row it ever had: the replay streams them
        side_snapshot.begin(ctx, rest, "created while streaming: captured from its CREATE", status=DONE)
    elif rest:
        plan(ctx.cfg, ctx)
        snapshot(ctx.cfg, None, ctx, tables=rest)


def check_position(ctx: Context) -> None:
    """Before streaming: PositionGoneError when the stored position's file is gone, SourceChangedError
    when the server no longer holds the history it belongs to (binlake.source.identity) -- unless it is
    another server of the same replication topology, which the stream fails over to (binlake.capture.failover)."""
    lineage = ctx.lineage()
    anchor = resume_anchor(ctx, lineage)
    if anchor is None:
        return
    conn = connect(ctx.params)
    try:
        now, _ = identify(conn)
        if not lineage.identity.same(now):
            fail_over(ctx, conn, lineage, anchor, now)
            return
        gone = gone_error(ctx.params, anchor.position)
        if gone is not None:
            raise gone
        verify(conn, ctx.params, anchor)
    finally:
        conn.close()


def fail_over(ctx: Context, conn: Any, lineage: Lineage, anchor: Anchor, now: ServerIdentity) -> None:
    """Follow the stream to `now`, another server, by the GTID state at the stored position; or
    SourceChangedError when it is not one of the same replication topology (binlake.capture.failover)."""
    position = resume_position(ctx)
    record = failover.GtidRecord(ctx.target.gtid_record).newest(position) if position is not None else None
    moved = failover.follow(conn, lineage, anchor, now, record, float(ctx.cfg.get("source.reconnect-timeout")))
    moved.save(ctx.target.source_lineage)
    ctx.forget_lineage()


def resume_position(ctx: Context) -> BinlogPosition | None:
    """Where the stream will read from next: the end of its last committed micro-batch, or, before
    the first one, the lowest high watermark of the snapshot's chunks."""
    done = committed_offset(ctx.target.checkpoint_files)
    if done is not None:
        return done
    if ctx.cfg.get("stream.startup-mode") not in SNAPSHOT_MODES:
        stored = ctx.target.stream_start
        return Start.from_dict(json.loads(stored.read_text())).position if stored.exists() else None
    path = ctx.target.split_state
    # a local split state is read by delta-rs, which starts no JVM (`binlake status` checks the position
    # too): `load` asks nothing then of `ctx.spark`, None unless a session runs
    spark = ctx.spark if split_state.read_here(path) else ctx.session()
    splits = split_state.load(spark, path, ctx.cfg.get("snapshot.group-size"), list(ctx.schemas()))
    return min((s.hw for ss in splits.values() for s in ss if s.hw is not None), default=None)


def resume_anchor(ctx: Context, lineage: Lineage) -> Anchor | None:
    """`resume_position` with what identifies its history."""
    end = committed_end(ctx.target.checkpoint_files)
    if end is not None:
        return lineage.anchor(BinlogPosition.from_dict(end), end.get("created"))
    position = resume_position(ctx)
    return None if position is None else lineage.anchor(position)

