"""Wide rows: LONGBLOB and LONGTEXT values of 8-16 MB through the snapshot and through the binlog
(an insert and updates after the handover), byte-exact in silver."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pymysql

from .capture import run_once, silver, write_config

MB = 1024 * 1024


def _text(n: int, seed: str) -> str:
    """About n bytes of utf8mb4 text: ASCII, 2-, 3- and 4-byte characters."""
    unit = f"{seed} ä € 😀 "
    return (unit * (n // len(unit.encode()) + 1))[: n // 2]


def _writer(port: int, database: str) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                           autocommit=True, charset="utf8mb4", max_allowed_packet=256 * MB)


def _digest(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((int(i), None if b is None else (len(b), hashlib.sha256(bytes(b)).hexdigest()),
                   None if t is None else (len(t), hashlib.sha256(t.encode()).hexdigest())) for i, b, t in rows)


def test_multi_megabyte_blobs_and_texts_through_snapshot_and_binlog(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with _writer(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE w (id INT PRIMARY KEY, b LONGBLOB, t LONGTEXT, note VARCHAR(10))")
        cur.execute("INSERT INTO w VALUES (%s, %s, %s, 'snap')", (1, os.urandom(12 * MB), _text(18 * MB, "one")))
        cur.execute("INSERT INTO w VALUES (%s, %s, %s, 'snap')", (2, b"small", "small"))
        cur.execute("INSERT INTO w VALUES (%s, %s, %s, 'snap')", (3, os.urandom(8 * MB), None))
    cfg_path = write_config(tmp_path / "binlake.yml", port, [rf"{database}\.w"], tmp_path / "lake", "5730-5734",
                            chunk_size=2, group_size=2)
    cfg = run_once(cfg_path)

    with _writer(port, database) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO w VALUES (%s, %s, %s, 'ins')", (4, os.urandom(16 * MB), _text(20 * MB, "four")))
        cur.execute("UPDATE w SET b = %s, note = 'upd' WHERE id = 2", (os.urandom(14 * MB),))
        # both row images of this event are wide: about 2 x 27 MB in one binlog event
        cur.execute("UPDATE w SET t = %s, note = 'upd' WHERE id = 1", (_text(18 * MB, "uno"),))
    run_once(cfg_path)

    with _writer(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, b, t FROM w")
        source = list(cur.fetchall())
    got = [(r["id"], r["b"], r["t"]) for r in silver(spark, cfg, f"{database}.w").select("id", "b", "t").collect()]
    assert _digest(got) == _digest(source)
    assert sorted(got) == sorted((i, None if b is None else bytearray(b), t) for i, b, t in source)
