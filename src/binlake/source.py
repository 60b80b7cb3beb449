"""The source database: connections, captured tables, their schemas and the binlog head."""

from __future__ import annotations

import re
from typing import Any

import pymysql
import pymysql.cursors

from binlake.errors import ConfigError, RuntimeFailure
from binlake.offsets import BinlogPosition
from binlake.schema import Column, TableSchema

SYSTEM_DATABASES = {"mysql", "information_schema", "performance_schema", "sys"}


def connect(params: dict[str, Any], **kw: Any) -> pymysql.connections.Connection:
    """A PyMySQL connection in UTC, autocommit, utf8mb4.

    The session time zone is UTC so TIMESTAMP columns come back as UTC wall time, the same instant
    the binlog carries as a Unix time.
    """
    try:
        conn = pymysql.connect(
            host=params["host"], port=int(params["port"]), user=params["user"], password=params["password"],
            connect_timeout=int(params.get("connect_timeout", 10)), autocommit=True, charset="utf8mb4",
            init_command="SET time_zone = '+00:00'", **kw,
        )
    except pymysql.err.OperationalError as exc:
        raise cannot_connect(params, exc) from None
    return conn


def cannot_connect(params: dict[str, Any], exc: Exception) -> RuntimeFailure:
    """One line naming the settings to check; the server's message (which may quote input) stays out."""
    code = exc.args[0] if exc.args else "?"
    return RuntimeFailure(
        f"cannot connect to {params['user']}@{params['host']}:{params['port']} (MySQL error {code}); "
        "check source.hostname, source.port, source.username and source.password"
    )


def select_rows(params: dict[str, Any], sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
    """All rows of one query (a chunk: bounded by the chunk size) through the C client when it is
    installed (mysqlclient, several times faster than PyMySQL at decoding rows), else PyMySQL. Both
    return the same Python values; `schema.Column.encode` makes any difference in form irrelevant."""
    try:
        import MySQLdb
    except ImportError:
        conn = connect(params)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()
    try:
        fast = MySQLdb.connect(
            host=params["host"], port=int(params["port"]), user=params["user"], password=params["password"],
            connect_timeout=int(params.get("connect_timeout", 10)), autocommit=True, charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
        )
    except MySQLdb.OperationalError as exc:
        raise cannot_connect(params, exc) from None
    try:
        cur = fast.cursor()
        cur.execute(sql, args)
        return list(cur.fetchall())
    finally:
        fast.close()


def master_position(conn: pymysql.connections.Connection) -> BinlogPosition:
    with conn.cursor() as cur:
        try:
            cur.execute("SHOW MASTER STATUS")
        except pymysql.err.ProgrammingError:  # MySQL 8.4 renamed it
            cur.execute("SHOW BINARY LOG STATUS")
        row = cur.fetchone()
    if not row:
        raise ConfigError("log_bin is OFF; binlake needs ON: start the server with --log-bin and restart")
    return BinlogPosition(row[0], int(row[1]))


def registered_replicas(conn: pymysql.connections.Connection) -> list[tuple[int, str]] | None:
    """(server id, host) of each replica registered on the source, or None when the account may not
    list them (MariaDB wants REPLICATION MASTER ADMIN, MySQL REPLICATION SLAVE)."""
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE HOSTS")
            names = [d[0].lower() for d in cur.description or ()]
            rows = cur.fetchall()
    except (pymysql.err.OperationalError, pymysql.err.ProgrammingError):
        return None
    sid, host = names.index("server_id"), names.index("host")
    return [(int(r[sid]), str(r[host] or "")) for r in rows]


def binlog_files(conn: pymysql.connections.Connection) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [r[0] for r in cur.fetchall()]


def purged(conn: pymysql.connections.Connection, position: BinlogPosition) -> str | None:
    """The oldest binlog file still on the server, if `position`'s file is no longer there."""
    files = binlog_files(conn)
    if not files or position.file in files:
        return None
    return files[0]


def captured_tables(conn: pymysql.connections.Connection, patterns: list[str]) -> list[tuple[str, str]]:
    """Base tables whose `db.table` fully matches one of the regexes, in name order."""
    compiled = [re.compile(p) for p in patterns]
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        rows = cur.fetchall()
    return [
        (db, t) for db, t in rows
        if db not in SYSTEM_DATABASES and any(p.fullmatch(f"{db}.{t}") for p in compiled)
    ]


def matches(patterns: list[str], database: str, table: str) -> bool:
    return database not in SYSTEM_DATABASES and any(re.fullmatch(p, f"{database}.{table}") for p in patterns)


def load_schema(
    conn: pymysql.connections.Connection, database: str, table: str, chunk_keys: dict[str, list[str]] | None = None
) -> TableSchema:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        cols = tuple(
            Column(
                name=r["COLUMN_NAME"], data_type=r["DATA_TYPE"].lower(), column_type=r["COLUMN_TYPE"].lower(),
                nullable=r["IS_NULLABLE"] == "YES",
                precision=int(r["NUMERIC_PRECISION"]) if r["NUMERIC_PRECISION"] is not None else None,
                scale=int(r["NUMERIC_SCALE"]) if r["NUMERIC_SCALE"] is not None else None,
                fraction=int(r["DATETIME_PRECISION"] or 0),
                length=int(r["CHARACTER_MAXIMUM_LENGTH"]) if r["CHARACTER_MAXIMUM_LENGTH"] is not None else None,
                collation=r["COLLATION_NAME"],
            )
            for r in cur.fetchall()
        )
        if not cols:
            raise RuntimeFailure(f"table {database}.{table} does not exist or has no columns visible to this user")
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (database, table),
        )
        pk = tuple(r["COLUMN_NAME"] for r in cur.fetchall())
        cur.execute(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND NON_UNIQUE = 0",
            (database, table),
        )
        unique: dict[str, set[str]] = {}
        for r in cur.fetchall():
            unique.setdefault(r["INDEX_NAME"], set()).add(r["COLUMN_NAME"])
    name = f"{database}.{table}"
    configured = tuple((chunk_keys or {}).get(name, ()))
    names = {c.name for c in cols}
    for k in configured:
        if k not in names:
            raise ConfigError(
                f"source.chunk-key for {name} names column {k!r}, which the table does not have; "
                f"set it to columns of {name}: {', '.join(sorted(names))}"
            )
        if next(c for c in cols if c.name == k).nullable:
            raise ConfigError(
                f"source.chunk-key column {name}.{k} is NULLable; binlake needs NOT NULL chunk-key columns: "
                "choose NOT NULL columns or ALTER the column"
            )
    if not pk and not configured:
        raise ConfigError(
            f"table {name} has no primary key; binlake needs a chunk key: set source.chunk-key "
            f"{{'{name}': [NOT NULL columns]}} or add a primary key"
        )
    # the chunk key identifies a row if a UNIQUE index over NOT NULL columns lies within it (a UNIQUE
    # index admits any number of rows with a NULL in it)
    nullable = {c.name for c in cols if c.nullable}
    key_unique = any(idx <= set(configured) and not idx & nullable for idx in unique.values())
    return TableSchema(database, table, cols, pk, configured, bool(configured) and key_unique)
