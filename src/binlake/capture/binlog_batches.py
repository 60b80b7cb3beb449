"""The binlog's micro-batches: offsets are binlog positions, a batch is the row changes of the
captured tables between two of them, as Arrow batches of bronze's flat change rows. `BinlogReader`
answers a streaming source's calls (`initialOffset`, `latestOffset`, `partitions`, `read`, `commit`)
through binlog_reader, handover (with the rules of a batch's range: binlake.capture.handover) and
failover: Spark's query asks them through the `binlake_binlog` source (`binlake.spark.binlog_source`),
a local lake's stream asks them in the driver (`binlake.capture.stream_loop`). The snapshot's reader
is `binlake.spark.sources`, the batches' shape `binlake.capture.arrow_batches`. A data row's values
come in `_vals` (its columns' encoded texts, in the order of the schema version it was read under);
`_row` carries the JSON of a schema marker or of a batch's trailer.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from binlake import faults
from binlake.capture.arrow_batches import BATCH_BYTES, BATCH_ROWS, arrow_batch, connection_params, meta_fields
from binlake.capture.failover import follow, state_at
from binlake.capture.handover import Handover, Skip, batch_start, before_reopen, server_moved
from binlake.errors import SchemaChangedError, SnapshotChangedError
from binlake.lake.evolution import Evolver, Version, column_defaults, marker_row
from binlake.offsets import BinlogPosition, event_seq, row_slot
from binlake.schema import TableSchema
from binlake.source.binlog_reader import RowChange, RowEvent, read_changes, split_key_change
from binlake.source.connection import connect
from binlake.source.dialect import Dialect, binlog_head
from binlake.source.gtids import Seen
from binlake.source.identity import Lineage, Watch, moved
from binlake.source.reconnect import retrying
from binlake.source.rowtext import Plans, RowValues
from binlake.source.schema_changes import Guard
from binlake.splits import Split


@dataclass
class BinlogRange:
    """A batch's binlog range: from one offset to the next."""
    start: dict[str, Any]
    end: dict[str, Any]


class BinlogReader:
    """Offsets are `{"file": ..., "pos": ...}` at transaction boundaries (the server's head when a
    micro-batch is planned), so a replayed batch reads exactly the same events again.

    With the job's `gtid_offsets` (the Lakeflow pipeline, which keeps no record files of its own), each
    offset also carries the GTID state at its position (`gtids`, `complete`), and after a failover the
    server it lies on (`lineage`): when `source.hostname` comes to lead to another server of the same
    replication topology, the reader follows it from the GTID state of the batch's start
    (binlake.capture.failover), and a restarted query knows the server from its checkpoint's offsets."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.job = json.loads(options["job"])
        self.plan: tuple[dict[str, TableSchema], dict[str, list[Split]]] | None = None  # see _plan
        self.handover: tuple[int, Handover] | None = None  # see _handover
        # see _watermarks
        self.watermarks: tuple[dict[str, BinlogPosition], dict[str, BinlogPosition]] | None = None
        self.watch: Any = None  # binlake.source.identity.Watch, made on the first call
        # the newest offset handed out or committed: the start of the next batch where Spark (before
        # 4.2) does not pass it to latestOffset
        self.last: dict[str, Any] | None = None
        # whether latestOffset keeps its connection for the read of the batch it planned (`Kept`): where
        # the same reader reads right after it plans (the stream's loop), not Spark's query's driver
        self.keeps = False
        self.kept: Kept | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark hands the reader to the process that reads the batch: a connection does not travel
        return {**self.__dict__, "kept": None}

    def initialOffset(self) -> dict[str, Any]:
        start = dict(self.job["start"])
        if self.job.get("gtid_offsets"):
            at = BinlogPosition.from_dict(start)
            gtids, complete = self._retrying(connection_params(self.options), "reading the GTID state",
                                             lambda conn: _gtid_state(conn, at, None))
            start.update(gtids=gtids, complete=complete)
        return start

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        base = start if start is not None else self.last
        params = connection_params(self.options)
        watch = self._watch(params, base)

        def head_now(conn: Any) -> dict[str, Any]:
            head = binlog_head(conn)
            until = self.job.get("until")
            if until is not None and head > BinlogPosition.from_dict(until):
                head = BinlogPosition.from_dict(until)  # --until-caught-up: nothing past the head at the start
            offset = watch.offset(conn, head, self._follower(base) if self.job.get("gtid_offsets") else None)
            if self.job.get("gtid_offsets"):
                here = BinlogPosition.from_dict(offset)
                same = base is not None and BinlogPosition.from_dict(base).epoch == here.epoch
                gtids, complete = _gtid_state(conn, here, base if same else None)
                offset.update(gtids=gtids, complete=complete)
                if watch.lineage.epoch > self._lineage(None).epoch:
                    offset["lineage"] = {k: v for k, v in watch.lineage.to_dict().items() if k != "files"}
            return offset

        offset = self._retrying(params, "asking for the binlog head", head_now, keep=self.keeps)
        # nothing new: the start itself, not its twin with another server start time (each reader's
        # look at `now - Uptime` wobbles by a second), which Spark would take for new data and plan an
        # empty batch to
        if base is not None and BinlogPosition.from_dict(offset) == BinlogPosition.from_dict(base):
            offset = base
        self.last = offset
        return self.last

    def _retrying(self, params: dict[str, Any], what: str, call: Any, keep: bool = False) -> Any:
        """`call(conn)` on a connection of its own, retried over lost connections (binlake.source.reconnect).
        With `keep`, the connection is kept (`Kept`) for the read of the batch the call plans."""
        def once() -> Any:
            conn = connect(params)
            try:
                answer = call(conn)
            except BaseException:
                conn.close()
                raise
            if keep:
                self._forget()
                self.kept = Kept(conn, time.monotonic())
            else:
                conn.close()
            return answer

        return retrying(params, float(self.job.get("reconnect_timeout", 0)), what, once)

    def _forget(self) -> None:
        if self.kept is not None and self.kept.conn.open:
            self.kept.conn.close()
        self.kept = None

    def _control(self, params: dict[str, Any], patience: float) -> Any:
        """The read's control connection: latestOffset's, just kept (see `Kept`), else a new one."""
        kept = self.kept
        if kept is not None and time.monotonic() - kept.at <= Kept.FOR and _answers(kept.conn):
            self.kept = None
            kept.conn.binlake_epoch = int(params["epoch"])
            return kept.conn
        self._forget()
        return retrying(params, patience, "opening the binlog", lambda: connect(params))

    def _lineage(self, offset: dict[str, Any] | None) -> Any:
        """The server `offset` lies on: the job's, or the one a failover carried into the offsets."""
        lineage = Lineage.from_dict(self.job["lineage"])
        carried = (offset or {}).get("lineage")
        return Lineage.from_dict(carried) if carried and int(carried["epoch"]) > lineage.epoch else lineage

    def _watch(self, params: dict[str, Any], base: dict[str, Any] | None) -> Any:
        if self.watch is None:
            self.watch = Watch(params, self._lineage(base), BinlogPosition.from_dict(base or self.job["start"]))
            if base is not None:
                self.watch.commit(base)
        return self.watch

    def _follower(self, base: dict[str, Any] | None) -> Any:
        """How the watch follows another server: by the GTID state at `base`, the start of the next batch
        (binlake.capture.failover), or SourceChangedError."""
        state = None if base is None or "gtids" not in base else {
            "end": BinlogPosition.from_dict(base).to_dict(), "gtids": base["gtids"], "complete": base["complete"]}
        patience = float(self.job.get("reconnect_timeout", 0))
        return lambda conn, lineage, committed, now: follow(conn, lineage, committed, now, state, patience)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[BinlogRange]:
        if BinlogPosition.from_dict(end) <= BinlogPosition.from_dict(start):
            return []
        return [BinlogRange(start, end)]

    def read(self, partition: BinlogRange) -> Iterator[Any]:

        params = connection_params(self.options)
        lineage = self._lineage(partition.end)
        params["epoch"] = lineage.epoch
        schemas = self._plan()[0]
        patience = float(self.job.get("reconnect_timeout", 0))
        gtid_offsets = bool(self.job.get("gtid_offsets"))
        conn = self._control(params, patience)
        try:
            # the batch was planned on the server its end offset names; another one now (a failover, a
            # replaced server), or the same restarted, must still hold the history up to its start
            stop, only = BinlogPosition.from_dict(partition.end), None
            if moved(conn, lineage.identity, partition.end.get("started")):
                lineage, replay = server_moved(conn, params, partition.start, partition.end, lineage, gtid_offsets,
                                               patience)
                if replay is not None:  # planned on a server that is gone: its transactions, by GTID
                    only, stop = replay
            params["epoch"] = lineage.epoch
            handover = self._handover(conn, lineage.epoch)
            # a table snapshotted again after a change starts at its new chunks' high watermarks
            first_hw, last_hw = self._watermarks()
            guard = Guard.on(schemas, conn, first_hw, self.job.get("patterns"))
            start, skip = batch_start(partition.start, lineage, self.job.get("since"), self.job.get("applied"), only)
            seen = Seen() if self.job.get("gtid_trailer") else None
            signals = self.job.get("signal_table")
            changes = read_changes(
                params, int(self.job["server_id"]), start, stop,
                lambda d, t: f"{d}.{t}" in schemas or f"{d}.{t}" == signals,
                reconnect_timeout=patience, ddl=True, on_reopen=lambda: before_reopen(params, partition.start, lineage, gtid_offsets),
                seen=seen, whole_events=True, control=conn,
            )
            evolver = _evolver(self.job, schemas, last_hw, start, guard, conn)
            values = RowValues()
            rows = _rows(_signals(changes, signals, values) if signals else changes, schemas, handover, guard, evolver,
                         skip, values)
            if seen is not None:  # the GTIDs this batch passed, for the driver's record (capture.micro_batch)
                rows = _trailed(rows, partition, seen, values)
            yield from _batches(rows, values)
        finally:
            conn.close()

    def _plan(self) -> tuple[dict[str, TableSchema], dict[str, list[Split]]]:
        """The job's schemas and chunks, read from it once (a large table's chunks are thousands)."""
        if self.plan is None:
            self.plan = ({n: TableSchema.from_dict(s) for n, s in self.job["schemas"].items()},
                         {n: [Split.from_dict(s) for s in ss] for n, ss in self.job["splits"].items()})
        return self.plan

    def _watermarks(self) -> tuple[dict[str, BinlogPosition], dict[str, BinlogPosition]]:
        """Each table's least and greatest chunk high watermark, of the tables whose chunks all have one:
        taken once, not at every batch (over a 20M-row table's 2,400 chunks, 5% of the stream's samples)."""
        if self.watermarks is None:
            done = {n: [s.hw for s in ss] for n, ss in self._plan()[1].items()
                    if ss and all(s.hw is not None for s in ss)}
            self.watermarks = ({n: min(hws) for n, hws in done.items()},  # type: ignore[type-var]
                               {n: max(hws) for n, hws in done.items()})  # type: ignore[type-var]
        return self.watermarks

    def _handover(self, conn: Any, epoch: int) -> Handover:
        """The handover of the job's chunks, bound on the server of `epoch` (a string key's order is its
        collation's) once, not at every batch: binding orders every chunk's start key."""
        if self.handover is None or self.handover[0] != epoch or not self.handover[1].bound:
            handover = Handover(*self._plan())
            handover.bind(conn)
            self.handover = (epoch, handover)
        return self.handover[1]

    def commit(self, end: dict[str, Any]) -> None:
        self._watch(connection_params(self.options), end).commit(end)
        self.last = end


@dataclass
class Kept:
    """The connection latestOffset asked the head on, kept for the read of the batch it planned (the
    stream's loop reads right after it plans). A connection costs a handshake: on MySQL, whose
    connections are TLS by default, about 3 ms of CPU; each batch took three (the head, the read's
    questions, the dump), about 14% of the steady stream's Python samples there, and now takes two.

    Taken only while at most FOR seconds old and answering a ping (else a new one, as before). The read
    checks the server behind it (`moved`) as it checked its own; the dump opens its own connection, as
    before. That check and the dump's connection were always milliseconds apart, and a server swapped
    behind the host name in between is not seen by the check; the kept connection moves them apart by
    the batch's planning too (its offset written), a few milliseconds more. latestOffset's next call
    opens a new connection, to see where the host name leads then.
    """

    conn: Any
    at: float
    FOR = 5.0


def _answers(conn: Any) -> bool:
    """Whether the connection `conn` still answers (a ping)."""
    try:
        conn.ping(reconnect=False)
    except Exception:  # noqa: BLE001 - gone (killed, timed out, the server restarted): not taken
        return False
    return True


Row = tuple[Any, ...]  # one flat change row: the meta columns (arrow_batches.meta_fields), then _row
# A row's `_seq` is a Python int: pyarrow makes a DECIMAL(38,0) of 2,000 ints in 0.43 ms, of the same
# values as Decimals in 5.9 ms (about 5% of a 2,000-change micro-batch's CPU, the steady bench's).


def _rows(changes: Iterator[Any], schemas: dict[str, Any], handover: Any, guard: Any, evolver: Any,
          skip: Skip, values: RowValues) -> Iterator[Row]:
    """The batch's flat change rows: each row change the handover emits (its values pushed to `values`
    as it is yielded, one `values` row per row), a schema version marker where the evolver follows a
    change, and a stop (SchemaChangedError) where the guard judges one, before any row of the changed
    table is handed over."""
    encoders: dict[int, Any] = {}  # id of a schema (version) -> its row encoder
    plans = Plans()
    for change in changes:
        if isinstance(change, tuple):  # a note of the batch, its values pushed already (`_signals`)
            yield change
            continue
        if not isinstance(change, (RowEvent, RowChange)):
            version = evolver.follow(change) if evolver is not None else False
            if version is False:
                _judge(guard, evolver, change)
            elif version is not None:
                values.push(None)
                yield (version.table, "s", version.seq, None, version.at.file, version.at.pos,
                       None, None, None, marker_row(version))
            continue
        if skip(change):  # a whole row event's rows share what it looks at (ts, gtid, epoch)
            continue
        schema = evolver.schema(change.table) if evolver is not None else schemas[change.table]
        each: Iterator[Any] = iter((change,))
        if isinstance(change, RowEvent):  # a whole row event: natively to text where it can be
            if handover.passes_all(change.table, change.at):
                continue  # inside the snapshot of every row it holds: not even decoded
            changed = None
            if handover.emits_all(change.table, change.at):
                plan = plans.plan(schema, change.event.columns, change.shape())
                changed = change.native_values(plan, values.native) if plan is not None else None
            if changed is not None:
                yield from _native(change, changed)
                continue
            each = change.changes(schema.keeps if schema.choice is not None else None)
        encode = encoders.get(id(schema))
        if encode is None:
            encode = encoders[id(schema)] = schema.row_encoder()
        for one in each:
            for part in split_key_change(one, schema.key, operator.eq):
                if not handover.should_emit(part):
                    continue
                try:
                    encoded = encode(part.image)
                except Exception as exc:  # noqa: BLE001 - one line naming the column and the key, not a trace
                    raise schema.unconvertible(part.image, exc, "batch") from None
                values.push(encoded)
                yield (part.table, part.op, part.seq, part.ts, part.file, part.pos, part.gtid,
                       None, None, None)


def _signals(changes: Iterator[Any], table: str, values: RowValues) -> Iterator[Any]:
    """`changes` with the signal table's own taken out: each row inserted into it a note of the batch
    (`_op` x, under the table "", its `_row` the signal's JSON; binlake.capture.signals), in binlog order
    with the data; its other changes, and its schema's, passed over."""
    for change in changes:
        if getattr(change, "table", None) != table:
            yield change
            continue
        if not isinstance(change, (RowEvent, RowChange)) or change.op != "c":
            continue
        for one in change.changes() if isinstance(change, RowEvent) else (change,):
            image = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in one.image.items()}
            values.push(None)
            yield ("", "x", one.seq, one.ts, one.file, one.pos, one.gtid, None, None,
                   json.dumps({"signal": {"id": str(image.get("id")), "type": image.get("type"),
                                          "data": image.get("data")}, "seq": str(one.seq)}))


def _native(event: RowEvent, changed: list[bool]) -> Iterator[Row]:
    """The flat change rows of a row event its plan appended to the values (an update that changed the
    key: a delete of the old key and an insert of the new one, as `split_key_change` makes them), each
    row in its slot."""
    table, ts, at, gtid, op = event.table, event.ts, event.at, event.gtid, event.op
    base = event_seq(at.file, at.pos, 0, at.epoch)
    for i, split in enumerate(changed):
        if not split:
            yield (table, op, base + row_slot(i), ts, at.file, at.pos, gtid, None, None, None)
        else:
            yield (table, "d", base + row_slot(i), ts, at.file, at.pos, gtid, None, None, None)
            yield (table, "c", base + row_slot(i, True), ts, at.file, at.pos, gtid, None, None, None)


def _trailed(rows: Iterator[Row], partition: BinlogRange, seen: Any, values: RowValues) -> Iterator[Row]:
    """The rows, then a trailer with the GTIDs the batch passed (known once they are all read)."""
    yield from rows
    values.push(None)
    yield ("", "g", None, None, None, None, None, None, None, json.dumps(
        {"start": partition.start, "end": partition.end, "gtids": seen.text(), "complete": seen.complete}))


def _batches(rows: Iterator[Row], values: RowValues) -> Iterator[Any]:
    """Arrow batches of at most BATCH_ROWS rows and about BATCH_BYTES of values."""
    import pyarrow as pa

    fields = meta_fields() + [("_row", pa.string())]
    batch: list[Row] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH_ROWS or values.nbytes() >= BATCH_BYTES:
            yield _batch(fields, batch, values)
            batch = []
            # a batch may end inside a multi-row event: harmless, since the micro-batch's offsets
            # (server heads, at transaction boundaries) never do, and a replayed micro-batch reads the
            # whole event again, each row in its slot
            faults.point("binlog_batch_handed", row[0])
    if batch:
        yield _batch(fields, batch, values)


def _batch(fields: list[tuple[str, Any]], rows: list[Row], values: RowValues) -> Any:
    """One Arrow batch of `rows`, with their `_vals` taken from `values`."""
    import pyarrow as pa

    meta = arrow_batch(fields, [list(c) for c in zip(*rows)])
    return pa.RecordBatch.from_arrays([*meta.columns, values.take(len(rows))], names=[*meta.schema.names, "_vals"])


def _gtid_state(conn: Any, position: BinlogPosition, base: dict[str, Any] | None) -> tuple[str, bool]:
    """The GTID state at `position`, from the state at `base` (an earlier offset on the same server) on."""
    return state_at(conn, Dialect.of(conn), position, base)


def _evolver(job: dict[str, Any], schemas: dict[str, Any], snapshot_end: dict[str, BinlogPosition],
             start: BinlogPosition, guard: Any, conn: Any) -> Any:
    """The reader's schema versions under `stream.schema-changes` other than `fail` (None under `fail`)."""
    if job.get("schema_changes", "fail") == "fail":
        return None
    recorded = {n: [Version.from_dict(v) for v in vs] for n, vs in (job.get("versions") or {}).items()}
    for name, schema in schemas.items():
        recorded.setdefault(name, [Version(name, None, schema)])
    # a change before a table's last chunk's high watermark (`snapshot_end`) is inside its snapshot, so
    # the guard's to judge
    return Evolver(recorded, start, guard.current, lambda name: column_defaults(conn, *name.split(".", 1)),
                   lambda name, at: name in schemas and (name not in snapshot_end or at >= snapshot_end[name]))


def _judge(guard: Any, evolver: Any, change: Any) -> None:
    """The guard's verdict on a change the evolver does not follow. A change inside a table's snapshot
    (between its chunks' high watermarks) is a `SnapshotChangedError`: the snapshot is taken again."""
    try:
        guard.check(change)
    except SchemaChangedError as changed:
        if evolver is not None and change.table in evolver.current and not evolver.past(change.table, change.position):
            raise SnapshotChangedError(changed.message) from None
        raise
