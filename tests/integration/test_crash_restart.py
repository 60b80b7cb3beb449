"""kill -9 of the whole run at exact points, then a restart: silver equals the source, bronze has
no duplicate (key, _seq). Each point is reached through a named crash point (binlake.faults)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from binlake.config import load
from binlake.capture.run import run
from binlake.lake import split_state as state
from binlake.lake.target import Target

from .workload import (TailInserter, Writers, bronze_duplicates, create_table, run_cli, silver_rows,
                       source_rows, write_config)

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


@pytest.mark.slow
def test_kill_after_a_batch_of_inserts_reached_silver_then_restart(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The stream appends a batch of inserts to silver plainly when bronze held none of its changes.
    Killed right after such a batch reached silver and before the checkpoint recorded it, the restart
    replays the batch, finds it in bronze, and takes the MERGE: silver holds each row once."""
    from delta.tables import DeltaTable

    port = dev_db.running_port()
    create_table(port, database, 200)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=2)
    writer = TailInserter(port, database, first=1001, per_step=1, pause=0.02)
    writer.start()
    counter = tmp_path / "crash-counter"
    try:
        # `binlake run` streams on (no --until-caught-up): killed once its third batch is in silver
        crashed = run_cli("run", "-c", str(cfg_path), env={"BINLAKE_CRASH_AT": "after_batch:3",
                                                           "BINLAKE_CRASH_COUNTER": str(counter)})
    finally:
        writer.stop()
    assert crashed.returncode == -9, f"the run was not killed: rc={crashed.returncode} {crashed.stderr[-2000:]}"
    assert len(counter.read_text().splitlines()) == 3
    cfg = load(cfg_path)
    target = Target.of(cfg)
    name = f"{database}.t"
    last = DeltaTable.forPath(spark, target.silver(name).location).history(1).collect()[0]
    assert (last["operation"], last["operationParameters"].get("mode")) == ("WRITE", "Append"), \
        "the killed batch reached silver as a plain append"

    run(cfg, until_caught_up=True)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0


@pytest.mark.slow
def test_a_new_checkpoint_over_an_old_bronze_lands_each_change_once(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The stream's checkpoint removed: the next stream starts again from the snapshot's high
    watermarks and reads every change since then once more. Bronze takes only those past the newest
    change it holds, and silver still equals the source."""
    import shutil

    port = dev_db.running_port()
    create_table(port, database, 300)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=2)
    cfg = load(cfg_path)
    target = Target.of(cfg)
    name = f"{database}.t"
    with Writers(port, database, 300, threads=1, pause=0.01) as w:
        run(cfg, until_caught_up=True)
        while w.ops < 100:
            time.sleep(0.01)
    run(cfg, until_caught_up=True)
    landed = spark.read.format("delta").load(target.bronze(name).location).where("_op IN ('c','u','d')").count()
    assert landed > 0
    shutil.rmtree(target.checkpoint)
    with Writers(port, database, 300, threads=1, pause=0.01) as w:
        while w.ops < 50:
            time.sleep(0.01)
    run(cfg, until_caught_up=True)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
