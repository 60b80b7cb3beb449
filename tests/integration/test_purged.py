"""A stored binlog position whose file the server has purged: a one-line error naming the file and
the fix (exit code 1), never a silent skip; with stream.on-purged: resnapshot, a fresh snapshot of
the captured tables, then the stream as usual."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from binlake.cli import main
from binlake.config import load
from binlake.capture.context import Context
from binlake.capture.run import run
from binlake.source.dialect import binlog_head
from binlake.lake import split_state as state
from binlake.lake.checkpoint import committed_offset
from binlake.capture.stream import resume_position
from binlake.lake.target import Target

from .helpers import seq
from .workload import Writers, bronze_duplicates, create_table, silver_rows, source_rows, write_config


def purge_up_to_now(conn, rotate: bool = True) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Rotate the binlog (unless not `rotate`) and purge every file before the current one; returns
    (oldest purged, current)."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        oldest = cur.fetchall()[0][0]
        if rotate:
            cur.execute("FLUSH BINARY LOGS")
        current = binlog_head(conn).file
        # MariaDB keeps a file until its binlog checkpoint is written (in the background after the
        # rotation); PURGE skips it until then
        deadline = time.monotonic() + 30
        while True:
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")
            cur.execute("SHOW BINARY LOGS")
            left = [r[0] for r in cur.fetchall()]
            if left == [current] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert left == [current]
    return oldest, current


@pytest.mark.slow
def test_purged_position_fails_then_resnapshots(dev_db, database, spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rows = 600
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=4)
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)
    target = Target.of(cfg)
    name = f"{database}.t"
    stored = resume_position(Context(cfg))
    assert stored is not None
    before = silver_rows(spark, target.silver(name).location)

    # changes the stream never read, then their binlog file is gone
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM t WHERE id <= 50")
        cur.execute("UPDATE t SET v = 'lost' WHERE id BETWEEN 51 AND 80")
        cur.execute(f"INSERT INTO t SELECT seq + 100000, 1, 'gap', 1, NOW(6), NULL FROM {seq(1, 30)}")
        purge_up_to_now(conn)

    capsys.readouterr()
    assert main(["run", "-c", str(cfg_path), "--until-caught-up"]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("binlake:")]
    assert len(lines) == 1, err[-2000:]
    assert stored.file in lines[0] and "purged" in lines[0] and "stream.on-purged: resnapshot" in lines[0], lines[0]
    # nothing was skipped silently: silver and the stored position are as they were
    assert silver_rows(spark, target.silver(name).location) == before
    assert resume_position(Context(cfg)) == stored

    old_splits = state.load(spark, target.split_state, 4)[name]
    with Writers(port, database, rows, threads=1, pause=0.01) as writers:
        resnap = load(cfg_path, ["stream.on-purged=resnapshot"])
        run(resnap, until_caught_up=True)
    assert writers.ops > 10
    run(resnap, until_caught_up=True)  # drain what the writers did after the first run's target

    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    fresh = state.load(spark, target.split_state, 4)[name]
    assert all(s.status == "done" for s in fresh) and fresh[-1].end is None
    assert min(s.hw for s in fresh if s.hw) > max(s.hw for s in old_splits if s.hw)  # re-read, not reused
    assert fresh[0].table_no != old_splits[0].table_no
    positions = spark.read.format("delta").load(target.bronze(name).location).where("_file IS NOT NULL")
    assert positions.where(f"_file = '{stored.file}'").count() == 0  # bronze was reset, not mixed
    done = committed_offset(target.checkpoint)
    assert done is not None and done > stored


def test_on_purged_rejects_other_values(tmp_path: Path) -> None:
    from binlake.errors import ConfigError

    with pytest.raises(ConfigError, match=r"stream.on-purged is 'skip'.*'fail' or 'resnapshot'"):
        load(None, ["stream.on-purged=skip"])
