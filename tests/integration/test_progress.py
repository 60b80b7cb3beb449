"""The snapshot's progress off a terminal: `binlake snapshot` with its output to a pipe (as under
systemd, cron, a Databricks task or CI) prints plain lines with sane figures, and no carriage return."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .capture import connect, write_config
from .workload import run_cli

TABLES = {"a": 80, "b": 40}
CHUNK_SIZE = 10
LINE = re.compile(r"^snapshot: tables (\d+)/(\d+), chunks (\d+)/(\d+), rows ([\d,]+), ([\d,]+) rows/s, "
                  r"(about (\d+)s left|time left unknown)$")
CLOSING = re.compile(r"^snapshot: (\d+) chunks, ([\d,]+) rows in [\d.]+s \(([\d,]+) rows/s\)$")


@pytest.mark.one_server
def test_plain_progress_lines_off_a_terminal(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        for name, rows in TABLES.items():
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.executemany(f"INSERT INTO {name} VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, rows + 1)])
    cfg = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.(a|b)"], tmp_path / "lake", "7640-7644",
                       chunk_size=CHUNK_SIZE, group_size=2)
    env = {"BINLAKE_PROGRESS_SECONDS": "0"}  # a line at every landed group, not every 10 s
    planned = run_cli("plan", "-c", str(cfg), env=env)
    assert planned.returncode == 0, planned.stderr[-2000:]
    done = run_cli("snapshot", "-c", str(cfg), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\r" not in done.stderr

    lines = [m for m in map(LINE.match, done.stderr.splitlines()) if m]
    assert len(lines) >= 4, done.stderr[-3000:]
    chunks = [int(m[3]) for m in lines]
    rows = [int(m[5].replace(",", "")) for m in lines]
    assert chunks == sorted(chunks) and rows == sorted(rows)  # they only grow
    total_chunks = int(lines[0][4])
    assert all(int(m[4]) == total_chunks for m in lines)
    assert total_chunks >= sum(TABLES.values()) // CHUNK_SIZE
    assert all(int(m[2]) == len(TABLES) for m in lines)
    last = lines[-1]
    assert (int(last[1]), int(last[3]), rows[-1]) == (len(TABLES), total_chunks, sum(TABLES.values()))
    assert last[7] == "about 0s left"
    assert all(m[8] is not None for m in lines)  # a time left from the first landed group on
    assert all(int(m[6].replace(",", "")) > 0 for m in lines)

    closing = [m for m in map(CLOSING.match, done.stderr.splitlines()) if m]
    assert len(closing) == 1, done.stderr[-3000:]
    assert (int(closing[0][1]), int(closing[0][2].replace(",", ""))) == (total_chunks, sum(TABLES.values()))
