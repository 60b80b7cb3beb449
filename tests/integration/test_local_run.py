"""A local lake's run that needs nothing of Spark starts no JVM: the snapshot of a table read group by
group, the stream's first batch (whose checkpoint records Spark's settings) and the batches after."""

from __future__ import annotations

from pathlib import Path

from binlake.config import load
from binlake.lake.target import Target

from .helpers import execute
from .workload import create_table, run_cli, silver_rows, source_rows, write_config


def test_a_local_run_that_needs_no_spark_starts_no_jvm(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    create_table(port, database, 3000)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=200, group_size=2)
    env = {"BINLAKE_ARROW_ROWS": "500"}  # a large table here: read group by group, not whole
    first = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    execute(dev_db, database, "UPDATE t SET k = k + 1 WHERE id % 7 = 0", "DELETE FROM t WHERE id % 11 = 0",
            "INSERT INTO t (id, k) VALUES (5001, 1), (5002, 2)")
    second = run_cli("run", "-c", str(cfg_path), "--until-caught-up", env=env)
    assert second.returncode == 0, second.stderr[-3000:]

    target = Target.of(load(cfg_path))
    # the JVM's log4j opens this file as it starts (binlake.spark.session); nothing else writes it
    assert not (tmp_path / "lake" / "_binlake" / "spark.log").exists(), "a JVM was started"
    assert silver_rows(spark, target.silver(f"{database}.t").location) == source_rows(port, database)
