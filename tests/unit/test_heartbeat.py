"""The idle stream's heartbeat (binlake.capture.heartbeat): the first caught-up look of a run is
recorded at once, then at most one record per interval; a batch's own progress survives it."""

from __future__ import annotations

import json
from pathlib import Path

from binlake.capture.heartbeat import Heartbeat, line, report
from binlake.lake.checkpoint import write_progress
from binlake.lake.storage import location

AT = {"file": "mysql-bin.000003", "pos": 4711, "created": 1, "started": 1}
LATER = {**AT, "pos": 5000}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(path: Path) -> dict:
    return dict(json.loads(path.read_text()))


def test_the_first_caught_up_look_is_recorded_at_once_then_one_per_interval(tmp_path: Path) -> None:
    clock, path = Clock(), tmp_path / "stream.json"
    beat = Heartbeat(location(str(path)), 30, clock)
    assert beat.beat(AT, caught_up=True)
    first = _record(path)
    assert first["heartbeat"]["position"] == AT and first["heartbeat"]["caught_up"] is True
    assert first["head_at"] == first["heartbeat"]["at"]  # caught up: every change the source had then is held

    clock.now += 29
    assert not beat.beat(AT, caught_up=True)
    clock.now += 1
    assert beat.beat(LATER, caught_up=True)
    assert _record(path)["heartbeat"]["position"] == LATER


def test_a_busy_start_waits_an_interval_and_a_look_that_found_changes_says_so(tmp_path: Path) -> None:
    clock, path = Clock(), tmp_path / "stream.json"
    beat = Heartbeat(location(str(path)), 30, clock)
    assert not beat.beat(AT, caught_up=False) and not path.exists()
    clock.now += 30
    assert beat.beat(LATER, caught_up=False)
    record = _record(path)
    assert record["heartbeat"]["caught_up"] is False and "head_at" not in record
    clock.now += 1
    assert beat.beat(LATER, caught_up=True)  # the run's first caught-up look: at once


def test_a_heartbeat_keeps_the_batches_progress_and_none_is_written_when_off(tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    write_progress(location(str(path)), 7, {"db.t": (3, 1_700_000_000)}, began=0.0)
    Heartbeat(location(str(path)), 30, Clock()).beat(AT, caught_up=True)
    record = _record(path)
    assert record["batch"] == 7 and record["tables"]["db.t"]["rows"] == 3 and "heartbeat" in record

    off = tmp_path / "off.json"
    assert not Heartbeat(location(str(off)), 0, Clock()).beat(AT, caught_up=True)
    assert not off.exists()


def test_status_says_caught_up_until_a_batch_lands_after_the_heartbeat(tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    Heartbeat(location(str(path)), 30, Clock()).beat(AT, caught_up=True)
    record = _record(path)
    said = report(record)
    assert said["caught_up"] is True and said["heartbeat_position"] == "mysql-bin.000003:4711"
    stream = {**said, "last_batch_at": None}
    assert line(stream, now=said["heartbeat_at"] + 12) == "stream: caught up at mysql-bin.000003:4711, 12 s ago"

    write_progress(location(str(path)), 8, {"db.t": (1, None)}, began=0.0)
    later = _record(path)
    assert later["updated"] >= record["heartbeat"]["at"]
    assert report(later)["caught_up"] is False  # a batch landed since: not known to be caught up now
    assert line({**report(later), "last_batch_at": later["updated"] + 1}) is None
    assert report({"tables": {}}) == {"caught_up": None, "heartbeat_at": None, "heartbeat_position": None}
