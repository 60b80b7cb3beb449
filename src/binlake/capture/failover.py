"""Failing over to another server of the same replication topology, by GTID.

A promoted replica holds the transactions binlake read under other binlog file names and positions,
so a stored `file:pos` means nothing there. What does carry over is the GTID of each transaction.
binlake keeps, in `_binlake/gtids.json`, the GTID state at the last few positions the stream reached:
every transaction it has read past, in the server's own text form (MySQL's GTID set, MariaDB's last
GTID per domain). The stream's reader collects the GTIDs each micro-batch passes
(`binlake.source.gtids.Seen`), and the driver adds them to the state before the batch commits; at the
stream's first start the state is read from the server (`state_at`).

When `source.hostname` leads to another server (its identity differs, `binlake.source.identity`):

- it must be the same kind of server and hold every transaction of the state at the stored position.
  Holding fewer of the same sources (MySQL source UUIDs, MariaDB domains), it is a replica behind:
  binlake waits for it, up to `source.reconnect-timeout`, then refuses. Holding none of a source, it
  is not of the topology: refused.
- MySQL: the stream reads on from the newest binlog file whose `Previous_gtids` the state covers,
  skipping the state's transactions there, as a replica with auto-positioning does.
- MariaDB: from the first transaction after the state's in one of its domains; the server's binlog
  must hold the state's own last GTIDs (domain, server id and number), not merely count higher.

The new server's positions take the next epoch (`binlake.offsets`), so every change read there ranks
after every change read before. Nothing is skipped that binlake has not had, and nothing it had is
read again.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from binlake.errors import SourceChangedError
from binlake.offsets import BinlogPosition
from binlake.source.dialect import Dialect, binlog_files, binlog_head
from binlake.source.gtids import (GTID_NEXT, Seen, advance, binlog_events, covered_file, file_state, format_mysql,
                                  lacking, last_per_domain, parse_mysql, previous_gtids, server_state)
from binlake.source.identity import Anchor, Lineage, ServerIdentity, changed_message

log = logging.getLogger(__name__)

KEEP = 4  # states kept: the committed position's, and those of batches read but not yet committed
_MARIADB_GTID = re.compile(r"\b(\d+-\d+-\d+)\b")


class GtidRecord:
    """`_binlake/gtids.json`: {"states": [{"end": position, "gtids": text, "complete": bool}, ...]}."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def states(self) -> list[dict[str, Any]]:
        return list(json.loads(self.path.read_text())["states"]) if self.path.exists() else []

    def at(self, position: BinlogPosition) -> dict[str, Any] | None:
        return next((s for s in self.states() if BinlogPosition.from_dict(s["end"]) == position), None)

    def newest(self, since: BinlogPosition) -> dict[str, Any] | None:
        """The state at the furthest position at or after `since` on the same server (epoch). A state is
        put once its batch has landed in bronze and silver: the batch after a commit the crash cut off
        counts as read too."""
        found = [s for s in self.states() if BinlogPosition.from_dict(s["end"]) >= since
                 and BinlogPosition.from_dict(s["end"]).epoch == since.epoch]
        return max(found, key=lambda s: BinlogPosition.from_dict(s["end"]), default=None)

    def put(self, position: BinlogPosition, gtids: str, complete: bool) -> None:
        kept = [s for s in self.states() if BinlogPosition.from_dict(s["end"]) != position][-(KEEP - 1):]
        kept.append({"end": position.to_dict(), "gtids": gtids, "complete": complete})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"states": kept}))
        tmp.replace(self.path)

    def advance(self, batch: dict[str, Any]) -> None:
        """Add a micro-batch's GTIDs (the reader's record: start, end, gtids, complete) to the state at
        its start. A replayed batch finds its end already there; a batch whose start has no state
        leaves its end without one too (the next start reads it from the server)."""
        start, end = BinlogPosition.from_dict(batch["start"]), BinlogPosition.from_dict(batch["end"])
        if self.at(end) is not None:
            return
        base = self.at(start)
        if base is not None:
            self.put(end, advance(base["gtids"], batch["gtids"]), bool(base["complete"] and batch["complete"]))


def state_at(conn: Any, dialect: Dialect, position: BinlogPosition,
             base: dict[str, Any] | None = None) -> tuple[str, bool]:
    """The GTID state at `position` on the server behind `conn`, and whether every transaction before
    it had a GTID. MariaDB tells it (BINLOG_GTID_POS); on MySQL it is the file's Previous_gtids and the
    GTIDs of the file's transactions before the position. With `base`, the state at an earlier position
    of the same file (an offset carrying `gtids` and `complete`), only the events between are read."""
    if base is not None and "gtids" in base and base["file"] == position.file and int(base["pos"]) <= position.pos:
        seen, complete = _passed(conn, dialect.is_mariadb, position.file, int(base["pos"]), position.pos)
        return advance(str(base["gtids"]), seen), bool(base["complete"]) and complete
    if dialect.is_mariadb:
        with conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
            (text,) = cur.fetchone()
        return str(text or ""), True
    seen, complete = _passed(conn, False, position.file, 4, position.pos)
    return advance(format_mysql(previous_gtids(conn, position.file)), seen), complete


def _passed(conn: Any, mariadb: bool, file: str, begin: int, end: int) -> tuple[str, bool]:
    """The GTIDs of binlog `file`'s transactions from `begin` up to `end`, in the server's text form (a
    MySQL GTID set, MariaDB's last GTID per domain), and whether every one of them had a GTID."""
    seen = Seen()
    if begin >= end:
        return seen.text(), seen.complete
    for row in binlog_events(conn, file, begin):
        if int(row[1]) >= end:
            break
        kind = str(row[2])
        if kind == "Anonymous_Gtid":
            seen.add(None)
        elif kind == "Gtid" if mariadb else kind.startswith("Gtid"):
            found = (_MARIADB_GTID if mariadb else GTID_NEXT).search(str(row[5]))
            if found:
                seen.add(found.group(1))
    return seen.text(), seen.complete


def follow(conn: Any, lineage: Lineage, anchor: Anchor, now: ServerIdentity, state: dict[str, Any] | None,
           patience: float) -> Lineage:
    """The record after following the stream to `now`, another server, by `state` (the GTID state at
    the stored position: {"end": position, "gtids": text, "complete": bool}); SourceChangedError when
    it is not one of the same replication topology."""
    if now.server != lineage.identity.server:
        why = f"binlake read {lineage.identity} before: another kind of server is not a failover"
    elif state is None:
        why = "binlake keeps no GTID state at the stored position to fail over with"
    elif not state["complete"]:
        why = "transactions without a GTID came before the stored position (gtid_mode OFF)"
    else:
        why = ""
    if why:
        raise SourceChangedError(changed_message(anchor, f"the server is now {now}, and {why}"))
    assert state is not None
    start = start_on(conn, Dialect.of(conn), anchor, state["gtids"], patience)
    log.warning("source.hostname now leads to %s, which holds every transaction binlake read from %s: failing "
                "over, reading on from %s (after GTIDs %s)", now, lineage.identity, start, state["gtids"])
    return lineage.failed_over(now, start, state["gtids"], BinlogPosition.from_dict(state["end"]))


def await_state(conn: Any, anchor: Anchor, state: str, mariadb: bool, patience: float) -> None:
    """Return once the server behind `conn` holds every transaction of `state`: a replica behind is
    waited for, up to `patience` seconds; SourceChangedError when it does not catch up, or holds none of
    a source of `state` (not a server of the same replication topology)."""
    deadline = time.monotonic() + patience
    told = False
    while True:
        short, behind = lacking(state, server_state(conn, mariadb))
        if not short:
            break
        if not behind:
            raise SourceChangedError(changed_message(
                anchor, f"the server is now {_name(conn)}, which lacks transactions binlake has already read "
                f"({short}) and holds none of their source: not a server of the same replication topology"))
        if time.monotonic() >= deadline:
            raise SourceChangedError(changed_message(
                anchor, f"the server is now {_name(conn)}, a replica still behind after {patience:g}s "
                f"(source.reconnect-timeout): it lacks transactions binlake has already read ({short}); let it "
                "catch up and run again"))
        if not told:
            log.warning("source.hostname now leads to %s, which lacks transactions binlake has already read (%s): "
                        "waiting for it to catch up (up to %gs, source.reconnect-timeout)", _name(conn), short, patience)
            told = True
        time.sleep(1)


def start_on(conn: Any, dialect: Dialect, anchor: Anchor, state: str, patience: float) -> BinlogPosition:
    """Where the stream reads on, on the server behind `conn`, after the transactions of `state`
    (see the module docstring); SourceChangedError when the server cannot serve them."""
    await_state(conn, anchor, state, dialect.is_mariadb, patience)
    if dialect.is_mariadb:
        found = _mariadb_start(conn, state)
        if found is None:
            raise SourceChangedError(changed_message(
                anchor, f"the server is now {_name(conn)}, whose binlog does not hold the last transactions binlake "
                f"read ({state}) under the same GTIDs: not a server of the same replication topology, or those "
                "binlogs are purged"))
        return found
    found_file = covered_file(conn, binlog_files(conn), parse_mysql(state) or {})
    if found_file is not None:
        return BinlogPosition(found_file, 4)
    raise SourceChangedError(changed_message(
        anchor, f"the server is now {_name(conn)}, which has purged binlogs holding transactions binlake has not "
        "read yet"))


def _name(conn: Any) -> str:
    from binlake.source.identity import identify

    return str(identify(conn)[0])


def _seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


def _mariadb_start(conn: Any, state: str) -> BinlogPosition | None:
    """The first transaction after `state` in one of its domains, scanning from the newest binlog file
    whose starting state is not past it; None when the binlog does not hold the state's own GTIDs."""
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
            m = _MARIADB_GTID.search(str(row[5])) if row[2] == "Gtid" else None
            gtid = m.group(1) if m else ""
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
