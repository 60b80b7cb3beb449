"""The lake side of the steady section (bench/steady.py): when each change reached silver, what
silver and bronze hold at the end (live files and bytes by the Delta log, every byte under each
table's folder), and how fast delta-rs scans silver against the same rows compacted.

Read by delta-rs and pyarrow in the bench's own process: no second Spark session competes with
binlake for the machine's cores.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from harness import LogFollower


class StampWatcher:
    """Reads silver's Delta log as it grows and keeps, for each value of the stamp column (the
    writer's wall time of a statement, in microseconds), the time of the first silver commit that
    added a row carrying it: the modification time of that commit's `_delta_log/NNN.json`.

    A commit's added files hold the rows it wrote: an update's and an insert's new image, and any
    rows a MERGE copied over from a file it rewrote. One writer stamps its statements in the order it
    commits them, and the binlog lands in silver in that order, so a stamp no newer than the newest
    already seen was seen before (or is below `floor`, the loaded rows'): only newer ones are kept."""

    def __init__(self, silver: Path, column: str, floor: int) -> None:
        self.log = LogFollower(silver, column)
        self.newest = floor - 1
        self.committed: dict[int, float] = {}
        self.rows_read = 0  # rows of added files read, copied-over rows included
        self.read_s = 0.0

    def poll(self) -> None:
        import pyarrow.compute as pc

        began = time.monotonic()
        for when, _found, columns in self.log.commits():
            newest = self.newest
            for stamps in columns:
                self.rows_read += len(stamps)
                top = pc.max(stamps).as_py()
                if top is None or top <= self.newest:
                    continue
                for stamp in pc.unique(pc.filter(stamps, pc.greater(stamps, self.newest))).to_pylist():
                    self.committed.setdefault(int(stamp), when)
                newest = max(newest, top)
            self.newest = newest  # after the whole commit: its other files may hold older new stamps
        self.read_s += time.monotonic() - began


def folder_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) of everything under `path`: live and dead data files, deletion vectors, the log."""
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
                files += 1
            except FileNotFoundError:
                continue  # a staged file committed or cleared meanwhile
    return total, files


def live(path: Path) -> dict[str, Any]:
    """What the Delta log's current version holds: live files, their bytes, and how many of them carry
    a deletion vector; and the table's version. Read by binlake's own reading of the log: delta-rs's
    add actions (`get_add_actions`) leave their deletion vectors out, so a count by them is always 0."""
    from binlake.lake.table_log import Snapshot

    snapshot = Snapshot.read(path)
    adds = list(snapshot.files.values())
    return {"live_files": len(adds), "live_bytes": sum(int(a.get("size") or 0) for a in adds),
            "files_with_deletion_vector": sum(1 for a in adds if a.get("deletionVector")),
            "version": snapshot.version}


def table_figures(path: Path, prefix: str) -> dict[str, Any]:
    """`live`'s figures and the folder's bytes and files, each named with `prefix`."""
    on_disk, files = folder_bytes(path)
    return {**{f"{prefix}_{k}": v for k, v in live(path).items()},
            f"{prefix}_folder_bytes": on_disk, f"{prefix}_folder_files": files}


def read_all(path: Path, opened: list[float] | None = None) -> Any:
    """Every row of the Delta table at `path`, by delta-rs's SQL engine: a pyarrow Table. With `opened`,
    the seconds it took to open the table (to read its log) are appended to it.

    Not `DeltaTable.to_pyarrow_table()`: it refuses silver's deletion vectors (docs/design.md#readers);
    the SQL engine reads them, and the compacted copy is read the same way, so the two scans compare
    the tables, not two readers."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    began = time.monotonic()
    table = DeltaTable(str(path))
    if opened is not None:
        opened.append(time.monotonic() - began)
    return pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())


def scan(path: Path, column: str, opened: list[float]) -> tuple[float, float, int, int]:
    """A full scan of the table at `path` (opening it included) with a count and a sum over `column`:
    (seconds, CPU seconds of this process's threads, rows, sum)."""
    import pyarrow.compute as pc

    began, cpu = time.monotonic(), time.process_time()
    rows = read_all(path, opened)
    total = pc.sum(rows.column(column)).as_py() or 0
    return time.monotonic() - began, time.process_time() - cpu, rows.num_rows, int(total)


def checksum(path: Path, columns: list[str]) -> list[str]:
    """The table's row count and the sum of each of `columns` (exact: integers and decimals), as text."""
    import pyarrow.compute as pc

    rows = read_all(path)
    return [str(rows.num_rows), *(str(pc.sum(rows.column(c)).as_py() or 0) for c in columns)]


def scan_against_compacted(silver: Path, scratch: Path, key: str, column: str,
                           rounds: int = 3) -> dict[str, Any]:
    """Silver's full scan against the same rows written fresh into one copy sorted by `key` (delta-rs,
    into `scratch`): the best of `rounds` interleaved scans of each, and their ratio."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    if scratch.exists():
        shutil.rmtree(scratch)
    began = time.monotonic()
    rows = read_all(silver)
    # the SQL engine gives strings as string_view, which pyarrow's sort cannot take from
    rows = rows.cast(pa.schema([pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type)
                                for f in rows.schema]))
    write_deltalake(str(scratch), rows.sort_by(key), mode="overwrite")
    copy_s = time.monotonic() - began
    copy_files = len(DeltaTable(str(scratch)).file_uris())
    del rows
    silver_s, copy_scan_s, silver_open, copy_open = [], [], [], []  # type: ignore[var-annotated]
    silver_cpu, copy_cpu = [], []  # type: ignore[var-annotated]
    for _ in range(rounds):
        s, cpu, silver_rows, silver_sum = scan(silver, column, silver_open)
        silver_s.append(s)
        silver_cpu.append(cpu)
        c, cpu, copy_rows, copy_sum = scan(scratch, column, copy_open)
        copy_scan_s.append(c)
        copy_cpu.append(cpu)
    if (silver_rows, silver_sum) != (copy_rows, copy_sum):
        raise RuntimeError(f"the compacted copy differs from silver: {copy_rows} rows, sum {copy_sum}; "
                           f"silver {silver_rows} rows, sum {silver_sum}")
    out = {
        "scan_silver_s": round(min(silver_s), 3),
        "scan_compacted_s": round(min(copy_scan_s), 3),
        "scan_ratio": round(min(silver_s) / min(copy_scan_s), 3),
        # the work of each scan: delta-rs reads a table with deletion vectors in one partition, one core
        # (delta-io/delta-rs#4692), so where the copy's scan runs on two cores the wall time doubles
        "scan_silver_cpu_s": round(min(silver_cpu), 3),
        "scan_compacted_cpu_s": round(min(copy_cpu), 3),
        "scan_cpu_ratio": round(min(silver_cpu) / min(copy_cpu), 3),
        "scan_silver_open_s": round(min(silver_open), 3),
        "scan_compacted_open_s": round(min(copy_open), 3),
        "scan_rows": silver_rows,
        "scan_sum": silver_sum,
        "compacted_files": copy_files,
        "compacted_bytes": folder_bytes(scratch)[0],
        "compacted_write_s": round(copy_s, 2),
    }
    shutil.rmtree(scratch)
    return out
