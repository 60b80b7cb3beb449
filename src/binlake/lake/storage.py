"""The lake's files on local storage, where a Delta table's creation can be cut short.

Creating a Delta table makes its `_delta_log` folder before it writes the first commit. A process
stopped in between (a kill, a stop at once) leaves a folder with no commit, which Delta then takes
for a table it cannot read (`DELTA_TABLE_NOT_FOUND`) instead of creating one. Such a folder holds
nothing (no commit, so no data), and is removed before the table is created again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def is_local(location: str) -> bool:
    return not ("://" in location or location.startswith("dbfs:"))


def has_commit(location: str) -> bool:
    """Whether the local table at `location` has a commit."""
    log = Path(location) / "_delta_log"
    return log.is_dir() and (any(log.glob("*.json")) or any(log.glob("*.checkpoint*.parquet")))


def clear_uncommitted(location: str) -> None:
    """Remove the `_delta_log` of a local table that has no commit (object stores are left alone:
    they have no folders to leave behind)."""
    if is_local(location) and (Path(location) / "_delta_log").is_dir() and not has_commit(location):
        shutil.rmtree(Path(location) / "_delta_log")


def table_exists(spark: Any, location: str) -> bool:
    """Whether a Delta table has a commit at `location` (a creation cut short is cleared first). A
    local one is looked at directly: the stream's start asks for every table, and Spark's answer
    costs about 70 ms a table."""
    from delta.tables import DeltaTable

    if is_local(location):
        clear_uncommitted(location)
        return has_commit(location)
    return bool(DeltaTable.isDeltaTable(spark, location))
