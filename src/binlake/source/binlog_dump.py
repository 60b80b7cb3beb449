"""What a binlog dump serves, and what its refusals mean.

A dump serves only what the server has synced, so a read up to (or from) a position reported a
moment ago may have to wait (`Catchup`); a refusal is a purge only when the file is really gone
(`gone_error`), and the other refusals become one line naming what to change (`refusal`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pymysql

from binlake.errors import PositionGoneError, RuntimeFailure
from binlake.offsets import BinlogPosition
from binlake.source.connection import connect
from binlake.source.dialect import purged


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


def refusal(exc: Exception, params: dict[str, Any], start: BinlogPosition, server_id: int) -> Exception:
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

