"""A table's live files from its Delta log (`binlake.lake.table_files`), on tables delta-rs writes here:
rows, files and bytes from the add actions; a file without a row count in the log has its table
counted by reading it, or not at all where delta-rs cannot read it -- never a guess. (Deletion vectors,
which delta-rs does not write, are in tests/integration/test_table_files.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from binlake.lake.table_files import NO_FILES, TableFiles


def _write(path: Path, *batches: list[int]) -> str:
    for ids in batches:
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    return str(path)


def _without_row_counts(location: str) -> None:
    """Drop the statistics of every add action in the table's log, as a writer that keeps none leaves it."""
    for commit in sorted((Path(location) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        for action in actions:
            action.get("add", {}).pop("stats", None)
        commit.write_text("".join(json.dumps(a) + "\n" for a in actions))


def _widened(location: str) -> None:
    """Commit version 1 of the table: a protocol with a reader feature delta-rs's engine does not read
    (binlake's tables have it under target.type-changes: widen)."""
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                "writerFeatures": ["typeWidening"]}
    (Path(location) / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"protocol": protocol}) + "\n")


def test_rows_files_and_bytes_come_from_the_add_actions(tmp_path: Path) -> None:
    location = _write(tmp_path / "t", [1, 2, 3], [4, 5], [6])
    DeltaTable(location).delete("id = 2")  # delta-rs rewrites the file: no deletion vector
    sizes = [f.stat().st_size for f in Path(location).glob("*.parquet")]
    found = TableFiles.read(location)
    live = pa.RecordBatchReader.from_stream(DeltaTable(location).get_add_actions()).read_all()
    assert found == TableFiles(5, 3, sum(live["size_bytes"].to_pylist()))
    assert found.bytes < sum(sizes), "the rewritten file is no longer live"
    assert found.to_dict() == {"rows": 5, "files": 3, "bytes": found.bytes}


def test_a_file_without_a_row_count_has_its_table_read(tmp_path: Path) -> None:
    location = _write(tmp_path / "t", [1, 2, 3], [4, 5])
    _without_row_counts(location)
    assert DeltaTable(location).count() == 0, "the log holds no row count now"
    found = TableFiles.read(location)
    assert found is not None and (found.rows, found.files) == (5, 2)


def test_no_count_where_delta_rs_can_read_neither_the_count_nor_the_table(tmp_path: Path) -> None:
    location = _write(tmp_path / "t", [1, 2, 3])
    _without_row_counts(location)
    _widened(location)
    assert TableFiles.read(location) is None


def test_a_widened_table_with_its_row_counts_is_counted_from_its_log(tmp_path: Path) -> None:
    location = _write(tmp_path / "t", [1, 2, 3])
    _widened(location)
    found = TableFiles.read(location)
    assert found is not None and found.rows == 3


def test_a_value_that_cannot_be_is_refused() -> None:
    assert NO_FILES.to_dict() == {"rows": 0, "files": 0, "bytes": 0}
    with pytest.raises(ValueError, match="no table has 3 rows in 0 files"):
        TableFiles(3, 0, 0)
    with pytest.raises(ValueError):
        TableFiles(-1, 1, 10)
