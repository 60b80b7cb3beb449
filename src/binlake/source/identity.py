"""Which server binlake reads, and whether it still holds the history a stored position belongs to.

A binlog position (`file:pos`) names a place in one server's binlog. The same name on another server
-- after a restore from a backup, a blue/green switch, a new data directory, a DNS name moved to
another instance -- is a place in another history, and reading on from it would pass changes over
without a word. So binlake keeps, beside the positions it stores, what identifies their history:

- the server: its `@@server_id` and, on MySQL, its `@@server_uuid`, made once per data directory
  (`Dialect.identity`), and which of the two it is;
- each binlog file's creation time: the timestamp of its first event (Format_description). A new
  data directory makes its files anew, and so does a server restored from a backup: it opens a fresh
  file when it starts, under the next name after the backup's newest.

Before it reads on from a stored position -- when a run starts, before each micro-batch once the
server has restarted, and when a lost connection is reopened -- binlake checks that:

1. the server is the same one (the same kind, UUID and server id);
2. the position's file is there, created at the recorded time, and at least `pos` bytes long.

A file past the server's newest (a restore from an older backup), one created again (a replaced data
directory) or one too short fails the check: `SourceChangedError`, or a new snapshot under
`stream.on-source-change: resnapshot`. A file older than the server's oldest was purged
(`stream.on-purged`).

The record (`_binlake/source.json`) holds the server's identity and the creation time of each file a
stored position lies in: the one at the head when planning began, each snapshot chunk's high
watermark's, noted as the chunks are read. The stream's own positions carry their file's creation
time in the offset Spark stores with each micro-batch.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from binlake.errors import SourceChangedError
from binlake.offsets import BinlogPosition, file_index
from binlake.source.connection import settings
from binlake.source.dialect import Dialect, binlog_sizes, server_name


class RecordFile(Protocol):
    """Where the record is kept: a `binlake.lake.storage.Location`, whose write replaces it whole."""

    def exists(self) -> bool: ...

    def read_text(self) -> str: ...

    def write_text(self, text: str) -> None: ...


# a server restarted when its start time (now - Uptime) moved by more than this
RESTART_SLACK = 3.0


@dataclass(frozen=True)
class ServerIdentity:
    server: str  # "mysql" or "mariadb"
    server_id: int
    uuid: str | None = None  # MySQL's @@server_uuid
    version: str = ""

    def same(self, other: ServerIdentity) -> bool:
        return (self.server, self.server_id, self.uuid) == (other.server, other.server_id, other.uuid)

    def __str__(self) -> str:
        uuid = f" server_uuid {self.uuid}," if self.uuid else ""
        return f"{server_name(self.server)} {self.version}{uuid} server_id {self.server_id}".replace("  ", " ")

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server, "server_id": self.server_id, "uuid": self.uuid, "version": self.version}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerIdentity:
        return cls(str(d["server"]), int(d["server_id"]), d.get("uuid"), str(d.get("version", "")))


def identify(conn: Any) -> tuple[ServerIdentity, float]:
    """The server behind `conn`, and when it started (Unix seconds, to about a second)."""
    dialect = Dialect.of(conn)
    server_id, uuid = dialect.identity(conn)
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Uptime'")
        uptime = float((cur.fetchone() or (None, 0))[1])
    version = ".".join(map(str, dialect.version))
    identity = ServerIdentity(dialect.server, server_id, uuid, version)
    return identity, time.time() - uptime


def file_created(params: dict[str, Any], file: str) -> int | None:
    """When binlog `file` was created: the timestamp of its Format_description event; None when the
    server does not have the file. Read over a replication connection (the statement form, SHOW BINLOG
    EVENTS, leaves the timestamp out) with server id 0, as mysqlbinlog reads: a non-blocking dump under
    id 0 is not a replica, and never takes the place of a reader using a real id (both servers end
    another dump of the same id only for a nonzero one)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import FormatDescriptionEvent


    # by file and position on both servers: the library's default (its MariaDB mode would start from a
    # GTID state instead)
    stream = BinLogStreamReader(
        connection_settings=settings(params), server_id=0, log_file=file, log_pos=4, resume_stream=True,
        blocking=False, only_events=[FormatDescriptionEvent], enable_logging=False,
    )
    try:
        event = stream.fetchone()
        return int(event.timestamp) if event is not None else None
    except Exception as exc:  # noqa: BLE001 - error 1236: the file is not there (any other error is raised)
        if "1236" in str(exc) or (getattr(exc, "args", None) and exc.args[0] == 1236):
            return None
        raise
    finally:
        stream.close()


@dataclass(frozen=True)
class Anchor:
    """A stored position and what identifies its history."""

    position: BinlogPosition
    identity: ServerIdentity
    created: int | None  # when position.file was created, if recorded


def _when(ts: int | None) -> str:
    return "unknown" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def changed_message(anchor: Anchor, what: str) -> str:
    return (
        f"the source at source.hostname no longer holds the binlog history binlake's stored position "
        f"belongs to: stored {anchor.position} on {anchor.identity} (file created {_when(anchor.created)}), "
        f"but {what}; binlake never reads on from a position in another history: point source.hostname back "
        "at that server, or set stream.on-source-change: resnapshot to snapshot the tables again, or delete "
        "the target and run again"
    )


def moved(conn: Any, identity: ServerIdentity, started: float | None) -> bool:
    """Whether the server behind `conn` is not `identity`, or has restarted since `started`."""
    now, since = identify(conn)
    return not identity.same(now) or (started is not None and abs(since - started) > RESTART_SLACK)


def verify(conn: Any, params: dict[str, Any], anchor: Anchor) -> None:
    """Raise SourceChangedError unless the server behind `conn` holds the history up to `anchor`. A
    file older than the server's oldest passes: that is a purge, which the caller reports as such."""
    now, _ = identify(conn)
    if not anchor.identity.same(now):
        raise SourceChangedError(changed_message(anchor, f"the server is now {now}"))
    sizes = binlog_sizes(conn)
    file, pos = anchor.position.file, anchor.position.pos
    if file not in sizes:
        newest = max(sizes, key=file_index, default=None)
        if newest is not None and file_index(file) > file_index(newest):
            raise SourceChangedError(changed_message(
                anchor, f"its binlog ends at {newest}, before {file} (restored from an older backup?)"))
        return
    if sizes[file] < pos:
        raise SourceChangedError(changed_message(
            anchor, f"its {file} is {sizes[file]} bytes, shorter than the position (restored from an older backup?)"))
    if anchor.created is not None:
        created = file_created(params, file)
        if created is not None and created != anchor.created:
            raise SourceChangedError(changed_message(
                anchor, f"its {file} was created {_when(created)}: a new binlog under the same name"))


@dataclass
class Lineage:
    """The record in `_binlake/source.json`: the server binlake reads, the creation time of each binlog
    file a stored position lies in, the epoch of that server's positions (binlake.offsets) and, after
    a failover, where it began (binlake.capture.failover)."""

    identity: ServerIdentity
    files: dict[str, int] = field(default_factory=dict)
    epoch: int = 0
    failover: dict[str, Any] | None = None  # the latest: epoch, start (here), applied (GTIDs had), from, at

    @classmethod
    def load(cls, path: RecordFile) -> Lineage | None:
        if not path.exists():
            return None
        return cls.from_dict(json.loads(path.read_text()))

    def save(self, path: RecordFile) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1))

    def anchor(self, position: BinlogPosition, created: int | None = None) -> Anchor:
        """`position` with what identifies its history. A position on a server before the failover is,
        on this one, where the failover began."""
        if position.epoch < self.epoch and self.failover is not None:
            position, created = BinlogPosition.from_dict(self.failover["start"]), None
        return Anchor(position, self.identity, created if created is not None else self.files.get(position.file))

    def note(self, params: dict[str, Any], files: list[str]) -> bool:
        """Record the creation time of `files` not recorded yet; whether any was."""
        added = False
        for file in sorted(set(files) - set(self.files), key=file_index):
            created = file_created(params, file)
            if created is not None:
                self.files[file] = created
                added = True
        return added

    def failed_over(self, identity: ServerIdentity, start: BinlogPosition, applied: str,
                    at: BinlogPosition) -> Lineage:
        """The record after a failover to `identity`: its positions take the next epoch; the stream reads
        on from `start` there, skipping the transactions `applied` names (binlake had them up to `at`)."""
        epoch = self.epoch + 1
        here = BinlogPosition(start.file, start.pos, epoch)
        return Lineage(identity, {}, epoch, {"epoch": epoch, "start": here.to_dict(), "applied": applied,
                                              "from": self.identity.to_dict(), "at": at.to_dict()})

    def to_dict(self) -> dict[str, Any]:
        return {"identity": self.identity.to_dict(), "files": dict(self.files), "epoch": self.epoch,
                "failover": self.failover}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Lineage:
        return cls(ServerIdentity.from_dict(d["identity"]), {str(k): int(v) for k, v in d.get("files", {}).items()},
                   int(d.get("epoch") or 0), d.get("failover"))


class Watch:
    """The stream's look at the server before each micro-batch (`offset`): its identity and start time.
    At the first look, on a new identity and after a restart, the whole history up to the last
    committed position (`verify`); each position handed out carries its file's creation time."""

    def __init__(self, params: dict[str, Any], lineage: Lineage, start: BinlogPosition) -> None:
        self.params, self.lineage = params, lineage
        self.committed = lineage.anchor(start)
        self.started: float | None = None

    def commit(self, end: dict[str, Any]) -> None:
        self.committed = self.lineage.anchor(BinlogPosition.from_dict(end), end.get("created"))

    def adopt(self, lineage: Lineage) -> None:
        """Follow a failover (binlake.capture.failover): the committed position is, on the new server, where the
        failover began; the next look checks the history up to it there."""
        self.lineage = lineage
        self.committed = lineage.anchor(self.committed.position)
        self.started = None

    def offset(self, conn: Any, head: BinlogPosition, follow: Any = None) -> dict[str, Any]:
        """`head` as the offset of the next micro-batch. With `follow(conn, lineage, committed, now)`,
        another server is followed (binlake.capture.failover) rather than refused."""
        now, started = identify(conn)
        if follow is not None and not self.lineage.identity.same(now):
            self.adopt(follow(conn, self.lineage, self.committed, now))
        restarted = self.started is not None and abs(started - self.started) > RESTART_SLACK
        if self.started is None or restarted or not self.lineage.identity.same(now):
            verify(conn, self.params, self.committed)
            # the history up to the committed position is the same; files after it may be new (a crash
            # can lose a tail that was written but never synced, and so never served)
            upto = file_index(self.committed.position.file)
            self.lineage.files = {f: c for f, c in self.lineage.files.items() if file_index(f) <= upto}
        if self.started is None or restarted:
            self.started = started  # kept while the server runs: `now - Uptime` wobbles by a second
        head = BinlogPosition(head.file, head.pos, self.lineage.epoch)
        created = self.lineage.files.get(head.file)
        if created is None:
            created = file_created(self.params, head.file)
            if created is not None:
                self.lineage.files[head.file] = created
        # the server's start time goes with the position: a reader meeting another
        # (binlake.capture.binlog_batches) checks the history before it reads
        return {**head.to_dict(), "created": created, "started": round(self.started)}
