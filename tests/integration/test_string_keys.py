"""String and binary primary keys under collations, many small chunks, writes racing the snapshot.

Keys mix case, accents, 'ß'/'ss', 4-byte characters, trailing spaces and tabs ('a\\t' sorts before
'a' under PAD SPACE), and for binary keys zero and 0xff bytes. Under a NO PAD collation (MySQL's
default utf8mb4_0900_ai_ci) trailing spaces count: 'a' < 'a\\t' < 'a ' are three keys. Two checks:
- the handover's key order agrees with the server: every key the server puts into a split's range
  is routed to that split by `Handover` (the rule that decides which binlog events a chunk already
  holds);
- after the runs, silver holds exactly the source rows, byte for byte.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.source.binlog_reader import RowChange
from binlake.keys import range_predicate
from binlake.capture.handover import Handover
from binlake.offsets import BinlogPosition
from binlake.schema import qualified, quote
from binlake.source.connection import connect as source_connect
from binlake.source.catalog import load_schema
from binlake.lake import split_state as state
from binlake.lake.target import Target

from .capture import connect, silver, snapshot_once, stream_once, write_config
from .helpers import params

TEXT = ["a", "A", "b", "B", "é", "e", "E", "É", "ß", "s", "ss", "SS", "😀", "😁", " ", "\t", "z", "ẞ"]
# a case- and accent-insensitive NO PAD collation: MySQL's default, and MariaDB's counterpart
NO_PAD = {"mariadb": "utf8mb4_unicode_nopad_ci", "mysql": "utf8mb4_0900_ai_ci"}
BYTES = [b"\x00", b"\x01", b" ", b"A", b"a", b"\xff"]
TABLES: dict[str, tuple[str, str]] = {  # table: (key DDL, key kind)
    "g": ("VARCHAR(8) COLLATE utf8mb4_general_ci", "text"),
    "u": ("VARCHAR(8) COLLATE utf8mb4_unicode_ci", "text"),
    "c": ("CHAR(6) COLLATE utf8mb4_bin", "text"),
    "np": ("VARCHAR(8) COLLATE {no_pad}", "text"),
    "vb": ("VARBINARY(6)", "bytes"),
    "bn": ("BINARY(4)", "bytes"),
}


def random_key(rnd: random.Random, kind: str) -> Any:
    if kind == "text":
        return "".join(rnd.choice(TEXT) for _ in range(rnd.randint(1, 4)))
    return b"".join(rnd.choice(BYTES) for _ in range(rnd.randint(1, 4)))


class KeyWriters:
    """One thread per table: inserts, updates, case-only and trailing-space key changes, deletes;
    at most `limit` statements per table, so the binlog to stream stays small."""

    def __init__(self, port: int, database: str, limit: int = 300) -> None:
        self.port, self.database, self.limit = port, database, limit
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(t,), daemon=True) for t in TABLES]
        self.ops = 0

    def __enter__(self) -> KeyWriters:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=30)

    def _work(self, table: str) -> None:
        rnd = random.Random(table)
        kind = TABLES[table][1]
        conn = connect(self.port, self.database)
        cur = conn.cursor()
        change_key = "UPPER(k)" if kind == "text" else "REVERSE(k)"
        for _ in range(self.limit):
            if self.stop_flag.is_set():
                break
            op = rnd.random()
            if op < 0.3:
                cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s)", (random_key(rnd, kind), rnd.randint(0, 999)))
            elif op < 0.55:
                cur.execute(f"UPDATE {table} SET v = v + 1 ORDER BY RAND() LIMIT 1")
            elif op < 0.7:
                cur.execute(f"UPDATE IGNORE {table} SET k = {change_key} ORDER BY RAND() LIMIT 1")
            elif op < 0.8:
                cur.execute(f"UPDATE IGNORE {table} SET k = CONCAT(k, ' ') WHERE LENGTH(k) < 4 ORDER BY RAND() LIMIT 1")
            else:
                cur.execute(f"DELETE FROM {table} ORDER BY RAND() LIMIT 1")
            self.ops += 1
            time.sleep(0.01)
        conn.close()


def source_rows(port: int, database: str, table: str) -> list[tuple[Any, int]]:
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT k, v FROM {table}")
        return sorted((bytes(k) if isinstance(k, (bytes, bytearray)) else k, v) for k, v in cur.fetchall())


@pytest.mark.slow
def test_string_keys_under_collations(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rnd = random.Random(7)
    with connect(port, database) as conn, conn.cursor() as cur:
        for table, (ddl, kind) in TABLES.items():
            key = ddl.format(no_pad=NO_PAD[dev_db.server])
            cur.execute(f"CREATE TABLE {table} (k {key} NOT NULL PRIMARY KEY, v INT) CHARACTER SET utf8mb4")
            for _ in range(250):
                cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s)", (random_key(rnd, kind), rnd.randint(0, 999)))
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.({'|'.join(TABLES)})"], tmp_path / "lake",
                            "6110-6114", chunk_size=12, group_size=32)
    with KeyWriters(port, database) as writers:
        before = writers.ops
        snapshot_once(cfg_path)
        during = writers.ops - before
    assert during >= 30, f"the writers must have raced the snapshot: {during} statements while it ran"
    cfg = stream_once(cfg_path)  # every change the writers made, across the handover

    target = Target.of(cfg)
    all_splits = state.load(spark, target.split_state, 32)
    conn = source_connect(params(dev_db))
    try:
        for table in TABLES:
            name = f"{database}.{table}"
            splits = all_splits[name]
            assert len(splits) >= 8, f"{name}: {len(splits)} chunks"
            schema = load_schema(conn, database, table)
            handover = Handover({name: schema}, {name: splits})
            handover.bind(conn)
            # every key the server places in split i is routed to split i: an event at that split's HW
            # is emitted, one just before it is not (unless past the table's largest HW)
            routed = handover._tables[name]  # type: ignore[index]
            for split in splits:
                where, args = range_predicate(schema, split.start, split.end)
                with conn.cursor() as cur:
                    cur.execute(f"SELECT k FROM {qualified(database, table)} WHERE {where} ORDER BY {quote('k')}", args)
                    keys = [r[0] for r in cur.fetchall()]
                for k in keys:
                    key = routed.order.sort_key([k])  # type: ignore[union-attr]
                    i = bisect.bisect_right(routed.starts, key, lo=1) - 1
                    assert i == split.index, f"{name}: key {k!r} is in split {split.index} on the server, {i} here"
                    change = RowChange(name, "u", None, {"k": k, "v": 0}, split.hw.file, split.hw.pos, 0, 0)  # type: ignore[union-attr]
                    assert handover.should_emit(change)
                    if split.hw.pos > 4:  # type: ignore[union-attr]
                        early = RowChange(name, "u", None, {"k": k, "v": 0}, split.hw.file, split.hw.pos - 1, 0, 0)  # type: ignore[union-attr]
                        assert handover.should_emit(early) == (BinlogPosition(split.hw.file, split.hw.pos - 1) >= routed.max_hw)  # type: ignore[union-attr]
    finally:
        conn.close()

    for table in TABLES:
        rows = silver(spark, cfg, f"{database}.{table}").select("k", "v").collect()
        lake = sorted((bytes(r["k"]) if isinstance(r["k"], (bytes, bytearray)) else r["k"], r["v"]) for r in rows)
        assert lake == source_rows(port, database, table), f"silver {table} differs from the source"
