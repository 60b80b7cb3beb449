"""Reconnecting to a source that went away: which errors mean the connection is lost, and the
backoff between attempts, bounded by `source.reconnect-timeout`.

A replica must ride out a server restart or a dropped connection: the stream retries with a
growing pause (0.5 s, 1 s, 2 s, ... up to 10 s) until the server answers again. A server that stays
away longer than the configured time is a failure with one line naming the setting, not a hang.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pymysql

from binlake.errors import RuntimeFailure
from binlake.source.connection import DEFAULT_READ_TIMEOUT, timed_out

log = logging.getLogger(__name__)

T = TypeVar("T")

# client-side codes: cannot connect, server gone away, lost connection during query / handshake;
# server-side: shutdown in progress, connection killed (1927 is MariaDB's)
LOST_CODES = frozenset({2003, 2006, 2013, 2055, 1053, 1152, 1927})


def is_connection_lost(exc: BaseException) -> bool:
    # PyMySQL's and mysqlclient's OperationalError are different classes with the same arguments
    if type(exc).__name__ == "OperationalError" and exc.args and isinstance(exc.args[0], int):
        # over TLS, mysqlclient reports a connection cut mid-read as a TLS error (2026) with an EOF
        eof = exc.args[0] == 2026 and "eof" in " ".join(map(str, exc.args[1:])).lower()
        return exc.args[0] in LOST_CODES or eof
    # a packet cut short by the server going away surfaces as a socket or decoding error
    return isinstance(exc, (ConnectionError, socket.timeout, struct.error, pymysql.err.InterfaceError, EOFError))


@dataclass
class Backoff:
    """Waits between reconnect attempts; `wait` fails once `timeout` seconds have passed since the
    first failure of this outage."""

    params: dict[str, Any]
    timeout: float
    first_pause: float = 0.5
    max_pause: float = 10.0
    _since: float | None = field(default=None, init=False)
    _pause: float = field(default=0.0, init=False)

    def wait(self, exc: BaseException, doing: str) -> None:
        now = time.monotonic()
        if self._since is None:
            self._since, self._pause = now, self.first_pause
        waited = now - self._since
        if waited >= self.timeout:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else type(exc).__name__
            silent = ""
            if timed_out(exc):
                silent = (f", the server sending nothing for source.read-timeout="
                          f"{self.params.get('read_timeout') or DEFAULT_READ_TIMEOUT}s")
            raise RuntimeFailure(
                f"lost the source {self.params['host']}:{self.params['port']} while {doing} and could not reconnect "
                f"within source.reconnect-timeout={self.timeout:g}s (last error {code}{silent}); binlake needs the "
                "server back: start it or check the network, or raise source.reconnect-timeout, then run binlake "
                "again (it resumes from the last committed position)"
            ) from None
        pause = min(self._pause, self.max_pause, self.timeout - waited)
        log.warning("source %s:%s unreachable while %s (%s); retrying in %.1fs", self.params["host"],
                    self.params["port"], doing, type(exc).__name__, pause)
        time.sleep(max(pause, 0.0))
        self._pause = min(self._pause * 2, self.max_pause)

    def reset(self) -> None:
        self._since = None



def retrying(params: dict[str, Any], timeout: float, doing: str, call: Callable[[], T]) -> T:
    """`call()`, retried while the connection is lost, for up to `timeout` seconds."""
    backoff = Backoff(params, timeout)
    while True:
        try:
            return call()
        except Exception as exc:
            cause = exc.__context__ if isinstance(exc, RuntimeFailure) and exc.__context__ is not None else exc
            if not is_connection_lost(cause):
                raise
            backoff.wait(cause, doing)
