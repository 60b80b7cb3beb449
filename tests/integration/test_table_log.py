"""A table's log read on from the last read (binlake.lake.table_log): the same snapshot as a read from
nothing, after appends, a checkpoint and a table made again at the same place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from binlake.lake import table_log
from binlake.lake.table_log import Snapshot


def whole(location: Path) -> Snapshot:
    """The table read from nothing, as a process that never read it does."""
    table_log._LAST.pop(str(location), None)
    return Snapshot.read(location)


def same(a: Snapshot, b: Snapshot) -> bool:
    """Equal snapshots, null fields aside (a commit's JSON may write them, a checkpoint leaves them out)."""
    def plain(s: Snapshot) -> tuple[object, ...]:
        return s.version, table_log._plain({"f": s.files, "m": s.metadata, "p": s.protocol})
    return plain(a) == plain(b)


def test_a_read_on_from_the_last_equals_a_whole_read(tmp_path: Path) -> None:
    location = tmp_path / "t"
    write_deltalake(str(location), pa.table({"id": [1, 2], "v": ["a", "b"]}))
    first = Snapshot.read(location)
    for i in range(12):  # past a checkpoint
        write_deltalake(str(location), pa.table({"id": [10 + i], "v": ["c"]}), mode="append")
    DeltaTable(str(location)).create_checkpoint()
    write_deltalake(str(location), pa.table({"id": [99], "v": ["d"]}), mode="overwrite")
    later = Snapshot.read(location)
    assert later.version == first.version + 13 and len(later.files) == 1
    assert same(later, whole(location))

    # made again at the same place, with as many commits: read whole, not on from the old table's
    shutil.rmtree(location)
    write_deltalake(str(location), pa.table({"id": [5], "v": ["e"]}))
    for i in range(13):
        write_deltalake(str(location), pa.table({"id": [20 + i], "v": ["f"]}), mode="append")
    table_log._LAST[str(location)] = later  # as the process last read the old table
    again = Snapshot.read(location)
    assert again.version == later.version and len(again.files) == 14
    assert same(again, whole(location))



def test_binlakes_own_commit_is_taken_as_written_not_read_back(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from binlake.lake import silver
    from binlake.lake.delta_commit import commit, data_file
    from binlake.schema import Column, TableSchema

    schema = TableSchema("d", "t", (Column("id", "bigint", "bigint(20)", False, in_key=True),
                                    Column("v", "varchar", "varchar(10)")), ("id",))
    arrow = pa.schema([("id", pa.int64()), ("v", pa.string()), ("_seq", pa.decimal128(38, 0)),
                       ("_ts", pa.timestamp("us", "UTC"))])
    location = str(tmp_path / "silver")
    rows = pa.Table.from_pylist([{"id": i, "v": "a", "_seq": 1, "_ts": None} for i in range(3)], arrow)
    assert silver.insert_snapshot_arrow(schema, rows, location)  # a table binlake writes, DVs enabled
    before = Snapshot.read(location)
    (path,) = before.files
    version = commit(before, {path: [1]}, [data_file(before, rows.slice(1, 1))])

    def unread(log: Path, v: int) -> None:
        raise AssertionError(f"commit {v} parsed back")

    monkeypatch.setattr(table_log, "_commit", unread)
    after = Snapshot.read(location)
    assert after.version == version == before.version + 1
    assert after.marks(path).rows().tolist() == [1] and len(after.files) == 2
    monkeypatch.undo()
    assert same(after, whole(Path(location)))
