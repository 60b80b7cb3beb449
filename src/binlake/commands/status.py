"""`binlake status`: the server the stored positions belong to, and per table chunks planned/done,
rows, phase, binlog position and lag."""

from __future__ import annotations

import json
import time
from typing import Any

from binlake.capture.context import Context
from binlake.config import Config
from binlake.errors import PositionGoneError, SourceChangedError
from binlake.lake.checkpoint import committed_end
from binlake.offsets import BinlogPosition
from binlake.source.connection import connect
from binlake.source.dialect import binlog_head
from binlake.source.identity import Lineage, identify


def status(cfg: Config) -> dict[str, Any]:
    from binlake.lake import split_state as state

    ctx = Context(cfg)
    spark = ctx.session()
    splits = state.load(spark, ctx.target.split_state, cfg.get("snapshot.group-size"))
    end = committed_end(ctx.target.checkpoint)
    position = None if end is None else BinlogPosition.from_dict(end)
    progress = json.loads(ctx.target.stream_progress.read_text()) if ctx.target.stream_progress.exists() else {}
    conn = connect(ctx.params)
    try:
        head = binlog_head(conn)
        now, _ = identify(conn)
    finally:
        conn.close()
    from delta.tables import DeltaTable

    tables = []
    for name in ctx.schemas():
        ss = splits.get(name, [])
        done = [s for s in ss if s.landed]  # read into bronze
        silver = ctx.target.silver(name)
        rows = (spark.read.format("delta").load(silver.location).count()
                if DeltaTable.isDeltaTable(spark, silver.location) else 0)
        planned_all = bool(ss) and ss[-1].end is None
        max_hw = max((s.hw for s in done if s.hw), default=None)
        if not ss:
            phase = "not started"
        elif not planned_all:
            phase = "planning"
        elif len(done) < len(ss):
            phase = "snapshot"
        elif position is None or (max_hw is not None and position < max_hw):
            phase = "handover"
        else:
            phase = "binlog"
        lag: float | None = None
        if position is not None:
            # the stream reads every table at one position: a table's lag is the stream's, however
            # long ago its own last change was
            head_at = progress.get("head_at")
            lag = 0.0 if position >= head else round(max(0.0, time.time() - head_at), 1) if head_at else None
        tables.append({
            "source": name,
            "phase": phase,
            "chunks": {"planned": len(ss), "done": len(done)},
            "rows": rows,
            "bronze": ctx.target.bronze(name).to_dict(),
            "silver": silver.to_dict(),
            "binlog": {"position": str(position) if position else None, "head": str(head), "lag_seconds": lag},
        })
    return {"source": _source(ctx, now), "tables": tables}


def _source(ctx: Context, identity: Any) -> dict[str, Any]:
    """The server the stored positions belong to, the one at source.hostname now, and whether it holds
    their history (the check a run makes before it streams, binlake.source.identity)."""
    from binlake.capture.stream import check_position

    now = str(identity)
    lineage = Lineage.load(ctx.target.source_lineage)
    if lineage is None:
        return {"now": now, "stored": None, "history": None}
    if not lineage.identity.same(identity):
        return {"now": now, "stored": str(lineage.identity),
                "history": "another server: the next run fails over to it if it holds every transaction binlake "
                           "has read (by GTID), and refuses it otherwise"}
    try:
        check_position(ctx)
        history = "the same"
    except (SourceChangedError, PositionGoneError) as failed:
        history = failed.message
    return {"now": now, "stored": str(lineage.identity), "history": history}


def render(report: dict[str, Any]) -> str:
    src = report["source"]
    if src["stored"] is None:
        lines = [f"source: {src['now']} (no position stored yet)"]
    elif src["history"] == "the same":
        lines = [f"source: {src['stored']}, holding the stored positions' history"]
    else:
        lines = [f"source: positions stored from {src['stored']}; source.hostname is now {src['now']}: "
                 f"{src['history']}"]
    for t in report["tables"]:
        b = t["binlog"]
        lag = "-" if b["lag_seconds"] is None else f"{b['lag_seconds']}s"
        lines.append(
            f"{t['source']}: {t['phase']}, chunks {t['chunks']['done']}/{t['chunks']['planned']}, rows {t['rows']}, "
            f"binlog {b['position'] or '-'} (lag {lag})\n  bronze {t['bronze']['location']}\n  silver {t['silver']['location']}"
        )
    return "\n".join(lines)
