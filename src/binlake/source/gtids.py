"""GTID positions in the two servers' forms, as `stream.startup-position` takes them.

- MariaDB: a GTID position, one `domain-server-seq` per domain (`0-1-42,1-7-3`, as `@@gtid_binlog_pos`
  prints it), naming the last transaction had per domain: {"0": 42, "1": 3}.
- MySQL: a GTID set (`@@gtid_executed`): per source UUID, and per tag on 8.4+, the intervals of
  transaction numbers had: `3e11fa47-...:1-5:11-18,2174b383-...:1-27` or `uuid:tag:1-3`:
  {"3e11fa47-...": [[1, 5], [11, 18]], "uuid:tag": [[1, 3]]}.

Both are plain JSON, stored with the stream's start (`binlake.startup`).
"""

from __future__ import annotations

import re
from typing import Any

from binlake.errors import ConfigError

_MARIADB = re.compile(r"(\d+)-(\d+)-(\d+)")
_MARIADB_LIST = re.compile(r"\s*\d+-\d+-\d+(?:\s*,\s*\d+-\d+-\d+)*\s*")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TAG = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,31}")
_INTERVAL = re.compile(r"(\d+)(?:-(\d+))?")

Intervals = list[list[int]]


def parse_mariadb(text: str) -> dict[str, int] | None:
    """`0-1-42,1-7-3` -> {"0": 42, "1": 3} (domain -> sequence number); None for anything else."""
    if not _MARIADB_LIST.fullmatch(text):
        return None
    applied: dict[str, int] = {}
    for domain, _server, seq in _MARIADB.findall(text):
        if domain in applied:
            raise ConfigError(f"stream.startup-position {text!r} names GTID domain {domain} twice; binlake needs one "
                              "GTID per domain, as @@gtid_binlog_pos prints it: fix stream.startup-position")
        applied[domain] = int(seq)
    return applied


def parse_mysql(text: str) -> dict[str, Intervals] | None:
    """A MySQL GTID set -> {"uuid" or "uuid:tag": [[first, last], ...]} (merged, in order); None when
    `text` is not one."""
    out: dict[str, Intervals] = {}
    for part in filter(None, (p.strip() for p in text.replace("\n", "").split(","))):
        uuid, *rest = part.split(":")
        if not _UUID.fullmatch(uuid) or not rest:
            return None
        key = uuid.lower()
        for token in rest:
            interval = _INTERVAL.fullmatch(token)
            if interval:
                first, last = int(interval.group(1)), int(interval.group(2) or interval.group(1))
                if not 1 <= first <= last:
                    return None
                out.setdefault(key, []).append([first, last])
            elif _TAG.fullmatch(token):
                key = f"{uuid.lower()}:{token.lower()}"
            else:
                return None
    return {k: _merged(v) for k, v in out.items()} or None


def _merged(intervals: Intervals) -> Intervals:
    out: Intervals = []
    for first, last in sorted(intervals):
        if out and first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last])
    return out


def contains(applied: dict[str, Any], gtid: str | None) -> bool:
    """Whether transaction `gtid` (MariaDB `domain-server-seq`, MySQL `uuid:n` or `uuid:tag:n`) is one
    of those `applied` names as had."""
    if not gtid:
        return False
    m = _MARIADB.fullmatch(gtid)
    if m is not None:
        seq = applied.get(m.group(1))
        return isinstance(seq, int) and int(m.group(3)) <= seq
    key, _, number = gtid.rpartition(":")
    intervals = applied.get(key.lower())
    if not isinstance(intervals, list) or not number.isdigit():
        return False
    n = int(number)
    return any(first <= n <= last for first, last in intervals)


def covers(applied: dict[str, Intervals], other: dict[str, Intervals]) -> bool:
    """Whether every transaction of the GTID set `other` is in `applied` (MySQL sets)."""
    for key, intervals in other.items():
        have = applied.get(key, [])
        for first, last in intervals:
            if not any(a <= first and last <= b for a, b in have):
                return False
    return True


def is_mysql_state(applied: dict[str, Any]) -> bool:
    return any(isinstance(v, list) for v in applied.values())
