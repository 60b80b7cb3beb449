"""A local Delta table's log read to one version (`Snapshot`): its protocol, its metadata and its
live add actions by path, each with its deletion vector as the log has it -- what binlake's own commits
(`binlake.lake.delta_commit`), its key index and its compaction plan from. The newest checkpoint at or
below the version (one file, or every part of a multi-part one) and each commit after it; a v2
checkpoint is refused, as no table of binlake's has one."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from binlake.lake.deletion_vectors import Positions, read

LOG = "_delta_log"


@dataclass(frozen=True)
class Snapshot:
    """A local table at one version, by its log: its protocol, its metadata and its live add actions
    by path (each with its `deletionVector`, if any, as the log has it)."""

    location: str
    version: int
    protocol: dict[str, Any]
    metadata: dict[str, Any]
    files: dict[str, dict[str, Any]]

    @classmethod
    def read(cls, location: str | Path, version: int | None = None) -> Snapshot:
        """The table at `location` at `version` (its newest by default): the newest checkpoint at or
        below it, then each commit after, a commit's removes before its adds (a commit may remove a
        file's add with one DV and add it with another)."""
        log = Path(location) / LOG
        names = os.listdir(log)
        commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT.fullmatch(n)))
        if not commits:
            raise FileNotFoundError(f"{log} holds no commit")
        version = commits[-1] if version is None else version
        start, parts = _checkpoint(log, names, version)
        protocol: dict[str, Any] = {}
        metadata: dict[str, Any] = {}
        files: dict[str, dict[str, Any]] = {}
        for kind, action in _checkpoint_actions(log, parts):
            if kind == "add":
                files[action["path"]] = action
            elif kind == "metaData":
                metadata = action
            elif kind == "protocol":
                protocol = action
        for v in range(start + 1, version + 1):
            actions = [json.loads(line) for line in (log / f"{v:020d}.json").read_text().splitlines() if line]
            for action in actions:
                if "remove" in action:
                    files.pop(action["remove"]["path"], None)
                protocol = action.get("protocol", protocol)
                metadata = action.get("metaData", metadata)
            files.update((a["add"]["path"], a["add"]) for a in actions if "add" in a)
        return cls(str(location), version, protocol, metadata, files)

    def deleted(self, path: str) -> Positions:
        """The rows of the live file `path` its DV marks deleted (none without one)."""
        dv = self.files[path].get("deletionVector")
        return read(self.location, dv) if dv else np.empty(0, np.uint64)

    @property
    def physical_names(self) -> dict[str, str]:
        """Each top-level column's name in the data files, by its name in the table (its physical name
        under column mapping, else the same)."""
        return {f["name"]: str(f.get("metadata", {}).get("delta.columnMapping.physicalName", f["name"]))
                for f in json.loads(self.metadata["schemaString"])["fields"]}

    @property
    def flat(self) -> bool:
        """Whether the table's columns are all of simple types: binlake's own commits write no nested
        column (its physical names under column mapping: `binlake.lake.delta_commit.data_file`)."""
        return all(isinstance(f["type"], str) for f in json.loads(self.metadata["schemaString"])["fields"])

    def num_records(self, path: str) -> int:
        """The rows of the data file `path`, deleted ones too: its `numRecords`, else its footer's count."""
        stats = json.loads(self.files[path].get("stats") or "{}")
        if "numRecords" in stats:
            return int(stats["numRecords"])
        import pyarrow.parquet as pq

        return int(pq.read_metadata(_data_path(self.location, path)).num_rows)


def _data_path(location: str | Path, path: str) -> Path:
    parsed = urlparse(path)
    place = unquote(parsed.path)
    return Path(place) if os.path.isabs(place) else Path(location) / place


_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
_V2_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)")


def _checkpoint(log: Path, names: list[str], version: int) -> tuple[int, list[str]]:
    """The newest checkpoint at or below `version` (one file, or all the parts of a multi-part one):
    its version and files, or -1 and none."""
    found: dict[int, list[str]] = {}
    for name in names:
        if (m := _V2_CHECKPOINT.fullmatch(name)) and int(m.group(1)) <= version:
            raise ValueError(f"{log / name} is a v2 checkpoint, which binlake does not read")
        if (m := _CHECKPOINT.fullmatch(name)) and int(m.group(1)) <= version:
            found.setdefault(int(m.group(1)), []).append(name)
    complete = [v for v, files in found.items() if len(files) == int(_parts(files[0]) or 1)]
    return (max(complete), sorted(found[max(complete)])) if complete else (-1, [])


def _parts(name: str) -> str | None:
    """How many parts the checkpoint file `name` is one of (None: a single file)."""
    m = _CHECKPOINT.fullmatch(name)
    return m.group(3) if m else None


def _checkpoint_actions(log: Path, parts: list[str]) -> Iterable[tuple[str, dict[str, Any]]]:
    import pyarrow.parquet as pq

    for name in parts:
        table = pq.read_table(log / name, columns=["add", "metaData", "protocol"])
        for kind in ("add", "metaData", "protocol"):
            for action in table.column(kind).to_pylist():
                if action is not None:
                    yield kind, _plain(action)


_MAPS = frozenset({"partitionValues", "tags", "configuration", "options"})


def _plain(value: Any) -> Any:
    """A checkpoint's action as its commit's JSON has it: maps as objects, null fields left out,
    statistics parsed by the checkpoint writer dropped (the JSON `stats` stays)."""
    if not isinstance(value, dict):
        return value
    return {k: dict(v) if k in _MAPS else _plain(v) for k, v in value.items()
            if v is not None and not k.endswith("_parsed")}
