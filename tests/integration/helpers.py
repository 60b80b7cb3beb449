"""Helpers shared by the integration tests: connection settings and small SQL conveniences."""

from __future__ import annotations

from typing import Any


def params(dev_db: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": dev_db.running_port(), "user": "root", "password": "", "connect_timeout": 10}


def execute(dev_db: Any, database: str, *statements: str) -> None:
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        for s in statements:
            cur.execute(s)


def fetch(dev_db: Any, database: str, sql: str) -> list[tuple[Any, ...]]:
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())
