"""The metrics endpoint of `binlake run`, scraped with a plain HTTP client while the run works, and
`binlake status --json` after it, checked against what the run did: rows captured equal to the
tables' rows, chunks done equal to chunks planned, the micro-batches' changes equal to the changes
bronze holds, seconds behind near zero once caught up, the error that ended it. In the slow tests'
turns: nothing listening when metrics.port is not set, and the last error served by the next run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .capture import connect, write_config
from .workload import BINLAKE, CLI_ENV, ROOT, run_cli

TABLES = {"a": 120, "b": 45}
CHUNK_SIZE = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    """Every sample served on `port` by name and labels; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/plain")
            text = answer.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def serves_metrics(port: int) -> bool:
    """Whether `port` answers a GET of /metrics with binlake's figures (another server may answer
    anything, or nothing)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.status == 200 and b"binlake_" in answer.read()
    except Exception:  # noqa: BLE001 - not an HTTP server at all
        return False


def sample(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def until(what: str, check: Callable[[], Any], process: subprocess.Popen[str], port: int,
          timeout: float = 420) -> Any:
    """`check()`'s first true answer, asked every half second while `process` runs (a loaded 2-core
    machine takes minutes to start Spark twice over)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        assert process.poll() is None, f"the run ended while waiting for {what}: {process.communicate()[1][-3000:]}"
        time.sleep(0.5)
    last = {k: v for k, v in (scrape(port) or {}).items() if k[0].startswith("binlake")}
    raise AssertionError(f"timed out waiting for {what}; the endpoint served {last}")


def listening(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its sockets in /proc/net/tcp*); none once it has ended."""
    inodes = set()
    ports = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        for table in ("tcp", "tcp6"):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    except OSError:  # it ended meanwhile
        pass
    return ports


def start(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, **CLI_ENV)
    env.pop("BINLAKE_RUN_PGID", None)
    return subprocess.Popen([*BINLAKE, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def stream_changes(lake: Path, database: str, table: str) -> int:
    """The binlog changes bronze holds for `table`, read by delta-rs."""
    bronze = deltalake.DeltaTable(str(lake / "bronze" / f"{database}__{table}"))
    result = deltalake.QueryBuilder().register("b", bronze).execute(
        "SELECT count(*) AS n FROM b WHERE _op IN ('c', 'u', 'd')").read_all()
    return int(pyarrow.table(result).to_pylist()[0]["n"])


def source(dev_db: Any, database: str, tmp_path: Path, server_ids: str) -> tuple[Path, dict[str, str]]:
    """The tables `TABLES` in `database`, and a binlake.yml capturing them: its path, the tables' names."""
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        for name, rows in TABLES.items():
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.executemany(f"INSERT INTO {name} VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, rows + 1)])
    cfg = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.(a|b)"], tmp_path / "lake", server_ids,
                       chunk_size=CHUNK_SIZE, group_size=2)
    return cfg, {t: f"{database}.{t}" for t in TABLES}


def with_metrics(cfg: Path, **sections: dict[str, Any]) -> int:
    """Set `metrics.port` to a free port (and the `sections` given) in the config at `cfg`; the port."""
    port = _free_port()
    doc = json.loads(cfg.read_text())
    doc.update(metrics={"port": port}, **sections)
    cfg.write_text(json.dumps(doc))
    return port


@pytest.mark.slow
def test_metrics_of_a_run_and_its_status(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    lake = tmp_path / "lake"
    cfg, names = source(dev_db, database, tmp_path, "7720-7724")

    # 1. a continuous run serving metrics: no error yet, then the snapshot's figures
    mport = with_metrics(cfg, stream={"schema-changes": "fail"})
    running = start("run", "-c", str(cfg))
    try:
        first = until("the endpoint", lambda: scrape(mport), running, mport)
        assert not any(name.startswith(("binlake_last_error", "binlake_errors")) for name, _ in first), first

        def caught_up() -> Any:
            got = scrape(mport)
            behind = [sample(got, "binlake_seconds_behind_source", table=n) for n in names.values()] if got else []
            return got if behind and all(b is not None and b <= 1 for b in behind) else None

        got = until("the stream to catch up", caught_up, running, mport)
        for t, n in names.items():
            planned = sample(got, "binlake_chunks_planned", table=n)
            assert planned is not None and planned >= TABLES[t] // CHUNK_SIZE, (t, planned)
            assert sample(got, "binlake_chunks_done", table=n) == planned
            assert sample(got, "binlake_rows_captured_total", table=n, phase="snapshot") == TABLES[t]

        # 2. changes to one table: the batches' rows are the changes bronze holds
        changed = time.time()
        with connect(port, database) as conn, conn.cursor() as cur:
            cur.execute("UPDATE a SET v = 'x' WHERE id <= 30")
            cur.executemany("INSERT INTO a VALUES (%s, 'new')", [(i,) for i in range(1000, 1010)])
            cur.execute("DELETE FROM a WHERE id > 115 AND id < 1000")
        changes = 30 + 10 + 5

        def landed() -> Any:
            got = scrape(mport)
            return got if got and sample(got, "binlake_rows_captured_total", table=names["a"], phase="stream") == changes \
                else None

        got = until("the changes to land", landed, running, mport)
        assert stream_changes(lake, database, "a") == changes
        assert sample(got, "binlake_micro_batch_rows_sum") == changes  # b's batches, if any, landed none
        batches = sample(got, "binlake_micro_batch_rows_count")
        assert batches is not None and batches >= 1
        assert sample(got, "binlake_micro_batch_duration_seconds_count") == batches
        assert 0 < (sample(got, "binlake_micro_batch_duration_seconds_sum") or 0) < 300
        assert changed < (sample(got, "binlake_last_micro_batch_timestamp_seconds") or 0) <= time.time()
        assert sample(got, "binlake_rows_captured_total", table=names["b"], phase="stream") in (None, 0)
        until("the stream to catch up again", caught_up, running, mport)
        time.sleep(4)  # idle: no batch for seconds, yet each trigger finds the head reached
        idle = scrape(mport)
        assert idle is not None
        lags = [sample(idle, "binlake_seconds_behind_source", table=n) for n in names.values()]
        assert all(lag is not None and lag <= 1.5 for lag in lags), lags

        # 3. a change the stream must not follow (stream.schema-changes: fail) ends the run
        with connect(port, database) as conn, conn.cursor() as cur:
            altered = time.time()
            cur.execute("ALTER TABLE b ADD COLUMN z INT")
        _, err = running.communicate(timeout=240)
        ended = time.time()
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 1, err[-3000:]
    [line] = [ln for ln in err.splitlines() if ln.startswith("binlake: ")]
    assert scrape(mport) is None  # the endpoint ends with the run

    # 4. status --json: the same figures, from the lake's own files
    shown = run_cli("status", "-c", str(cfg), "--json", timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    report = json.loads(shown.stdout)
    tables = {t["source"]: t for t in report["tables"]}
    for t, n in names.items():
        assert tables[n]["chunks"]["done"] == tables[n]["chunks"]["planned"] >= TABLES[t] // CHUNK_SIZE
        assert tables[n]["captured"] == {"snapshot": TABLES[t], "stream": changes if t == "a" else 0}
    last = report["stream"]["last_batch"]
    assert last["rows"] >= 1 and last["seconds"] > 0 and last["id"] >= 0
    failed = report["last_error"]
    assert failed["kind"] == "SchemaChangedError" and line == f"binlake: {failed['message']}"
    assert failed["exit_code"] == 1 and altered < failed["at"] < ended


@pytest.mark.slow
def test_nothing_listens_without_a_port_and_the_next_run_serves_the_last_error(  # type: ignore[no-untyped-def]
        dev_db, database, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    cfg, _ = source(dev_db, database, tmp_path, "7725-7729")

    # metrics.port unset: nothing of the run serves metrics. This stream fails (no snapshot yet),
    # and its error is kept for the next run to serve.
    failing = start("stream", "-c", str(cfg))
    seen: dict[int, bool] = {}  # each port it listened on: whether it served binlake's metrics
    while failing.poll() is None:
        for other in listening(failing.pid) - set(seen):
            seen[other] = serves_metrics(other)
        time.sleep(0.2)
    _, err = failing.communicate()
    assert failing.returncode == 1 and "has no snapshot yet" in err, err[-3000:]
    # PySpark's own servers (its accumulator server) show the look ran while Spark was up
    assert seen and not any(seen.values()), seen
    kept = json.loads((lake / "_binlake" / "error.json").read_text())
    assert kept["kind"] == "RuntimeFailure" and kept["message"] in err and kept["exit_code"] == 1

    # the next run serves it as the last error from its start, and none of its own
    mport = with_metrics(cfg)
    running = start("run", "-c", str(cfg), "--until-caught-up")
    try:
        first = until("the endpoint", lambda: scrape(mport), running, mport)
        assert sample(first, "binlake_last_error_timestamp_seconds", kind="RuntimeFailure") == kept["at"]
        assert not any(name == "binlake_errors_total" for name, _ in first), first
        _, err = running.communicate(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 0, err[-3000:]
    assert json.loads((lake / "_binlake" / "error.json").read_text()) == kept
