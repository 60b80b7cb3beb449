"""What an operator sees of a table's upkeep (`binlake status --json`'s `maintenance`): for its bronze
and its silver, the live files and bytes, the last compaction step (`binlake.lake.compaction`), and the
bytes on disk waiting for retention as its last pass left them, with when that pass ran
(`binlake.lake.retention`). All of it is read from the lake: the tables' logs and the two records the
running stream keeps beside them, so status needs neither the stream nor a JVM for it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from binlake.lake import compaction, retention, storage
from binlake.lake.table_files import NO_FILES, TableFiles
from binlake.lake.target import Target

THREADS = 4


def report(target: Target, names: list[str], silver: dict[str, TableFiles]) -> dict[str, dict[str, Any]]:
    """Each source table's upkeep, by name, its silver's files as `silver` holds them (status counted
    them already); a bronze behind a URI has no files here (None)."""
    steps, passes = compaction.last_steps(target), retention.last_passes(target)

    def bronze_files(name: str) -> TableFiles | None:
        location = target.bronze(name).location
        if not storage.is_local(location):
            return None
        return TableFiles.read(location) if storage.has_commit(location) else NO_FILES

    with ThreadPoolExecutor(THREADS) as pool:
        bronze = dict(zip(names, pool.map(bronze_files, names)))

    def side(name: str, kind: str, files: TableFiles | None) -> dict[str, Any]:
        location = target.bronze(name).location if kind == "bronze" else target.silver(name).location
        step = steps.get(name, {}).get(kind)
        cleaned = passes.get(location)
        return {"files": None if files is None else files.files, "bytes": None if files is None else files.bytes,
                "last_compaction": step.get("at") if step else None,
                "waiting_bytes": cleaned.waiting_bytes if cleaned else None,
                "last_retention": cleaned.at if cleaned else None}

    return {name: {"bronze": side(name, "bronze", bronze[name]), "silver": side(name, "silver", silver.get(name))}
            for name in names}


def summary(side: dict[str, Any], now: float) -> str:
    """One side's upkeep as `binlake status` prints it after the table's location, e.g.
    ` (6 files, 2.1 MB; compacted 12 s ago; 40.0 MB waiting for retention)`; empty when nothing is known."""
    parts = []
    if side["files"] is not None:
        parts.append(f"{side['files']} files, {_size(side['bytes'])}")
    if side["last_compaction"]:
        parts.append(f"compacted {max(0, round(now - side['last_compaction']))} s ago")
    if side["waiting_bytes"]:
        parts.append(f"{_size(side['waiting_bytes'])} waiting for retention")
    return f" ({'; '.join(parts)})" if parts else ""


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
