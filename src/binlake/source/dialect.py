"""What differs between the servers binlake reads: MariaDB, MySQL 8.0/8.4 and MySQL 9.x.

Every statement whose spelling depends on the server, the form of its GTIDs, the way a chunk read gets
an exact binlog position and the way a failover finds where to read on, is chosen here from the
server's version, so the rest of binlake asks the dialect instead of testing the server's name.

GTIDs differ in form (`binlake.source.gtids` keeps the arithmetic on them, the same code for both):
MariaDB names a transaction `domain-server-seq`, and its GTID state is the last GTID per replication
domain (`@@gtid_binlog_pos`: `0-1-42,1-7-3`); MySQL names one `uuid:n` (`uuid:tag:n` on 8.4+), and
its state is the set of transaction numbers per source UUID and tag (`@@gtid_executed`:
`uuid:1-5:11-18`). A domain's numbers rise in binlog order, so MariaDB's last GTID stands for all
before it; MySQL's sets can have gaps, so a set is kept whole.

The exact chunk read (why `SHOW ... STATUS` alone is not enough): under group commit a transaction is
written to the binlog, and the position the status command reports moves past it, before the storage
engine makes its rows visible. A `SELECT` started right after that position can miss a transaction
logged before it. So the chunk read's low watermark is the status position P *settled*: the read
waits until every transaction written before P is visible, then selects, then takes its high
watermark and folds the changes between them (`binlake.source.chunk_reader`). Each server settles
its own way (`snapshot_method`):

- MariaDB, `settled-commits`: outside a consistent snapshot, the status variables
  `binlog_snapshot_file`/`binlog_snapshot_position` give the end of the last group commit whose
  engine commit (`commit_ordered`, which makes its rows visible) has run, and groups commit in
  binlog order. The read waits until that end reaches P, or until no transaction lies between them
  (a rotation or a binlog checkpoint event is written without a group commit). The SELECT then runs
  in `START TRANSACTION WITH CONSISTENT SNAPSHOT`, which takes its view under the lock the group
  commits hold while they commit, so it never sees half a group. The snapshot's own position
  (`binlog_snapshot_position` inside it) is not used: with it as HW the chunk oracle found reads
  whose rows were not the state at it (1 in 60,003 under 16 writers and a slow fsync, after a fix
  for 1 in 2,000-6,000), and the settled LW needs no trust in it.
- MySQL with `gtid_mode=ON`, `settled-gtids`: every GTID the server has handed out but not yet
  committed (`@@global.gtid_owned`) is waited for with `WAIT_FOR_EXECUTED_GTID_SET`. A transaction
  written before P took its GTID before P was reported (GTIDs are assigned in the flush stage,
  before the write), and a GTID leaves `gtid_owned` only by entering `gtid_executed`, after the
  engine commit. So once the wait returns, every transaction before P is visible to a `SELECT`
  started after it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Literal

import pymysql

from binlake.errors import ConfigError, RuntimeFailure
from binlake.offsets import BinlogPosition, file_index
from binlake.source.connection import epoch_of
from binlake.source.gtids import (
    GTID_NEXT,
    Seen,
    advance,
    binlog_events,
    covered_file,
    file_state,
    format_mysql,
    last_per_domain,
    parse_mariadb,
    parse_mysql,
    previous_gtids,
)

Server = Literal["mariadb", "mysql"]
SnapshotMethod = Literal["settled-commits", "settled-gtids"]

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_OWNER = re.compile(r"#\d+")
# how SHOW BINLOG EVENTS prints a MariaDB GTID event: BEGIN GTID 0-1-42 (MySQL's: gtids.GTID_NEXT)
_DOMAIN_GTID = re.compile(r"\b(\d+-\d+-\d+)\b")
# how long a MariaDB chunk read polls the committed end before it lists the binlog up to its LW
COMMIT_POLL_S = 0.05
# events SHOW BINLOG EVENTS lists that belong to no transaction: a file's header, its end, the
# checkpoints MariaDB writes once earlier files' transactions are durable
_NOT_TRANSACTIONS = {"Format_desc", "Gtid_list", "Binlog_checkpoint", "Rotate", "Stop", "Start_encryption",
                     "Previous_gtids"}


@dataclass(frozen=True)
class Dialect:
    server: Server
    version: tuple[int, int, int]

    @classmethod
    def from_version(cls, text: str) -> Dialect:
        """From `SELECT VERSION()` or the handshake's version ('5.5.5-10.11.6-MariaDB-0+deb12u1', '9.7.4-2')."""
        if "mariadb" in text.lower():
            text = text.removeprefix("5.5.5-")  # the handshake's prefix for old clients
            server: Server = "mariadb"
        else:
            server = "mysql"
        m = _VERSION.search(text)
        version = (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)
        return cls(server, version)

    @classmethod
    def of(cls, conn: Any) -> Dialect:
        """The dialect of an open PyMySQL or mysqlclient connection, from its handshake (no query)."""
        info = conn.get_server_info()
        return cls.from_version(info.decode() if isinstance(info, bytes) else str(info))

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server, "version": list(self.version)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Dialect:
        return cls(d["server"], tuple(int(v) for v in d["version"]))  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.name} {'.'.join(map(str, self.version))}"

    @property
    def name(self) -> str:
        return server_name(self.server)

    @property
    def is_mariadb(self) -> bool:
        return self.server == "mariadb"

    @property
    def minimum_version(self) -> tuple[int, int]:
        """The oldest release binlake reads (major, minor; `binlake check` refuses older ones): MariaDB
        10.5, the first to log the column names binlake decodes rows by (`binlog_row_metadata`), and
        MySQL 8.0 (the check names a missing `binlog_row_metadata` on its own)."""
        return (10, 5) if self.is_mariadb else (8, 0)

    @property
    def snapshot_method(self) -> SnapshotMethod:
        return "settled-commits" if self.is_mariadb else "settled-gtids"

    @property
    def snapshot_select(self) -> bool:
        """Whether a chunk's SELECT runs in `START TRANSACTION WITH CONSISTENT SNAPSHOT`: on MariaDB, so
        its view is taken under the lock a group commit holds while its transactions commit, never
        inside a group its settle saw committed (see the module docstring)."""
        return self.is_mariadb

    @property
    def head_statement(self) -> str:
        """The binlog's written end. MySQL 8.2 added SHOW BINARY LOG STATUS and 8.4 removed the
        MASTER form; MariaDB spells it SHOW BINLOG STATUS from 10.5.2 on."""
        if self.is_mariadb:
            return "SHOW BINLOG STATUS" if self.version >= (10, 5, 2) else "SHOW MASTER STATUS"
        return "SHOW BINARY LOG STATUS" if self.version >= (8, 2, 0) else "SHOW MASTER STATUS"

    @property
    def replicas_statement(self) -> str:
        """The replicas registered on the source. MySQL 8.4 removed SHOW SLAVE HOSTS (SHOW REPLICAS
        since 8.0.22); MariaDB knows SHOW REPLICA HOSTS from 10.5.1."""
        if self.is_mariadb:
            return "SHOW REPLICA HOSTS" if self.version >= (10, 5, 1) else "SHOW SLAVE HOSTS"
        return "SHOW REPLICAS" if self.version >= (8, 0, 22) else "SHOW SLAVE HOSTS"

    def estimated_rows(self, conn: Any, database: str, table: str) -> int:
        """The server's estimate of a table's row count. MySQL 8.0.3+ caches information_schema's table
        statistics for information_schema_stats_expiry seconds (a day by default): a table grown since
        shows its old size there, and even chunks planned from it would be several times chunk-size.
        The session reads them fresh from the storage engine instead."""
        with conn.cursor() as cur:
            if not self.is_mariadb and self.version >= (8, 0, 3):
                cur.execute("SET SESSION information_schema_stats_expiry = 0")
            cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (database, table))
            row = cur.fetchone()
        return int((row or [0])[0] or 0)

    def head(self, conn: Any) -> BinlogPosition:
        with conn.cursor() as cur:
            cur.execute(self.head_statement)
            row = cur.fetchone()
        if not row:
            raise ConfigError("log_bin is OFF; binlake needs ON: start the server with --log-bin and restart")

        return BinlogPosition(str(row[0]), int(row[1]), epoch_of(conn))

    def settle(self, conn: Any, lw: BinlogPosition, timeout: float) -> None:
        """Wait until every transaction written before `lw` is visible to a read that starts after this
        returns (see the module docstring). `conn` must not be inside a transaction."""
        if self.is_mariadb:
            self._await_commits(conn, lw, timeout)
        else:
            self._await_owned_gtids(conn, timeout)

    def _await_owned_gtids(self, conn: Any, timeout: float) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.gtid_mode, @@global.gtid_owned")
            mode, owned = cur.fetchone()
            if str(mode).upper() != "ON":
                raise ConfigError(
                    f"gtid_mode is {mode}; binlake's exact chunk read on MySQL needs ON: set gtid_mode "
                    "step by step to ON (OFF_PERMISSIVE, ON_PERMISSIVE, ON) with enforce_gtid_consistency=ON"
                )
            owned = _OWNER.sub("", str(owned or "")).strip()
            if not owned:
                return
            cur.execute("SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)", (owned, timeout))
            (timed_out,) = cur.fetchone()
        if timed_out:
            raise RuntimeFailure(
                f"transactions {owned} stayed uncommitted for {timeout:.0f}s after they reached the binlog; "
                "a chunk read waits for them to be visible: raise source.read-timeout, or find what holds them"
            )

    def _await_commits(self, conn: Any, lw: BinlogPosition, timeout: float) -> None:
        """MariaDB: until the end of the last committed group reaches `lw`, or no transaction lies between
        them. The committed end usually passes `lw` within a group commit or two; only when it has not
        within COMMIT_POLL_S is the binlog between them listed (an idle server whose head is past a
        rotation or a checkpoint event)."""
        began = time.monotonic()
        pause = 0.0005
        listed = None  # the committed end the binlog was last listed from: listed again only once it moves
        while True:
            committed = self.committed_position(conn, lw.epoch)
            if committed >= lw:
                return
            waited = time.monotonic() - began
            if waited >= COMMIT_POLL_S and committed != listed:
                if not transactions_between(conn, committed, lw):
                    return
                listed = committed
            if waited >= timeout:
                raise RuntimeFailure(
                    f"the transactions the binlog holds between {committed} and {lw} stayed uncommitted for "
                    f"{timeout:.0f}s after they reached it; a chunk read waits for them to be visible: raise "
                    "source.read-timeout, or find what holds them"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def committed_position(self, conn: Any, epoch: int = 0) -> BinlogPosition:
        """MariaDB, outside a consistent snapshot: the end of the last group commit the engines have
        committed (the head can be past it while a group is synced)."""
        with conn.cursor() as cur:
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): v for k, v in cur.fetchall()}
        return BinlogPosition(str(status["binlog_snapshot_file"]), int(status["binlog_snapshot_position"]), epoch)

    def replicas(self, conn: Any) -> list[tuple[int, str]] | None:
        """(server id, host) of each replica registered on the source, or None when the account may not
        list them (MariaDB wants REPLICATION MASTER ADMIN, MySQL REPLICATION SLAVE)."""
        try:
            with conn.cursor() as cur:
                cur.execute(self.replicas_statement)
                names = [d[0].lower() for d in cur.description or ()]
                rows = cur.fetchall()
        except (pymysql.err.OperationalError, pymysql.err.ProgrammingError):
            return None
        sid, host = names.index("server_id"), names.index("host")
        return [(int(r[sid]), str(r[host] or "")) for r in rows]

    @property
    def client_privilege_alias(self) -> str | None:
        """REPLICATION CLIENT's other name, the privilege to read binlog positions: MariaDB 10.5+ calls
        it BINLOG MONITOR (and SHOW GRANTS prints that); MySQL has no other."""
        return "BINLOG MONITOR" if self.is_mariadb else None

    @property
    def identity_statement(self) -> str:
        """What tells this server from another (binlake.source.identity): its @@server_id and MySQL's
        @@server_uuid, made once per data directory. MariaDB has no server UUID."""
        return "SELECT @@server_id" if self.is_mariadb else "SELECT @@server_id, @@server_uuid"

    def identity(self, conn: Any) -> tuple[int, str | None]:
        """The server's id and its UUID (None on MariaDB), by `identity_statement`."""
        with conn.cursor() as cur:
            cur.execute(self.identity_statement)
            row = cur.fetchone()
        return int(row[0]), None if self.is_mariadb else str(row[1])

    @property
    def gtid_state_statement(self) -> str:
        """The server's GTID state, every transaction it holds (see the module docstring): MySQL's
        @@gtid_executed; MariaDB's @@gtid_binlog_pos, the last GTID per domain its binlog holds."""
        return "SELECT @@global.gtid_binlog_pos" if self.is_mariadb else "SELECT @@global.gtid_executed"

    @property
    def gtid_state_form(self) -> str:
        """How a message names what `gtid_state_statement` gives."""
        if self.is_mariadb:
            return "a MariaDB GTID position (@@gtid_binlog_pos)"
        return "a GTID set (@@gtid_executed)"

    def gtid_state(self, conn: Any) -> str:
        """The server's GTID state as text, its whitespace taken out (MySQL breaks a long set over lines)."""
        with conn.cursor() as cur:
            cur.execute(self.gtid_state_statement)
            (value,) = cur.fetchone()
        return " ".join(str(value or "").split()).replace(" ", "")

    def parse_gtids(self, text: str) -> dict[str, Any] | None:
        """A GTID state in this server's form, parsed (`binlake.source.gtids`): MariaDB's as {domain:
        sequence number}, MySQL's as {"uuid" or "uuid:tag": intervals}; None when `text` is not one."""
        return parse_mariadb(text) if self.is_mariadb else parse_mysql(text)

    @property
    def gtid_event_pattern(self) -> re.Pattern[str]:
        """The GTID in a GTID event's Info as SHOW BINLOG EVENTS prints it (group 1): MySQL's
        `SET @@SESSION.GTID_NEXT= 'uuid:n'` (tagged or not), MariaDB's `BEGIN GTID 0-1-42`."""
        return _DOMAIN_GTID if self.is_mariadb else GTID_NEXT

    def event_gtid(self, kind: str, info: str) -> str | None:
        """The GTID a transaction's GTID event names, from its SHOW BINLOG EVENTS row (Event_type, Info);
        None for any other event. MySQL's GTID event types all begin with `Gtid` (a tagged GTID's too),
        while `Anonymous_Gtid` and `Previous_gtids` do not; MariaDB's is `Gtid` alone: its `Gtid_list`
        (a file's starting state) names GTIDs too, of transactions in earlier files."""
        if not (kind == "Gtid" if self.is_mariadb else kind.startswith("Gtid")):
            return None
        found = self.gtid_event_pattern.search(info)
        return found.group(1) if found else None

    def gtids_between(self, conn: Any, file: str, begin: int, end: int) -> tuple[str, bool]:
        """The GTIDs of binlog `file`'s transactions from `begin` up to `end`, in the server's text form (a
        MySQL GTID set, MariaDB's last GTID per domain), and whether every one of them had a GTID (MySQL
        with gtid_mode OFF logs `Anonymous_Gtid` instead)."""
        seen = Seen()
        if begin >= end:
            return seen.text(), seen.complete
        for row in binlog_events(conn, file, begin):
            if int(row[1]) >= end:
                break
            kind = str(row[2])
            if kind == "Anonymous_Gtid":
                seen.add(None)
                continue
            gtid = self.event_gtid(kind, str(row[5]))
            if gtid:
                seen.add(gtid)
        return seen.text(), seen.complete

    def gtid_state_at(self, conn: Any, position: BinlogPosition) -> tuple[str, bool]:
        """The GTID state at `position`, in the server's text form, and whether every transaction before it
        had a GTID. MariaDB tells it (BINLOG_GTID_POS); on MySQL it is the file's Previous_gtids and the
        GTIDs of the file's transactions before the position."""
        if self.is_mariadb:
            with conn.cursor() as cur:
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
                (text,) = cur.fetchone()
            return str(text or ""), True
        seen, complete = self.gtids_between(conn, position.file, 4, position.pos)
        return advance(format_mysql(previous_gtids(conn, position.file)), seen), complete

    def resume_after(self, conn: Any, state: str) -> BinlogPosition | None:
        """Where a stream that has read every transaction of the GTID state `state` reads on, on the server
        behind `conn`, which holds them all (binlake.capture.failover); None when its binlog cannot
        serve the rest (`resume_refusal` says why).

        - MySQL: from the newest binlog file whose `Previous_gtids` the state covers, skipping the
          state's transactions there, as a replica with auto-positioning does.
        - MariaDB: from the first transaction after the state's in one of its domains; the server's
          binlog must hold the state's own last GTIDs (domain, server id and number), not merely count
          higher."""
        if self.is_mariadb:
            return self._resume_in_domains(conn, state)
        found = covered_file(conn, binlog_files(conn), parse_mysql(state) or {})
        return None if found is None else BinlogPosition(found, 4)

    def resume_refusal(self, state: str) -> str:
        """Why `resume_after` found no place to read on after `state`, to follow the server's name."""
        if self.is_mariadb:
            return (f"whose binlog does not hold the last transactions binlake read ({state}) under the same "
                    "GTIDs: not a server of the same replication topology, or those binlogs are purged")
        return "which has purged binlogs holding transactions binlake has not read yet"

    def _resume_in_domains(self, conn: Any, state: str) -> BinlogPosition | None:
        """MariaDB: the first transaction after `state` in one of its domains, scanning from the newest
        binlog file whose starting state is not past it; None when the binlog does not hold the state's
        own GTIDs."""
        ours = last_per_domain(state)
        files = binlog_files(conn)
        first = None
        listed: dict[str, str] = {}
        for i in range(len(files) - 1, -1, -1):
            listed = last_per_domain(file_state(conn, files[i]))
            if all(_seq(listed[d]) <= _seq(g) for d, g in ours.items() if d in listed):
                first = i
                break
        if first is None:
            return None
        found = {d for d, g in ours.items() if listed.get(d) == g}
        start: BinlogPosition | None = None
        for file in files[first:]:
            for row in binlog_events(conn, file):
                gtid = self.event_gtid(str(row[2]), str(row[5])) or ""
                domain = gtid.split("-", 1)[0]
                if domain not in ours:
                    continue
                if gtid == ours[domain]:
                    found.add(domain)
                elif start is None and _seq(gtid) > _seq(ours[domain]):
                    start = BinlogPosition(file, int(row[1]))
                if start is not None and found == set(ours):
                    return start
        if found != set(ours):
            return None
        return start if start is not None else binlog_head(conn)


def server_name(server: str) -> str:
    """How a message names a kind of server ('mariadb' or 'mysql', as `Dialect.server` holds it)."""
    return "MariaDB" if server == "mariadb" else "MySQL"


def _seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


def binlog_head(conn: Any) -> BinlogPosition:
    """The binlog's written end, in the connection's own dialect."""
    return Dialect.of(conn).head(conn)


def transactions_between(conn: Any, a: BinlogPosition, b: BinlogPosition) -> bool:
    """Whether any event of a transaction starts at or after `a` and before `b` (SHOW BINLOG EVENTS)."""
    files = binlog_files(conn)
    if a.file not in files or b.file not in files:
        return True  # purged or not there yet: not known to be empty
    for file in files[files.index(a.file):files.index(b.file) + 1]:
        start = a.pos if file == a.file else 4
        for row in binlog_events(conn, file, start):
            if file == b.file and int(row[1]) >= b.pos:
                break
            if str(row[2]) not in _NOT_TRANSACTIONS:
                return True
    return False


def registered_replicas(conn: Any) -> list[tuple[int, str]] | None:
    return Dialect.of(conn).replicas(conn)


def binlog_files(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [r[0] for r in cur.fetchall()]


def binlog_sizes(conn: Any) -> dict[str, int]:
    """Each binlog file the server holds, with its size in bytes."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return {str(r[0]): int(r[1]) for r in cur.fetchall()}


def binlog_bytes(conn: Any, a: BinlogPosition, b: BinlogPosition) -> int | None:
    """The bytes of binlog from `a` to `b` on the server behind `conn`, over the files between them;
    None when one of those files is not there (purged, or another server's)."""
    sizes = binlog_sizes(conn)
    spanned = [f for f in sizes if file_index(a.file) <= file_index(f) <= file_index(b.file)]
    if a.file not in sizes or b.file not in sizes:
        return None
    return sum(sizes[f] for f in spanned) - a.pos - (sizes[b.file] - b.pos)


def purged(conn: Any, position: BinlogPosition) -> str | None:
    """The oldest binlog file still on the server, if `position`'s file is no longer there."""
    files = binlog_files(conn)
    if not files or position.file in files:
        return None
    return files[0]
