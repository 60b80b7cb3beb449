"""Snapshots taken beside the running stream: DBLog's incremental snapshot, as Debezium offers it. A
table is snapshotted at any time (a signal, binlake.capture.signals), paused and resumed, while the
stream goes on for every table, this one included; nothing is locked and nothing is written to the source.

The table's chunks are read one after another, in a thread of their own, each by the exact chunk read
of the first snapshot (binlake.source.chunk_reader: its own low and high watermark, folded), so a
chunk's rows are the table's state at its high watermark HW for every key in its range. The stream
meanwhile emits every change of the table, as usual. A chunk lands between two micro-batches, once
the stream has committed past its HW:
  1. its rows go to bronze as snapshot reads (`r`, at HW's `_seq`);
  2. those whose key bronze holds a change after HW of are left out: silver holds that change already
     (a newer image, or no row for a delete);
  3. the others replace silver's rows of their keys: every change before HW is older than them, and
     every later one left them out. A row of the same `_seq` is replaced too: an older snapshot's read
     at the same HW, on a source quiet since.
Once the last chunk has landed, silver's rows whose key the snapshot touched nowhere -- in none of its
chunks in bronze, in no change since it began -- are deleted: the key was not in the table at its
chunk's HW and has not come back since, so the source does not hold it. Keys are compared by value,
never placed in a range of the server's order (a collation's). A snapshot repairs silver, rows too
many included.

Worked example: chunk [100, 200) read with HW 000003:900; the stream has committed to 000003:1200.
    bronze after HW: u id 150 at 000003:1000, d id 170 at 000003:1100
    chunk rows: 120, 150, 170 (their state at 000003:900)
    -> 120 replaces silver's row; 150 and 170 are left out (silver holds 150's update and not 170)

Where a snapshot stands is a small file per table (`_binlake/snapshots/`): the next chunk's start and
index. It is written before a chunk's rows reach bronze (the index moves on) and after they reach
silver (the start moves on), so a kill anywhere reads the chunk again, under a new index: bronze may
then hold a chunk's snapshot rows twice, at two high watermarks, never a change twice.
"""

from __future__ import annotations

import json
import logging
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable

import pyarrow.compute as pc
import pymysql

from binlake.capture import metrics
from binlake.capture.chunking import next_range
from binlake.capture.context import Context, current_position
from binlake.capture.plan import table_rows
from binlake.capture.side_state import DONE, PAUSED, REFUSALS_KEPT, RUNNING, STOPPED, SideSnapshot, states
from binlake.capture.signals import Signal, SignalRefused, waiting
from binlake.capture.snapshot import chunk_job
from binlake.errors import BinlakeError, RuntimeFailure
from binlake.lake import arrow_commit, arrow_types, bronze, chunk_merge, split_state
from binlake.lake.checkpoint import committed_offset
from binlake.offsets import BinlogPosition, snapshot_seq
from binlake.schema import TableSchema, qualified
from binlake.source.connection import connect
from binlake.splits import Split

log = logging.getLogger(__name__)

@dataclass
class _Read:
    state: SideSnapshot
    future: Future[tuple[Split, Any]]


class SideSnapshots:
    """The snapshots beside a stream driven in this process (binlake.capture.stream_loop): `step`
    between two micro-batches takes the signals written since, lands a chunk read whose high watermark
    the stream has committed past, and starts the next read. `schema(name)` is the table's schema as
    the stream has it now; `index(schema)` its silver's key index (binlake.capture.micro_batch)."""

    def __init__(self, ctx: Context, schema: Callable[[str], TableSchema], index: Callable[[TableSchema], Any]) -> None:
        self.ctx, self.schema, self.index = ctx, schema, index
        self.folder = ctx.target.side_snapshots
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="side-snapshot")
        self.reading: _Read | None = None
        self.idle = False  # no snapshot ran at the last look, and no signal came since: no look at the states

    def step(self, committed: BinlogPosition) -> bool:
        """Between two batches, the stream committed up to `committed`. Whether a snapshot is under way."""
        self._take_signals()
        self._land(committed)
        if self.reading is None and not self.idle:
            self._read_next()
        return self.reading is not None

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    # -- signals -------------------------------------------------------------------------------------

    def _take_signals(self) -> None:
        for entry, signal in waiting(self.ctx.target.signals):
            self.idle = False
            try:
                if isinstance(signal, SignalRefused):
                    raise signal
                self._carry_out(signal)
            except SignalRefused as refused:
                self._refuse(refused.message)
            entry.unlink(missing_ok=True)

    def _refuse(self, message: str) -> None:
        log.error("signal refused: %s", message)
        kept = self.folder / "refused.jsonl"
        lines = (kept.read_text().splitlines() if kept.exists() else [])[-(REFUSALS_KEPT - 1):]
        kept.write_text("\n".join([*lines, json.dumps({"at": time.time(), "message": message})]) + "\n")

    def _carry_out(self, signal: Signal) -> None:
        captured = sorted(self.ctx.schemas())
        unknown = [t for t in signal.tables if not any(t == n or re.fullmatch(t, n) for n in captured)]
        if unknown:
            raise SignalRefused(
                f"signal {signal.id} ({signal.kind}) names {', '.join(unknown)}, which is not a captured table; "
                f"binlake takes tables source.tables matches ({', '.join(captured)}): name one as db.table")
        names = [n for n in captured if signal.matches(n)]
        held = states(self.folder)
        if signal.kind == "execute-snapshot":
            self._execute(signal, names, held)
            return
        change = {"pause-snapshot": (RUNNING, PAUSED), "resume-snapshot": (PAUSED, RUNNING),
                  "stop-snapshot": (RUNNING, STOPPED)}[signal.kind]
        chosen = [held[n] for n in names if n in held and held[n].status in
                  ((RUNNING, PAUSED) if signal.kind == "stop-snapshot" else (change[0],))]
        if not chosen:
            raise SignalRefused(f"signal {signal.id} ({signal.kind}): no snapshot of "
                                f"{', '.join(signal.tables) or 'any table'} is {change[0]}; nothing to "
                                f"{signal.kind.split('-')[0]}")
        for state in chosen:
            saved = replace(state, status=change[1]).save(self.ctx.target.side_snapshot(state.table))
            metrics.side_snapshot(saved)
            log.warning("snapshot of %s %s (chunk %d, %d rows so far)", state.table,
                        {PAUSED: "paused", RUNNING: "resumed", STOPPED: "stopped"}[change[1]], state.chunks,
                        state.rows)
        if self.reading is not None and self.reading.state.table in {s.table for s in chosen} \
                and change[1] == STOPPED:
            self.reading = None  # its rows are left unlanded

    def _execute(self, signal: Signal, names: list[str], held: dict[str, SideSnapshot]) -> None:
        busy = [n for n in names if n in held and held[n].status in (RUNNING, PAUSED)]
        if busy:
            raise SignalRefused(f"signal {signal.id} (execute-snapshot): {', '.join(busy)} is being snapshotted "
                                f"already ({held[busy[0]].chunks} chunks landed); send stop-snapshot first to "
                                "begin again")
        for name in names:
            condition = signal.condition(name)
            why = _unsupported(self.ctx, self.schema(name)) or _refused_condition(self.ctx, name, condition)
            if why:
                raise SignalRefused(f"signal {signal.id} (execute-snapshot): {name} {why}")
        for name in names:
            begin(self.ctx, [name], f"signal {signal.id}", condition=signal.condition(name))

    # -- chunks --------------------------------------------------------------------------------------

    def _read_next(self) -> None:
        running = sorted((s for s in states(self.folder).values() if s.status == RUNNING), key=lambda s: s.began_at)
        self.idle = not running
        if running:
            state = running[0]
            self.reading = _Read(state, self.pool.submit(_read_chunk, self.ctx, self.schema(state.table), state))

    def _land(self, committed: BinlogPosition) -> None:
        reading = self.reading
        if reading is None or not reading.future.done():
            return
        table = reading.state.table
        where = self.ctx.target.side_snapshot(table)
        try:
            split, rows = reading.future.result()
        except Exception as exc:  # noqa: BLE001 - the snapshot stops, in one line; the stream goes on
            self.reading = None
            why = exc.message if isinstance(exc, BinlakeError) else f"{type(exc).__name__}: {exc}"
            self._refuse(f"the snapshot of {table} beside the stream stopped: {' '.join(why.split())[:400]}")
            replace(reading.state, status=STOPPED).save(where)
            return
        if committed < split.hw:  # type: ignore[operator]
            return  # the stream has still to pass its high watermark
        self.reading = None
        state = SideSnapshot.load(where)
        if state is None or state.began_at != reading.state.began_at or state.status not in (RUNNING, PAUSED):
            return  # stopped meanwhile: its rows are left unlanded
        schema = self.schema(table)
        state = replace(state, chunk=split.index + 1).save(where)  # a kill from here reads it again anew
        landed = _land_chunk(self.ctx, schema, split, rows, self.index(schema))
        state = replace(state, start=split.end, chunks=state.chunks + 1, rows=state.rows + landed)
        if split.end is None:
            if state.condition is None:  # a snapshot of the rows a condition matches deletes nothing
                _forget_untouched(self.ctx, schema, state, self.index(schema))
            state = replace(state, status=DONE)
            log.warning("snapshot of %s beside the stream done: %d chunks, %d rows", split.table, state.chunks,
                        state.rows)
        state = state.save(where)
        metrics.side_snapshot(state)


def begin(ctx: Context, names: list[str], why: str, status: str = RUNNING, condition: str | None = None,
          fresh: bool = False) -> None:
    """Snapshot `names` beside the stream from now on, of their rows that match `condition` when given
    (`status` DONE: record them as needing none, a table the stream captures from its CREATE). `fresh`:
    tables new to the capture, whose changes before now the stream passes (see `handover_splits`)."""
    head = ctx.retrying("asking for the binlog head", lambda: current_position(ctx))
    for name in names:
        chunk = _next_chunk(ctx, name)
        estimate = _estimate(ctx, name) if status == RUNNING else None
        state = SideSnapshot(name, why, status, str(head), chunk, chunk, began_at=time.time(), condition=condition,
                             fresh=fresh, estimate=estimate)
        state.save(ctx.target.side_snapshot(name))
        metrics.side_snapshot(state)
        if status == RUNNING:
            log.warning("snapshotting %s beside the stream (%s)", name, why)


def adopt(ctx: Context, names: list[str], why: str = "new to the capture") -> list[str]:
    """Tables new to the capture, snapshotted beside the stream (`begin`), their changes before it
    passed by the stream: those it can take; the others are returned, for the caller to capture."""
    schemas = ctx.schemas()
    taken = [n for n in names if _unsupported(ctx, schemas[n]) is None]
    if taken:
        begin(ctx, taken, why, fresh=True)
    return [n for n in names if n not in taken]


def handover_splits(ctx: Context) -> dict[str, list[Split]]:
    """For the stream's handover (binlake.capture.handover): each table new to the capture and snapshotted
    beside the stream as one chunk of its whole key space, landed at the binlog head when its snapshot
    began. Its changes before that are passed by, as a chunk's before its high watermark: every one of
    its rows then is in a chunk read after it. A `CREATE TABLE ... AS SELECT` of a million rows is then
    read in chunks beside the stream, instead of holding the other tables back while the stream lands
    its rows."""
    out = {}
    for name, state in states(ctx.target.side_snapshots).items():
        if state.fresh and name in ctx.schemas():
            whole = Split(name, 0, 0, None, None)
            out[name] = [whole.landed_at(BinlogPosition.parse(state.head), 0)]
    return out


def _unsupported(ctx: Context, schema: TableSchema) -> str | None:
    """Why the table cannot be snapshotted beside the stream, or None."""
    if not arrow_commit.local(ctx.target.silver(schema.name).location):
        return "lives in a lake behind a URI, where the stream is Spark's query: use binlake resnapshot there"
    if schema.multiset:
        return "has no key: use binlake resnapshot for it"
    if schema.row_filter:
        return "has a source.row-filter: use binlake resnapshot for it"
    if not ctx.shape.plain:
        return "keeps deleted rows or every version in silver (silver.*): use binlake resnapshot for it"
    if arrow_types.typer(schema) is None:
        return "has a column type the snapshot beside the stream does not read yet: use binlake resnapshot for it"
    return None


def _refused_condition(ctx: Context, name: str, condition: str | None) -> str | None:
    """Why the server refuses `condition` over the table's rows, or None (a condition it takes, or none)."""
    if condition is None:
        return None
    db, table = name.split(".", 1)
    conn = connect(ctx.params)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {qualified(db, table)} WHERE ({condition.replace('%', '%%')}) LIMIT 0", [])
        return None
    except pymysql.err.MySQLError as exc:
        return (f"has the additional condition {condition!r}, which the server refuses ({exc.args[-1]}); "
                "fix the filter: SQL over the table's columns, as in a WHERE clause")
    finally:
        conn.close()


def _estimate(ctx: Context, name: str) -> int:
    """The table's rows as the server estimates them (counted when few), for the chunks left."""
    conn = connect(ctx.params)
    try:
        return table_rows(conn, ctx.schemas()[name], ctx.cfg.chunk_size)
    finally:
        conn.close()


def _next_chunk(ctx: Context, name: str) -> int:
    """An index for a new chunk of the table: past every chunk bronze holds rows of."""
    location = ctx.target.bronze(name).location
    if not arrow_commit.readable(location):
        return 0
    found = arrow_commit.query(location, "bronze", "SELECT max(_chunk) AS m FROM bronze").column("m")[0].as_py()
    return 0 if found is None else int(found) + 1


def _read_chunk(ctx: Context, schema: TableSchema, state: SideSnapshot) -> tuple[Split, Any]:
    """The next chunk of the table, cut at chunk-size rows where the server says (`next_range`) and read
    exactly: the chunk (landed at its high watermark) and its rows as bronze's columns."""
    conn = connect(ctx.params)
    try:
        start, end = next_range(conn, schema, ctx.cfg.chunk_size, state.start)
    finally:
        conn.close()
    split = Split(schema.name, 0, state.chunk, start, end)
    with ctx.readers(1) as ids:
        flat = ctx.snapshot_here({**chunk_job(ctx, schema, [split], ids), "condition": state.condition})
    if flat is None:
        raise RuntimeFailure(f"a chunk of {schema.name} holds more than binlake reads at once, beside the stream; "
                             "lower snapshot.chunk-size")
    rows = arrow_types.typer(schema)(flat)  # type: ignore[misc]  # `_unsupported` refuses a table it cannot type
    mark = bronze.arrow_marks(rows, [split.index])[0]
    if mark["hw_file"] is None:
        raise RuntimeFailure(f"chunk {split.index} of {schema.name} has no watermark row after its read")
    hw = BinlogPosition(mark["hw_file"], int(mark["hw_pos"]), int(mark["epoch"]))
    lw = BinlogPosition.parse(mark["lw"]) if mark["lw"] else None
    return split.landed_at(hw, int(mark["rows"]), lw), rows


def _land_chunk(ctx: Context, schema: TableSchema, split: Split, rows: Any, index: Any) -> int:
    """A chunk read (`rows`, bronze's columns) into bronze, then silver (see the module); its rows."""
    name = schema.name
    b = ctx.target.bronze(name).location
    s = ctx.target.silver(name).location
    if not arrow_commit.takes(b, bronze.struct(schema).fieldNames()):
        raise RuntimeFailure(f"{name}'s bronze is not a table delta-rs writes; use binlake resnapshot for it")
    arrow_commit.add_file(b, rows)
    reads = rows.filter(pc.equal(rows.column("_op"), "r"))
    seq = snapshot_seq(split.hw)  # type: ignore[arg-type]
    fresh = chunk_merge.without(reads, chunk_merge.changed_since(b, list(schema.key), seq), list(schema.key))
    chunk_merge.apply(s, schema, fresh, index, ctx.shape)
    return reads.num_rows


def _forget_untouched(ctx: Context, schema: TableSchema, state: SideSnapshot, index: Any) -> None:
    """Silver's rows whose key the snapshot touched nowhere, deleted (see the module)."""
    s, b = ctx.target.silver(schema.name).location, ctx.target.bronze(schema.name).location
    gone = chunk_merge.untouched(s, b, schema, state.first, state.since)
    if gone.num_rows:
        log.warning("%s: %d rows in silver are not in the source; deleted", schema.name, gone.num_rows)
        chunk_merge.apply(s, schema, gone, index, ctx.shape)


def adopt_new(ctx: Context) -> None:
    """Before `binlake run` plans: the captured tables a stream that has run before does not know yet
    (added to source.tables since, or matching it now), snapshotted beside the stream (`adopt`) rather
    than before it, where they would hold every other table's changes back for as long as they take."""
    if committed_offset(ctx.target.checkpoint_files) is None:
        return  # the first snapshot: every table before the stream
    known = set(states(ctx.target.side_snapshots)) | set(split_state.planned(ctx.session(), ctx.target.split_state)[0])
    new = [n for n in ctx.schemas() if n not in known]
    if new:
        adopt(ctx, new)
