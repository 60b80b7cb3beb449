"""Tables without a primary key: a clear configuration error, or a configured NOT NULL chunk key."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from binlake.source.chunk_reader import Hooks, read_chunk
from binlake.source.connection import connect as source_connect
from binlake.source.catalog import load_schema
from binlake.splits import Split
from binlake.commands.verify import verify

from .capture import connect, run_once, silver, write_config
from .helpers import execute, params, seq
from .workload import run_cli


def test_without_chunk_key_run_exits_2_naming_the_setting(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE nopk (a INT NOT NULL, b VARCHAR(10))")
    cfg = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.nopk"], tmp_path / "lake", "6120-6124")
    done = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1]
    assert "source.chunk-key" in message and f"{database}.nopk" in message and "no primary key" in message


def test_unique_not_null_chunk_key(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE u (code VARCHAR(12) NOT NULL, v INT, UNIQUE KEY (code)) CHARACTER SET utf8mb4")
        cur.execute(f"INSERT INTO u SELECT CONCAT('c', seq), seq FROM {seq(1, 200)}")
    name = f"{database}.u"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.u"], tmp_path / "lake", "6120-6124",
                            chunk_size=25, group_size=4, chunk_keys={name: ["code"]})
    cfg = run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE u SET v = v * 10 WHERE v % 3 = 0")
        cur.execute("DELETE FROM u WHERE v % 7 = 0")
        cur.execute("UPDATE u SET code = UPPER(code) WHERE v % 5 = 0")
        cur.execute("INSERT INTO u VALUES ('new', -1)")
    run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT code, v FROM u")
        source = sorted(cur.fetchall())
    lake = sorted(tuple(r) for r in silver(spark, cfg, name).select("code", "v").collect())
    assert lake == source


class DupWriters:
    """Writes to a key-less table that make and remove identical rows: duplicate inserts, deletes and
    updates of one of several identical rows, chunk-key changes, rows turned into copies of others."""

    def __init__(self, port: int, database: str, limit: int = 400) -> None:
        self.port, self.database, self.limit = port, database, limit
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.ops = 0

    def __enter__(self) -> DupWriters:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=30)

    def _work(self) -> None:
        rnd = random.Random(5)
        with connect(self.port, self.database) as conn, conn.cursor() as cur:
            for _ in range(self.limit):
                if self.stop_flag.is_set():
                    break
                dup_change(cur, rnd)
                self.ops += 1
                time.sleep(0.01)


def dup_change(cur: Any, rnd: random.Random) -> None:
    g, v = rnd.randrange(40), rnd.randrange(3)
    op = rnd.random()
    if op < 0.3:
        cur.execute("INSERT INTO dup VALUES (%s, %s, %s), (%s, %s, %s)", (g, f"s{v}", v, g, f"s{v}", v))
    elif op < 0.45:
        cur.execute("DELETE FROM dup WHERE g = %s AND v = %s LIMIT 1", (g, v))
    elif op < 0.6:
        cur.execute("UPDATE dup SET v = v + 1 WHERE g = %s AND v = %s LIMIT 1", (g, v))
    elif op < 0.75:  # the chunk key changes: the row may move to another chunk
        cur.execute("UPDATE dup SET g = %s WHERE g = %s LIMIT 1", (rnd.randrange(40), g))
    elif op < 0.9:  # a row becomes identical to others
        cur.execute("UPDATE dup SET s = 's0', v = 0 WHERE g = %s LIMIT 2", (g,))
    else:  # several identical rows at once, in one event
        cur.execute("DELETE FROM dup WHERE g = %s AND v = 0 LIMIT 3", (g,))


def dup_rows(port: int, database: str) -> list[tuple[Any, ...]]:
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT g, s, v FROM dup")
        return sorted(cur.fetchall(), key=repr)


@pytest.mark.slow
def test_non_unique_chunk_key_keeps_identical_rows(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE dup (g INT NOT NULL, s VARCHAR(10), v INT, KEY (g)) CHARACTER SET utf8mb4")
        # 40 chunk-key values x 3 images x 3 identical rows, and NULLs in the other columns
        cur.execute(f"INSERT INTO dup SELECT seq % 40, CONCAT('s', seq % 3), seq % 3 FROM {seq(0, 359)}")
        cur.execute("INSERT INTO dup VALUES (7, NULL, NULL), (7, NULL, NULL)")
    name = f"{database}.dup"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.dup"], tmp_path / "lake", "6150-6154",
                            chunk_size=30, group_size=4, chunk_keys={name: ["g"]})
    with DupWriters(port, database) as writers:
        cfg = run_once(cfg_path)
    assert writers.ops > 100, "the writers must have raced the snapshot"
    rnd = random.Random(9)
    with connect(port, database) as conn, conn.cursor() as cur:  # through the binlog after the handover
        for _ in range(60):
            dup_change(cur, rnd)
    run_once(cfg_path)

    source = dup_rows(port, database)
    assert len(source) > len(set(source)), "the source must hold identical rows"
    df = silver(spark, cfg, name)
    assert sorted((tuple(r) for r in df.select("g", "s", "v").collect()), key=repr) == source
    numbered = df.groupBy("g", "s", "v").agg(F.sort_array(F.collect_list("_dup")).alias("d")).collect()
    assert all(r["d"] == list(range(1, len(r["d"]) + 1)) for r in numbered), "identical rows are numbered 1..n"
    report = verify(cfg)
    assert report["ok"], report


def test_keyless_chunk_read_is_exact_when_writes_race_it(dev_db, database) -> None:  # type: ignore[no-untyped-def]
    """An insert of a row identical to one the chunk holds, between LW and the SELECT, must be
    counted once: the read sees a change inside the chunk between its watermarks and reads it again."""
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE dup (g INT NOT NULL, s VARCHAR(10), v INT)")
        cur.execute("INSERT INTO dup VALUES (1, 'a', 1), (1, 'a', 1), (2, 'b', 2)")
    p = params(dev_db)
    conn = source_connect(p)
    try:
        schema = load_schema(conn, database, "dup", {f"{database}.dup": ["g"]})
    finally:
        conn.close()
    assert schema.multiset and schema.key == ("g", "s", "v")
    calls = {"n": 0}

    def race() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            execute(dev_db, database, "INSERT INTO dup VALUES (1, 'a', 1)", "DELETE FROM dup WHERE g = 2")

    split = Split(f"{database}.dup", 1, 0, None, None)
    result = read_chunk(p, schema, split, 6159, Hooks(after_low_watermark=race))
    rows = sorted((r["g"], r["s"], r["v"]) for r in result.rows)
    assert calls["n"] == 2, "the chunk changed during the first read, so it is read again"
    assert rows == [("1", "a", "1"), ("1", "a", "1"), ("1", "a", "1")]
