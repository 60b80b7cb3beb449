"""A peer: Flink CDC's MySQL source (PyFlink from PyPI, flink-sql-connector-mysql-cdc from Maven Central)
reading the same customer table's snapshot into a blackhole sink, parallelism 2, chunk size 8096.

PyFlink pins its own pandas and pyarrow, so it gets a virtualenv of its own under
`.binlake/bench-flink`; the connector jar goes there too. When any step cannot run here the section
records `flink_cdc_rows_per_s: null` and the exact reason.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from harness import ROOT, Source, TreeSampler, create_customer, rate
from snapshot import DATABASE, TABLE

FLINK = ROOT / ".binlake" / "bench-flink"
PYFLINK = "apache-flink==1.20.3"
CDC = "org.apache.flink:flink-sql-connector-mysql-cdc:3.5.0"  # 3.5.0 is built for Flink 1.20
# the connector no longer bundles the MySQL JDBC driver (GPL); Flink CDC's docs name 8.0.27+
DRIVER = "com.mysql:mysql-connector-j:8.0.33"
JAR = FLINK / "jars" / "flink-sql-connector-mysql-cdc-3.5.0.jar"
DRIVER_JAR = FLINK / "jars" / "mysql-connector-j-8.0.33.jar"
JOB = Path(__file__).with_name("flink_job.py")


class Unavailable(Exception):
    pass


def _step(cmd: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{what} did not finish within {timeout:.0f}s") from None
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if "ERROR" in ln or "error" in ln]
        raise Unavailable(f"{what} failed: {(lines or [done.stderr.strip()[-300:]])[0][:300]}")


def install() -> Path:
    """The PyFlink interpreter, installing PyFlink and the connector jar on first use."""
    python = FLINK / "venv" / "bin" / "python"
    if not python.exists():
        _step(["python3", "-m", "venv", str(FLINK / "venv")],
              "creating the PyFlink virtualenv", 120)
    if subprocess.run([str(python), "-c", "import pyflink"], capture_output=True).returncode != 0:
        _step([str(python), "-m", "pip", "install", "-q", PYFLINK], f"pip install {PYFLINK}", 900)
    for artifact, jar in ((CDC, JAR), (DRIVER, DRIVER_JAR)):
        if not jar.exists():
            _step(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={jar.parent}"],
                  f"fetching {artifact} with mvn", 600)
    return python


def reason_from(output: str) -> str:
    """The most telling line of a failed Flink run: the deepest 'Caused by', else the last exception."""
    lines = [ln.strip() for ln in output.splitlines()]
    caused = [ln for ln in lines if ln.startswith("Caused by:")]
    if caused:
        return caused[-1][:400]
    errors = [ln for ln in lines if "Exception" in ln or "Error" in ln]
    return (errors[-1] if errors else (lines[-1] if lines else "no output"))[:400]


def run(source: Source, rows: int) -> dict[str, Any]:
    began = time.monotonic()
    out: dict[str, Any] = {"engine": f"Flink CDC 3.5.0 MySQL source on PyFlink 1.20.3 ({PYFLINK})",
                           "flink_cdc_rows_per_s": None}
    try:
        python = install()
    except Unavailable as exc:
        out["reason"] = str(exc)
        return out
    exists = source.scalar(f"SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{DATABASE}' "
                           f"AND TABLE_NAME = '{TABLE}'")
    if not exists or int(source.scalar(f"SELECT COUNT(*) FROM {DATABASE}.{TABLE}")) != rows:
        create_customer(source, DATABASE, rows, TABLE)  # the snapshot section did not run at this size
    n = int(source.scalar(f"SELECT COUNT(*) FROM {DATABASE}.{TABLE}"))
    log = FLINK / "job.log"
    with open(log, "w") as f:
        t0 = time.monotonic()
        proc = subprocess.Popen([str(python), "-P", str(JOB), "127.0.0.1", str(source.port), DATABASE, TABLE, f"{JAR};{DRIVER_JAR}",
                                 "2", "8096"], stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        with TreeSampler(proc.pid) as sampler:
            try:
                rc = proc.wait(timeout=1200)
            except subprocess.TimeoutExpired:
                from harness import stop_group
                stop_group(proc, grace=10)
                rc = -9
        wall = time.monotonic() - t0
    text = log.read_text(errors="replace")
    result = next((json.loads(ln) for ln in text.splitlines() if ln.startswith("{\"job_s\"")), None)
    if rc != 0 or result is None:
        out["reason"] = f"the Flink job exited {rc}: {reason_from(text)} (log {log})"
        return out
    out.update({
        "rows": n,
        "rows_counted_by_flink": result["rows"],
        "flink_cdc_rows_per_s": rate(n, result["job_s"]),
        "job_s": round(result["job_s"], 2),
        "wall_s": round(wall, 2),
        "wall_rows_per_s": rate(n, wall),
        "peak_rss_mb": sampler.peak_mb,
        "peak_pss_mb": sampler.peak_pss_mb,
        "section_s": round(time.monotonic() - began, 1),
        "measures": "the snapshot job only (INSERT INTO blackhole SELECT * FROM the mysql-cdc table, "
                    "scan.startup.mode snapshot); wall_s adds the JVM and a second job counting the rows",
    })
    if result["rows"] != n:
        out["note"] = f"Flink counted {result['rows']} rows, the table has {n}"
    return out
