"""A snapshot beside the stream as `binlake status` and the metrics show it (binlake.capture.side_state),
and the signals the command line refuses before any reaches the stream (binlake.capture.signals)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from binlake.capture import side_state, signals
from binlake.capture.side_state import DONE, PAUSED, SideSnapshot
from binlake.lake.storage import location

RUNNING = SideSnapshot("db.t", "signal 1", side_state.RUNNING, "mysql-bin.000003:900", chunk=7, first=4,
                       estimate=1_000_000, began_at=86400.0)


def test_the_chunks_left_follow_the_servers_estimate_at_the_rows_a_chunk_held() -> None:
    assert RUNNING.chunks_left() is None  # no chunk landed yet: how many rows one holds is not known
    three = replace(RUNNING, chunks=3, rows=30_000)
    assert three.chunks_left() == 97
    assert replace(three, status=PAUSED).chunks_left() == 97
    # writers inserted more than the estimate said: one at least, until the last chunk has landed
    assert replace(three, rows=1_200_000, chunks=120).chunks_left() == 1
    assert replace(three, status=DONE).chunks_left() == 0
    # a condition's rows, or a state written before there was an estimate: not known
    assert replace(three, condition="id < 10").chunks_left() is None
    assert replace(three, estimate=None).chunks_left() is None


def test_status_shows_the_chunks_left_while_it_runs(tmp_path: Path) -> None:
    folder = location(str(tmp_path))
    replace(RUNNING, chunks=3, rows=30_000).save(folder / "db__t.json")
    shown, refused = side_state.report(folder)
    assert shown["db.t"]["chunks_left"] == 97 and refused == []
    assert side_state.summary(shown["db.t"]) == (
        "  snapshot beside the stream: running, 3 chunks, about 97 left, 30000 rows "
        "(signal 1, began 1970-01-02 00:00:00 UTC)")
    replace(RUNNING, chunks=101, rows=1_000_130, status=DONE).save(folder / "db__t.json")
    done = side_state.report(folder)[0]["db.t"]
    assert side_state.summary(done) == ("  snapshot beside the stream: done, 101 chunks, 1000130 rows "
                                        "(signal 1, began 1970-01-02 00:00:00 UTC)")


@pytest.mark.parametrize("kind", ["pause-snapshot", "resume-snapshot", "stop-snapshot"])
def test_a_condition_on_a_signal_other_than_execute_snapshot_is_refused(kind: str, tmp_path: Path) -> None:
    refused = f"limits the rows of an execute-snapshot, not of a {kind}"
    with pytest.raises(signals.SignalRefused, match=refused):
        signals.make(kind, ["db.t"], "id < 10")
    cfg = tmp_path / "binlake.yml"
    cfg.write_text("source:\n  hostname: 127.0.0.1\n  port: 1\n  username: u\n  password: ''\n"
                   f"  tables: ['db\\.t']\ntarget:\n  path: {tmp_path / 'lake'}\n")
    argv = [sys.executable, "-m", "binlake", "signal", "-c", str(cfg), kind, "db.t", "--condition", "id < 10"]
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1, shown.stderr
    assert f"not of a {kind}: leave it out" in shown.stderr
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").rglob("*.json"))  # nothing written
