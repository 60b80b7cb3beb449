"""kill -9 while planning and between a chunk's low and high watermark, on tables whose chunk keys
are strings under a case- and accent-insensitive collation and composite keys of mixed types, with
writes racing every run; the restart must finish the plan where it stopped (no gap, no overlap, no
chunk planned twice) and land silver equal to the source row by row, with no duplicate in bronze."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.config import load
from binlake.lake import split_state as state
from binlake.lake.target import Target

from .capture import connect, snapshot_once, stream_once, write_config
from .workload import run_cli

WORDS = ["a", "A", "é", "E", "ß", "ss", "😀", "z", "Zz", "ö"]


def word(rnd: random.Random) -> str:
    return "".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 4))) + f"{rnd.randrange(10_000):04d}"


class Writers(threading.Thread):
    def __init__(self, port: int, database: str) -> None:
        super().__init__(daemon=True)
        self.port, self.database, self.ops = port, database, 0
        self.stop_flag = threading.Event()

    def __enter__(self) -> Writers:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_flag.set()
        self.join(timeout=30)

    def run(self) -> None:
        rnd = random.Random(17)
        with connect(self.port, self.database) as conn, conn.cursor() as cur:
            while not self.stop_flag.is_set():
                op = rnd.random()
                if op < 0.25:
                    cur.execute("INSERT IGNORE INTO s VALUES (%s, %s)", (word(rnd), rnd.randrange(1000)))
                    cur.execute("INSERT IGNORE INTO c VALUES (%s, %s, %s, %s)",
                                (rnd.randrange(3), word(rnd), f"2024-01-{rnd.randint(1, 28):02d}", -1))
                elif op < 0.5:
                    cur.execute("UPDATE s SET v = v + 1 ORDER BY RAND() LIMIT 1")
                    cur.execute("UPDATE c SET v = v + 1 ORDER BY RAND() LIMIT 1")
                elif op < 0.7:  # key changes, case-only ones included
                    cur.execute("UPDATE IGNORE s SET k = UPPER(k) ORDER BY RAND() LIMIT 1")
                    cur.execute("UPDATE IGNORE c SET a = 2 - a, d = d + INTERVAL 1 DAY ORDER BY RAND() LIMIT 1")
                else:
                    cur.execute("DELETE FROM s ORDER BY RAND() LIMIT 1")
                    cur.execute("DELETE FROM c ORDER BY RAND() LIMIT 1")
                self.ops += 1
                time.sleep(0.02)


def rows(port: int, database: str, table: str, cols: str) -> list[tuple[Any, ...]]:
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {cols} FROM {table}")
        return sorted(tuple(r) for r in cur.fetchall())


@pytest.mark.slow
def test_kill_mid_plan_and_between_watermarks_with_string_and_composite_keys(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rnd = random.Random(1)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE s (k VARCHAR(24) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, v INT) "
                    "CHARACTER SET utf8mb4")
        cur.execute("CREATE TABLE c (a TINYINT NOT NULL, b VARCHAR(24) COLLATE utf8mb4_unicode_ci NOT NULL, "
                    "d DATE NOT NULL, v INT, PRIMARY KEY (a, b, d)) CHARACTER SET utf8mb4")
        cur.executemany("INSERT IGNORE INTO s VALUES (%s, %s)", [(word(rnd), i) for i in range(1500)])
        cur.executemany("INSERT IGNORE INTO c VALUES (%s, %s, %s, %s)",
                        [(rnd.randrange(3), word(rnd), f"2024-02-{rnd.randint(1, 28):02d}", i) for i in range(1500)])
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.(s|c)"], tmp_path / "lake", "6170-6174",
                            chunk_size=100, group_size=8)
    with Writers(port, database) as writers:
        for point in ("mid_plan:2", "after_low_watermark:5"):
            counter = tmp_path / f"crash-{point.split(':')[0]}"
            env = {"BINLAKE_CRASH_AT": point, "BINLAKE_CRASH_COUNTER": str(counter), "BINLAKE_PLAN_BATCH": "4"}
            crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
            assert crashed.returncode == -9, f"not killed at {point}: rc={crashed.returncode} {crashed.stderr[-2000:]}"
            if point.startswith("mid_plan"):
                planned = state.load(spark, Target.of(load(cfg_path)).split_state, 8)
                assert planned and any(s.end is not None for ss in planned.values() for s in ss[-1:]), \
                    "the crash must leave a table half planned"
        # the restart, in this process, writers still running: it finishes the half-done plan and the
        # chunk the kill cut short
        snapshot_once(cfg_path)
    assert writers.ops > 50
    cfg = stream_once(cfg_path)  # every change the writers made, across the handover

    target = Target.of(cfg)
    all_splits = state.load(spark, target.split_state, 8)
    for table, cols in (("s", "k, v"), ("c", "a, b, d, v")):
        name = f"{database}.{table}"
        splits = all_splits[name]
        assert [s.index for s in splits] == list(range(len(splits))) and len(splits) >= 5, len(splits)
        assert splits[0].start is None and splits[-1].end is None
        assert all(a.end == b.start for a, b in zip(splits, splits[1:])), f"{name}: the plan has a gap or overlap"
        assert all(s.status == "done" for s in splits)
        df = spark.read.format("delta").load(target.silver(name).location)
        lake = sorted(tuple(r) for r in df.selectExpr(*cols.split(", ")).collect())
        # a DATE key is its text in silver
        assert lake == rows(port, database, table, cols.replace(" d,", " CAST(d AS CHAR),")), f"silver {name} differs"
        key = cols.split(", ")[:-1]
        dup = (spark.read.format("delta").load(target.bronze(name).location).where("_op IN ('r','c','u','d')")
               .groupBy(*key, "_seq", "_op").count().where("count > 1").count())
        assert dup == 0, f"bronze {name} holds a change twice"
