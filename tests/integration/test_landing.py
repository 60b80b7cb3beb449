"""A large table's snapshot on a local lake commits several chunk groups at once (`Landing.hold`): its
files come out near the size compaction aims at instead of one small file per group. A kill between
two such commits loses only the groups held, and the next run resumes from what bronze holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from binlake.config import load
from binlake.lake import split_state as state
from binlake.lake.table_log import Snapshot, data_path
from binlake.lake.target import Target

from .workload import bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config

GROUP_SIZE = 2


def _chunks_per_file(location: str) -> list[int]:
    """Per live file of bronze, the chunks whose snapshot rows it holds."""
    snapshot = Snapshot.read(location)
    op, chunk = snapshot.physical_names["_op"], snapshot.physical_names["_chunk"]
    counts = []
    for path in snapshot.files:
        rows = pq.read_table(data_path(location, path), columns=[op, chunk])
        counts.append(len(pc.unique(rows.filter(pc.equal(rows.column(op), "r")).column(chunk))))
    return [c for c in counts if c]


@pytest.mark.parametrize("plan_batch", ["1000", "6"], ids=["planned-whole", "planned-in-parts"])
def test_groups_land_several_to_a_commit_and_a_kill_between_commits_resumes(
        dev_db, database, spark, tmp_path: Path, plan_batch: str) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rows = 3000
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100,
                            group_size=GROUP_SIZE)
    # a table of more than 500 rows is large here, read group by group; a commit holds about 60 KB of
    # Arrow, three or four groups of this table
    env = {"BINLAKE_ARROW_ROWS": "500", "BINLAKE_SNAPSHOT_HOLD_BYTES": "60000", "BINLAKE_PLAN_BATCH": plan_batch,
           "BINLAKE_CRASH_COUNTER": str(tmp_path / "crash-counter")}
    crashed = run_cli("run", "-c", str(cfg_path), "--until-caught-up",
                      env={**env, "BINLAKE_CRASH_AT": "after_bronze_write:2"})
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    cfg = load(cfg_path)
    target = Target.of(cfg)
    name = f"{database}.t"
    held: Any = _chunks_per_file(target.bronze(name).location)
    assert len(held) == 2 and min(held) > GROUP_SIZE, f"two commits of several groups each: {held}"

    resumed = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    splits = state.load(spark, target.split_state, GROUP_SIZE)[name]
    assert all(s.status == "done" for s in splits)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    per_file = _chunks_per_file(target.bronze(name).location)
    # the commits hold several groups each (the last of a part, and the open last chunk, may hold fewer)
    assert max(per_file) > GROUP_SIZE and len(per_file) <= len(splits) // (2 * GROUP_SIZE) + 3, per_file
