"""A lake's upkeep while `binlake run` streams under writers and is killed (SIGKILL to its process
group) at random moments: every batch marked (binlake.lake.marked_merge), compaction steps racing the
stream's commits (lake.file-size 1 MiB), retention removing what left the tables seconds ago. After the
restart silver equals the source and bronze holds no change twice; the lake shows each of the three at
work, and status reports it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.config import load
from binlake.lake import compaction, retention
from binlake.lake.table_log import Snapshot, replay
from binlake.lake.target import Target

from .workload import (BINLAKE, CLI_ENV, ROOT, Writers, assert_quiet, bronze_duplicates, create_table, run_cli,
                       silver_rows, source_rows, write_config)

ROWS = 3000


def _killed_after(cfg_path: Path, log: Path, seconds: float) -> None:
    """`binlake run` under way for `seconds`, then killed."""
    with log.open("wb") as out:
        proc = subprocess.Popen([*BINLAKE, "-v", "run", "-c", str(cfg_path)], cwd=ROOT, start_new_session=True,
                                env={**os.environ, **CLI_ENV}, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"binlake run ended (rc {proc.returncode}): {log.read_text()[-2000:]}"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _operations(location: str) -> list[str]:
    return [json.loads(line)["commitInfo"].get("operation", "") for f in sorted((Path(location) / "_delta_log")
            .glob("*.json")) for line in f.read_text().splitlines() if "commitInfo" in line]


@pytest.mark.one_server
def test_marking_compaction_and_retention_under_writers_and_kills(dev_db: Any, database: str, spark: Any,
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BINLAKE_MARK_FROM_BYTES", "1")  # this small table's batches are marked, as a large one's
    port = dev_db.running_port()
    create_table(port, database, ROWS)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=500, group_size=2)
    with cfg_path.open("a") as cfg:
        cfg.write("lake:\n  compaction: on\n  file-size: 1\n  retention: 5s\n  retention-interval: 5s\n")
    seed = int(os.environ.get("BINLAKE_KILL_SEED") or random.randrange(10**6))
    rng = random.Random(seed)
    with Writers(port, database, ROWS, threads=2, pause=0.01) as writers:
        for kill in range(2):
            _killed_after(cfg_path, tmp_path / f"run-{kill}.log", rng.uniform(25, 45))
    resumed = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_quiet(resumed.stderr)

    target, name = Target.of(load(cfg_path)), f"{database}.t"
    silver, bronze = target.silver(name).location, target.bronze(name).location
    assert silver_rows(spark, silver) == source_rows(port, database), f"seed {seed}"
    assert bronze_duplicates(spark, bronze) == 0, f"seed {seed}"
    assert writers.ops > 500 and not writers.errors, (writers.ops, writers.errors[:3])

    # each of the three was at work: marked batches, compaction of both tables, retention's removals
    operations = _operations(silver)
    assert "MERGE" in operations and "OPTIMIZE" in operations, f"seed {seed}"
    assert "OPTIMIZE" in _operations(bronze), f"seed {seed}"
    # marks stay until a compaction takes them; an append after it (inserts only) adds none
    assert any("deletionVector" in a for a in Snapshot.read(silver).files.values()) or \
        [op for op in operations if op != "WRITE"][-1] == "OPTIMIZE", f"seed {seed}"
    steps = compaction.last_steps(target)[name]
    assert set(steps) == {"bronze", "silver"}
    passes = retention.last_passes(target)
    assert sum(p.total_removed_bytes for p in passes.values()) > 0, passes

    report = json.loads(run_cli("status", "-c", str(cfg_path), "--json").stdout)
    upkeep = next(t for t in report["tables"] if t["source"] == name)["maintenance"]
    assert upkeep["silver"]["files"] == len(Snapshot.read(silver).files)
    assert upkeep["bronze"]["files"] == len(Snapshot.read(bronze).files)
    assert upkeep["silver"]["last_compaction"] == steps["silver"]["at"]
    assert upkeep["silver"]["waiting_bytes"] is not None and upkeep["silver"]["last_retention"] is not None
    # once retention has passed, what lies on disk beside the log is at most twice what the table holds
    time.sleep(6)
    for location in (silver, bronze):
        retention.clean(location, 5.0)
        live = sum(os.path.getsize(f) for f in replay(location).live)
        on_disk = sum(f.stat().st_size for f in Path(location).rglob("*")
                      if f.is_file() and "_delta_log" not in f.parts)
        assert on_disk <= 2 * live, (location, on_disk, live, f"seed {seed}")
    print(f"upkeep on {dev_db.server}: {writers.ops} statements, silver {upkeep['silver']}, bronze "
          f"{upkeep['bronze']} (seed {seed})")
