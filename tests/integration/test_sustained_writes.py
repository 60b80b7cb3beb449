"""A snapshot under sustained single-row writes, each key changed at most once, then a catch-up.

Because no key is changed twice, a change lost at a chunk's low watermark is never healed by a later
one: silver differs from the source at the end. This is the run that lost committed rows before the
chunk read was made exact (one insert on MariaDB; rows in every try on MySQL with a slow disk, once
with both runs exiting 0). The server runs with `sync_binlog=1`, `innodb_flush_log_at_trx_commit=1`,
4 MB binlog files and every fsync slowed by a shim, which widens the window between a transaction
reaching the binlog and its rows becoming visible. `make soak` repeats it (BINLAKE_SOAK_RUNS).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.commands.devdb import DevDb
from binlake.lake import split_state as state
from binlake.lake.target import Target
from binlake.config import load

from ..conftest import SERVERS
from .helpers import seq
from .oracle import build_shim, shim_loaded
from .workload import bronze_duplicates, run_cli

ROWS = int(os.environ.get("BINLAKE_SUSTAINED_ROWS", "15000"))
WRITERS = 16
RUNS = int(os.environ.get("BINLAKE_SOAK_RUNS", "1"))


@pytest.fixture(scope="module", params=SERVERS)
def busy_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevDb]:
    root = tmp_path_factory.mktemp(f"sustained-{request.param}")
    shim = build_shim(root)
    db = DevDb(datadir=root / "db", server=request.param, server_id=41,
               extra_options=("--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1", "--max-binlog-size=4194304"),
               env={"LD_PRELOAD": str(shim), "BINLAKE_FSYNC_DELAY_US": os.environ.get("BINLAKE_FSYNC_DELAY_US", "5000")})
    db.start()
    assert shim_loaded(db.pid(), shim), "the fsync shim is not loaded"  # type: ignore[arg-type]
    yield db
    db.stop()


class OnceEach(threading.Thread):
    """One of the writers: walks its own share of the keys and changes each exactly once, in its own
    autocommit transaction -- an update or a delete of an existing key (multiples of 10), or an insert
    of a new key between two existing ones."""

    def __init__(self, port: int, database: str, n: int) -> None:
        super().__init__(daemon=True)
        self.port, self.database, self.n = port, database, n
        self.stop_flag = threading.Event()
        self.changes = 0

    def run(self) -> None:
        with pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", database=self.database,
                             autocommit=True) as conn, conn.cursor() as cur:
            for i in range(self.n + 1, ROWS + 1, WRITERS):
                if self.stop_flag.is_set():
                    return
                if i % 3 == 0:
                    cur.execute("UPDATE t SET v = %s WHERE id = %s", (f"u{i}", 10 * i))
                elif i % 3 == 1:
                    cur.execute("DELETE FROM t WHERE id = %s", (10 * i,))
                else:
                    cur.execute("INSERT INTO t VALUES (%s, %s)", (10 * i + 5, f"i{i}"))
                self.changes += 1


def _config(path: Path, port: int, database: str, lake: Path) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5700-5704\n"
        f"target:\n  path: {lake}\n"
        "snapshot:\n  chunk-size: 1000\n  group-size: 8\n  parallelism: 2\n"
    )
    return path


def _source(port: int, database: str) -> list[tuple[Any, ...]]:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database) as conn, \
            conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        return [(int(i), v) for i, v in cur.fetchall()]


@pytest.mark.parametrize("attempt", range(RUNS))
def test_snapshot_under_sustained_writes_then_catch_up(busy_server: DevDb, spark: Any, tmp_path: Path,
                                                       attempt: int) -> None:
    port = busy_server.running_port()
    assert port is not None
    database = f"sustained_{attempt}"
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True) as conn, \
            conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE `{database}`.t (id BIGINT PRIMARY KEY, v VARCHAR(16))")
        cur.execute(f"INSERT INTO `{database}`.t SELECT seq * 10, CONCAT('r', seq) FROM {seq(1, ROWS)}")
    cfg = _config(tmp_path / "binlake.yml", port, database, tmp_path / "lake")
    writers = [OnceEach(port, database, n) for n in range(WRITERS)]
    for w in writers:
        w.start()
    try:
        first = run_cli("run", "-c", str(cfg), "--until-caught-up")
    finally:
        for w in writers:
            w.stop_flag.set()
        for w in writers:
            w.join(timeout=60)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Traceback" not in first.stderr
    changed = sum(w.changes for w in writers)
    assert changed > 1000, f"only {changed} changes ran during the snapshot: the writers did not race it"
    second = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert second.returncode == 0, second.stderr[-2000:]
    target = Target.of(load(cfg))
    name = f"{database}.t"
    silver = sorted((int(r["id"]), r["v"]) for r in
                    spark.read.format("delta").load(target.silver(name).location).select("id", "v").collect())
    source = _source(port, database)
    missing = sorted(set(source) - set(silver))[:5]
    extra = sorted(set(silver) - set(source))[:5]
    assert silver == source, f"{changed} changes: silver lacks {missing}, has extra {extra}"
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    splits = state.load(spark, target.split_state, 8)[name]
    assert splits and all(s.lw is not None and s.lw <= s.hw for s in splits), \
        "the split state does not keep each chunk's low watermark beside its high watermark"
    print(f"sustained writes on {busy_server.server}, run {attempt}: {changed} changes during the snapshot of "
          f"{ROWS} rows in {len(splits)} chunks; silver equals the source ({len(source)} rows)")
