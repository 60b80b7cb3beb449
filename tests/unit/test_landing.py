"""How many chunk groups a large table's snapshot holds for one commit (binlake.capture.landing): until
their files would come out at the aim, by bronze's bytes per row so far, or until they hold
HOLD_BYTES in memory. A fake group of rows stands for a read; bronze is a real Delta table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from binlake.capture import landing as landing_module
from binlake.capture.landing import Landing
from binlake.lake.table_log import Snapshot

ROWS = pa.table({"id": pa.array(range(10_000), pa.int64()), "v": [f"value-{i}" for i in range(10_000)]})


def _bronze(tmp_path: Path) -> tuple[str, float]:
    """A bronze holding one file of ROWS, and its bytes per row."""
    location = str(tmp_path / "bronze")
    write_deltalake(location, ROWS)
    sizes = [int(a["size"]) for a in Snapshot.read(location).files.values()]
    return location, sum(sizes) / ROWS.num_rows


def test_groups_are_held_until_their_files_reach_the_aim(tmp_path: Path) -> None:
    location, per_row = _bronze(tmp_path)
    group = ROWS.slice(0, 1000)
    held = Landing(None, False, None, location, aim=int(per_row * 2500))
    assert [held.hold([], group) for _ in range(3)] == [False, False, True]  # 3,000 rows' files pass 2,500's
    splits, rows = held.parcel()
    assert rows.num_rows == 3000 and splits == [] and held.held == []
    assert held.hold([], group) is False  # the next commit starts empty


def test_memory_bounds_a_commit_and_the_first_one(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    group = ROWS.slice(0, 1000)
    monkeypatch.setattr(landing_module, "HOLD_BYTES", 2 * group.nbytes)
    location, _ = _bronze(tmp_path)
    held = Landing(None, False, None, location, aim=10**12)  # an aim far off: memory decides
    assert [held.hold([], group) for _ in range(2)] == [False, True]

    empty = str(tmp_path / "empty")  # a bronze with no file yet: no bytes per row, memory decides
    write_deltalake(empty, ROWS.slice(0, 0))
    first = Landing(None, False, None, empty, aim=1)
    assert [first.hold([], group) for _ in range(2)] == [False, True]
