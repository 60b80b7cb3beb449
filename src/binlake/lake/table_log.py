"""A local Delta table's log, read by binlake itself, two ways:
- `Snapshot.read`: the table at one version -- its protocol, its metadata and its live add actions by
  path, each with its deletion vector as the log has it: what binlake's own commits
  (`binlake.lake.delta_commit`), its key index and its compaction plan from;
- `replay`: the files the newest version holds (each live add's data file and its deletion vector's
  file) and the removed ones the log still records, with the time of their removal: what
  `binlake.lake.retention` keeps and removes by.

Read here rather than through delta-rs, whose Python API gives neither a live add's deletion vector
nor any tombstone. Both read the newest checkpoint at or below the version (one Parquet file, or every
part of a multi-part one), then each commit after it, in order, an action replacing an earlier one of
the same file (the protocol's action reconciliation). A checkpoint holds the live adds and the
tombstones younger than the table's `delta.deletedFileRetentionDuration` (7 days by default); older
ones are dropped from it, and their files count as never committed (see retention).

A log binlake cannot read whole (no commit, a v2 checkpoint, a commit missing after the newest
checkpoint, a file another process removes while it is read) raises UnreadableLog, a ValueError: the
caller then writes and removes nothing.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from binlake.lake.deletion_vectors import NO_MARKS, Descriptor, Marks, read_marks

LOG = "_delta_log"
# the newest Snapshot this process read of each table, by location: the next read starts from it
_LAST: dict[str, Snapshot] = {}
_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
_V2 = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)")


class UnreadableLog(ValueError):
    """The log of a table cannot be read whole here (the message says why)."""


@dataclass(frozen=True)
class Snapshot:
    """A local table at one version, by its log: its protocol, its metadata and its live add actions
    by path (each with its `deletionVector`, if any, as the log has it)."""

    location: str
    version: int
    protocol: dict[str, Any]
    metadata: dict[str, Any]
    files: dict[str, dict[str, Any]]
    tip: tuple[int, int] | None = None  # its version's commit file: (inode, modification time in ns)

    @classmethod
    def read(cls, location: str | Path, version: int | None = None) -> Snapshot:
        """The table at `location` at `version` (its newest by default). A commit's removes go before
        its adds: a commit may remove a file's add with one DV and add it with another. The newest
        version is read on from the last one this process read of the table, when that one's commit is
        still the same file (a table made again at the same place is read whole)."""
        log = Path(location) / LOG
        last = _LAST.get(str(location)) if version is None else None
        if last is not None and last.tip is not None and last.tip == _tip(log, last.version):
            protocol, metadata, files, start = last.protocol, last.metadata, dict(last.files), last.version
            version = start
            while (log / f"{version + 1:020d}.json").exists():
                version += 1
        else:
            log, version, start, parts = _log(location, version)
            protocol, metadata, files = {}, {}, {}
            for kind, action in _checkpoint_actions(log, parts, ("add", "metaData", "protocol")):
                if kind == "add":
                    files[action["path"]] = action
                elif kind == "metaData":
                    metadata = action
                elif kind == "protocol":
                    protocol = action
        for v in range(start + 1, version + 1):
            protocol, metadata = _reconciled(files, protocol, metadata, _commit(log, v)[0])
        return _kept(cls(str(location), version, protocol, metadata, files, _tip(log, version)))

    def then(self, version: int, actions: list[dict[str, Any]]) -> Snapshot:
        """The table at `version`, the commit of `actions` right after this snapshot's version, as this
        process wrote it: the next `read` goes on from it, and does not parse the commit back (a batch's
        commit on a large table names every file it marks)."""
        if version != self.version + 1:
            raise ValueError(f"version {version} does not follow {self.version}")
        files = dict(self.files)
        protocol, metadata = _reconciled(files, self.protocol, self.metadata, actions)
        tip = _tip(Path(self.location) / LOG, version)
        return _kept(Snapshot(self.location, version, protocol, metadata, files, tip))

    def marks(self, path: str) -> Marks:
        """The rows of the live file `path` its DV marks deleted, as a bitset (none without one)."""
        dv = self.files[path].get("deletionVector")
        return read_marks(self.location, dv) if dv else NO_MARKS

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

    def bytes_per_row(self) -> float | None:
        """The bytes a row takes in the table's live files (those whose stats count their rows), or
        None while they hold none."""
        counted = [p for p, a in self.files.items() if a.get("stats")]
        stored = sum(int(self.files[p].get("size") or 0) for p in counted)
        rows = sum(self.num_records(p) for p in counted)
        return stored / rows if stored and rows else None

    def num_records(self, path: str) -> int:
        """The rows of the data file `path`, deleted ones too: its `numRecords`, else its footer's count."""
        records = stated_records(self.files[path].get("stats") or "{}")
        if records is not None:
            return records
        import pyarrow.parquet as pq

        return int(pq.read_metadata(data_path(self.location, path)).num_rows)


@dataclass
class LogState:
    """A table's files by its log at `version`: absolute paths under the table's real folder (links
    resolved: an absolute path in the log matches the same file reached through a link)."""

    version: int
    live: set[str] = field(default_factory=set)
    removed: dict[str, float] = field(default_factory=dict)  # path -> newest removal, seconds since the epoch
    live_bytes: int = 0  # the data files' sizes the live adds record (deletion vectors not counted)


def replay(location: str) -> LogState:
    """The files the local table at `location` holds at its newest version, and those it removed."""
    log, newest, start, parts = _log(location, None)
    root = os.path.realpath(location)
    latest: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for kind, action in _checkpoint_actions(log, parts, ("add", "remove")):
        latest[(action["path"], _dv_id(action.get("deletionVector")))] = (kind, action)
    for v in range(start + 1, newest + 1):
        actions, written_at = _commit(log, v)
        for action in actions:
            if "add" in action:
                kind, act = "add", action["add"]
            elif "remove" in action:
                kind, act = "remove", action["remove"]
                if act.get("deletionTimestamp") is None:  # optional: the commit's own time then
                    act = {**act, "deletionTimestamp": int(written_at * 1000)}
            else:
                continue
            latest[(act["path"], _dv_id(act.get("deletionVector")))] = (kind, act)
    state = LogState(newest)
    for kind, action in latest.values():
        named = [_local(root, action["path"]), dv_file(root, action.get("deletionVector"))]
        if kind == "add":
            state.live.update(p for p in named if p)
            state.live_bytes += int(action.get("size") or 0)
            continue
        at = (action.get("deletionTimestamp") or 0) / 1000
        for p in named:
            if p:
                state.removed[p] = max(at, state.removed.get(p, 0.0))
    return state


@functools.lru_cache(maxsize=16384)
def stated_records(stats: str) -> int | None:
    """The `numRecords` of an add action's `stats` (its JSON text), None where it has none. Parsed once
    per text: a batch's commit, compaction's look and the key index each ask it of every live file,
    every batch, and a file's stats stay the same text from commit to commit."""
    records = json.loads(stats).get("numRecords")
    return None if records is None else int(records)


def data_path(location: str | Path, path: str) -> Path:
    """The local path of the data file an add action names (relative and percent-encoded, or absolute)."""
    place = unquote(urlparse(path).path)
    return Path(place) if os.path.isabs(place) else Path(location) / place


def dv_file(root: str, dv: dict[str, Any] | None) -> str | None:
    """The absolute path of the file holding the deletion vector `dv` (an action's `deletionVector`),
    None for one inline in the log, or for none."""
    if not dv or dv.get("storageType") == "i":
        return None
    stored = dv["pathOrInlineDv"]
    if dv["storageType"] == "p":
        return _local(root, stored)
    if dv["storageType"] != "u":
        raise UnreadableLog(f"a deletion vector is stored as {dv['storageType']!r}, which binlake does not know")
    path = Descriptor.from_dict(dv).file(root)
    return None if path is None else os.path.normpath(path)


def _local(root: str, path: str) -> str:
    """The absolute local path of an action's `path` under the table's real folder `root` (links in an
    absolute path resolved); another scheme's path as it is (no file under the table's folder)."""
    parsed = urlparse(path)
    if parsed.scheme not in ("file", ""):
        return path
    place = unquote(parsed.path)
    return os.path.realpath(place) if os.path.isabs(place) else os.path.normpath(os.path.join(root, place))


def _dv_id(dv: dict[str, Any] | None) -> str:
    if not dv:
        return ""
    offset = dv.get("offset")
    return f"{dv['storageType']}{dv['pathOrInlineDv']}" + ("" if offset is None else f"@{offset}")


def _log(location: str | Path, version: int | None) -> tuple[Path, int, int, list[str]]:
    """The table's log folder, the version read (the newest by default), and the newest checkpoint at
    or below it: its version (-1 for none) and files. Every commit after that checkpoint is there."""
    log = Path(location) / LOG
    try:
        names = os.listdir(log)
    except OSError as exc:
        raise UnreadableLog(f"{log} cannot be listed: {exc}") from None
    commits = {int(m.group(1)) for n in names if (m := _COMMIT.fullmatch(n))}
    if not commits:
        raise UnreadableLog(f"{log} holds no commit")
    version = max(commits) if version is None else version
    start, parts = _checkpoint(log, names, version)
    missing = sorted(set(range(start + 1, version + 1)) - commits)
    if missing:
        after = f"checkpoint {start}" if start >= 0 else "no checkpoint"
        raise UnreadableLog(f"{log} misses commit {missing[0]} (after {after})")
    return log, version, start, parts


def _reconciled(files: dict[str, dict[str, Any]], protocol: dict[str, Any], metadata: dict[str, Any],
                actions: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Take one commit's `actions` into `files` (removes before adds); the protocol and metadata after it."""
    for action in actions:
        if "remove" in action:
            files.pop(action["remove"]["path"], None)
        protocol = action.get("protocol", protocol)
        metadata = action.get("metaData", metadata)
    files.update((a["add"]["path"], a["add"]) for a in actions if "add" in a)
    return protocol, metadata


def _kept(snapshot: Snapshot) -> Snapshot:
    """`snapshot`, kept as the one the next read of its table starts from when it is the newest read."""
    newest = _LAST.get(snapshot.location)
    if newest is None or snapshot.version >= newest.version:
        _LAST[snapshot.location] = snapshot
    return snapshot


def _tip(log: Path, version: int) -> tuple[int, int] | None:
    """Which file commit `version` is: its inode and modification time (None when it is gone)."""
    try:
        st = (log / f"{version:020d}.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _checkpoint(log: Path, names: list[str], version: int) -> tuple[int, list[str]]:
    """The newest complete checkpoint at or below `version` (one file, or all the parts of a
    multi-part one): its version and files, or -1 and none."""
    found: dict[int, list[str]] = {}
    parts: dict[tuple[int, int], list[str]] = {}
    for name in names:
        if (m := _CHECKPOINT.fullmatch(name)) and int(m.group(1)) <= version:
            if m.group(3) is None:
                found.setdefault(int(m.group(1)), [name])
            else:
                parts.setdefault((int(m.group(1)), int(m.group(3))), []).append(name)
        elif (m := _V2.fullmatch(name)) and int(m.group(1)) <= version:
            found.setdefault(int(m.group(1)), [name])
    for (at, count), files in parts.items():
        if len(set(files)) == count:
            found.setdefault(at, sorted(files))
    if not found:
        return -1, []
    newest = max(found)
    if _V2.fullmatch(found[newest][0]):
        raise UnreadableLog(f"{log / found[newest][0]} is a v2 checkpoint, which binlake does not read")
    return newest, found[newest]


def _commit(log: Path, version: int) -> tuple[list[dict[str, Any]], float]:
    """The actions of commit `version`, and the time its file was written."""
    path = log / f"{version:020d}.json"
    try:
        text = path.read_text()
        written_at = path.stat().st_mtime
    except OSError as exc:
        raise UnreadableLog(f"commit {path.name} cannot be read: {exc}") from None
    return [json.loads(line) for line in text.splitlines() if line], written_at


def _checkpoint_actions(log: Path, parts: list[str], kinds: tuple[str, ...]) -> Iterable[tuple[str, dict[str, Any]]]:
    """The checkpoint's actions of `kinds`, each as its commit's JSON has it."""
    import pyarrow.parquet as pq

    for name in parts:
        try:
            table = pq.read_table(log / name, columns=list(kinds))
        except (OSError, ValueError) as exc:
            raise UnreadableLog(f"checkpoint {name} cannot be read: {exc}") from None
        for kind in kinds:
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
