"""Where a stream without a snapshot starts: the startup modes, after Flink CDC's
`scan.startup.mode`.

- `initial` (default): snapshot every captured table, then stream from the handover;
- `snapshot`: the snapshot only, then stop;
- `latest`: no snapshot; stream from the server's head when the stream first starts;
- `earliest`: no snapshot; stream from the start of the oldest binlog file on the server;
- `specific`: no snapshot; stream from `stream.startup-position`: `file:position` (a transaction
  boundary such as `SHOW BINARY LOG STATUS` printed); on MySQL a GTID set (`@@gtid_executed`), from
  the newest binlog file that every transaction before is in the set, skipping the set's own
  transactions wherever they lie after it (as a replica with auto-positioning does); or on
  MariaDB a GTID position `domain-server-seq`
  per domain (`0-1-42,1-7-3`, as `@@gtid_binlog_pos` prints it) naming the last transaction already
  had: the stream starts at the first later transaction of a named domain and skips the named
  domains' transactions up to those numbers wherever they lie after it (domains interleave in the
  binlog); domains the position does not name start there too;
- `timestamp`: no snapshot; stream the changes written at or after `stream.startup-timestamp`
  (Unix seconds), reading from the newest binlog file created at or before it.

The start is chosen once, on the first start of the stream, and stored next to the checkpoint
(`_binlake/start.json`), so a restart before the first committed micro-batch starts at the same
place rather than at a new head.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from binlake.config import Config
from binlake.errors import ConfigError
from binlake.lake.storage import Location
from binlake.offsets import BinlogPosition
from binlake.source.dialect import Dialect, binlog_files, binlog_head
from binlake.source.gtids import (
    binlog_events,
    contains,
    covered_file,
    file_state,
    is_mysql_state,
    parse_state,
    previous_gtids,
)
from binlake.source.identity import file_created

__all__ = ["contains", "parse_position", "resolve", "validate"]

MODES = ("initial", "snapshot", "latest", "earliest", "specific", "timestamp")
SNAPSHOT_MODES = ("initial", "snapshot")


@dataclass(frozen=True)
class Start:
    position: BinlogPosition
    since: int | None = None  # only changes written at or after this Unix time
    applied: dict[str, Any] | None = None  # the GTIDs already had (binlake.source.gtids)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position.to_dict(), "since": self.since, "applied": self.applied}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Start:
        return cls(BinlogPosition.from_dict(d["position"]), d.get("since"), d.get("applied"))


_GTID = re.compile(r"(\d+)-(\d+)-(\d+)")


def parse_position(text: str) -> BinlogPosition | dict[str, Any]:
    """A `file:position`, a MariaDB GTID position ({domain: sequence number}) or a MySQL GTID set
    ({uuid: intervals}), see `binlake.source.gtids`."""
    gtids = parse_state(text)
    if gtids is not None:
        return gtids
    file, sep, pos = text.rpartition(":")
    if not sep or not pos.isdigit() or not file:
        raise ConfigError(
            f"stream.startup-position is {text!r}; binlake needs 'file:position' such as mysql-bin.000003:1234 "
            "(as SHOW BINARY LOG STATUS prints it), a MariaDB GTID position such as 0-1-42 (as @@gtid_binlog_pos "
            "prints it) or a MySQL GTID set such as 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42 (as "
            "@@gtid_executed prints it): fix stream.startup-position"
        )
    return BinlogPosition(file, int(pos))


def validate(cfg: Config) -> None:
    """The settings each mode needs, checked before anything runs."""
    mode = cfg.get("stream.startup-mode")
    if mode == "specific":
        if not cfg.get("stream.startup-position"):
            raise ConfigError("stream.startup-mode is 'specific' but stream.startup-position is not set; binlake "
                              "needs 'file:position' or a MariaDB GTID position: set stream.startup-position")
        parse_position(cfg.get("stream.startup-position"))
    if mode == "timestamp" and cfg.get("stream.startup-timestamp") is None:
        raise ConfigError("stream.startup-mode is 'timestamp' but stream.startup-timestamp is not set; binlake "
                          "needs Unix seconds: set stream.startup-timestamp")


def resolve(cfg: Config, conn: Any, dialect: Dialect, stored: Location) -> Start:
    """The stream's start for a non-snapshot mode: the stored one, else chosen now and stored."""
    if stored.exists():
        return Start.from_dict(json.loads(stored.read_text()))
    validate(cfg)
    mode = cfg.get("stream.startup-mode")
    if mode == "latest":
        start = Start(binlog_head(conn))
    elif mode == "earliest":
        start = Start(BinlogPosition(binlog_files(conn)[0], 4))
    elif mode == "specific":
        position = parse_position(cfg.get("stream.startup-position"))
        files = binlog_files(conn)
        if isinstance(position, dict):
            text = cfg.get("stream.startup-position")
            # the form the text is in: once the server's dialect reads it, the server's own
            mysql_set = is_mysql_state(position)
            if dialect.parse_gtids(text) is None:
                given = "a MySQL GTID set" if mysql_set else "a MariaDB GTID position"
                raise ConfigError(f"stream.startup-position is {given} but the source is {dialect.name}; binlake "
                                  f"needs 'file:position' or {dialect.gtid_state_form} there: fix "
                                  "stream.startup-position")
            found = mysql_gtid_start(conn, position, text) if mysql_set else gtid_start(conn, position, text)
            start = Start(found, applied=position)
        elif position.file not in files:
            raise ConfigError(
                f"stream.startup-position {position} names binlog file {position.file}, which the server does not "
                f"have (it has {files[0]} .. {files[-1]}): fix stream.startup-position"
            )
        else:
            start = Start(position)
    else:
        since = int(cfg.get("stream.startup-timestamp"))
        start = Start(BinlogPosition(_file_at(cfg, conn, since), 4), since)
    # a first write only: a start another process stored meanwhile is the one kept, and used
    if not stored.create_text(json.dumps(start.to_dict())):
        return Start.from_dict(json.loads(stored.read_text()))
    return start


def _file_at(cfg: Config, conn: Any, since: int) -> str:
    """The newest binlog file created at or before `since`: every event in older files is older.
    A file's creation time is the timestamp of its format-description event."""
    files = binlog_files(conn)
    chosen = files[0]
    for name in files:
        if _created(cfg, name) > since:
            break
        chosen = name
    return chosen


def _created(cfg: Config, file: str) -> int:
    return file_created(cfg.connection(), file) or 0


def _gtid_list(conn: Any, file: str) -> dict[str, int]:
    """The GTID state at the start of `file` (its Gtid_list event): domain -> last sequence number."""
    return {d: int(seq) for d, _server, seq in _GTID.findall(file_state(conn, file))}


def gtid_start(conn: Any, applied: dict[str, int], text: str, page: int = 5000) -> BinlogPosition:
    """The position of the first transaction of a named domain after the one `applied` names there:
    found from the newest binlog file whose starting GTID state is not past `applied`, scanning its
    events (SHOW BINLOG EVENTS, no replication connection); the head when there is none yet."""
    files = binlog_files(conn)
    first = None
    for i in range(len(files) - 1, -1, -1):
        state = _gtid_list(conn, files[i])
        if all(state.get(d, 0) <= seq for d, seq in applied.items()):
            first = i
            break
    if first is None:
        raise ConfigError(
            f"stream.startup-position {text} is older than the oldest binlog file on the server ({files[0]} starts "
            f"after {_gtid_list(conn, files[0])}): its later transactions are purged; binlake cannot start there "
            "without losing changes: use startup-mode initial (a snapshot), or a later position"
        )
    for file in files[first:]:
        for row in binlog_events(conn, file, page=page):
            m = _GTID.search(str(row[5])) if row[2] == "Gtid" else None
            if m and m.group(1) in applied and int(m.group(3)) > applied[m.group(1)]:
                return BinlogPosition(file, int(row[1]))
    return binlog_head(conn)


def mysql_gtid_start(conn: Any, applied: dict[str, list[list[int]]], text: str) -> BinlogPosition:
    """The start of the newest binlog file whose earlier transactions are all in the GTID set
    `applied`: every transaction the set lacks is at or after it."""
    files = binlog_files(conn)
    found = covered_file(conn, files, applied)
    if found is not None:
        return BinlogPosition(found, 4)
    raise ConfigError(
        f"stream.startup-position {text} lacks transactions of the oldest binlog file on the server ({files[0]} "
        f"comes after {previous_gtids(conn, files[0])}): they are purged; binlake cannot start there without "
        "losing changes: use startup-mode initial (a snapshot), or a later GTID set"
    )
