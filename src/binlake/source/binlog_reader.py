"""Reading row changes from the binlog between two positions.

mysql-replication speaks the replication protocol and decodes row events; with
`binlog_row_metadata=FULL` every table-map event carries the column names, so each row is decoded
with the schema that was current when it was written. This module turns its events into
`RowChange`s with exact positions: an event's start is its end position minus its size.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.json_binary import JsonDiff
from pymysqlreplication.event import (GtidEvent, MariadbGtidEvent, NotImplementedEvent, QueryEvent, RotateEvent,
                                     XidEvent)
from pymysqlreplication.row_event import DeleteRowsEvent, PartialUpdateRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.errors import PositionGoneError, RuntimeFailure
from binlake.offsets import BinlogPosition, event_seq, row_slot
from binlake.source.reconnect import Backoff, is_connection_lost
from binlake.source.rowcodec import RowDecoder
from binlake.source.schema_changes import SchemaChange, ShapeColumn, TableShape, ddl_tables, shape_of
from binlake.source import binlog_types
from binlake.source.connection import DEFAULT_READ_TIMEOUT, connect, settings
from binlake.source.dialect import purged
from binlake.source.gtids import GTID_NEXT, Seen

log = logging.getLogger(__name__)

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


def _open(params: dict[str, Any], server_id: int, start: BinlogPosition) -> BinLogStreamReader:
    return BinLogStreamReader(
        connection_settings=settings(params),
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
        # is_mariadb=True would make the library ignore log_file/log_pos and start from a GTID state;
        # MariaDB GTID events still arrive (the library always sets @mariadb_slave_capability=4).
        is_mariadb=False,
        enable_logging=False,
    )


class NotServedYet(Exception):
    """The dump ended, or refused to start, short of a position the server has reported written."""


@dataclass
class Catchup:
    """Waiting for the server to serve what it has already written.

    A binlog dump sends only what the server has synced, but `SHOW ... STATUS` reports the written
    end, and with `sync_binlog=1` an fsync sits between the two. A read up to (or from) a position
    reported a moment ago can find the dump short of it: it ends early, or refuses to start with error
    1236 'position > file size'. That is a short wait, not a server restart and not a purge. The wait
    is bounded by `source.read-timeout` without progress; pauses grow from 5 ms to 200 ms.
    """

    timeout: float
    _since: float | None = None
    _pause: float = 0.005

    def wait(self, why: str) -> None:
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since >= self.timeout:
            raise RuntimeFailure(
                f"{why} for {self.timeout:g}s; binlake waits for the server to serve what it reported "
                "written: raise source.read-timeout if its disk is that slow, or check the server"
            )
        time.sleep(self._pause)
        self._pause = min(self._pause * 2, 0.2)

    def reset(self) -> None:
        self._since, self._pause = None, 0.005


def _failure(exc: Exception, params: dict[str, Any], start: BinlogPosition, server_id: int) -> Exception:
    """The server's refusal as one line binlake can act on (or `NotServedYet`), or `exc` itself."""
    text = str(exc)
    if "max_allowed_packet" in text:
        return RuntimeFailure(
            f"a binlog event after {start} is larger than the server's max_allowed_packet; binlake "
            "needs the whole event: SET GLOBAL max_allowed_packet=1073741824 (and in the server "
            "config), then run again"
        )
    # MySQL refuses a second replica with the same id with error 1236 too, so this test comes first
    if "server_id" in text.lower() or "server id" in text.lower():
        return RuntimeFailure(
            f"binlog reader server id {server_id} was taken over by another replica or binlake pipeline "
            "connecting with the same id; binlake needs ids no other reader of this source uses: set "
            "source.server-id to a free range"
        )
    code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
    if code != 1236 and "1236" not in text:
        return exc
    if "file size" in text or "impossible position" in text:
        return NotServedYet(f"the source refused to send its binlog from {start} (not yet synced)")
    # a 1236 is a purge only if the file is really gone: the same code covers other refusals
    gone = gone_error(params, start)
    if gone is not None:
        return gone
    message = " ".join(str(exc.args[-1] if exc.args else exc).split())
    return RuntimeFailure(f"the source refused to send its binlog from {start}: {message} (MySQL error 1236)")


def gone_error(params: dict[str, Any], position: BinlogPosition) -> PositionGoneError | None:
    """The error to raise when `position`'s binlog file is no longer on the server, else None."""
    conn = connect(params)
    try:
        oldest = purged(conn, position)
    finally:
        conn.close()
    return None if oldest is None else PositionGoneError(purged_message(position, oldest))


def purged_message(position: BinlogPosition, oldest: str | None = None) -> str:
    have = f" (its oldest is {oldest})" if oldest else ""
    return (
        f"binlog file {position.file} (stored position {position}) has been purged from the server{have}; "
        "binlake cannot resume from it without losing changes: set stream.on-purged: resnapshot to snapshot "
        "the tables again, or delete the target and run again; keep binlogs longer "
        "(binlog_expire_logs_seconds / expire_logs_days) so it does not recur"
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
    GTID of every transaction that starts before `stop`, wanted or not.
    """
    backoff = Backoff(params, reconnect_timeout)
    catchup = Catchup(float(params.get("read_timeout") or DEFAULT_READ_TIMEOUT))
    epoch = start.epoch
    txn_start = start  # where the transaction being read began: a safe place to reopen
    done = start  # events starting before this were handled completely
    in_txn = False
    gtid: str | None = None
    shapes: dict[str, tuple[int, tuple[ShapeColumn, ...]]] = {}
    fast = RowDecoder()
    tagged = TaggedGtids(params)
    lost = False
    while True:
        if lost and on_reopen is not None:
            try:
                on_reopen()
            except Exception as exc:  # noqa: BLE001 - still away: keep waiting, within the patience
                if not is_connection_lost(exc):
                    raise
                backoff.wait(exc, f"reading the binlog at {done}")
                continue
        lost = False
        stream = _open(params, server_id, txn_start)
        try:
            while True:
                try:
                    event = stream.fetchone()
                except Exception as exc:  # the library raises pymysql errors with the server's text
                    if is_connection_lost(exc):
                        if reconnect_timeout <= 0:
                            raise RuntimeFailure(
                                f"lost the source while reading the binlog at {done} ({_cause(exc)}); set "
                                "source.reconnect-timeout to ride out a server restart or a dropped connection"
                            ) from None
                        backoff.wait(exc, f"reading the binlog at {done}")
                        lost = True
                        break
                    failure = _failure(exc, params, txn_start, server_id)
                    if isinstance(failure, NotServedYet):
                        catchup.wait(str(failure))
                        break
                    if failure is exc:
                        raise
                    raise failure from None
                if event is None:
                    reached = (BinlogPosition(stream.log_file, int(stream.log_pos or 0), epoch) if stream.log_file
                               else None)
                    if stop is None or (reached is not None and reached >= stop):
                        return
                    # the dump ended short of `stop`, which the server had reported written: it has not
                    # synced it yet (see Catchup). Returning here would commit a batch with events
                    # missing; a server going away fails the reopen instead, which takes the reconnect path.
                    catchup.wait(f"the source's binlog dump ended at {reached}, short of {stop} it reported written,")
                    break
                backoff.reset()
                catchup.reset()
                end = int(event.packet.log_pos)
                size = int(event.packet.event_size)  # the whole event; `event.event_size` leaves out header and checksum
                file = stream.log_file
                if isinstance(event, RotateEvent):
                    continue
                begin = end - size if end else 0
                here = BinlogPosition(file, begin, epoch)
                if stop is not None and here >= stop:
                    return
                if isinstance(event, (GtidEvent, MariadbGtidEvent)):
                    gtid = str(event.gtid)
                    txn_start, in_txn = here, True
                    if seen is not None:
                        seen.add(gtid)
                elif isinstance(event, NotImplementedEvent) and event.event_type == GTID_TAGGED_LOG_EVENT:
                    gtid = tagged.gtid(here)
                    txn_start, in_txn = here, True
                    if seen is not None:
                        seen.add(gtid)
                elif isinstance(event, NotImplementedEvent) and event.event_type == ANONYMOUS_GTID_LOG_EVENT:
                    if seen is not None:
                        seen.add(None)  # a transaction without a GTID: no GTID state to fail over with
                elif isinstance(event, QueryEvent) and _query(event) == "BEGIN":
                    if not in_txn:
                        txn_start, in_txn = here, True
                elif here < done:
                    continue  # yielded before the connection was lost
                elif isinstance(event, NotImplementedEvent):
                    if event.event_type == TRANSACTION_PAYLOAD_EVENT:
                        raise RuntimeFailure(compressed_message(here))
                    continue  # anonymous or tagged GTIDs, heartbeats: no rows
                elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                    if wanted(event.schema, event.table):
                        if ddl:
                            yield from _shape_change(shapes, event, file, begin, txn_start)
                        yield from _rows(event, here, gtid, fast)
                elif isinstance(event, XidEvent) or not _query(event).startswith(("SAVEPOINT", "ROLLBACK TO")):
                    if ddl and isinstance(event, QueryEvent):
                        default_db = event.schema.decode("utf-8") if isinstance(event.schema, bytes) else str(event.schema)
                        for kind, db, table in ddl_tables(event.query, default_db):
                            # the guard knows which tables a DROP DATABASE takes, and which new ones match
                            if wanted(db, table) or kind in ("drop_database", "create_table", "rename"):
                                yield SchemaChange(f"{db}.{table}", kind, file, begin, _text(event.query),
                                                   txn_start if in_txn else here)
                    gtid = None
                    in_txn = False
                    if end:
                        txn_start = BinlogPosition(file, end, epoch)
                if end:
                    done = max(done, BinlogPosition(file, end, epoch))
                    if on_position is not None:
                        on_position(BinlogPosition(file, end, epoch), int(event.timestamp))
        finally:
            stream.close()
            tagged.close()


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


def _rows(event: Any, at: BinlogPosition, gtid: str | None, fast: RowDecoder) -> Iterator[RowChange]:
    table = f"{event.schema}.{event.table}"
    ts = int(event.timestamp)
    update = isinstance(event, UpdateRowsEvent)
    partial = isinstance(event, PartialUpdateRowsEvent)
    images = None if partial else fast.images(event, update)
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
