"""Where a stream without a snapshot starts: the startup modes, after Flink CDC's
`scan.startup.mode`.

- `initial` (default): snapshot every captured table, then stream from the handover;
- `snapshot`: the snapshot only, then stop;
- `latest`: no snapshot; stream from the server's head when the stream first starts;
- `earliest`: no snapshot; stream from the start of the oldest binlog file on the server;
- `specific`: no snapshot; stream from `stream.startup-position` (`file:position`, a transaction
  boundary such as `SHOW MASTER STATUS` printed);
- `timestamp`: no snapshot; stream the changes written at or after `stream.startup-timestamp`
  (Unix seconds), reading from the newest binlog file created at or before it.

The start is chosen once, on the first start of the stream, and stored next to the checkpoint
(`_binlake/start.json`), so a restart before the first committed micro-batch starts at the same
place rather than at a new head.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from binlake.config import Config
from binlake.errors import ConfigError
from binlake.offsets import BinlogPosition

MODES = ("initial", "snapshot", "latest", "earliest", "specific", "timestamp")
SNAPSHOT_MODES = ("initial", "snapshot")


@dataclass(frozen=True)
class Start:
    position: BinlogPosition
    since: int | None = None  # only changes written at or after this Unix time

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position.to_dict(), "since": self.since}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Start:
        return cls(BinlogPosition.from_dict(d["position"]), d.get("since"))


def parse_position(text: str) -> BinlogPosition:
    file, sep, pos = text.rpartition(":")
    try:
        if not sep or not pos.isdigit():
            raise ValueError
        return BinlogPosition(file, int(pos))
    except ValueError:
        raise ConfigError(
            f"stream.startup-position is {text!r}; binlake needs 'file:position' such as mysql-bin.000003:1234 "
            "(as SHOW MASTER STATUS prints it): fix stream.startup-position"
        ) from None


def validate(cfg: Config) -> None:
    """The settings each mode needs, checked before anything runs."""
    mode = cfg.get("stream.startup-mode")
    if mode == "specific":
        if not cfg.get("stream.startup-position"):
            raise ConfigError("stream.startup-mode is 'specific' but stream.startup-position is not set; binlake "
                              "needs 'file:position': set stream.startup-position")
        parse_position(cfg.get("stream.startup-position"))
    if mode == "timestamp" and cfg.get("stream.startup-timestamp") is None:
        raise ConfigError("stream.startup-mode is 'timestamp' but stream.startup-timestamp is not set; binlake "
                          "needs Unix seconds: set stream.startup-timestamp")


def resolve(cfg: Config, conn: Any, is_mariadb: bool, stored: Path) -> Start:
    """The stream's start for a non-snapshot mode: the stored one, else chosen now and stored."""
    from binlake.source import binlog_files, master_position

    if stored.exists():
        return Start.from_dict(json.loads(stored.read_text()))
    validate(cfg)
    mode = cfg.get("stream.startup-mode")
    if mode == "latest":
        start = Start(master_position(conn))
    elif mode == "earliest":
        start = Start(BinlogPosition(binlog_files(conn)[0], 4))
    elif mode == "specific":
        position = parse_position(cfg.get("stream.startup-position"))
        files = binlog_files(conn)
        if position.file not in files:
            raise ConfigError(
                f"stream.startup-position {position} names binlog file {position.file}, which the server does not "
                f"have (it has {files[0]} .. {files[-1]}): fix stream.startup-position"
            )
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
    from binlake.source import binlog_files

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

    params = cfg.connection()
    stream = BinLogStreamReader(
        connection_settings={k: params[k] for k in ("host", "port", "user", "password", "connect_timeout")},
        server_id=cfg.server_ids.pick(0), log_file=file, log_pos=4, resume_stream=True, blocking=False,
        only_events=[FormatDescriptionEvent], is_mariadb=False, enable_logging=False,
    )
    try:
        event = stream.fetchone()
        return int(event.timestamp) if event is not None else 0
    finally:
        stream.close()
