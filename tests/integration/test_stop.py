"""A stop as systemd, Kubernetes and Databricks send it: SIGTERM to a running `binlake run`, to its
process alone or to its whole process group (systemd's KillMode=control-group, `kill -TERM -PGID`),
under writers. binlake finishes or abandons the micro-batch in flight, says `binlake: stopped at
<position>` in one line and exits 0; nothing else reaches the output, Spark's start-up lines
included. A second signal stops at once; a stop during the snapshot too. After a restart silver
equals the source and bronze holds no change twice."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.config import load
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

from .test_reconnect import running, wait_for
from .workload import Writers, assert_quiet, bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config

STOPPED = re.compile(r"^binlake: stopped at (\S+:\d+)$", re.M)


def _signal(run: Any, form: str) -> str:
    if form == "group":
        os.killpg(run.pid, signal.SIGTERM)
    else:
        run.send_signal(signal.SIGTERM)
    if form == "twice":
        time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
    _out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    return str(err)


def _caught_up_and_exact(cfg_path: Path, port: int, database: str, spark: Any) -> None:
    done = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_quiet(done.stderr)
    target = Target.of(load(cfg_path))
    name = f"{database}.t"
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0


# the process form on both servers; the group and twice forms (how binlake takes the signal, which no
# server changes) on one a day
@pytest.mark.parametrize("form", ["process", *(pytest.param(f, marks=pytest.mark.slow) for f in ("group", "twice"))])
def test_sigterm_while_streaming_under_writers(dev_db: Any, database: str, spark: Any, tmp_path: Path,
                                               form: str) -> None:
    port = dev_db.running_port()
    rows = 300
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=2)
    target = Target.of(load(cfg_path))
    with Writers(port, database, rows, threads=2, pause=0.005) as writers:
        with running(cfg_path, "--set", "stream.trigger-seconds=1") as run:
            first = None

            def batches() -> bool:
                nonlocal first
                now = committed_offset(target.checkpoint)
                first = first or now
                return now is not None and now != first  # two batches committed, writers still going

            wait_for("two micro-batches under writers", batches, run)
            err = _signal(run, form)
        assert writers.ops > 50
    stopped = STOPPED.findall(err)
    assert len(stopped) == 1, err[-3000:]
    # the position said is the one the checkpoint holds: the next run goes on from there
    assert stopped[0] == str(committed_offset(target.checkpoint)), err[-3000:]
    assert_quiet(err)
    _caught_up_and_exact(cfg_path, port, database, spark)


@pytest.mark.slow
def test_sigterm_during_the_snapshot(dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    port = dev_db.running_port()
    rows = 20_000
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=500, group_size=2)
    target = Target.of(load(cfg_path))
    with running(cfg_path) as run:
        wait_for("the snapshot's first chunks", lambda: (Path(target.split_state) / "_delta_log").is_dir(), run)
        err = _signal(run, "group")
    assert committed_offset(target.checkpoint) is None  # it stopped before the stream began
    assert re.search(r"^binlake: stopped; the next run goes on where this one was$", err, re.M), err[-3000:]
    assert_quiet(err)
    _caught_up_and_exact(cfg_path, port, database, spark)
