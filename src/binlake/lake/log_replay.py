"""What a local Delta table's log says of its files at its newest version: the live ones (each live
add's data file and its deletion vector's file) and the removed ones the log still records (each
tombstone's files, with the time of their removal). `binlake.lake.retention` keeps the first and
removes the others once their removal is older than the retention.

Read here rather than through delta-rs, whose Python API gives neither a live add's deletion vector
nor any tombstone: the newest checkpoint (one Parquet file, or all the parts of a multi-part one),
then each commit after it, in order, an action replacing an earlier one of the same file and
deletion vector (the protocol's action reconciliation). A checkpoint already holds the live adds and
the tombstones younger than the table's `delta.deletedFileRetentionDuration` (7 days by default);
older ones are dropped from it, and their files count as never committed (see retention).

A log binlake cannot read whole (a v2 checkpoint with sidecars, a commit missing after the newest
checkpoint, a file another process removes while it is read) raises UnreadableLog: the caller then
removes nothing.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

LOG = "_delta_log"
_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.parquet")
_PART = re.compile(r"(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet")
_V2 = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(json|parquet)")
# Z85, the Base85 variant the protocol encodes a deletion vector's UUID in
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(Z85)}


class UnreadableLog(Exception):
    """The log of a table cannot be read whole here (the message says why)."""


@dataclass
class LogState:
    """A table's files by its log at `version`: absolute paths under the table's real folder (links
    resolved: an absolute path in the log matches the same file reached through a link)."""

    version: int
    live: set[str] = field(default_factory=set)
    removed: dict[str, float] = field(default_factory=dict)  # path -> newest removal, seconds since the epoch
    live_bytes: int = 0  # the data files' sizes the live adds record (deletion vectors not counted)


def z85_uuid(text: str) -> uuid.UUID:
    """The UUID the 20 characters `text` encode in Z85 (each 5 characters, 4 bytes, big-endian)."""
    if len(text) != 20:
        raise ValueError(f"a Z85-encoded UUID has 20 characters, not {len(text)}: {text!r}")
    raw = b""
    for at in range(0, 20, 5):
        value = 0
        for c in text[at:at + 5]:
            value = value * 85 + _Z85_VALUE[c]
        raw += value.to_bytes(4, "big")
    return uuid.UUID(bytes=raw)


def _local(root: str, path: str) -> str:
    """The absolute local path of an action's `path` (a relative, percent-encoded URI, or an absolute one)."""
    parsed = urlparse(path)
    if parsed.scheme in ("file", ""):
        place = unquote(parsed.path)
        return os.path.realpath(place) if os.path.isabs(place) else os.path.normpath(os.path.join(root, place))
    return path  # another scheme: no file under the table's folder


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
    prefix, name = stored[:-20], f"deletion_vector_{z85_uuid(stored[-20:])}.bin"
    return os.path.normpath(os.path.join(root, prefix, name))


def _dv_id(dv: dict[str, Any] | None) -> str:
    if not dv:
        return ""
    offset = dv.get("offset")
    return f"{dv['storageType']}{dv['pathOrInlineDv']}" + ("" if offset is None else f"@{offset}")


def _checkpoint(names: list[str], newest: int) -> tuple[int, list[str]]:
    """The newest complete checkpoint at or below `newest`: its version and files (-1, [] for none)."""
    found: dict[int, list[str]] = {}
    parts: dict[tuple[int, int], list[str]] = {}
    for name in names:
        if m := _CHECKPOINT.fullmatch(name):
            found.setdefault(int(m.group(1)), [name])
        elif m := _PART.fullmatch(name):
            parts.setdefault((int(m.group(1)), int(m.group(3))), []).append(name)
        elif m := _V2.fullmatch(name):
            found.setdefault(int(m.group(1)), [name])
    for (version, count), files in parts.items():
        if len(set(files)) == count:
            found.setdefault(version, sorted(files))
    usable = [v for v in found if v <= newest]
    if not usable:
        return -1, []
    version = max(usable)
    if _V2.fullmatch(found[version][0]):
        raise UnreadableLog(f"version {version}'s checkpoint is a v2 checkpoint, which binlake does not read")
    return version, found[version]


def _checkpoint_actions(log: Path, files: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow.parquet as pq

    wanted = ["add.path", "add.size", "add.deletionVector", "remove.path", "remove.deletionTimestamp",
              "remove.deletionVector"]
    for name in files:
        try:
            table = pq.read_table(log / name, columns=wanted)
        except (OSError, ValueError) as exc:
            raise UnreadableLog(f"checkpoint {name} cannot be read: {exc}") from None
        columns = [table.column(i).to_pylist() for i in range(len(wanted))]
        for path, size, dv, gone, deleted_at, gone_dv in zip(*columns):
            if path is not None:
                yield "add", {"path": path, "size": size, "deletionVector": dv}
            if gone is not None:
                yield "remove", {"path": gone, "deletionTimestamp": deleted_at, "deletionVector": gone_dv}


def _commit_actions(log: Path, version: int) -> Iterator[tuple[str, dict[str, Any]]]:
    path = log / f"{version:020d}.json"
    try:
        text = path.read_text()
        written_at = path.stat().st_mtime
    except OSError as exc:
        raise UnreadableLog(f"commit {path.name} cannot be read: {exc}") from None
    for line in text.splitlines():
        if '"add"' not in line and '"remove"' not in line:
            continue
        action = json.loads(line)
        if "add" in action:
            yield "add", action["add"]
        elif "remove" in action:
            remove = action["remove"]
            if remove.get("deletionTimestamp") is None:  # optional: the commit's own time then
                remove = {**remove, "deletionTimestamp": int(written_at * 1000)}
            yield "remove", remove


def replay(location: str) -> LogState:
    """The files the local table at `location` holds at its newest version, and those it removed."""
    log = Path(location) / LOG
    root = os.path.realpath(location)
    try:
        names = os.listdir(log)
    except OSError as exc:
        raise UnreadableLog(f"{log} cannot be listed: {exc}") from None
    commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT.fullmatch(n)))
    if not commits:
        raise UnreadableLog(f"{log} holds no commit")
    newest = commits[-1]
    start, files = _checkpoint(names, newest)
    missing = sorted(set(range(start + 1, newest + 1)) - set(commits))
    if missing:
        after = f"checkpoint {start}" if start >= 0 else "no checkpoint"
        raise UnreadableLog(f"{log} misses commit {missing[0]} (after {after})")
    latest: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    actions = [_checkpoint_actions(log, files)] + [_commit_actions(log, v) for v in range(start + 1, newest + 1)]
    for stream in actions:
        for kind, action in stream:
            latest[(action["path"], _dv_id(action.get("deletionVector")))] = (kind, action)
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
