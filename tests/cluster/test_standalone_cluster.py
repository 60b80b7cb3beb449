"""binlake under spark-submit on a standalone Spark cluster: the launcher's master is used (no local
mode), chunks are read by two executors in JVMs of their own, the lake's files go through Hadoop's
FileSystem (`target.path: file:…`). A kill -9 of the driver mid-snapshot under concurrent writers,
then a restart: silver equals the source."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.integration.workload import Writers, create_table, source_rows, write_config

from .parts import ROOT, Cluster, said, silver, submit, submit_command, submit_env


def test_run_on_a_cluster_with_its_driver_killed(dev_db, database, spark_cluster: Cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rows = 4000
    create_table(port, database, rows)
    lake = tmp_path / "lake"
    cfg = write_config(tmp_path / "binlake.yml", port, database, f"file:{lake}",  # type: ignore[arg-type]
                       chunk_size=250, group_size=2)
    command = submit_command(spark_cluster.url, tmp_path, "run", "-c", str(cfg), "--until-caught-up")
    bronze_log = lake / "bronze" / f"{database}__t" / "_delta_log"
    before = set(spark_cluster.executors())
    with Writers(port, database, rows, threads=2, pause=0.005), open(tmp_path / "killed.log", "wb") as log:
        driver = subprocess.Popen(command, cwd=ROOT, env=submit_env(), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        # the driver dies (spark-submit's JVM and binlake's Python at once) once chunks are landing in bronze
        deadline = time.monotonic() + 600
        while driver.poll() is None and time.monotonic() < deadline and not list(bronze_log.glob("*.json")):
            time.sleep(0.2)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert driver.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-4000:]

    restart = submit(command)
    assert restart.returncode == 0, said(restart)
    assert silver(str(lake / "silver" / f"{database}__t")) == source_rows(port, database)
    # each run was an application of the cluster with two executors (JVMs the worker started)
    apps = {app: ids for app, ids in spark_cluster.executors().items() if app not in before}
    assert len(apps) == 2 and all(len(ids) == 2 for ids in apps.values()), apps
