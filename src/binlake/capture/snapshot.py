"""The snapshot: every unfinished chunk read into bronze, group by group, in Spark jobs of the
`binlake_snapshot` source (`binlake.spark.sources`), then the landed chunks applied to silver. On a
local lake the same reader runs in this process instead and delta-rs commits the groups, several at
a time for a large table (`Landing`).

Each chunk's read and its record in the split state are idempotent, so a snapshot cut short anywhere
is resumed by the next run: a chunk whose rows reached bronze but whose status did not is recorded
from bronze (`landed_in_bronze`), not read again.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Self

from pyspark.sql import functions as F

from binlake import faults
from binlake.capture import plan as planning  # PLAN_BATCH read when used: the tests set it
from binlake.capture.behind import Behind
from binlake.capture.chunking import plan_ranges
from binlake.capture.context import Context
from binlake.capture.landing import Landing
from binlake.capture.progress import Progress
from binlake.config import Config
from binlake.errors import RuntimeFailure
from binlake.lake import bronze, silver, split_state, storage
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source.connection import connect
from binlake.splits import Split

log = logging.getLogger(__name__)

# snapshot rows applied to silver per MERGE (landed chunks are gathered up to this many rows)
SILVER_BATCH_ROWS = int(os.environ.get("BINLAKE_SILVER_BATCH_ROWS", "1000000"))
# groups whose splits the snapshot loads from the split state at once
GROUP_WINDOW = 64
# split statuses of tables read whole recorded per append (see `Reading`)
RECORD_BATCH = 200


def snapshot(cfg: Config, groups: list[int] | None = None, ctx: Context | None = None, apply_silver: bool = True,
             tables: list[str] | None = None) -> None:
    """Read every unfinished chunk (of `groups`, or all) into bronze, group by group, then apply the
    landed chunks to silver (locally; on Databricks the pipeline's AUTO CDC does that). Tables are
    read `Context.tables_at_once` at a time.

    Splits are loaded GROUP_WINDOW groups at a time: the driver never holds a huge table's splits.
    """
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    schemas = ctx.schemas()
    names = [t for t in (tables or list(schemas)) if t in schemas]
    unfinished, counts = split_state.groups(spark, ctx.target.split_state, "done" if apply_silver else "landed", names)
    progress = Progress({t: n for t, (n, _) in counts.items()}, {t: d for t, (_, d) in counts.items()})
    chosen = {t: [g for g in gs if groups is None or g in groups] for t, gs in unfinished.items()}
    work = [(schemas[t], gs) for t, gs in chosen.items() if gs]
    at_once = min(len(work), ctx.tables_at_once)
    if at_once < 2:
        for schema, chosen in work:
            _table(ctx, schema, chosen, apply_silver, progress)
    else:
        with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="snapshot") as pool:
            for done in [pool.submit(_table, ctx, schema, chosen, apply_silver, progress) for schema, chosen in work]:
                done.result()
    progress.finish()
    ctx.release()


def _table(ctx: Context, schema: TableSchema, chosen: list[int], apply_silver: bool, progress: Progress) -> None:
    """One table's unfinished groups `chosen` read into bronze (and applied to silver)."""
    group_size = int(ctx.cfg.get("snapshot.group-size"))
    table = schema.name
    landed: list[Split] = []
    # silver's rows if every apply was recorded (see apply_to_silver)
    held = split_state.applied_rows(ctx.session(), ctx.target.split_state, table) if apply_silver else None
    landing = Landing.large(ctx, schema) if apply_silver else None
    with Behind() as behind:
        for at in range(0, len(chosen), GROUP_WINDOW):
            held = behind.wait(held)
            window = split_state.load(ctx.session(), ctx.target.split_state, group_size, [table],
                                      chosen[at:at + GROUP_WINDOW]).get(table, [])
            landed += [s for s in window if s.status == "landed"]
            pending = [s for s in window if not s.landed]
            recovered = landed_in_bronze(ctx, schema, pending)
            landed += recovered
            recovered_ids = {s.index for s in recovered}
            by_group = in_groups(s for s in pending if s.index not in recovered_ids)
            for group in sorted(by_group):
                rows = read_ahead(ctx, schema, by_group[group], landing)
                if landing is not None and rows is not None:
                    if landing.hold(by_group[group], rows):
                        held = land_held(ctx, schema, landing, behind, held, progress)
                    continue
                held = behind.wait(land_held(ctx, schema, landing, behind, held, progress))
                read = read_any(ctx, schema, by_group[group], progress, landing=landing)
                if landing is not None and landing.rows:
                    held = apply_here(ctx, schema, read, landing, held)
                    continue
                landed += read
                if apply_silver and sum(s.rows or 0 for s in landed) >= SILVER_BATCH_ROWS:
                    apply_to_silver(ctx, schema, landed, held=held)
                    held = _plus(held, landed)
                    landed = []
        held = behind.wait(land_held(ctx, schema, landing, behind, held, progress))
    if apply_silver:
        apply_to_silver(ctx, schema, landed, held=held)


def read_ahead(ctx: Context, schema: TableSchema, splits: list[Split], landing: Landing | None) -> Any:
    """A group's chunks read in this process into bronze's columns, not landed yet; None when it is not
    read so (no `landing`, a group with the open last split, a read too large to hold)."""
    if landing is None or landing.spilled or splits[-1].is_last:
        return None
    with ctx.readers(len(splits)) as ids:
        return landing.read(ctx, schema, chunk_job(ctx, schema, splits, ids))


def land_held(ctx: Context, schema: TableSchema, landing: Landing | None, behind: Behind, held: int | None,
              progress: Progress) -> int | None:
    """The groups `landing` holds (`Landing.hold`) landing behind the next read (`land_read`), once
    the commit before them has landed; `held` after that one."""
    held = behind.wait(held)
    if landing is not None and landing.held:
        behind.land(functools.partial(land_read, ctx, schema, *landing.parcel(), landing, held, progress))
    return held


def land_read(ctx: Context, schema: TableSchema, splits: list[Split], rows: Any, landing: Landing,
              held: int | None, progress: Progress) -> int | None:
    """Groups `read_ahead` read, landed in one commit (`landed_read`), then applied to silver and
    recorded done (`apply_here`). `held` after it."""
    return apply_here(ctx, schema, landed_read(ctx, schema, splits, rows, landing, progress), landing, held)


def landed_read(ctx: Context, schema: TableSchema, splits: list[Split], rows: Any, landing: Landing,
                progress: Progress, record: bool = True) -> list[Split]:
    """Groups `read_ahead` read, appended to bronze in one commit and recorded landed (unless `record`
    is False: the caller records them later): their splits, landed."""
    read = landed_in(ctx, schema, splits, landing.append(rows, [s.index for s in splits]), record)
    progress.update(schema.name, len(read), sum(s.rows or 0 for s in read))
    ctx.note_files([s.hw.file for s in read if s.hw is not None])
    return read


def _plus(held: int | None, applied: list[Split]) -> int | None:
    """`held` (see apply_to_silver) after the chunks `applied` were applied."""
    if held is None or any(s.rows is None for s in applied):
        return None
    return held + sum(s.rows or 0 for s in applied)


def in_groups(splits: Iterable[Split]) -> dict[int, list[Split]]:
    """Splits by group id, each group's in the order given."""
    by_group: dict[int, list[Split]] = {}
    for s in splits:
        by_group.setdefault(s.group, []).append(s)
    return by_group


def read_any(ctx: Context, schema: TableSchema, todo: list[Split], progress: Progress,
             record: bool = True, landing: Landing | None = None) -> list[Split]:
    """A group read into bronze, its open last split cut again first if it has one."""
    if todo[-1].is_last:
        read = read_tail(ctx, schema, todo, progress, record, landing)
    else:
        with ctx.readers(len(todo)) as ids:
            read = read_group(ctx, schema, todo, ids, record, landing)
        progress.update(schema.name, len(read), sum(s.rows or 0 for s in read))
    ctx.note_files([s.hw.file for s in read if s.hw is not None])
    return read


class Reading:
    """The tables `plan` hands over, read while it plans the rest (its `on_batch`). A table planned
    whole in one stored batch was never read, so it is read at once, `Context.tables_at_once` tables
    at a time, without a look at the split state or bronze; its statuses are recorded for many tables
    in one append (a crash before that append leaves the chunks landed in bronze, and the next run
    records them from there, see `landed_in_bronze`). A table planned in parts is read as its parts
    are stored, by the planning thread."""

    def __init__(self, cfg: Config, ctx: Context) -> None:
        self.cfg, self.ctx = cfg, ctx
        self.pool = ThreadPoolExecutor(max_workers=ctx.tables_at_once, thread_name_prefix="snapshot")
        self.running: list[Future[None]] = []
        self.progress = Progress({}, {}, planning=True)
        self.done: list[Split] = []
        self.lock = threading.Lock()

    def __call__(self, table: str, whole: list[Split] | None) -> None:
        for failed in [f for f in self.running if f.done()]:
            failed.result()  # a read that failed ends planning too
        if whole is None:
            snapshot(self.cfg, None, self.ctx, tables=[table])
        else:
            self.progress.expect(table, len(whole))
            self.running.append(self.pool.submit(self.whole, self.ctx.schemas()[table], whole))

    def whole(self, schema: TableSchema, splits: list[Split]) -> None:
        landing = Landing.of(self.ctx, schema, len(splits))
        if landing is not None:
            self.whole_arrow(schema, splits, landing)
            return
        landing = Landing.large(self.ctx, schema)
        created = landing.created if landing is not None else \
            not storage.table_exists(self.ctx.session(), self.ctx.target.bronze(schema.name).location)
        by_group = in_groups(splits)
        landed: list[Split] = []
        held = split_state.applied_rows(self.ctx.session(), self.ctx.target.split_state, schema.name)
        for group in sorted(by_group):
            rows = read_ahead(self.ctx, schema, by_group[group], landing)
            if landing is not None and rows is not None and not landing.hold(by_group[group], rows):
                continue
            held = self.land_held(schema, landing, held)
            if rows is not None:
                continue
            read = read_any(self.ctx, schema, by_group[group], self.progress, record=False, landing=landing)
            if landing is not None and landing.rows:
                held = apply_here(self.ctx, schema, read, landing, held, record=False)
                self.applied([s.applied() for s in read])
                continue
            landed += read
            if sum(s.rows or 0 for s in landed) >= SILVER_BATCH_ROWS or group == max(by_group):
                apply_to_silver(self.ctx, schema, landed, record=False, held=held)
                held = _plus(held, landed)
                self.applied([s.applied() for s in landed])
                landed = []
        self.land_held(schema, landing, held)
        if created:
            with self.lock:
                self.ctx.created_bronze(schema.name)

    def land_held(self, schema: TableSchema, landing: Landing | None, held: int | None) -> int | None:
        """The groups `landing` holds (`Landing.hold`) landed in one commit, not recorded yet (see
        `applied`); `held` after them."""
        if landing is None or not landing.held:
            return held
        read = landed_read(self.ctx, schema, *landing.parcel(), landing, self.progress, record=False)
        held = apply_here(self.ctx, schema, read, landing, held, record=False)
        self.applied([s.applied() for s in read])
        return held

    def whole_arrow(self, schema: TableSchema, splits: list[Split], landing: Landing) -> None:
        """A small table's chunks committed to bronze and silver by delta-rs (`Landing`)."""
        by_group = in_groups(splits)
        landed: list[Split] = []
        for group in sorted(by_group):
            landed += read_any(self.ctx, schema, by_group[group], self.progress, record=False, landing=landing)
        location = self.ctx.target.silver(schema.name).location
        if not landing.spilled and silver.insert_snapshot_arrow(schema, landing.take(), location,
                                                                   self.ctx.shape):
            faults.point("after_silver_chunks", schema.name)
        else:
            apply_to_silver(self.ctx, schema, landed, record=False)
        self.applied([s.applied() for s in landed])
        if landing.created:
            with self.lock:
                self.ctx.created_bronze(schema.name)

    def applied(self, splits: list[Split]) -> None:
        with self.lock:
            self.done += splits
            if len(self.done) < RECORD_BATCH:
                return
            done, self.done = self.done, []
        split_state.record(self.ctx.session(), self.ctx.target.split_state, done)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        """Wait for the reads (or, when planning failed, for those begun), record what they applied,
        and raise the first read's failure unless planning's own is on its way."""
        failed = kind is not None or any(f.done() and not f.cancelled() and f.exception() for f in self.running)
        self.pool.shutdown(wait=True, cancel_futures=failed)
        split_state.record(self.ctx.session(), self.ctx.target.split_state, self.done)
        self.progress.finish()
        self.ctx.release()
        if kind is None:
            for f in self.running:
                if not f.cancelled():
                    f.result()


def read_tail(ctx: Context, schema: TableSchema, splits: list[Split], progress: Progress,
              record: bool = True, landing: Landing | None = None) -> list[Split]:
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
        by_group = in_groups(todo[:-1] + pieces)
        later += [by_group[g] for g in sorted(by_group)[:-1]]
        todo = by_group[max(by_group)]
        if small:
            break
    landed: list[Split] = []
    for group in [todo, *later]:
        with ctx.readers(len(group)) as ids:
            read = read_group(ctx, schema, group, ids, record, landing)
        progress.update(schema.name, len(read), sum(s.rows or 0 for s in read))
        landed += read
    return landed


def cut_tail(ctx: Context, schema: TableSchema, last: Split) -> tuple[list[Split], bool]:
    """The open last split cut again at chunk-size, as it is now: no pieces when it holds at most
    chunk-size rows; else at most PLAN_BATCH pieces, the first with the split's index, the last open,
    and whether that last one holds at most chunk-size rows (False: cut it again)."""
    most = max(planning.PLAN_BATCH, 2)
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
    landed = landed_by(splits, marks)
    split_state.record(ctx.session(), ctx.target.split_state, landed)
    return landed


def landed_by(splits: list[Split], marks: list[dict[str, Any]]) -> list[Split]:
    """The splits whose watermark row is in bronze (`marks`), landed at its positions."""
    found = {m["_chunk"]: m for m in marks if m["hw_file"]}
    return [s.landed_at(BinlogPosition(found[s.index]["hw_file"], int(found[s.index]["hw_pos"]),
                                       int(found[s.index].get("epoch") or 0)),
                        int(found[s.index]["rows"]),
                        BinlogPosition.parse(found[s.index]["lw"]) if found[s.index]["lw"] else None)
            for s in splits if s.index in found]


def read_group(ctx: Context, schema: TableSchema, splits: list[Split], ids: list[int],
               record: bool = True, landing: Landing | None = None) -> list[Split]:
    """Read a group's chunks into bronze under the server ids `ids`: in one Spark job, committed by
    Spark; or, for a `landing`, in this process, committed by delta-rs. Record them landed with their
    HW (unless `record` is False: the caller records them later)."""
    b, job = ctx.target.bronze(schema.name).location, chunk_job(ctx, schema, splits, ids)
    chunks = [s.index for s in splits]
    rows = landing.read(ctx, schema, job) if landing is not None and not landing.spilled else None
    if rows is not None:
        marks = landing.append(rows, chunks)  # type: ignore[union-attr]
    else:
        marks = bronze.append_chunks(bronze.typed_flat(ctx.snapshot_rows(job), schema), b, chunks)
    return landed_in(ctx, schema, splits, marks, record)


def landed_in(ctx: Context, schema: TableSchema, splits: list[Split], marks: list[dict[str, Any]],
              record: bool = True) -> list[Split]:
    """`splits`, just appended to bronze with their `marks`, recorded landed (unless `record` is False)."""
    faults.point("after_bronze_write", schema.name)
    landed = record_landed(ctx, splits, marks) if record else landed_by(splits, marks)
    missing = sorted({s.index for s in splits} - {s.index for s in landed})
    if missing:
        raise RuntimeFailure(f"chunks {missing} of {schema.name} have no watermark row in bronze after their read")
    return landed


def chunk_job(ctx: Context, schema: TableSchema, splits: list[Split], ids: list[int]) -> dict[str, Any]:
    """What the `binlake_snapshot` source reads: `splits` of `schema` under the server ids `ids`."""
    return {"connection": ctx.public_params(), "schema": schema.to_dict(), "splits": [s.to_dict() for s in splits],
            "server_ids": ids, "dialect": ctx.dialect.to_dict(),
            "reconnect_timeout": int(ctx.cfg.get("source.reconnect-timeout"))}


def apply_here(ctx: Context, schema: TableSchema, read: list[Split], landing: Landing, held: int | None,
               record: bool = True) -> int | None:
    """The chunks `read` into a `landing`, applied to silver from the rows it kept, by delta-rs when
    silver is a table it writes (appended when `held` proves none is there, see apply_to_silver),
    else by Spark from bronze; then recorded done (unless `record` is False). `held` after them."""
    location = ctx.target.silver(schema.name).location
    if silver.insert_snapshot_arrow(schema, landing.take(), location, ctx.shape, fresh=_fresh(ctx, schema, held)):
        faults.point("after_silver_chunks", schema.name)
        if record:
            split_state.record(ctx.session(), ctx.target.split_state, [s.applied() for s in read])
    else:
        apply_to_silver(ctx, schema, read, record, held)
    return _plus(held, read)


def apply_to_silver(ctx: Context, schema: TableSchema, landed: list[Split], record: bool = True,
                    held: int | None = None) -> None:
    """Apply landed chunks' rows to silver in one MERGE, then record them done (both idempotent;
    unless `record` is False: the caller records them later).

    `held` is how many rows silver holds if every apply so far was recorded (the rows of the chunks
    recorded done, and of those this process applied since), or None. When silver holds exactly
    that many, no row of `landed` is there: an apply commits all its rows or none, every row of a
    chunk is one key of its own, and nothing else reaches silver during a snapshot (see
    `silver.insert_snapshot`). The rows are then appended; after a crash between an apply and its
    record the count is higher, and the insert-only MERGE skips the rows already there. A filtered
    table's silver holds only the rows that match, so its count proves nothing: it is MERGEd."""
    if not landed:
        return
    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    location = ctx.target.silver(schema.name).location
    chunks = [s.index for s in landed]
    rows = spark.read.format("delta").load(b).where(F.col("_chunk").isin(chunks) & (F.col("_op") == "r"))
    silver.insert_snapshot(spark, schema, rows, location, b, ctx.shape, fresh=_fresh(ctx, schema, held))
    faults.point("after_silver_chunks", schema.name)
    if record:
        split_state.record(spark, ctx.target.split_state, [s.applied() for s in landed])


def _fresh(ctx: Context, schema: TableSchema, held: int | None) -> bool:
    """Whether silver holds none of the rows about to be applied: exactly `held` rows (see
    apply_to_silver), a count that proves nothing for a filtered or key-less table."""
    return held is not None and not schema.row_filter and not schema.multiset \
        and silver.row_count(ctx.session(), ctx.target.silver(schema.name).location) == held
