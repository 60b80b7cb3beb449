"""kill -9 of `binlake run` at random moments, not at hooked points, under writers, with a DDL and a
server restart along the way. After every kill bronze has no duplicate (key, _seq); at the end, after
the writers stop and one run catches up, silver equals the source.

The kill times come from a seeded generator and are printed with any failure (and kept in
`kills.log` in the test's folder), so a failing sequence can be replayed: BINLAKE_KILL_SEED=<seed>.
`make test` runs BINLAKE_KILLS=12 on one server a day (tests/conftest.py's DAY_SERVER: MariaDB and
MySQL in turn, seven days each); BINLAKE_KILL_SERVERS=mariadb,mysql runs both, and `make soak` runs 200
kills on each.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.config import load
from binlake.capture.run import run
from binlake.lake.target import Target

from ..conftest import SERVERS, SLOW_SERVERS
from .workload import (BINLAKE, CLI_ENV, ROOT, ReconnectingWriters, bronze_duplicates, create_table, silver_rows,
                       source_rows, write_config)

KILLS = int(os.environ.get("BINLAKE_KILLS", "12"))
ROWS = 20_000
DDL_AT, RESTART_AT = KILLS // 3, (2 * KILLS) // 3


def _chosen() -> list[str]:
    named = os.environ.get("BINLAKE_KILL_SERVERS")
    return named.split(",") if named else sorted(SLOW_SERVERS)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from binlake.commands.devdb import DevDb

    if request.param not in _chosen():
        pytest.skip(f"the random-kill soak runs on {','.join(_chosen())} today (see the module docstring)")
    db = DevDb(datadir=tmp_path_factory.mktemp(f"kills-{request.param}") / "db", server=request.param, server_id=51)
    db.start()
    yield db
    db.stop()


@pytest.mark.long
def test_kill_at_random_moments_then_catch_up(server: Any, spark: Any, tmp_path: Path) -> None:
    port = server.running_port()
    database = "kills"
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True) as conn, \
            conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    create_table(port, database, ROWS)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=500, group_size=4)
    cfg = load(cfg_path)
    name = f"{database}.t"
    bronze = Target.of(cfg).bronze(name).location
    seed = int(os.environ.get("BINLAKE_KILL_SEED") or random.randrange(10**6))
    rnd = random.Random(seed)
    journal = tmp_path / "kills.log"
    kills: list[float] = []
    writers = ReconnectingWriters(port, database, ROWS, seed)
    writers.start()
    try:
        for n in range(KILLS):
            if n == DDL_AT:
                with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                                     autocommit=True) as conn, conn.cursor() as cur:
                    cur.execute("ALTER TABLE t ADD COLUMN extra INT DEFAULT 7")
            if n == RESTART_AT:
                server.stop()
                server.port = port
                server.start()
            after = rnd.uniform(2.0, 20.0)
            kills.append(after)
            journal.write_text(f"seed {seed}: kills after {[round(k, 2) for k in kills]}\n")
            log = tmp_path / f"run-{n + 1}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen([*BINLAKE, "run", "-c", str(cfg_path)], cwd=ROOT, start_new_session=True,
                                        env={**os.environ, **CLI_ENV}, stdout=out, stderr=out)
            try:
                proc.wait(timeout=after)
                failed = log.read_text(errors="replace")[-2000:]
                raise AssertionError(f"binlake run ended on its own (rc {proc.returncode}) before kill {n + 1} "
                                     f"({journal.read_text().strip()}): {failed}")
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if any((Path(bronze) / "_delta_log").glob("*.json")):  # a kill may land before its first commit
                assert bronze_duplicates(spark, bronze) == 0, f"duplicates after kill {n + 1}: {journal.read_text()}"
    finally:
        writers.stop_flag.set()
        writers.join(timeout=30)
    run(load(cfg_path), until_caught_up=True)
    target = Target.of(cfg)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database), journal.read_text()
    assert bronze_duplicates(spark, bronze) == 0, journal.read_text()
    print(f"random-kill soak on {server.server}: {KILLS} kills survived ({journal.read_text().strip()})")
