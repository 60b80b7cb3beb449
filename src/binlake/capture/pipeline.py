"""The three steps -- plan, snapshot, stream -- and `run`, which chains them and resumes.

Every step reads what the previous ones left in Delta (split state, bronze) and writes
idempotently, so any step can be re-run after a crash at any point.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from binlake.lake import bronze, silver
from binlake import faults
from binlake.lake import split_state
from binlake.config import Config
from binlake.errors import (ConfigError, NewTableError, PositionGoneError, RuntimeFailure, SchemaChangedError,
                            SnapshotChangedError, SourceChangedError, raised_in_spark)
from binlake.lake.evolution import History, Version
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source.catalog import captured_tables, load_schema
from binlake.source.connection import connect
from binlake.source.dialect import Dialect, binlog_head
from binlake.source.identity import Anchor, Lineage, ServerIdentity, identify, verify
from binlake.splits import Split
from binlake.lake.target import Target
from binlake.source.validation import check_server_ids

log = logging.getLogger(__name__)

# splits written to the split state per commit while planning (the resume grain of planning)
PLAN_BATCH = int(os.environ.get("BINLAKE_PLAN_BATCH", "500"))
# snapshot rows applied to silver per MERGE (landed chunks are gathered up to this many rows)
SILVER_BATCH_ROWS = int(os.environ.get("BINLAKE_SILVER_BATCH_ROWS", "1000000"))
# groups whose splits the snapshot loads from the split state at once
GROUP_WINDOW = 64


@dataclass
class Context:
    cfg: Config
    target: Target = field(init=False)
    spark: Any = field(init=False, default=None)
    _schemas: dict[str, TableSchema] | None = field(init=False, default=None)
    dialect: Dialect = field(init=False, default=Dialect("mariadb", (0, 0, 0)))
    new_seen: set[str] = field(init=False, default_factory=set)  # new tables met that were gone again
    _lineage: Lineage | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.target = Target.of(self.cfg)

    def session(self) -> Any:
        if self.spark is None:
            from binlake.spark.session import get_spark
            from binlake.spark.sources import register

            self.spark = get_spark(self.cfg.parallelism, log_file=self.target.spark_log)
            register(self.spark)
        return self.spark

    @property
    def params(self) -> dict[str, Any]:
        """The connection parameters, with the epoch of the server's positions (binlake.offsets)."""
        return {**self.cfg.connection(), "epoch": self.lineage().epoch}

    def public_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k != "password"}

    def schemas(self) -> dict[str, TableSchema]:
        if self._schemas is None:
            conn = connect(self.params)
            try:
                self.dialect = Dialect.of(conn)
                tables = captured_tables(conn, self.cfg.tables)
                if not tables:
                    raise ConfigError(
                        f"source.tables {self.cfg.tables} matches no table on the server; binlake needs at "
                        "least one: fix the regexes (they match 'db.table' in full)"
                    )
                chunk_keys = self.cfg.get("source.chunk-key")
                loaded = [load_schema(conn, d, t, chunk_keys) for d, t in tables]
                refused = next((r for r in map(TableSchema.refusal, loaded) if r), None)
                if refused:
                    raise ConfigError(refused)
                self._schemas = {s.name: self._captured(s) for s in loaded}
            finally:
                conn.close()
        return self._schemas

    def _captured(self, schema: TableSchema) -> TableSchema:
        """The table's schema as the stream last followed it, kept from its first capture on: the
        server's may have changed since (the stream meets those changes in binlog order)."""
        history = self.history(schema.name)
        if history.exists():
            return history.latest()
        history.start(schema)
        return schema

    def history(self, name: str) -> History:
        return History(self.target.captured_schema(name))

    def versions(self) -> dict[str, list[Version]]:
        """Every captured table's schema versions (see `binlake.lake.evolution`)."""
        return {name: self.history(name).versions() for name in self.schemas()}

    def forget_schemas(self) -> None:
        """Load the captured tables and their schemas again (tables may have come or gone)."""
        self._schemas = None

    def lineage(self) -> Lineage:
        """The server binlake reads (`_binlake/source.json`), recorded at the first connection: its
        identity and the creation time of its binlog's head file."""
        if self._lineage is not None:
            return self._lineage
        path = self.target.source_lineage
        found = Lineage.load(path)
        if found is None:
            params = self.cfg.connection()
            conn = connect(params)
            try:
                identity, _ = identify(conn)
                head = binlog_head(conn)
            finally:
                conn.close()
            found = Lineage(identity)
            found.note(params, [head.file])
            found.save(path)
            log.info("source is %s", identity)
        self._lineage = found
        return found

    def forget_lineage(self) -> None:
        self._lineage = None

    def note_files(self, files: list[str]) -> None:
        """Record the creation time of binlog files stored positions now lie in (see `lineage`)."""
        lineage = self.lineage()
        if lineage.note(self.cfg.connection(), files):
            lineage.save(self.target.source_lineage)

    def reader_ids(self) -> list[int]:
        ids = self.cfg.server_ids
        n = self.cfg.parallelism
        if len(ids) < 2:
            raise ConfigError(
                f"source.server-id has {len(ids)} id; binlake needs one for the stream and one per parallel "
                f"chunk reader ({n + 1} for snapshot.parallelism {n}): set source.server-id to a range like "
                f"{ids.first}-{ids.first + n}"
            )
        return [ids.pick(1 + i) for i in range(min(n, len(ids) - 1))]


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
            from binlake.capture.chunking import plan_ranges

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
    from binlake.schema import qualified

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


class Progress:
    """Chunks done/total, rows and rows/s per table on a terminal; silent otherwise."""

    def __init__(self, totals: dict[str, int], done: dict[str, int]) -> None:
        self.tty = sys.stderr.isatty()
        self.totals, self.done = totals, done
        self.rows: dict[str, int] = {t: 0 for t in totals}
        self.began = time.monotonic()

    def update(self, table: str, chunks: int, rows: int) -> None:
        self.done[table] = self.done.get(table, 0) + chunks
        self.rows[table] = self.rows.get(table, 0) + rows
        if self.tty:
            rate = self.rows[table] / max(time.monotonic() - self.began, 1e-6)
            sys.stderr.write(f"\r{table}: chunks {self.done[table]}/{self.totals.get(table, '?')}, "
                             f"rows {self.rows[table]:,}, {rate:,.0f} rows/s   ")
            sys.stderr.flush()

    def finish(self) -> None:
        total = sum(self.rows.values())
        secs = time.monotonic() - self.began
        line = f"snapshot: {sum(self.done.values())} chunks, {total:,} rows in {secs:.1f}s ({total / max(secs, 1e-6):,.0f} rows/s)"
        log.info(line)
        if self.tty:
            sys.stderr.write("\r" + line + " " * 20 + "\n")


def snapshot(cfg: Config, groups: list[int] | None = None, ctx: Context | None = None, apply_silver: bool = True,
             tables: list[str] | None = None) -> None:
    """Read every unfinished chunk (of `groups`, or all) into bronze, group by group, then apply the
    landed chunks to silver (locally; on Databricks the pipeline's AUTO CDC does that).

    Splits are loaded GROUP_WINDOW groups at a time: the driver never holds a huge table's splits.
    """
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    schemas = ctx.schemas()
    names = [t for t in (tables or list(schemas)) if t in schemas]
    path = ctx.target.split_state
    unfinished, counts = split_state.groups(spark, path, "done" if apply_silver else "landed", names)
    progress = Progress({t: n for t, (n, _) in counts.items()}, {t: d for t, (_, d) in counts.items()})
    ids = ctx.reader_ids()
    group_size = int(cfg.get("snapshot.group-size"))
    for table, table_groups in unfinished.items():
        chosen = [g for g in table_groups if groups is None or g in groups]
        schema = schemas[table]
        landed: list[Split] = []
        for at in range(0, len(chosen), GROUP_WINDOW):
            window = split_state.load(spark, path, group_size, [table], chosen[at:at + GROUP_WINDOW]).get(table, [])
            landed += [s for s in window if s.status == "landed"]
            pending = [s for s in window if not s.landed]
            recovered = landed_in_bronze(ctx, schema, pending)
            landed += recovered
            recovered_ids = {s.index for s in recovered}
            by_group: dict[int, list[Split]] = {}
            for s in pending:
                if s.index not in recovered_ids:
                    by_group.setdefault(s.group, []).append(s)
            for group in sorted(by_group):
                todo = by_group[group]
                if todo[-1].is_last:
                    read = read_tail(ctx, schema, todo, ids, progress)
                else:
                    read = read_group(ctx, schema, todo, ids)
                    progress.update(table, len(read), sum(s.rows or 0 for s in read))
                ctx.note_files([s.hw.file for s in read if s.hw is not None])
                landed += read
                if apply_silver and sum(s.rows or 0 for s in landed) >= SILVER_BATCH_ROWS:
                    apply_to_silver(ctx, schema, landed)
                    landed = []
        if apply_silver:
            apply_to_silver(ctx, schema, landed)
    progress.finish()


def read_tail(ctx: Context, schema: TableSchema, splits: list[Split], ids: list[int], progress: Progress) -> list[Split]:
    """Read a group ending with the open last split `[start, +inf)`, which grows while the snapshot
    runs when rows are inserted past the maximum key.

    Before it is read, the open split is cut again at chunk-size (`cut_tail`): it keeps its index
    with a bound end, new splits follow, the last of them open and holding at most chunk-size rows
    at that moment. The pieces are stored, the group holding the new open split is read at once --
    so it grows only by what is inserted during one group's read -- and then the other pieces, group
    by group. No read holds more than about a chunk, however far the table grew, and a table that
    keeps growing still ends its snapshot (the rows inserted after the open split's high watermark
    come through the binlog). Whoever reads the last split reads every piece (on Databricks, the
    task of the last group).
    """
    todo = splits
    later: list[list[Split]] = []
    while True:
        pieces, small = cut_tail(ctx, schema, todo[-1])
        if not pieces:
            break
        split_state.add_recut(ctx.session(), ctx.target.split_state, pieces)
        log.info("%s: the open last chunk %d holds more than %d rows; cut into chunks %d..%d",
                 schema.name, pieces[0].index, ctx.cfg.chunk_size, pieces[0].index, pieces[-1].index)
        by_group: dict[int, list[Split]] = {}
        for s in todo[:-1] + pieces:
            by_group.setdefault(s.group, []).append(s)
        later += [by_group[g] for g in sorted(by_group)[:-1]]
        todo = by_group[max(by_group)]
        if small:
            break
    landed: list[Split] = []
    for group in [todo, *later]:
        read = read_group(ctx, schema, group, ids)
        progress.update(schema.name, len(read), sum(s.rows or 0 for s in read))
        landed += read
    return landed


def cut_tail(ctx: Context, schema: TableSchema, last: Split) -> tuple[list[Split], bool]:
    """The open last split cut again at chunk-size, as it is now: no pieces when it holds at most
    chunk-size rows; else at most PLAN_BATCH pieces, the first with the split's index, the last open,
    and whether that last one holds at most chunk-size rows (False: cut it again)."""
    from binlake.capture.chunking import plan_ranges

    most = max(PLAN_BATCH, 2)
    conn = connect(ctx.params)
    try:
        pieces: list[Split] = []
        for start, end in plan_ranges(conn, schema, ctx.cfg.chunk_size, last.start):
            if end is None and not pieces:
                return [], True  # small enough to read as it is
            is_open = end is None or len(pieces) + 1 == most
            pieces.append(Split(last.table, last.table_no, last.index + len(pieces), start,
                                None if is_open else end, last.group_size))
            if is_open:
                return pieces, end is None
    finally:
        conn.close()
    return pieces, True


def landed_in_bronze(ctx: Context, schema: TableSchema, splits: list[Split]) -> list[Split]:
    """Chunks whose rows reached bronze but whose status did not (a crash between the two): record
    them as landed instead of reading them again."""
    if not splits:
        return []
    marks = bronze.chunk_marks(ctx.session(), ctx.target.bronze(schema.name).location, [s.index for s in splits])
    return record_landed(ctx, splits, marks)


def record_landed(ctx: Context, splits: list[Split], marks: list[dict[str, Any]]) -> list[Split]:
    """Record as landed the splits whose watermark row is in bronze (`marks`, see bronze.chunk_marks)."""
    found = {m["_chunk"]: m for m in marks if m["hw_file"]}
    landed = [s.landed_at(BinlogPosition(found[s.index]["hw_file"], int(found[s.index]["hw_pos"]),
                                         int(found[s.index].get("epoch") or 0)),
                          int(found[s.index]["rows"]),
                          BinlogPosition.parse(found[s.index]["lw"]) if found[s.index]["lw"] else None)
              for s in splits if s.index in found]
    split_state.record(ctx.session(), ctx.target.split_state, landed)
    return landed


def read_group(ctx: Context, schema: TableSchema, splits: list[Split], ids: list[int]) -> list[Split]:
    """Read a group's chunks in one Spark job into bronze; record them landed with their HW."""
    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    job = {"connection": ctx.public_params(), "schema": schema.to_dict(), "splits": [s.to_dict() for s in splits],
           "server_ids": ids, "dialect": ctx.dialect.to_dict(),
           "reconnect_timeout": int(ctx.cfg.get("source.reconnect-timeout"))}
    df = (spark.read.format("binlake_snapshot").option("job", json.dumps(job))
          .option("password", ctx.params["password"]).load())
    marks = bronze.append_chunks(bronze.typed_flat(df, schema), b, [s.index for s in splits])
    faults.point("after_bronze_write", schema.name)
    landed = record_landed(ctx, splits, marks)
    missing = sorted({s.index for s in splits} - {s.index for s in landed})
    if missing:
        raise RuntimeFailure(f"chunks {missing} of {schema.name} have no watermark row in bronze after their read")
    return landed


def apply_to_silver(ctx: Context, schema: TableSchema, landed: list[Split]) -> None:
    """Apply landed chunks' rows to silver in one MERGE, then record them done (both idempotent)."""
    from pyspark.sql import functions as F

    if not landed:
        return
    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    chunks = [s.index for s in landed]
    rows = spark.read.format("delta").load(b).where(F.col("_chunk").isin(chunks) & (F.col("_op") == "r"))
    silver.insert_snapshot(spark, schema, rows, ctx.target.silver(schema.name).location, b)
    faults.point("after_silver_chunks", schema.name)
    split_state.record(spark, ctx.target.split_state, [s.applied() for s in landed])


def stream(cfg: Config, until_caught_up: bool = False, ctx: Context | None = None) -> None:
    """Stream the binlog from the stored position. A position the server has purged is an error
    (exit code 1), or with `stream.on-purged: resnapshot` a fresh snapshot of the captured tables
    followed by the stream from its handover -- never a silent skip of the missing changes."""
    from binlake.capture.stream import run_stream

    if ctx is None:  # `run` passes its context, having checked the server ids before planning
        check_server_ids(cfg)
        ctx = Context(cfg)
    attempt = 0
    resnapshots: dict[str, int] = {}
    while attempt < 3:
        checked = False
        try:
            check_position(ctx)
            checked = True
            run_stream(ctx, until_caught_up)
            return
        except NewTableError as new:
            capture_new_tables(ctx, new)
        except SchemaChangedError as changed:
            snapshot_again(ctx, changed, resnapshots)
        except SourceChangedError as changed:
            attempt += 1
            if checked:  # met while streaming: the check before the next start fails over, or refuses
                ctx.forget_lineage()
                continue
            if cfg.get("stream.on-source-change") != "resnapshot" or cfg.get("stream.startup-mode") != "initial":
                raise
            log.warning("%s; stream.on-source-change is resnapshot: snapshotting %s again",
                        changed.message.split(";")[0], ", ".join(ctx.schemas()))
            resnapshot(ctx)
        except PositionGoneError as gone:
            attempt += 1
            if cfg.get("stream.on-purged") != "resnapshot" or cfg.get("stream.startup-mode") != "initial":
                raise
            log.warning("%s; stream.on-purged is resnapshot: snapshotting %s again", gone.message,
                        ", ".join(ctx.schemas()))
            resnapshot(ctx)
    raise RuntimeFailure("the binlog was purged, or the source changed, again during each of 3 fresh snapshots; "
                         "binlake needs binlogs kept longer than a snapshot takes (binlog_expire_logs_seconds) "
                         "and one source server while it takes one: check the server")


def snapshot_again(ctx: Context, changed: SchemaChangedError, done: dict[str, int]) -> None:
    """Snapshot a changed table again where that is the way to follow the change (see
    `binlake.capture.resnapshot`); raise `changed` where it is not, or after 3 times for one table."""
    from binlake.capture import resnapshot
    from binlake.capture.startup import SNAPSHOT_MODES

    policy = ctx.cfg.get("stream.schema-changes")
    table = changed.table
    if (policy == "fail" or table is None or table not in ctx.schemas()
            or ctx.cfg.get("stream.startup-mode") not in SNAPSHOT_MODES
            or not (isinstance(changed, SnapshotChangedError) or policy == "evolve")):
        raise changed
    done[table] = done.get(table, 0) + 1
    if done[table] > 3:
        raise changed
    log.warning("%s; snapshotting %s again", changed.message.split(";")[0], table)
    resnapshot.request(ctx, [table])


def capture_new_tables(ctx: Context, new: NewTableError) -> None:
    """A table came to match source.tables while streaming. The micro-batch that met its CREATE (or
    RENAME) failed uncommitted; the table is planned and snapshotted like any other (in a mode without a
    snapshot, it needs none: the replayed batch holds all of its rows), then the stream restarts and
    replays that batch with the table captured. The handover passes only its changes after each of its
    chunks' high watermark, so rows written between its creation and its snapshot are neither lost nor
    repeated."""
    from binlake.capture.startup import SNAPSHOT_MODES

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
    if ctx.cfg.get("stream.startup-mode") in SNAPSHOT_MODES:
        plan(ctx.cfg, ctx)
        snapshot(ctx.cfg, None, ctx, tables=added)


def check_position(ctx: Context) -> None:
    """Before streaming: PositionGoneError when the stored position's file is gone, SourceChangedError
    when the server no longer holds the history it belongs to (binlake.source.identity) -- unless it is
    another server of the same replication topology, which the stream fails over to (binlake.capture.failover)."""
    from binlake.source.binlog_reader import gone_error
    from binlake.capture.stream import resume_anchor

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
    from binlake.capture import failover
    from binlake.capture.stream import resume_position

    position = resume_position(ctx)
    record = failover.GtidRecord(ctx.target.gtid_record).newest(position) if position is not None else None
    moved = failover.follow(conn, lineage, anchor, now, record, float(ctx.cfg.get("source.reconnect-timeout")))
    moved.save(ctx.target.source_lineage)
    ctx.forget_lineage()


def resnapshot(ctx: Context) -> None:
    """Forget the stream and the snapshot of every captured table, then plan and snapshot them again.

    Crash-safe by its order: the checkpoint goes first, so until the split state is retired the next
    start still finds a purged position (the old high watermarks) and resets again; bronze and silver
    are emptied (not dropped, so their schemas and locations stay) before the chunks are retired.
    """
    import shutil

    from delta.tables import DeltaTable

    spark = ctx.session()
    names = list(ctx.schemas())
    shutil.rmtree(ctx.target.checkpoint, ignore_errors=True)
    ctx.target.stream_progress.unlink(missing_ok=True)
    for name in names:
        for location in (ctx.target.bronze(name).location, ctx.target.silver(name).location):
            if DeltaTable.isDeltaTable(spark, location):
                DeltaTable.forPath(spark, location).delete()
    split_state.retire(spark, ctx.target.split_state, names)
    # the new snapshot records its server afresh (after a source change, the new one); every position
    # of the old one is gone by now
    ctx.target.source_lineage.unlink(missing_ok=True)
    ctx.target.gtid_record.unlink(missing_ok=True)
    ctx.forget_lineage()
    faults.point("mid_resnapshot", ",".join(names))
    plan(ctx.cfg, ctx)
    snapshot(ctx.cfg, None, ctx)


def run(cfg: Config, until_caught_up: bool = False) -> None:
    """Plan, snapshot and stream, as `stream.startup-mode` says: `snapshot` stops after the
    snapshot; the modes that start from a binlog position skip the snapshot. Planning and reading
    interleave: each batch of planned groups is read while the rest of the table is still to be
    planned; the final snapshot picks up whatever a crash left unread (planned, or landed and not yet
    in silver)."""
    from binlake.capture.startup import SNAPSHOT_MODES, validate

    from binlake.capture import resnapshot

    validate(cfg)
    check_server_ids(cfg)
    ctx = Context(cfg)
    mode = cfg.get("stream.startup-mode")
    if mode in SNAPSHOT_MODES:
        resnapshot.finish(ctx)  # what a crash left half done
        done: dict[str, int] = {}
        while True:
            try:
                plan(cfg, ctx, on_batch=lambda table: snapshot(cfg, None, ctx, tables=[table]))
                snapshot(cfg, None, ctx)
                break
            except Exception as exc:  # a chunk read saw its table change: the snapshot mixes two schemas
                changed = exc if isinstance(exc, SchemaChangedError) else raised_in_spark(exc)
                if not isinstance(changed, SchemaChangedError):
                    raise
                snapshot_again(ctx, SnapshotChangedError(changed.message), done)
    if mode != "snapshot":
        stream(cfg, until_caught_up, ctx)


def current_position(ctx: Context) -> BinlogPosition:
    conn = connect(ctx.params)
    try:
        return binlog_head(conn)
    finally:
        conn.close()
