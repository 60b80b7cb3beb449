"""Connections to the source: every connection binlake opens to the server takes its settings here
(metadata and chunk SELECTs through PyMySQL or mysqlclient, binlog reads through mysql-replication).

Every connection has a read timeout (`source.read-timeout`): a connection whose peer vanished without
closing it (a half-open TCP connection) fails after that many seconds instead of hanging forever.
"""

from __future__ import annotations

import socket
from typing import Any

import pymysql

from binlake.errors import RuntimeFailure

DEFAULT_READ_TIMEOUT = 60


def settings(params: dict[str, Any]) -> dict[str, Any]:
    """PyMySQL's connection arguments from binlake's connection parameters (`Config.connection`);
    mysql-replication takes the same."""
    return {
        "host": params["host"], "port": int(params["port"]), "user": params["user"], "password": params["password"],
        "connect_timeout": int(params.get("connect_timeout", 10)),
        "read_timeout": int(params.get("read_timeout") or DEFAULT_READ_TIMEOUT),
    }


def connect(params: dict[str, Any], **kw: Any) -> pymysql.connections.Connection:
    """A PyMySQL connection in UTC, autocommit, utf8mb4.

    The session time zone is UTC so TIMESTAMP columns come back as UTC wall time, the same instant
    the binlog carries as a Unix time.
    """
    try:
        conn = pymysql.connect(**settings(params), autocommit=True, charset="utf8mb4",
                               init_command="SET time_zone = '+00:00'", **kw)
    except pymysql.err.OperationalError as exc:
        raise cannot_connect(params, exc) from None
    return conn


def timed_out(exc: BaseException) -> bool:
    """A read that got nothing within its timeout: a stalled or half-open connection."""
    return isinstance(exc, (socket.timeout, TimeoutError)) or "timed out" in " ".join(map(str, exc.args))


def cannot_connect(params: dict[str, Any], exc: Exception) -> RuntimeFailure:
    """One line naming the settings to check; the server's message (which may quote input) stays out."""
    code = exc.args[0] if exc.args else "?"
    if timed_out(exc):  # a server, or a network path, that answers nothing
        return RuntimeFailure(
            f"cannot connect to {params['user']}@{params['host']}:{params['port']} (MySQL error {code}: no answer "
            f"within source.connect-timeout={params.get('connect_timeout', 10)}s / source.read-timeout="
            f"{params.get('read_timeout') or DEFAULT_READ_TIMEOUT}s); check that the server is up and the "
            "network path to it passes data, or raise those timeouts"
        )
    return RuntimeFailure(
        f"cannot connect to {params['user']}@{params['host']}:{params['port']} (MySQL error {code}); "
        "check source.hostname, source.port, source.username and source.password"
    )


def bulk_connect(params: dict[str, Any]) -> Any:
    """A connection for reading many rows: the C client when it is installed (mysqlclient, several
    times faster than PyMySQL at decoding rows), else PyMySQL. Both return the same Python values;
    `schema.Column.encode` makes any difference in form irrelevant. Autocommit, UTC, utf8mb4."""
    try:
        import MySQLdb
    except ImportError:
        return connect(params)
    try:
        return MySQLdb.connect(**settings(params), autocommit=True, charset="utf8mb4",
                               init_command="SET time_zone = '+00:00'")
    except MySQLdb.OperationalError as exc:
        raise cannot_connect(params, exc) from None


def select_rows(params: dict[str, Any], sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
    """All rows of one query (a chunk: bounded by the chunk size), on a bulk connection of its own."""
    conn = bulk_connect(params)
    try:
        cur = conn.cursor()
        cur.execute(sql, args)
        return list(cur.fetchall())
    finally:
        conn.close()
