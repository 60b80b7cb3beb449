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


def seq(first: int, last: int) -> str:
    """A derived table `seq(seq)` of the integers first..last, on MariaDB and MySQL alike (MariaDB's
    seq_1_to_N tables are its own engine's). Recursion stays within MySQL's default depth of 1000 by
    crossing two ranges."""
    n = last - first + 1
    width = max(1, min(1000, n))
    return (f"(SELECT {first} + hi.i * {width} + lo.i AS seq FROM "
            f"(WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < {width - 1}) SELECT i FROM r) lo, "
            f"(WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < {(n - 1) // width}) SELECT i FROM r) hi "
            f"WHERE hi.i * {width} + lo.i < {n}) seq")
