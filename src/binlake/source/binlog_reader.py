"""Reading row changes from the binlog between two positions.

mysql-replication speaks the replication protocol and decodes row events; with
`binlog_row_metadata=FULL` every table-map event carries the column names, so each row is decoded
with the schema that was current when it was written. This module turns its events into
`RowChange`s with exact positions: an event's start is its end position minus its size.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.event import (
    GtidEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.json_binary import JsonDiff
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from binlake.errors import RuntimeFailure
from binlake.offsets import BinlogPosition, event_seq, row_slot
from binlake.source import binlog_types
from binlake.source.binlog_dump import Catchup, NotServedYet, refusal
from binlake.source.connection import DEFAULT_READ_TIMEOUT, connect, settings
from binlake.source.gtids import GTID_NEXT, Seen
from binlake.source.reconnect import Backoff, is_connection_lost
from binlake.source.rowcodec import RowDecoder
from binlake.source.schema_changes import SchemaChange, ShapeColumn, TableShape, ddl_tables, shape_of

log = logging.getLogger(__name__)
# the library re-requests a stream it lost, with a warning of several lines each time; binlake's own
# reconnecting (binlake.source.reconnect) says in one line when it gives up, so only its errors show
logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)

Op = Literal["c", "u", "d"]


binlog_types.install()  # before any event is parsed, also by a reader opened directly (the tests)


@dataclass(frozen=True)
class RowChange:
    """One row of a row event. Key-changing updates are split by `split_key_change`."""

    table: str  # "db.table"
    op: Op
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    file: str
    pos: int  # start position of the row event
    row: int  # index of the row inside its event
    ts: int  # commit time, Unix seconds
    gtid: str | None = None
    second_half: bool = False  # the insert half of a key-changing update
    epoch: int = 0  # the server's, see binlake.offsets

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition(self.file, self.pos, self.epoch)

    @property
    def seq(self) -> int:
        return event_seq(self.file, self.pos, row_slot(self.row, self.second_half), self.epoch)

    @property
    def image(self) -> dict[str, Any]:
        """The row as it is after the change, or as it was before a delete."""
        return self.after if self.after is not None else self.before  # type: ignore[return-value]


def split_key_change(change: RowChange, key: tuple[str, ...], same: Callable[[Any, Any], bool]) -> list[RowChange]:
    """An update that changes the key is a delete of the old key followed by an insert of the new one."""
    if change.op != "u" or change.before is None or change.after is None:
        return [change]
    if all(same(change.before[k], change.after[k]) for k in key):
        return [change]
    return [replace(change, op="d", after=None), replace(change, op="c", before=None, second_half=True)]


def _open(params: dict[str, Any], server_id: int, start: BinlogPosition, control: Any = None) -> BinLogStreamReader:
    return BinLogStreamReader(
        connection_settings=settings(params),
        # the library's control connection is `control` where the caller holds one (a handshake fewer)
        pymysql_wrapper=binlog_types.connector(control),
        server_id=server_id,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=False,
        # the library matches classes exactly: a partial update (PARTIAL_JSON) must be asked for, and an
        # event it cannot decode (a compressed transaction) arrives as NotImplementedEvent, not at all
        # when left out -- which would lose its rows without a word
        only_events=[WriteRowsEvent, UpdateRowsEvent, PartialUpdateRowsEvent, DeleteRowsEvent, GtidEvent,
                     MariadbGtidEvent, RotateEvent, XidEvent, QueryEvent, NotImplementedEvent],
        filter_non_implemented_events=False,
        # by file and position on both servers: the library's default (its MariaDB mode would ignore
        # log_file/log_pos and start from a GTID state); MariaDB GTID events still arrive (the library
        # always sets @mariadb_slave_capability=4)
        enable_logging=False,
    )


def read_changes(
    params: dict[str, Any],
    server_id: int,
    start: BinlogPosition,
    stop: BinlogPosition | None,
    wanted: Callable[[str, str], bool],
    on_position: Callable[[BinlogPosition, int], None] | None = None,
    reconnect_timeout: float = 0,
    ddl: bool = False,
    on_reopen: Callable[[], None] | None = None,
    seen: Seen | None = None,
    control: Any = None,
    whole_events: bool = False,
    keeps: Callable[[str], bool] | None = None,
) -> Iterator[Any]:
    """Row changes of tables `wanted(db, table)` from `start` up to (not including) `stop`.

    Without `stop`, reads to the current end of the binlog. `on_position(pos, ts)` is called after
    every event with the position after it, so callers can record progress for idle tables too.
    With `ddl`, also yields, in binlog order, a `SchemaChange` for each DDL statement naming a wanted
    table and a `TableShape` before the first row event of a wanted table and whenever its columns differ
    from the previous row event's.

    A connection lost mid-read is reopened (with backoff, for up to `reconnect_timeout` seconds) at
    the start of the transaction being read, not at the last event: a row event decodes only after
    its transaction's table-map events. Events already yielded are skipped on the way back, so no
    row is lost or repeated. Example: rows of the events at 500 and 620 were yielded, the event at
    740 was being read, the transaction began at 420 -> reopen at 420, skip events starting before
    740. Before that reopen, `on_reopen()` may refuse a server that no longer holds the history read so
    far (binlake.source.identity): one restarted with a new data directory, say. `seen` collects the
    GTID of every transaction that starts before `stop`, wanted or not. `control`: a PyMySQL
    connection the caller holds, lent to mysql-replication for its questions to the server at the
    first open (it opens one of its own otherwise, and after a lost connection, which may have taken
    the lent one with it). With `whole_events`, a row event of a wanted table comes as one
    `RowEvent`, its rows not decoded yet, instead of its `RowChange`s. `keeps(column)` says which
    columns of a row are read (`TableSchema.keeps`, for one table's read; every column when None).
    """
    reading = _Reading(params, start, stop, wanted, on_position, ddl, seen, whole_events, keeps)
    backoff = Backoff(params, reconnect_timeout)
    catchup = Catchup(float(params.get("read_timeout") or DEFAULT_READ_TIMEOUT))
    lost = False
    lend = control
    while True:
        if lost and on_reopen is not None:
            try:
                on_reopen()
            except Exception as exc:  # noqa: BLE001 - still away: keep waiting, within the patience
                if not is_connection_lost(exc):
                    raise
                backoff.wait(exc, f"reading the binlog at {reading.done}")
                continue
        lost = False
        stream = _open(params, server_id, reading.txn_start, lend)
        lend = None
        try:
            while True:
                try:
                    event = stream.fetchone()
                except Exception as exc:  # the library raises pymysql errors with the server's text
                    lost = _refused(exc, reading, backoff, catchup, reconnect_timeout, server_id)
                    break
                if event is None:
                    reached = (BinlogPosition(stream.log_file, int(stream.log_pos or 0), reading.epoch)
                               if stream.log_file else None)
                    if stop is None or (reached is not None and reached >= stop):
                        return
                    # the dump ended short of `stop`, which the server had reported written: it has not
                    # synced it yet (see Catchup). Returning here would commit a batch with events
                    # missing; a server going away fails the reopen instead, which takes the reconnect path.
                    catchup.wait(f"the source's binlog dump ended at {reached}, short of {stop} it reported written,")
                    break
                backoff.reset()
                catchup.reset()
                if (yield from reading.take(event, stream.log_file)):
                    return
        finally:
            stream.close()
            reading.tagged.close()


def _refused(exc: Exception, reading: _Reading, backoff: Backoff, catchup: Catchup, reconnect_timeout: float,
             server_id: int) -> bool:
    """After the dump failed with `exc`: True for a lost connection to reopen (once `backoff` waited),
    False for a dump not served yet (once `catchup` waited); anything else raised as one line."""
    if is_connection_lost(exc):
        if reconnect_timeout <= 0:
            raise RuntimeFailure(
                f"lost the source while reading the binlog at {reading.done} ({_cause(exc)}); set "
                "source.reconnect-timeout to ride out a server restart or a dropped connection"
            ) from None
        backoff.wait(exc, f"reading the binlog at {reading.done}")
        return True
    failure = refusal(exc, reading.params, reading.txn_start, server_id)
    if isinstance(failure, NotServedYet):
        catchup.wait(str(failure))
        return False
    if failure is exc:
        raise exc
    raise failure from None


@dataclass
class _Reading:
    """Where a read stands in the binlog, across the dump connections it takes: the start of the
    transaction being read (a safe place to reopen) and the end of the events handled completely."""

    params: dict[str, Any]
    start: BinlogPosition
    stop: BinlogPosition | None
    wanted: Callable[[str, str], bool]
    on_position: Callable[[BinlogPosition, int], None] | None
    ddl: bool
    seen: Seen | None
    whole_events: bool = False
    keeps: Callable[[str], bool] | None = None
    in_txn: bool = False
    gtid: str | None = None

    def __post_init__(self) -> None:
        self.epoch = self.start.epoch
        self.txn_start = self.start  # where the transaction being read began: a safe place to reopen
        self.done = self.start  # events starting before this were handled completely
        self.shapes: dict[str, tuple[int, tuple[ShapeColumn, ...]]] = {}
        self.fast = RowDecoder()
        self.tagged = TaggedGtids(self.params)

    def take(self, event: Any, file: str) -> Generator[Any, None, bool]:
        """The changes of one event read from `file`; True once the read has reached `stop`."""
        end = int(event.packet.log_pos)
        size = int(event.packet.event_size)  # the whole event; `event.event_size` leaves out header and checksum
        if isinstance(event, RotateEvent):
            return False
        begin = end - size if end else 0
        here = BinlogPosition(file, begin, self.epoch)
        if self.stop is not None and here >= self.stop:
            return True
        if not (yield from self._handle(event, here, file, begin, end)):
            return False
        if end:
            self.done = max(self.done, BinlogPosition(file, end, self.epoch))
            if self.on_position is not None:
                self.on_position(BinlogPosition(file, end, self.epoch), int(event.timestamp))
        return False

    def _handle(self, event: Any, here: BinlogPosition, file: str, begin: int, end: int) -> Generator[Any, None, bool]:
        """The changes of an event starting at `here`; False for one passed over whole (read before
        the connection was lost, or one without rows), which moves no position."""
        if isinstance(event, (GtidEvent, MariadbGtidEvent)):
            self._begin(str(event.gtid), here)
        elif isinstance(event, NotImplementedEvent) and event.event_type == GTID_TAGGED_LOG_EVENT:
            self._begin(self.tagged.gtid(here), here)
        elif isinstance(event, NotImplementedEvent) and event.event_type == ANONYMOUS_GTID_LOG_EVENT:
            if self.seen is not None:
                self.seen.add(None)  # a transaction without a GTID: no GTID state to fail over with
        elif isinstance(event, QueryEvent) and _query(event) == "BEGIN":
            if not self.in_txn:
                self.txn_start, self.in_txn = here, True
        elif here < self.done:
            return False  # yielded before the connection was lost
        elif isinstance(event, NotImplementedEvent):
            if event.event_type == TRANSACTION_PAYLOAD_EVENT:
                raise RuntimeFailure(compressed_message(here))
            return False  # anonymous or tagged GTIDs, heartbeats: no rows
        elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            if self.wanted(event.schema, event.table):
                if self.ddl:
                    yield from _shape_change(self.shapes, event, file, begin, self.txn_start)
                if self.whole_events and not isinstance(event, PartialUpdateRowsEvent):
                    yield RowEvent(event, here, self.gtid, self.fast)
                else:
                    yield from _rows(event, here, self.gtid, self.fast, self.keeps)
        elif isinstance(event, XidEvent) or not _query(event).startswith(("SAVEPOINT", "ROLLBACK TO")):
            if self.ddl and isinstance(event, QueryEvent):
                yield from self._schema_changes(event, file, begin, here)
            self.gtid = None
            self.in_txn = False
            if end:
                self.txn_start = BinlogPosition(file, end, self.epoch)
        return True

    def _begin(self, gtid: str | None, here: BinlogPosition) -> None:
        self.gtid = gtid
        self.txn_start, self.in_txn = here, True
        if self.seen is not None:
            self.seen.add(gtid)

    def _schema_changes(self, event: Any, file: str, begin: int, here: BinlogPosition) -> Iterator[SchemaChange]:
        default_db = event.schema.decode("utf-8") if isinstance(event.schema, bytes) else str(event.schema)
        for kind, db, table in ddl_tables(event.query, default_db):
            # the guard knows which tables a DROP DATABASE takes, and which new ones match
            if self.wanted(db, table) or kind in ("drop_database", "create_table", "rename"):
                yield SchemaChange(f"{db}.{table}", kind, file, begin, _text(event.query),
                                   self.txn_start if self.in_txn else here)


def _cause(exc: BaseException) -> str:
    code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
    return f"MySQL error {code}" if code is not None else type(exc).__name__


def _shape_change(shapes: dict[str, tuple[int, tuple[ShapeColumn, ...]]], event: Any, file: str,
                  begin: int, txn: BinlogPosition) -> Iterator[TableShape]:
    """A `TableShape` when the event's columns differ from the table's previous row event's."""
    name = f"{event.schema}.{event.table}"
    # the server gives a table a new table id when its definition changes, so the columns are
    # compared again only when the id does
    seen = shapes.get(name)
    if seen is None or seen[0] != event.table_id:
        shape = shape_of(event.columns)
        if seen is None or seen[1] != shape:
            yield TableShape(name, shape, file, begin, txn)
        shapes[name] = (event.table_id, shape)


def _text(q: Any) -> str:
    return q.decode(errors="replace") if isinstance(q, bytes) else str(q)


def _query(event: Any) -> str:
    return _text(event.query).strip().upper()


class RowEvent:
    """A row event of a wanted table, its rows not decoded yet (`read_changes(whole_events=True)`): the
    reader takes them straight to text where it can (`native_values`, binlake.source.rowtext) and as
    `RowChange`s otherwise (`changes`). Either before it reads the next item: the event's bytes are
    the replication connection's current packet."""

    def __init__(self, event: Any, at: BinlogPosition, gtid: str | None, fast: RowDecoder) -> None:
        self.event, self.at, self.gtid, self.fast = event, at, gtid, fast
        self.table = f"{event.schema}.{event.table}"
        self.op: Op = "u" if isinstance(event, UpdateRowsEvent) else "c" if isinstance(event, WriteRowsEvent) else "d"
        self.ts = int(event.timestamp)
        self.epoch = at.epoch

    def changes(self, keeps: Callable[[str], bool] | None = None) -> Iterator[RowChange]:
        """The event's rows, with the columns `keeps` keeps (all when None; `TableSchema.keeps`)."""
        return _rows(self.event, self.at, self.gtid, self.fast, keeps)

    def shape(self) -> tuple[Any, ...]:
        return self.fast.shape(self.event.columns)

    def native_values(self, plan: Any, values: Any) -> list[bool] | None:
        """The rows' texts appended to `values` (binlake.source.rowtext: `Plan.append`, whose answer this
        is: per row, whether an update changed its key), or None with nothing appended, the event then
        left whole for `changes`: a minimal image, or a value the plan does not read."""
        event = self.event
        if not event.complete or not self.fast.full_images(event, self.op == "u"):
            return None
        packet = event.packet
        data = packet.read(event.event_size - packet.read_bytes)
        changed = plan.append(data, self.op == "u", values)
        if changed is None:
            packet.unread(data)
        return changed  # type: ignore[no-any-return]


def _rows(event: Any, at: BinlogPosition, gtid: str | None, fast: RowDecoder,
          keeps: Callable[[str], bool] | None = None) -> Iterator[RowChange]:
    table = f"{event.schema}.{event.table}"
    ts = int(event.timestamp)
    update = isinstance(event, UpdateRowsEvent)
    partial = isinstance(event, PartialUpdateRowsEvent)
    images = None if partial else fast.images(event, update, keeps)
    if images is None:  # a shape the generated decoder leaves to mysql-replication
        columns = getattr(event, "columns", [])
        times = [c.name for c in columns if c.type == FIELD_TYPE.TIME2]
        sets = {c.name: c.set_values for c in columns if c.type == FIELD_TYPE.SET and c.set_values}
        images = [(_image(row, "before_", times, sets), _image(row, "after_", times, sets)) if update
                  else _image(row, "", times, sets) for row in event.rows]
    if partial:
        images = [(before, _whole_json(before, after, table, at)) for before, after in images]
    insert = isinstance(event, WriteRowsEvent)
    file, begin, epoch = at.file, at.pos, at.epoch
    for i, image in enumerate(images):
        if update:
            yield RowChange(table, "u", image[0], image[1], file, begin, i, ts, gtid, epoch=epoch)
        elif insert:
            yield RowChange(table, "c", None, image, file, begin, i, ts, gtid, epoch=epoch)
        else:
            yield RowChange(table, "d", image, None, file, begin, i, ts, gtid, epoch=epoch)


ANONYMOUS_GTID_LOG_EVENT = 34  # MySQL with gtid_mode OFF: a transaction without a GTID
GTID_TAGGED_LOG_EVENT = 42  # MySQL 8.4+: a GTID with a tag, `uuid:tag:n`, which mysql-replication does not decode


class TaggedGtids:
    """The GTIDs of tagged-GTID events, read from the server's own rendering of the event (SHOW BINLOG
    EVENTS): mysql-replication leaves the event undecoded. One query per tagged transaction, on a
    connection opened at the first one."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.conn: Any = None

    def gtid(self, at: BinlogPosition) -> str | None:
        if self.conn is None:
            self.conn = connect(self.params)
        with self.conn.cursor() as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN '{at.file}' FROM {int(at.pos)} LIMIT 1")
            row = cur.fetchone()
        found = GTID_NEXT.search(str(row[5])) if row else None
        return found.group(1) if found else None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


SAME_AS_BEFORE = object()  # a JSON column a partial update left alone
TRANSACTION_PAYLOAD_EVENT = 40  # a compressed transaction (binlog_transaction_compression=ON)


def compressed_message(at: BinlogPosition) -> str:
    return (
        f"the binlog holds a compressed transaction at {at} (binlog_transaction_compression=ON), which binlake "
        "cannot read yet, and skipping it would lose its changes; turn it off on the server (SET GLOBAL "
        "binlog_transaction_compression=OFF, and in any session that sets it), then take a new snapshot: delete the "
        "target, or run binlake resnapshot for each captured table"
    )


def _whole_json(before: dict[str, Any], after: dict[str, Any], table: str, at: BinlogPosition) -> dict[str, Any]:
    """A partial update's after image with whole JSON values: a JSON column the update left alone comes
    as "same as before"; one it changed in place comes as a diff, which binlake refuses."""
    whole = dict(after)
    for name, value in after.items():
        if isinstance(value, JsonDiff):
            raise RuntimeFailure(
                f"{table} has a partial JSON update at {at} (binlog_row_value_options=PARTIAL_JSON): the binlog holds "
                f"only the change to column {name}, which binlake does not apply yet; set binlog_row_value_options='' "
                "on the server (SET GLOBAL, and in any session that sets it), then run binlake resnapshot for "
                f"{table}"
            )
        if value is SAME_AS_BEFORE:
            whole[name] = before.get(name)
    return whole


def _image(row: dict[str, Any], prefix: str, times: list[str],
           sets: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """One row image, with three of the library's decodings corrected.

    A SET is a Python set of its members: it becomes their list in definition order, the order the
    server prints them in (the table map's members are the column's own, in its character set). An
    empty SET comes back as None, like NULL; its none-source tells them apart. A negative TIME
    with a fraction is stored as one two's-complement number, but the library negates the whole
    seconds and the fraction separately: -00:00:00.25 decodes as -00:00:00.75 (-(S + 1 - f) for
    the true -(S + f)).
    """
    values: dict[str, Any] = dict(row[f"{prefix}values"])
    for k, members in (sets or {}).items():
        chosen = values.get(k)
        if isinstance(chosen, set):
            values[k] = [m for m in members if m in chosen]
    for k, why in row.get(f"{prefix}none_sources", {}).items():
        if why == NONE_SOURCE.EMPTY_SET:
            values[k] = []
        elif why == NONE_SOURCE.JSON_PARTIAL_UPDATE:
            values[k] = SAME_AS_BEFORE
    for k in times:
        v = values.get(k)
        if isinstance(v, dt.timedelta) and v < dt.timedelta(0):
            whole, micros = divmod(-v // dt.timedelta(microseconds=1), 1_000_000)
            if micros:
                values[k] = -dt.timedelta(seconds=whole, microseconds=1_000_000 - micros)
    return values
