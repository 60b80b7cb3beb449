"""kill -9 of the whole run at exact points, then a restart: silver equals the source, bronze has
no duplicate (key, _seq). Each point is reached through a named crash point (binlake.faults)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from binlake.config import load
from binlake.pipeline import run
from binlake.spark import state
from binlake.target import Target

from .workload import Writers, bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config

POINTS = [
    "mid_plan",  # after part of the table's splits are stored
    "after_low_watermark",  # inside a chunk read, between LW and HW (in a Spark worker)
    "after_bronze_write",  # a group's rows are in bronze, its splits not yet recorded landed
    "after_silver_chunks",  # silver has the landed chunks, the split state does not know yet
    "mid_merge",  # just before a MERGE commits (the landed chunks' MERGE, run again)
    "mid_stream",  # a micro-batch is in bronze, not yet in silver, checkpoint not committed
    "after_batch",  # right after handover: the first stream batch applied, checkpoint not committed
]


@pytest.mark.slow
def test_kill_at_each_point_in_turn_then_restart(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One run killed at each point in the order a run reaches them; every run resumes from what the
    one before left behind, so each point's recovery is exercised by the next run."""
    port = dev_db.running_port()
    rows = 2000
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=250, group_size=4)
    with Writers(port, database, rows, threads=1, pause=0.01):
        for point in POINTS:
            counter = tmp_path / f"crash-counter-{point}"
            env = {"BINLAKE_CRASH_AT": point, "BINLAKE_CRASH_COUNTER": str(counter), "BINLAKE_PLAN_BATCH": "3"}
            crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
            assert crashed.returncode == -9, f"the run was not killed at {point}: rc={crashed.returncode} {crashed.stderr[-2000:]}"
            assert counter.read_text().startswith(point)

    with Writers(port, database, rows, threads=1, pause=0.005) as more:
        while more.ops < 50:
            time.sleep(0.01)
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)  # the restart, in this process

    target = Target.of(cfg)
    name = f"{database}.t"
    splits = state.load(spark, target.split_state, 4)[name]
    assert [s.index for s in splits] == list(range(len(splits))) and splits[-1].end is None
    assert all(s.status == "done" for s in splits)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
