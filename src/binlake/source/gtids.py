"""GTID positions in the two servers' forms, as `stream.startup-position` takes them.

- MariaDB: a GTID position, one `domain-server-seq` per domain (`0-1-42,1-7-3`, as `@@gtid_binlog_pos`
  prints it), naming the last transaction had per domain: {"0": 42, "1": 3}.
- MySQL: a GTID set (`@@gtid_executed`): per source UUID, and per tag on 8.4+, the intervals of
  transaction numbers had: `3e11fa47-...:1-5:11-18,2174b383-...:1-27` or `uuid:tag:1-3`:
  {"3e11fa47-...": [[1, 5], [11, 18]], "uuid:tag": [[1, 3]]}.

Both are plain JSON, stored with the stream's start (`binlake.capture.startup`). This module is the
data and the arithmetic on it, the same code for both forms; which form a server uses, how it tells its
state and how its binlog prints a GTID are the server's dialect's (`binlake.source.dialect`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
    return {k: merged(v) for k, v in out.items()} or None


def parse_state(text: str) -> dict[str, Any] | None:
    """A stored GTID state in either form, told apart by its text (the two never look alike): a MySQL
    GTID set as `parse_mysql`, a MariaDB GTID position as `parse_mariadb`; None for neither. With the
    server at hand, `Dialect.parse_gtids` reads its own form only."""
    return parse_mysql(text) or parse_mariadb(text)


def merged(intervals: Intervals) -> Intervals:
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


def format_mysql(state: dict[str, Intervals]) -> str:
    """A GTID set in the form `parse_mysql` reads (`uuid:1-5:11-18,uuid:tag:1-3`)."""
    return ",".join(f"{key}:" + ":".join(f"{a}-{b}" if a != b else str(a) for a, b in intervals)
                    for key, intervals in sorted(state.items()) if intervals)


def last_per_domain(text: str) -> dict[str, str]:
    """`0-1-42,1-7-3` -> {"0": "0-1-42", "1": "1-7-3"}: the last GTID per domain, whole."""
    return {m.group(1): m.group(0) for m in _MARIADB.finditer(text or "")}


class Seen:
    """The GTIDs of the transactions a binlog read passed, in the server's own text form: MySQL's as a
    GTID set, MariaDB's as the last GTID per domain (a domain's numbers rise in binlog order). A
    transaction without a GTID (MySQL with gtid_mode OFF) makes the record incomplete."""

    def __init__(self) -> None:
        self._mysql: dict[str, list[int]] = {}
        self._mariadb: dict[str, str] = {}
        self.complete = True

    def add(self, gtid: str | None) -> None:
        if not gtid:
            self.complete = False
            return
        if _MARIADB.fullmatch(gtid):
            self._mariadb[gtid.split("-", 1)[0]] = gtid
            return
        key, _, number = gtid.rpartition(":")
        self._mysql.setdefault(key.lower(), []).append(int(number))

    def text(self) -> str:
        if self._mariadb:
            return ",".join(self._mariadb[d] for d in sorted(self._mariadb, key=int))
        return format_mysql({k: merged([[n, n] for n in v]) for k, v in self._mysql.items()})


def advance(state: str, seen: str) -> str:
    """The GTID state after `state` and then the transactions `seen` (both in the server's text form)."""
    if not seen:
        return state
    if not state:
        return seen
    if parse_mariadb(seen) is not None or parse_mariadb(state) is not None:
        return ",".join(v for _, v in sorted({**last_per_domain(state), **last_per_domain(seen)}.items(),
                                             key=lambda kv: int(kv[0])))
    a, b = parse_mysql(state) or {}, parse_mysql(seen) or {}
    return format_mysql({k: merged(a.get(k, []) + b.get(k, [])) for k in set(a) | set(b)})


def lacking(state: str, server: str) -> tuple[str, bool]:
    """What of `state` the server's (`Dialect.gtid_state`) does not hold, as text ('' when nothing), and
    whether the server could still come to hold it: it has transactions of the same sources (MySQL
    UUIDs, MariaDB domains), only fewer -- a replica behind -- rather than none of them."""
    if parse_mariadb(state) is not None:  # told by the whole text: a MySQL UUID may hold `1-8094-02`
        ours_mariadb, theirs = last_per_domain(state), last_per_domain(server)
        short = {d: g for d, g in ours_mariadb.items()
                 if d not in theirs or int(theirs[d].rsplit("-", 1)[1]) < int(g.rsplit("-", 1)[1])}
        return ",".join(short.values()), all(d in theirs for d in short)
    ours, have = parse_mysql(state) or {}, parse_mysql(server) or {}
    missing: dict[str, Intervals] = {}
    for key, intervals in ours.items():
        for first, last in intervals:
            n = first
            while n <= last:
                cover = next((b for a, b in have.get(key, []) if a <= n <= b), None)
                if cover is not None:
                    n = cover + 1
                    continue
                nxt = min((a for a, _ in have.get(key, []) if a > n), default=last + 1)
                missing.setdefault(key, []).append([n, min(last, nxt - 1)])
                n = nxt
    return format_mysql(missing), all(key in have for key in missing)


def binlog_events(conn: Any, file: str, pos: int = 4, page: int = 5000) -> Iterator[tuple[Any, ...]]:
    """The events of binlog `file` from `pos` as SHOW BINLOG EVENTS lists them (Log_name, Pos,
    Event_type, Server_id, End_log_pos, Info), a page at a time: no replication connection."""
    while True:
        with conn.cursor() as cur:
            cur.execute(f"SHOW BINLOG EVENTS IN '{file}' FROM {int(pos)} LIMIT {int(page)}")
            rows = cur.fetchall()
        yield from rows
        if len(rows) < page:
            return
        pos = int(rows[-1][4])  # End_log_pos of the last event: where the next one starts


def file_state(conn: Any, file: str) -> str:
    """The GTID state written before binlog `file`, as its header event gives it: MySQL's
    Previous_gtids (a GTID set), MariaDB's Gtid_list (the last GTID per domain)."""
    for row in binlog_events(conn, file, page=4):
        if row[2] in ("Previous_gtids", "Gtid_list"):
            return str(row[5]).strip("[]")
    return ""


def previous_gtids(conn: Any, file: str) -> dict[str, Intervals]:
    """The GTID set written before binlog `file` (its Previous_gtids event; MySQL)."""
    return parse_mysql(file_state(conn, file)) or {}


# how SHOW BINLOG EVENTS prints a MySQL GTID event (tagged or not): SET @@SESSION.GTID_NEXT= 'uuid:n'
GTID_NEXT = re.compile(r"GTID_NEXT\s*=\s*'([^']+)'", re.I)


def covered_file(conn: Any, files: list[str], had: dict[str, Intervals]) -> str | None:
    """The newest of `files` whose earlier transactions (Previous_gtids) are all in the MySQL GTID set
    `had`: every transaction the set lacks is at or after its start. None when even the oldest's are
    not (they are purged)."""
    return next((file for file in reversed(files) if covers(had, previous_gtids(conn, file))), None)
