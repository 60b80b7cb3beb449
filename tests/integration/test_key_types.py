"""Primary keys of every integer width and sign, DECIMAL and date/time keys, an empty table, a
one-row table and a sparse key, captured in one run while writers race the snapshot, then changed
again through the binlog after the handover; silver must equal the source value by value.

Integer keys that are dense enough are planned by the even strategy (arithmetic bounds), the
sparse and the non-integer ones by the uneven one (bounds asked of the server); both are checked.
The date/time keys exercise the order of a split bound (text) against a binlog value (datetime,
timedelta) in the chunk reader's fold and in the handover.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake.capture.chunking import _even_step
from binlake.source.connection import connect as source_connect
from binlake.source.catalog import load_schema
from binlake.lake import split_state as state
from binlake.lake.target import Target

from .capture import connect, silver, snapshot_once, stream_once, write_config
from .helpers import params

D = decimal.Decimal


def linear(base: Any, step: Any) -> Callable[[int], Any]:
    return lambda n: base + n * step


# table: (key type, key of slot n for n in 0..199; the initial rows take the even slots). Every integer
# width once, signed and unsigned alternating (each table costs a few Delta commits per run).
KEYS: dict[str, tuple[str, Callable[[int], Any]]] = {
    "i8": ("TINYINT", linear(-100, 1)),
    "u16": ("SMALLINT UNSIGNED", linear(0, 300)),
    "i24": ("MEDIUMINT", linear(-8_000_000, 80_000)),
    "u32": ("INT UNSIGNED", linear(0, 20_000_000)),
    "u64": ("BIGINT UNSIGNED", linear(2**63 - 150, 1)),  # across 2^63, planned evenly
    "u64w": ("BIGINT UNSIGNED", linear(2**63 + 12345, 2**55)),  # up to 2^64 - 1 region, uneven
    "sparse": ("BIGINT", linear(-9 * 10**18, 9 * 10**16)),  # distribution factor ~2e17: uneven
    "dm": ("DECIMAL(20,4)", linear(D("-5000.1234"), D("73.0071"))),
    "d": ("DATE", linear(dt.date(999, 1, 1), dt.timedelta(days=3001))),
    "dt6": ("DATETIME(6)", linear(dt.datetime(1960, 1, 1), dt.timedelta(seconds=12_345_678, microseconds=123_457))),
    "ts6": ("TIMESTAMP(6)", linear(dt.datetime(1971, 1, 1), dt.timedelta(seconds=5_000_000, microseconds=123))),
    "tm6": ("TIME(6)", linear(-dt.timedelta(hours=830), dt.timedelta(hours=8, minutes=20, microseconds=7))),
    "no_rows": ("INT", linear(0, 1)),  # not "empty": a reserved word on MySQL 8
    "one": ("BIGINT UNSIGNED", linear(2**64 - 200, 1)),
}
INITIAL = {"no_rows": [], "one": [0]}  # slots of the initial rows; every other table: the even slots
QUIET = {"no_rows", "one"}  # not written while the snapshot runs: planned as they are


def initial_slots(table: str) -> list[int]:
    return INITIAL.get(table, list(range(0, 200, 2)))


class Racers:
    """One thread per table: inserts (between existing keys and past the maximum), updates, key
    changes and deletes, at most `limit` statements each so the binlog to stream stays small."""

    def __init__(self, port: int, database: str, limit: int = 120) -> None:
        self.port, self.database, self.limit = port, database, limit
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(t,), daemon=True) for t in KEYS if t not in QUIET]
        self.ops = 0

    def __enter__(self) -> Racers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=30)

    def _work(self, table: str) -> None:
        rnd = random.Random(table)
        key = KEYS[table][1]
        with connect(self.port, self.database, time_zone="+00:00") as conn, conn.cursor() as cur:
            for _ in range(self.limit):
                if self.stop_flag.is_set():
                    break
                change(cur, table, key, rnd)
                self.ops += 1
                time.sleep(0.03)


def change(cur: Any, table: str, key: Callable[[int], Any], rnd: random.Random) -> None:
    op = rnd.random()
    if op < 0.35:
        cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s)", (key(rnd.randrange(200)), rnd.randint(0, 999)))
    elif op < 0.6:
        cur.execute(f"UPDATE {table} SET v = v + 1 ORDER BY RAND() LIMIT 1")
    elif op < 0.8:
        cur.execute(f"UPDATE IGNORE {table} SET k = %s ORDER BY RAND() LIMIT 1", (key(rnd.randrange(200)),))
    else:
        cur.execute(f"DELETE FROM {table} ORDER BY RAND() LIMIT 1")


# a key DATE, DATETIME or TIMESTAMP is a string in silver (zero dates stay distinct): the source's text
TEXT_KEYS = ("DATE", "DATETIME", "TIMESTAMP")


def comparable(kind: str, v: Any) -> Any:
    """Source (PyMySQL, session in UTC; key dates as the server prints them) and silver values in one form."""
    if v is None:
        return None
    if kind.startswith("TIMESTAMP"):
        return v if v.endswith("+00:00") else v + "+00:00"
    if kind.startswith("TIME(") and isinstance(v, dt.timedelta):
        micros = v // dt.timedelta(microseconds=1)
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        secs, frac = divmod(micros, 1_000_000)
        return f"{sign}{secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}.{frac:06d}"
    if isinstance(v, decimal.Decimal):
        return v.normalize()
    if isinstance(v, int):
        return D(v).normalize()
    return v


def source_rows(port: int, database: str, table: str) -> list[tuple[Any, Any]]:
    kind = KEYS[table][0]
    with connect(port, database, time_zone="+00:00") as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {'CAST(k AS CHAR)' if kind.startswith(TEXT_KEYS) else 'k'}, v FROM {table}")
        return sorted((comparable(kind, k), v) for k, v in cur.fetchall())


def silver_rows(spark: Any, cfg: Any, database: str, table: str) -> list[tuple[Any, Any]]:
    kind = KEYS[table][0]
    df = silver(spark, cfg, f"{database}.{table}")
    return sorted((comparable(kind, r[0]), r[1]) for r in df.select("k", "v").collect())


@pytest.mark.slow
def test_integer_decimal_and_temporal_keys_race_the_snapshot(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database, time_zone="+00:00") as conn, conn.cursor() as cur:
        for table, (kind, key) in KEYS.items():
            cur.execute(f"CREATE TABLE {table} (k {kind} NOT NULL PRIMARY KEY, v INT)")
            slots = initial_slots(table)
            if slots:
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s)", [(key(n), n) for n in slots])
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.({'|'.join(KEYS)})"], tmp_path / "lake",
                            "6140-6144", chunk_size=20, group_size=32)

    conn = source_connect(params(dev_db))
    try:
        planned_evenly = {t for t in KEYS if _even_step(conn, load_schema(conn, database, t), 20) is not None}
    finally:
        conn.close()
    assert {"i8", "u16", "u64"} <= planned_evenly
    assert not planned_evenly & {"sparse", "u64w", "i24", "u32", "dm", "d", "dt6", "ts6", "tm6", "no_rows"}

    with Racers(port, database) as racers:
        snapshot_once(cfg_path)
    assert racers.ops > 200, "the writers must have raced the snapshot"

    # after every chunk's high watermark: every table, the empty and the one-row table included, changes
    # again; one stream then carries the racers' changes and these across the handover
    rnd = random.Random(11)
    with connect(port, database, time_zone="+00:00") as conn, conn.cursor() as cur:
        for table, (_, key) in KEYS.items():
            for n in (1, 99, 199):
                cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s)", (key(n), -n))
            for _ in range(12):
                change(cur, table, key, rnd)
    cfg = stream_once(cfg_path)

    splits = state.load(spark, Target.of(cfg).split_state, 32)
    for table in KEYS:
        name = f"{database}.{table}"
        chunks = splits[name]
        assert all(s.status == "done" for s in chunks) and chunks[-1].end is None
        if table in QUIET:
            assert len(chunks) == 1, f"{name}: an empty or one-row table is one chunk"
        else:
            assert len(chunks) >= 4, f"{name}: {len(chunks)} chunks"
        assert silver_rows(spark, cfg, database, table) == source_rows(port, database, table), f"{name} differs"
