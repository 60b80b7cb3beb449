"""The signal table: a table in the source whose inserted rows are signals to the running stream
(binlake.capture.signals), as Debezium's. Its rows reach the stream through the binlog, ordered with
the data, so a signal works wherever the source is reachable, binlake's host or not. binlake needs
INSERT on it only for `binlake signal`; a row inserted by anyone is a signal.
"""

from __future__ import annotations

import json
from typing import Any

import pymysql

from binlake.errors import ConfigError
from binlake.schema import qualified
from binlake.source.connection import connect

DDL = "CREATE TABLE {table} (id VARCHAR(64) PRIMARY KEY, type VARCHAR(32) NOT NULL, data TEXT)"
DENIED = (1142, 1044, 1045, 1227)  # the account may not write there: the signal goes to a file instead


def insert(params: dict[str, Any], table: str, signal: dict[str, Any]) -> bool:
    """Insert `signal` ({id, type, data}) into the signal table `table` (db.table); False when the account
    may not write to it."""
    db, name = table.split(".", 1)
    try:
        conn = connect(params)
    except pymysql.err.MySQLError as exc:
        raise ConfigError(f"could not reach the source to write the signal to {table} ({exc.args[-1]})") from None
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {qualified(db, name)} (id, type, data) VALUES (%s, %s, %s)",
                        (signal["id"], signal["type"], json.dumps(signal["data"])))
        conn.commit()
        return True
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        if code in DENIED:
            return False
        if code == 1146:
            raise ConfigError(f"source.signal-table {table} is not on the server; create it there: "
                              f"{DDL.format(table=qualified(db, name))}") from None
        raise ConfigError(f"the server refused the signal row in {table}: {exc.args[-1]}") from None
    finally:
        conn.close()
