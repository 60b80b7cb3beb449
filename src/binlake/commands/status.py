"""`binlake status`: what the lake and the stored state say -- per table chunks planned/done, rows,
phase and the committed binlog position; the server the positions were stored from -- and, when the
source answers, the server at source.hostname, whether it holds the stored positions' history, its
binlog head and the lag.

Status is what an operator runs when something is wrong, often because the source is down. So it
reads the lake without a connection and looks at the source last, with short timeouts: a source
that does not answer is one line of the report (and `reachable: false` with the reason in JSON),
not a failure, and the command exits 0.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pymysql

from binlake.capture import heartbeat, metrics, side_state
from binlake.capture.context import Context
from binlake.config import Config
from binlake.errors import BinlakeError
from binlake.lake import maintenance, storage
from binlake.lake.checkpoint import committed_end
from binlake.lake.evolution import History
from binlake.lake.table_files import NO_FILES, TableFiles
from binlake.offsets import BinlogPosition
from binlake.source.catalog import captured_tables, matches
from binlake.source.connection import connect
from binlake.source.dialect import binlog_head
from binlake.source.identity import Lineage, ServerIdentity, identify
from binlake.splits import Split

# Seconds the look at the source may take to connect, and then for each answer (each at most the
# configured source.connect-timeout and source.read-timeout): a server that is down or hung costs
# status a few seconds, not the minute a capture waits for it.
LOOK_CONNECT_TIMEOUT = 3
LOOK_READ_TIMEOUT = 5
# silver tables counted at once: delta-rs reads a small table's log in milliseconds, much of it outside
# Python's lock (on 2 cores under load, 1,000 small tables took 4.8 s one at a time, 2.3 s four at once,
# and no less with more)
COUNTING_THREADS = 4


@dataclass
class Look:
    """What a look at the source found: its identity, binlog head and captured tables, or why not."""

    error: str | None = None
    identity: ServerIdentity | None = None
    head: BinlogPosition | None = None
    tables: list[str] = field(default_factory=list)


def looking(cfg: Config) -> Config:
    """`cfg` with the look's short timeouts."""
    source = dict(cfg.values["source"])
    source["connect-timeout"] = min(int(source["connect-timeout"]), LOOK_CONNECT_TIMEOUT)
    source["read-timeout"] = min(int(source["read-timeout"]), LOOK_READ_TIMEOUT)
    return Config({**cfg.values, "source": source}, cfg.origin)


def look(cfg: Config, lineage: Lineage | None) -> Look:
    """The source's identity, binlog head and the tables source.tables matches on it; or the one-line
    reason it could not be asked (no secret: the connection errors name user, host and port only)."""
    params = {**cfg.connection(), "epoch": lineage.epoch if lineage else 0}
    try:
        conn = connect(params)
    except BinlakeError as exc:
        return Look(error=exc.message)
    try:
        head = binlog_head(conn)
        identity, _ = identify(conn)
        tables = [f"{d}.{t}" for d, t in captured_tables(conn, cfg.tables)]
    except BinlakeError as exc:
        return Look(error=exc.message)
    except (pymysql.MySQLError, OSError) as exc:
        who = f"{params['user']}@{params['host']}:{params['port']}"
        return Look(error=f"{who} stopped answering ({type(exc).__name__}{_code(exc)})")
    finally:
        conn.close()
    return Look(identity=identity, head=head, tables=tables)


def _code(exc: BaseException) -> str:
    code = exc.args[0] if exc.args else None
    return f", MySQL error {code}" if isinstance(code, int) else ""


def status(cfg: Config) -> dict[str, Any]:
    ctx = Context(looking(cfg))
    lineage = Lineage.load(ctx.target.source_lineage)
    end = committed_end(ctx.target.checkpoint_files)
    position = None if end is None else BinlogPosition.from_dict(end)
    progress = json.loads(ctx.target.stream_progress.read_text()) if ctx.target.stream_progress.exists() else {}
    seen = look(ctx.cfg, lineage)
    beside, refused = side_state.report(ctx.target.side_snapshots)
    tables = _tables(ctx, position, progress, seen, beside)
    return {
        "source": _source(ctx, lineage, seen),
        "stream": {"position": str(position) if position else None, "last_batch_at": _last_batch_at(progress),
                   "last_batch": progress.get("last_batch"), **heartbeat.report(progress)},
        "tables": tables,
        "last_error": metrics.last_error(ctx.target),
        # the last signals the stream refused (binlake.capture.signals), oldest first
        "signals_refused": refused,
    }


def _last_batch_at(progress: dict[str, Any]) -> float | None:
    """When the last micro-batch landed (the progress file's time, unless a heartbeat alone wrote it)."""
    return progress.get("updated") if "batch" in progress else None


def _tables(ctx: Context, position: BinlogPosition | None, progress: dict[str, Any], seen: Look,
            beside: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    splits = _splits(ctx)
    names = sorted(set(_captured(ctx, list(splits) + list(beside))) | set(seen.tables))
    counted = _counted(ctx, names)
    upkeep = maintenance.report(ctx.target, names, counted)
    out = []
    for name in names:
        ss = splits.get(name, [])
        done = [s for s in ss if s.landed]  # read into bronze
        silver = ctx.target.silver(name)
        max_hw = max((s.hw for s in done if s.hw), default=None)
        side = beside.get(name)
        if side is not None and side["status"] in (side_state.RUNNING, side_state.PAUSED):
            phase = "snapshot beside the stream"
        elif not ss:
            phase = "binlog" if side is not None else "not started"
        elif ss[-1].end is not None:  # the last chunk planned is not the open-ended one
            phase = "planning"
        elif len(done) < len(ss):
            phase = "snapshot"
        elif position is None or (max_hw is not None and position < max_hw):
            phase = "handover"
        else:
            phase = "binlog"
        out.append({
            "source": name,
            "phase": phase,
            "chunks": {"planned": len(ss), "done": len(done)},
            # silver's live rows (not its tombstones or ended versions), files and bytes
            **counted[name].to_dict(),
            # rows captured since the capture began: the snapshot's rows read, the stream's changes landed
            "captured": {"snapshot": sum(s.rows or 0 for s in done),
                         "stream": int(progress.get("tables", {}).get(name, {}).get("rows", 0))},
            "bronze": ctx.target.bronze(name).to_dict(),
            "silver": silver.to_dict(),
            "binlog": {"position": str(position) if position else None,
                       "head": str(seen.head) if seen.head else None,
                       "lag_seconds": _lag(position, seen.head, progress)},
            # bronze's and silver's live files and bytes, last compaction, bytes waiting for retention
            "maintenance": upkeep[name],
            # the table's snapshot beside the stream, running or as the last one ended (binlake.capture.side_snapshot)
            "side_snapshot": side,
        })
    return out


def _splits(ctx: Context) -> dict[str, list[Split]]:
    """The split state's splits by table. A local split state is read by delta-rs: no Spark session is
    started for it."""
    from binlake.lake import split_state  # deferred: it loads pyspark

    path = ctx.target.split_state
    # `load` asks nothing of the session where it reads by delta-rs: `ctx.spark`, None unless one runs
    spark = ctx.spark if split_state.read_here(path) else ctx.session()
    return split_state.load(spark, path, ctx.cfg.get("snapshot.group-size"))


def _counted(ctx: Context, names: list[str]) -> dict[str, TableFiles]:
    """Each table's silver: its live rows, files and bytes, several tables at once. A local lake's are
    read from the Delta log by delta-rs (`binlake.lake.table_files`), without a JVM. Spark counts the
    rest: the rows a predicate tells (`Shape.live`: soft deletes, history), a lake behind a URI, and a
    table delta-rs cannot count."""
    live = ctx.shape.live()

    def here(name: str) -> TableFiles | None:
        location = ctx.target.silver(name).location
        if not storage.is_local(location):
            return None
        if not storage.has_commit(location):
            return NO_FILES
        return TableFiles.read(location) if live is None else None

    def by_spark(spark: Any, name: str) -> TableFiles:
        from delta.tables import DeltaTable  # deferred: it loads pyspark

        location = ctx.target.silver(name).location
        if not DeltaTable.isDeltaTable(spark, location):
            return NO_FILES
        return TableFiles.by_spark(spark, location, live)

    with ThreadPoolExecutor(COUNTING_THREADS) as pool:
        found = dict(zip(names, pool.map(here, names)))
        rest = [name for name, files in found.items() if files is None]
        if rest:
            spark = ctx.session()  # started here, once, not by each thread
            found.update(zip(rest, pool.map(lambda name: by_spark(spark, name), rest)))
    return {name: files for name, files in found.items() if files is not None}


def _captured(ctx: Context, planned: list[str]) -> list[str]:
    """The tables the lake holds state of (planned chunks, a captured schema) that source.tables still
    matches: what status can say without the source."""
    names = set(planned)
    names.update(History(f).latest().name for f in ctx.target.schemas.iterdir() if f.name.endswith(".json"))
    return [n for n in names if matches(ctx.cfg.tables, *n.split(".", 1))]


def _lag(position: BinlogPosition | None, head: BinlogPosition | None, progress: dict[str, Any]) -> float | None:
    """Seconds the stream is behind the source's head; None when either is unknown. The stream reads
    every table at one position: a table's lag is the stream's, however long ago its own last change was."""
    if position is None or head is None:
        return None
    if position >= head:
        return 0.0
    head_at = progress.get("head_at")
    return round(max(0.0, time.time() - head_at), 1) if head_at else None


def _source(ctx: Context, lineage: Lineage | None, seen: Look) -> dict[str, Any]:
    """The server the stored positions belong to, the one at source.hostname now, and whether it holds
    their history (the check a run makes before it streams, binlake.source.identity)."""
    from binlake.capture.stream import check_position

    stored = None if lineage is None else str(lineage.identity)
    found = {"reachable": seen.error is None, "error": seen.error, "stored": stored, "now": None, "history": None}
    if seen.identity is None:
        return found
    found["now"] = str(seen.identity)
    if lineage is None:
        return found
    if not lineage.identity.same(seen.identity):
        found["history"] = ("another server: the next run fails over to it if it holds every transaction binlake "
                            "has read (by GTID), and refuses it otherwise")
        return found
    try:
        check_position(ctx)
        found["history"] = "the same"
    except BinlakeError as failed:  # gone, replaced, or the source lost in the meantime
        found["history"] = failed.message
    return found


def render(report: dict[str, Any]) -> str:
    src, stream, now = report["source"], report["stream"], time.time()
    if not src["reachable"]:
        stored = f" (positions stored from {src['stored']})" if src["stored"] else ""
        lines = [f"source: unreachable, its binlog head and the lag unknown{stored}: {src['error']}"]
    elif src["stored"] is None:
        lines = [f"source: {src['now']} (no position stored yet)"]
    elif src["history"] == "the same":
        lines = [f"source: {src['stored']}, holding the stored positions' history"]
    else:
        lines = [f"source: positions stored from {src['stored']}; source.hostname is now {src['now']}: {src['history']}"]
    if stream["last_batch_at"]:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stream["last_batch_at"]))
        last = stream.get("last_batch") or {}
        took = f" ({last['rows']} changes in {last['seconds']:.1f}s)" if last else ""
        lines.append(f"stream: at {stream['position'] or '-'}, last batch committed {at}{took}")
    idle = heartbeat.line(stream)
    if idle:
        lines.append(idle)
    if not report["tables"]:
        lines.append("no captured table yet")
    for t in report["tables"]:
        b = t["binlog"]
        lag = "-" if b["lag_seconds"] is None else f"{b['lag_seconds']}s"
        lines.append(
            f"{t['source']}: {t['phase']}, chunks {t['chunks']['done']}/{t['chunks']['planned']}, rows {t['rows']}, "
            f"binlog {b['position'] or '-'} (lag {lag})")
        for kind in ("bronze", "silver"):
            lines.append(f"  {kind} {t[kind]['location']}{maintenance.summary(t['maintenance'][kind], now)}")
        if t.get("side_snapshot"):
            lines.append(side_state.summary(t["side_snapshot"]))
    for refused in report.get("signals_refused", [])[-3:]:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(refused["at"]))
        lines.append(f"signal refused ({at}): {refused['message']}")
    failed = report.get("last_error")
    if failed:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(failed["at"]))
        lines.append(f"last error ({failed['kind']}, {at}): {failed['message']}")
    return "\n".join(lines)
