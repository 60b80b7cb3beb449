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
- the stream reads on where that server's binlog continues after the state
  (`binlake.source.dialect.Dialect.resume_after` says how each kind of server finds it), skipping the
  state's transactions it meets there.

The new server's positions take the next epoch (`binlake.offsets`), so every change read there ranks
after every change read before. Nothing is skipped that binlake has not had, and nothing it had is
read again.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from binlake.errors import SourceChangedError
from binlake.lake.storage import Location
from binlake.offsets import BinlogPosition
from binlake.source.dialect import Dialect
from binlake.source.gtids import advance, lacking
from binlake.source.identity import Anchor, Lineage, ServerIdentity, changed_message, identify

log = logging.getLogger(__name__)

KEEP = 4  # states kept: the committed position's, and those of batches read but not yet committed


class GtidRecord:
    """`_binlake/gtids.json`: {"states": [{"end": position, "gtids": text, "complete": bool}, ...]}."""

    def __init__(self, path: Location) -> None:
        self.path = path

    def states(self) -> list[dict[str, Any]]:
        return list(json.loads(self.path.read_text())["states"]) if self.path.exists() else []

    def at(self, position: BinlogPosition, states: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The state at `position`, among `states` (the record's, read now, by default)."""
        return next((s for s in (self.states() if states is None else states)
                     if BinlogPosition.from_dict(s["end"]) == position), None)

    def newest(self, since: BinlogPosition) -> dict[str, Any] | None:
        """The state at the furthest position at or after `since` on the same server (epoch). A state is
        put once its batch has landed in bronze and silver: the batch after a commit the crash cut off
        counts as read too."""
        found = [s for s in self.states() if BinlogPosition.from_dict(s["end"]) >= since
                 and BinlogPosition.from_dict(s["end"]).epoch == since.epoch]
        return max(found, key=lambda s: BinlogPosition.from_dict(s["end"]), default=None)

    def put(self, position: BinlogPosition, gtids: str, complete: bool,
            states: list[dict[str, Any]] | None = None) -> None:
        """Record the state at `position`, the record's `states` (read now, by default) kept besides."""
        kept = [s for s in (self.states() if states is None else states)
                if BinlogPosition.from_dict(s["end"]) != position][-(KEEP - 1):]
        kept.append({"end": position.to_dict(), "gtids": gtids, "complete": complete})
        self.path.write_text(json.dumps({"states": kept}))

    def advance(self, batch: dict[str, Any]) -> None:
        """Add a micro-batch's GTIDs (the reader's record: start, end, gtids, complete) to the state at
        its start. A replayed batch finds its end already there; a batch whose start has no state
        leaves its end without one too (the next start reads it from the server). The record is read
        once for the three (a batch a second)."""
        start, end = BinlogPosition.from_dict(batch["start"]), BinlogPosition.from_dict(batch["end"])
        states = self.states()
        if self.at(end, states) is not None:
            return
        base = self.at(start, states)
        if base is not None:
            self.put(end, advance(base["gtids"], batch["gtids"]), bool(base["complete"] and batch["complete"]), states)


def state_at(conn: Any, dialect: Dialect, position: BinlogPosition,
             base: dict[str, Any] | None = None) -> tuple[str, bool]:
    """The GTID state at `position` on the server behind `conn`, and whether every transaction before
    it had a GTID (`Dialect.gtid_state_at`). With `base`, the state at an earlier position of the same
    file (an offset carrying `gtids` and `complete`), only the events between are read."""
    if base is not None and "gtids" in base and base["file"] == position.file and int(base["pos"]) <= position.pos:
        seen, complete = dialect.gtids_between(conn, position.file, int(base["pos"]), position.pos)
        return advance(str(base["gtids"]), seen), bool(base["complete"]) and complete
    return dialect.gtid_state_at(conn, position)


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


def await_state(conn: Any, anchor: Anchor, state: str, dialect: Dialect, patience: float) -> None:
    """Return once the server behind `conn` holds every transaction of `state`: a replica behind is
    waited for, up to `patience` seconds; SourceChangedError when it does not catch up, or holds none of
    a source of `state` (not a server of the same replication topology)."""
    deadline = time.monotonic() + patience
    told = False
    while True:
        short, behind = lacking(state, dialect.gtid_state(conn))
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
    await_state(conn, anchor, state, dialect, patience)
    found = dialect.resume_after(conn, state)
    if found is None:
        raise SourceChangedError(changed_message(
            anchor, f"the server is now {_name(conn)}, {dialect.resume_refusal(state)}"))
    return found


def _name(conn: Any) -> str:
    return str(identify(conn)[0])
