"""Where a stream without a snapshot starts: the startup modes, after Flink CDC's
`scan.startup.mode`.

- `initial` (default): snapshot every captured table, then stream from the handover;
- `snapshot`: the snapshot only, then stop;
- `latest`: no snapshot; stream from the server's head when the stream first starts;
- `earliest`: no snapshot; stream from the start of the oldest binlog file on the server;
- `specific`: no snapshot; stream from `stream.startup-position`: `file:position` (a transaction
  boundary such as `SHOW MASTER STATUS` printed), or on MariaDB a GTID position `domain-server-seq`
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
from pathlib import Path
from typing import Any

from binlake.config import Config
from binlake.source.dialect import Dialect
from binlake.errors import ConfigError
from binlake.offsets import BinlogPosition

MODES = ("initial", "snapshot", "latest", "earliest", "specific", "timestamp")
SNAPSHOT_MODES = ("initial", "snapshot")


@dataclass(frozen=True)
class Start:
    position: BinlogPosition
    since: int | None = None  # only changes written at or after this Unix time
    applied: dict[str, int] | None = None  # per GTID domain, the last sequence number already had

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position.to_dict(), "since": self.since, "applied": self.applied}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Start:
        return cls(BinlogPosition.from_dict(d["position"]), d.get("since"), d.get("applied"))


_GTID = re.compile(r"(\d+)-(\d+)-(\d+)")
_GTID_LIST = re.compile(r"\s*\d+-\d+-\d+(?:\s*,\s*\d+-\d+-\d+)*\s*")
_MYSQL_GTID_SET = re.compile(r"\s*[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-.*:.*")


def parse_gtids(text: str) -> dict[str, int] | None:
    """`0-1-42,1-7-3` -> {"0": 42, "1": 3} (domain -> sequence number); None for anything else."""
    if not _GTID_LIST.fullmatch(text):
        return None
    applied: dict[str, int] = {}
    for domain, _server, seq in _GTID.findall(text):
        if domain in applied:
            raise ConfigError(f"stream.startup-position {text!r} names GTID domain {domain} twice; binlake needs one "
                              "GTID per domain, as @@gtid_binlog_pos prints it: fix stream.startup-position")
        applied[domain] = int(seq)
    return applied


def contains(applied: dict[str, int], gtid: str | None) -> bool:
    """Whether the transaction `gtid` (domain-server-seq) is one of those `applied` names as had."""
    m = _GTID.fullmatch(gtid or "")
    return m is not None and m.group(1) in applied and int(m.group(3)) <= applied[m.group(1)]


def parse_position(text: str) -> BinlogPosition | dict[str, int]:
    """A `file:position`, or a MariaDB GTID position as {domain: sequence number}."""
    if _MYSQL_GTID_SET.fullmatch(text):
        raise ConfigError(
            f"stream.startup-position is the MySQL GTID set {text!r}; binlake starts from a GTID position on "
            "MariaDB only: give the 'file:position' that set ends at (SHOW MASTER STATUS on the source, or "
            "SHOW BINLOG EVENTS), in stream.startup-position"
        )
    gtids = parse_gtids(text)
    if gtids is not None:
        return gtids
    file, sep, pos = text.rpartition(":")
    if not sep or not pos.isdigit() or not file:
        raise ConfigError(
            f"stream.startup-position is {text!r}; binlake needs 'file:position' such as mysql-bin.000003:1234 "
            "(as SHOW MASTER STATUS prints it) or a MariaDB GTID position such as 0-1-42 (as @@gtid_binlog_pos "
            "prints it): fix stream.startup-position"
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


def resolve(cfg: Config, conn: Any, dialect: Dialect, stored: Path) -> Start:
    """The stream's start for a non-snapshot mode: the stored one, else chosen now and stored."""
    from binlake.source.dialect import binlog_files, binlog_head

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
            if not dialect.is_mariadb:
                raise ConfigError("stream.startup-position is a MariaDB GTID position but the source is MySQL; "
                                  "binlake needs 'file:position' there: fix stream.startup-position")
            start = Start(gtid_start(conn, position, cfg.get("stream.startup-position")), applied=position)
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
    stored.parent.mkdir(parents=True, exist_ok=True)
    tmp = stored.with_suffix(".tmp")
    tmp.write_text(json.dumps(start.to_dict()))
    tmp.replace(stored)
    return start


def _file_at(cfg: Config, conn: Any, since: int) -> str:
    """The newest binlog file created at or before `since`: every event in older files is older.
    A file's creation time is the timestamp of its format-description event."""
    from binlake.source.dialect import binlog_files

    files = binlog_files(conn)
    chosen = files[0]
    for name in files:
        if _created(cfg, name) > since:
            break
        chosen = name
    return chosen


def _created(cfg: Config, file: str) -> int:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import FormatDescriptionEvent

    from binlake.source.connection import settings

    params = cfg.connection()
    stream = BinLogStreamReader(
        connection_settings=settings(params),
        server_id=cfg.server_ids.pick(0), log_file=file, log_pos=4, resume_stream=True, blocking=False,
        only_events=[FormatDescriptionEvent], is_mariadb=False, enable_logging=False,
    )
    try:
        event = stream.fetchone()
        return int(event.timestamp) if event is not None else 0
    finally:
        stream.close()


def _gtid_list(conn: Any, file: str) -> dict[str, int]:
    """The GTID state at the start of `file` (its Gtid_list event): domain -> last sequence number."""
    with conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}' LIMIT 4")
        rows = cur.fetchall()
    for row in rows:
        if row[2] == "Gtid_list":
            return {d: int(seq) for d, _server, seq in _GTID.findall(str(row[5]))}
    return {}


def gtid_start(conn: Any, applied: dict[str, int], text: str, page: int = 5000) -> BinlogPosition:
    """The position of the first transaction of a named domain after the one `applied` names there:
    found from the newest binlog file whose starting GTID state is not past `applied`, scanning its
    events (SHOW BINLOG EVENTS, no replication connection); the head when there is none yet."""
    from binlake.source.dialect import binlog_files, binlog_head

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
        pos = 4
        while True:
            with conn.cursor() as cur:
                cur.execute(f"SHOW BINLOG EVENTS IN '{file}' FROM {pos} LIMIT {page}")
                rows = cur.fetchall()
            for row in rows:
                m = _GTID.search(str(row[5])) if row[2] == "Gtid" else None
                if m and m.group(1) in applied and int(m.group(3)) > applied[m.group(1)]:
                    return BinlogPosition(file, int(row[1]))
            if len(rows) < page:
                break
            pos = int(rows[-1][4])  # End_log_pos of the last event: where the next one starts
    return binlog_head(conn)
