"""An idle stream stays visible and restartable (binlake.capture.heartbeat): `binlake run` streams a
source on which nothing changes; `status --json` says the stream is caught up, with a recent time,
for as long as it idles. Then the binlog moves in a table binlake does not capture, the record
follows the head, binlake is killed (SIGKILL to its process group) and a restart reads on from the
recorded position, which is the server's head at the kill."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.source.dialect import binlog_head

from ..conftest import DAY_SERVER
from .test_heartbeat import settled_head
from .workload import BINLAKE, CLI_ENV, ROOT, create_table, run_cli, silver_rows, source_rows, write_config

HEARTBEAT_SECONDS = 5
STREAMING_FROM = re.compile(r"streaming from (\S+) in the driver")


def _status(cfg_path: Path) -> dict[str, Any]:
    done = run_cli("status", "-c", str(cfg_path), "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def _until(what: str, seconds: float, check: Any, run: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        assert run.poll() is None, f"binlake run ended (rc {run.returncode}): {log.read_text()[-2000:]}"
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s; {log.read_text()[-2000:]}"
        time.sleep(1)


@pytest.mark.one_server
def test_an_idle_stream_says_caught_up_and_a_kill_restarts_at_the_recorded_head(
        dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    # a minute of quiet (twelve heartbeats) on the day's server, where make test runs it (one_server);
    # twenty seconds on the other, where BINLAKE_TEST_SLOW_SERVERS runs it too
    idle = 60 if dev_db.server == DAY_SERVER else 20
    port = dev_db.running_port()
    create_table(port, database, 50)
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE uncaptured (id INT PRIMARY KEY)")
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=20, group_size=2)
    with cfg_path.open("a") as cfg:
        cfg.write(f"stream:\n  heartbeat-seconds: {HEARTBEAT_SECONDS}\n")
    log = tmp_path / "run-1.log"
    with log.open("wb") as out:
        run = subprocess.Popen([*BINLAKE, "-v", "run", "-c", str(cfg_path)], cwd=ROOT, start_new_session=True,
                               env={**os.environ, **CLI_ENV}, stdout=out, stderr=out)
    try:
        _until("the stream caught up", 300, lambda: _status(cfg_path)["stream"].get("caught_up"), run, log)
        time.sleep(idle)
        with dev_db.connect(database) as conn:
            head = settled_head(conn)
        asked = time.time()
        quiet = _status(cfg_path)["stream"]
        assert quiet["caught_up"] is True, quiet
        # recorded within the last interval or so before status was asked (it reads the file soon after), not
        # at the start of the quiet spell
        assert asked - quiet["heartbeat_at"] <= 2 * HEARTBEAT_SECONDS, (asked, quiet)
        assert quiet["heartbeat_position"] == str(head), (quiet, head)

        with dev_db.connect(database) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO uncaptured VALUES (1), (2), (3)")
            moved = settled_head(conn)
        assert moved > head

        def follows() -> bool:
            stream = _status(cfg_path)["stream"]
            return bool(stream["caught_up"] and stream["heartbeat_position"] == str(moved))

        _until("the record following the head", 60, follows, run, log)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    with dev_db.connect(database) as conn:
        at_kill = binlog_head(conn)
    recorded = _status(cfg_path)["stream"]
    assert recorded["heartbeat_position"] == str(at_kill) == recorded["position"], (recorded, at_kill)

    again = run_cli("-v", "run", "-c", str(cfg_path), "--until-caught-up")
    assert again.returncode == 0, again.stderr[-3000:]
    started = STREAMING_FROM.findall(again.stderr)
    assert started and started[0] == str(at_kill), (started, at_kill)
    target = json.loads(run_cli("status", "-c", str(cfg_path), "--json").stdout)["tables"][0]["silver"]["location"]
    assert silver_rows(spark, target) == source_rows(port, database)
