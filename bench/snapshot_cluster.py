"""The snapshot section's run on a standalone Spark cluster, next to its `local[2]` figure: the same
`binlake snapshot` of the same table into a fresh lake, given to `spark-submit` as README's "Running on
a Spark cluster" has it, on a master and a worker this module starts from pyspark's own scripts (the
cluster tests' `tests/cluster/parts.py`, which has no pytest in it) and stops at the end.

The cluster: one worker of 2 cores, two executors of 1 core and 1 GB each, the driver in client mode
with the 2 GB the local run's driver has, and the local session's own `spark.default.parallelism` and
`spark.sql.shuffle.partitions` (2), so the two runs differ by where the work runs, not by Spark's
defaults. It needs only what `make setup` installs (pyspark's scripts, Delta's jars): `make
setup-cluster` adds SeaweedFS and Hadoop's S3A jars, which a `file:` lake does not use. Anything
missing, or a cluster that does not start or a run that fails, is recorded as `cluster_reason` in one
line instead of the figures; the section's local figures are kept either way.

Measured on MariaDB only: the cluster changes where binlake's work runs, not how the server is read.
`BENCH_SNAPSHOT_CLUSTER=0` leaves it out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
from harness import ROOT, WORK, Source, TreeSampler, parse_snapshot_line, rate, stop_group, write_config

NAME = "snapshot-cluster"
EXECUTORS = 2
# on top of parts.submit_command's (2 executors of 1 core, 1 GB each): the local session's settings
SETTINGS = {"spark.driver.memory": os.environ.get("BINLAKE_DRIVER_MEMORY", "2g"),
            "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2"}
DESCRIPTION = (f"standalone: a master and a worker of 2 cores started by the bench, spark-submit in client "
               f"mode, {EXECUTORS} executors of 1 core and 1 GB, driver {SETTINGS['spark.driver.memory']}")


def parts() -> Any:
    """tests/cluster/parts.py, the cluster tests' own cluster: importable from the repository's root."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tests.cluster import parts as cluster_parts

    return cluster_parts


def run(source: Source, database: str, table: str, rows: int, local: dict[str, Any]) -> dict[str, Any]:
    """The `cluster_*` figures of the snapshot section, or its `cluster_reason` in one line."""
    if os.environ.get("BENCH_SNAPSHOT_CLUSTER", "1") == "0":
        return {"cluster_reason": "left out: BENCH_SNAPSHOT_CLUSTER=0"}
    try:
        missing = parts().missing_cluster_tools()
        if missing:
            return {"cluster_reason": missing}
        return measure(source, database, table, rows, local)
    except Exception as exc:  # the local figures of the section stand without the cluster's
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return {"cluster_reason": f"the cluster run failed: {type(exc).__name__}: {first} "
                                  f"(logs in {WORK / NAME})"}


def measure(source: Source, database: str, table: str, rows: int, local: dict[str, Any]) -> dict[str, Any]:
    cfg, _lake = write_config(NAME, source, [rf"{database}\.{table}"], file_uri=True)
    folder = cfg.parent
    began = time.monotonic()
    with parts().standalone_cluster(folder / "spark", cores=EXECUTORS) as cluster:
        start_s = time.monotonic() - began
        before = set(cluster.executors())
        wall_s, cpu_s, output = submit(cluster, folder, cfg)
        apps = [ids for app, ids in cluster.executors().items() if app not in before]
    inproc = parse_snapshot_line(output)
    if inproc is None or inproc["rows"] != rows:
        raise RuntimeError(f"binlake snapshot on the cluster reported {inproc and inproc['rows']} rows, "
                           f"the table has {rows}")
    out: dict[str, Any] = {
        "cluster": DESCRIPTION,
        "cluster_executors": sum(len(ids) for ids in apps),
        "cluster_start_s": round(start_s, 1),
        "cluster_wall_s": round(wall_s, 2),
        "cluster_rows_per_s": rate(rows, wall_s),
        "cluster_in_process_s": inproc["seconds"],
        "cluster_in_process_rows_per_s": rate(rows, inproc["seconds"]),
        "cluster_chunks": inproc["chunks"],
        "cluster_cpu_s_per_1m_rows": round(cpu_s * 1e6 / rows, 1),
    }
    if local.get("rows_per_s"):
        out["cluster_ratio_to_local"] = round(out["cluster_rows_per_s"] / local["rows_per_s"], 4)
    if local.get("in_process_rows_per_s"):
        out["cluster_ratio_to_local_in_process"] = round(out["cluster_in_process_rows_per_s"]
                                                         / local["in_process_rows_per_s"], 4)
    return out


def submit(cluster: Any, folder: Path, cfg: Path, timeout: float = 3600) -> tuple[float, float, str]:
    """`spark-submit ... snapshot` on the cluster: its wall time, the CPU seconds of the driver's process
    tree and of the worker's during the run (the executors are its children), and binlake's output (the
    driver's stdout)."""
    command = parts().submit_command(cluster.url, folder, "-v", "snapshot", "-c", str(cfg), conf=SETTINGS)
    env = parts().submit_env()
    # the cluster tests' C1-only, serial-GC driver starts faster; the local run's JVM has neither
    env.pop("JDK_JAVA_OPTIONS", None)
    worker = psutil.Process(cluster.worker)
    worker_cpu = sum(worker.cpu_times()[:2])  # the worker JVM's own start, before the run
    log, spark_log = folder / "snapshot.log", folder / "spark-submit.log"
    with open(log, "wb") as out, open(spark_log, "wb") as err:
        began = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)
        try:
            with TreeSampler(proc.pid) as driver, TreeSampler(cluster.worker) as executors:
                rc = proc.wait(timeout=timeout)
            wall_s = time.monotonic() - began
        finally:
            stop_group(proc, grace=30)
            try:  # anything of the driver's left behind its leader
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    output = log.read_text(errors="replace")
    if rc != 0:
        tail = "\n".join((output + spark_log.read_text(errors="replace")).strip().splitlines()[-15:])
        raise RuntimeError(f"spark-submit ... snapshot exited {rc}; logs {log}, {spark_log}:\n{tail}")
    return wall_s, driver.cpu_s + executors.cpu_s - worker_cpu, output
