"""Deletion vectors written by binlake (`binlake.lake.deletion_vectors`), read back by delta-spark,
by delta-rs and by plain pyarrow: the format alone first (no Spark), then commits to tables Spark
wrote and marked with DVs of its own."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.lake import delta_commit, table_log
from binlake.lake import deletion_vectors as dv

# -- the format, no Spark ---------------------------------------------------------------------------

# the edges a position crosses: a 16-bit container, a 32-bit bucket, a far bucket
EDGES = [0, 1, 65_535, 65_536, 65_537, 2**32 - 1, 2**32, 2**32 + 65_536, 2**40 + 7, 2**63 - 1]


@pytest.mark.parametrize("rows", [
    [], [0], [5, 3, 3, 1], EDGES, list(range(4_096)), list(range(4_097)),  # the largest array container, the least bitmap
    list(range(0, 200_000, 2)), sorted({int(x) for x in np.random.default_rng(1).integers(0, 2**34, 20_000)}),
], ids=["empty", "one", "repeats", "edges", "array", "bitmap", "halves", "sparse-64-bit"])
def test_positions_round_trip(rows: list[int]) -> None:
    data = dv.serialize(rows)
    assert dv.deserialize(data).tolist() == sorted(set(rows))


def test_marks_united_with_a_batchs_rows_are_both_sets_and_serialize_as_their_positions() -> None:
    """A DV's marks as a bitset (what a marked batch unites and writes): the union, the rows new in it,
    which rows are marked, and the same bytes as the positions' own serialization."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        span = int(rng.choice([5_000, 70_000, 300_000]))
        old = dv.positions(rng.integers(0, span, int(rng.integers(0, span * rng.choice([0.001, 0.1, 0.5])))))
        more = rng.integers(0, span + 100, int(rng.integers(0, 600)))  # some already in `old`, some repeated
        marks, fresh = dv.Marks.of(old).united(more)
        union = sorted(set(old.tolist()) | set(more.tolist()))
        assert marks.rows().tolist() == union and marks.count == len(union) and fresh == len(union) - old.size
        asked, united = rng.integers(0, span + 200, 500), set(union)
        assert marks.holds(asked).tolist() == [int(a) in united for a in asked]
        assert np.flatnonzero(~marks.unmarked(span + 100)).tolist() == union
        assert dv.serialize(marks) == dv.serialize(union)
    crossing = dv.Marks.of(range(0, 8_190, 2))  # a chunk of 4,095 rows (an array container), then 4,105
    for more in ([8_190], range(8_192, 8_212, 2)):
        crossing, _ = crossing.united(more)
        assert dv.serialize(crossing) == dv.serialize(crossing.rows())
    assert len(dv.serialize(crossing)) == 12 + 4 + 8 + 4 + 4 + 8_192  # a bitmap container now
    edges = [e for e in EDGES if e < 2**32]
    assert dv.serialize(dv.Marks.of(edges)) == dv.serialize(edges)
    assert dv.Marks.of(edges).united([2, 65_536])[1] == 1
    with pytest.raises(ValueError, match="2\\^32 rows"):
        dv.Marks.of([2**32])


def test_the_layout_byte_by_byte() -> None:
    """The docstring's worked example, and the buckets of positions either side of 2^32."""
    data = dv.serialize([3, 4, 7, 11, 18, 29])
    assert data.hex() == ("d1d33964" "0100000000000000" "00000000"  # magic, one bucket, its key 0
                          "3a300000" "01000000" "0000" "0500" "10000000"  # cookie, 1 container: key 0, 6 values, offset 16
                          "0300" "0400" "0700" "0b00" "1200" "1d00")
    assert len(dv.serialize([])) == 12 and dv.serialize([]) == dv.serialize(np.array([], np.uint64))
    wide = dv.serialize([2**32 - 1, 2**32, 2**33 + 2])
    assert int.from_bytes(wide[4:12], "little") == 3  # buckets 0, 1 and 2
    second = 12 + 4 + 8 + 4 + 4 + 2  # first bucket: key, header of one container, offset, one value
    assert int.from_bytes(wide[second:second + 4], "little") == 1


def test_a_bitmap_container_is_delta_sized() -> None:
    rows = list(range(0, 65_536, 2))  # 32,768 values in one container: 1,024 64-bit words
    assert len(dv.serialize(rows)) == 12 + 4 + 8 + 4 + 4 + 8_192


def test_positions_delta_cannot_hold_are_refused() -> None:
    for bad in ([-1], [2**63], [1.5]):
        with pytest.raises(ValueError):
            dv.serialize(bad)


def test_a_file_of_several_dvs_reads_back_and_checks_itself(tmp_path: Path) -> None:
    bitmaps = [[], [1, 2**16 + 1], list(range(10_000))]
    descriptors = dv.write_file(tmp_path, bitmaps, prefix="ab")
    assert [d.cardinality for d in descriptors] == [0, 2, 10_000]
    assert [d.offset for d in descriptors] == [1, 1 + 8 + 12, 1 + 8 + 12 + 8 + descriptors[1].size_in_bytes]
    file = descriptors[0].file(tmp_path)
    assert file is not None and file.parent.name == "ab" and file.name.startswith("deletion_vector_")
    for rows, d in zip(bitmaps, descriptors):
        assert dv.read_marks(tmp_path, d.to_dict()).rows().tolist() == rows
        assert dv.Descriptor.from_dict(d.to_dict()) == d
    data = bytearray(file.read_bytes())
    last = descriptors[2]
    assert data[0] == 1 and int.from_bytes(data[last.offset:last.offset + 4], "big") == last.size_in_bytes
    crc = last.offset + 4 + last.size_in_bytes
    assert int.from_bytes(data[crc:crc + 4], "big") == zlib.crc32(bytes(data[last.offset + 4:crc]))
    data[last.offset + 10] ^= 1
    file.write_bytes(bytes(data))
    dv._DECODED.clear()  # DVs read are kept decoded: a DV file is never written again in place, as here
    with pytest.raises(dv.CorruptDeletionVector, match="checksum"):
        dv.read_marks(tmp_path, last)
    with pytest.raises(dv.CorruptDeletionVector, match="marks 2 rows"):
        dv.read_marks(tmp_path, dv.Descriptor("u", descriptors[1].path_or_inline_dv, descriptors[1].size_in_bytes, 3, 21))


def test_inline_and_z85() -> None:
    d = dv.inline([3, 4, 7, 11, 18, 29])
    assert d.offset is None and d.size_in_bytes == 44 and len(d.path_or_inline_dv) == 55
    assert dv.read_marks("/nowhere", d).rows().tolist() == [3, 4, 7, 11, 18, 29]
    assert d.unique_id == "i" + d.path_or_inline_dv
    # the protocol's example of a 'u' path: a prefix "ab", then the UUID in Z85
    example = dv.Descriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6, 4)
    assert example.file("/t") == Path("/t/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin")
    assert example.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"
    assert dv.z85_encode(bytes.fromhex("d2c639aa8816431aaaf6d3fe2512ff61")) == "^-aqEH.-t@S}K{vb[*k^"


# -- tables Spark wrote -----------------------------------------------------------------------------

N = 210_000  # three files of 70,000 rows: positions past 2^16 in each


def _table(spark: Any, location: Path, rows: int = N, files: int = 3, mapping: bool = True) -> str:
    """A table of `rows` rows (id, v = 'v' || id) in `files` files of consecutive ids, created by
    Spark with deletion vectors on (and column mapping by name, as silver is)."""
    path = str(location)
    props = "'delta.enableDeletionVectors' = 'true'" + (", 'delta.columnMapping.mode' = 'name'" if mapping else "")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, v STRING) USING delta TBLPROPERTIES ({props})")
    for start in range(0, rows, rows // files):
        spark.sql(f"INSERT INTO delta.`{path}` SELECT /*+ COALESCE(1) */ id, concat('v', id) "
                  f"FROM range({start}, {start + rows // files})")
    return path


def _spark_rows(spark: Any, path: str, version: int | None = None) -> dict[int, str]:
    reader = spark.read.format("delta")
    rows = (reader.option("versionAsOf", version) if version is not None else reader).load(path).toArrow()
    return dict(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist()))


def _delta_rs_rows(path: str) -> dict[int, str]:
    from deltalake import DeltaTable, QueryBuilder

    rows = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT id, v FROM t").read_all())
    return dict(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist()))


def _file_ids(snapshot: table_log.Snapshot, path: str) -> np.ndarray:
    """The ids of the data file `path`, every row in the file's order (its first column is id)."""
    return pq.read_table(Path(snapshot.location) / path).column(0).to_numpy()


def _arrow_rows(path: str) -> dict[int, str]:
    """The table read with pyarrow alone: each live file's rows, less those its DV marks."""
    snapshot = table_log.Snapshot.read(path)
    out: dict[int, str] = {}
    for name in snapshot.files:
        rows = pq.read_table(Path(path) / name)
        keep = np.ones(rows.num_rows, np.bool_)
        keep[snapshot.marks(name).rows().astype(np.int64)] = False
        rows = rows.filter(pa.array(keep))
        out.update(zip(rows.column(0).to_pylist(), rows.column(1).to_pylist()))
    return out


@pytest.mark.parametrize("mapping", [True, False], ids=["column-mapping", "plain"])
def test_marks_and_new_rows_read_alike_everywhere(spark: Any, tmp_path: Path, mapping: bool) -> None:
    """A MERGE's shape as merge-on-read: the old rows of changed keys marked in each file (one file
    with Spark's DV already, of scattered rows and a range, its marks united with ours), their new
    images and new keys in a new file; Spark, delta-rs and pyarrow read the same rows, and the
    version before reads as it was."""
    path = _table(spark, tmp_path / "t", mapping=mapping)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id < 70000 AND (id % 10 = 3 OR id BETWEEN 20000 AND 30000)")
    before = {i: f"v{i}" for i in range(N) if not (i < 70_000 and (i % 10 == 3 or 20_000 <= i <= 30_000))}
    snapshot = table_log.Snapshot.read(path)
    assert len(snapshot.files) == 3
    sparks = {p: snapshot.marks(p).rows() for p, add in snapshot.files.items() if "deletionVector" in add}
    assert len(sparks) == 1 and len(next(iter(sparks.values()))) == N - len(before)

    changed = {i for i in range(N) if i % 7 == 0 or i in (3, 13, 25_000)}  # some already deleted by Spark
    marks = {}
    for name in snapshot.files:
        ids = _file_ids(snapshot, name)
        marks[name] = np.flatnonzero(np.isin(ids, list(changed)))
        assert marks[name].max() > 2**16
    images = sorted(changed & {i for i in range(0, N, 14)}) + list(range(N, N + 50))  # updated, then new keys
    new = pa.table({"id": pa.array(images, pa.int64()), "v": [f"new{i}" for i in images]})
    version = delta_commit.commit(snapshot, marks, [delta_commit.data_file(snapshot, new)], parameters={"predicate": "test"})

    expected = {i: v for i, v in before.items() if i not in changed} | {i: f"new{i}" for i in images}
    assert _spark_rows(spark, path) == expected
    assert _delta_rs_rows(path) == expected
    assert _arrow_rows(path) == expected
    after = table_log.Snapshot.read(path)
    assert after.version == version == snapshot.version + 1
    for name, add in after.files.items():
        if name in marks:
            union = np.union1d(sparks.get(name, np.empty(0, np.uint64)), marks[name])
            assert add["deletionVector"]["cardinality"] == len(union)
            assert after.marks(name).rows().tolist() == union.tolist()
            assert json.loads(add["stats"])["numRecords"] == 70_000
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [(h.version, h.operation) for h in history][-2:] == [(version - 1, "DELETE"), (version, "MERGE")]
    assert _spark_rows(spark, path, version - 1) == before


def test_spark_run_containers_and_bitmaps_read_here(spark: Any, tmp_path: Path) -> None:
    """Spark's DVs of a range (run containers) and of every third row (bitmap containers, which this
    module writes byte for byte as Spark does)."""
    path = _table(spark, tmp_path / "t", rows=140_000, files=2, mapping=False)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id BETWEEN 1000 AND 60000 OR (id >= 70000 AND id % 3 = 0)")
    snapshot = table_log.Snapshot.read(path)
    for name, add in snapshot.files.items():
        ids, rows = _file_ids(snapshot, name), snapshot.marks(name).rows()
        gone = ids[rows.astype(np.int64)]
        assert sorted(gone.tolist()) == [i for i in range(ids.min(), ids.max() + 1)
                                         if 1000 <= i <= 60000 or (i >= 70000 and i % 3 == 0)]
        d = dv.Descriptor.from_dict(add["deletionVector"])
        if ids.min() >= 70_000:
            file = d.file(path)
            assert file is not None and d.offset is not None
            assert file.read_bytes()[d.offset + 4:d.offset + 4 + d.size_in_bytes] == dv.serialize(rows)


@pytest.mark.parametrize("where", ["file", "prefixed", "inline"])
def test_each_place_of_a_dv_is_read_by_spark_and_delta_rs(spark: Any, tmp_path: Path, where: str) -> None:
    path = _table(spark, tmp_path / "t", rows=70_000, files=1, mapping=False)
    snapshot = table_log.Snapshot.read(path)
    (name,) = snapshot.files
    delta_commit.commit(snapshot, {name: range(0, 70_000, 3)}, inline_dvs=where == "inline",
              prefix="ab" if where == "prefixed" else "")
    add = table_log.Snapshot.read(path).files[name]
    assert add["deletionVector"]["storageType"] == ("i" if where == "inline" else "u")
    expected = {i: f"v{i}" for at, i in enumerate(_file_ids(snapshot, name).tolist()) if at % 3}
    assert _spark_rows(spark, path) == expected
    assert _delta_rs_rows(path) == expected


def test_a_file_all_marked_is_removed_and_empty_marks_change_nothing(spark: Any, tmp_path: Path) -> None:
    path = _table(spark, tmp_path / "t", rows=1_000, files=2, mapping=False)
    snapshot = table_log.Snapshot.read(path)
    first, second = sorted(snapshot.files, key=lambda n: int(_file_ids(snapshot, n).min()))
    assert delta_commit.commit(snapshot, {first: [], second: []}) == snapshot.version  # nothing to commit
    delta_commit.commit(snapshot, {first: range(len(_file_ids(snapshot, first))), second: []})
    after = table_log.Snapshot.read(path)
    assert list(after.files) == [second] and "deletionVector" not in after.files[second]
    assert _spark_rows(spark, path) == {i: f"v{i}" for i in _file_ids(snapshot, second).tolist()}


def test_concurrent_commits(spark: Any, tmp_path: Path) -> None:
    """Two commits planned on the same version: the second lands after the first when they mark
    different files, and is refused when they mark the same one."""
    path = _table(spark, tmp_path / "t", rows=1_000, files=2, mapping=False)
    snapshot = table_log.Snapshot.read(path)
    first, second = sorted(snapshot.files)
    assert delta_commit.commit(snapshot, {first: [1]}) == snapshot.version + 1
    assert delta_commit.commit(snapshot, {second: [2]}) == snapshot.version + 2
    with pytest.raises(delta_commit.CommitConflict, match="removed"):
        delta_commit.commit(snapshot, {first: [3]})
    assert table_log.Snapshot.read(path).version == snapshot.version + 2
    assert len(_spark_rows(spark, path)) == 998


def test_delta_rs_and_spark_keep_working_on_the_table(spark: Any, tmp_path: Path) -> None:
    """After binlake's DVs: delta-rs's checkpoint keeps them (read back here from it), its MERGE and
    its vacuum (lite) leave the table whole, and Spark's VACUUM removes only a DV no longer used."""
    from deltalake import DeltaTable

    path = _table(spark, tmp_path / "t", rows=1_000, files=2, mapping=False)
    snapshot = table_log.Snapshot.read(path)
    first, second = sorted(snapshot.files, key=lambda n: int(_file_ids(snapshot, n).min()))
    delta_commit.commit(snapshot, {first: [0, 1], second: [0]})
    delta_commit.commit(table_log.Snapshot.read(path), {first: [2]})  # the first DV file is then used by `second` alone
    expected = _spark_rows(spark, path)
    assert len(expected) == 996
    marked = table_log.Snapshot.read(path)
    DeltaTable(path).create_checkpoint()
    assert table_log.Snapshot.read(path).files == marked.files

    def dv_files() -> list[str]:
        return sorted(p.name for p in Path(path).glob("deletion_vector_*.bin"))

    firsts = dv.Descriptor.from_dict(marked.files[first]["deletionVector"]).file(path)
    assert firsts is not None and len(dv_files()) == 2
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert len(dv_files()) == 2 and _delta_rs_rows(path) == expected
    # VACUUM lists the table in as many tasks as this says (10,000 by default: 50 s on 2 busy cores)
    settings = {"spark.databricks.delta.retentionDurationCheck.enabled": "false",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}
    for name, value in settings.items():
        spark.conf.set(name, value)
    try:
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
        assert len(dv_files()) == 2 and _delta_rs_rows(path) == expected  # both still used
        key = 999  # in `second`: delta-rs's MERGE rewrites that file, and its DV file is then unused
        source = pa.table({"id": pa.array([key], pa.int64()), "v": ["merged"]})
        DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t") \
            .when_matched_update_all().execute()
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
        assert dv_files() == [firsts.name] and _spark_rows(spark, path) == {**expected, key: "merged"}
    finally:
        for name in settings:
            spark.conf.unset(name)
