"""Signals to the running stream, in Debezium's shape: a kind and its data.

    {"id": "d2c1", "type": "execute-snapshot",
     "data": {"data-collections": ["shop\\.orders", "shop.items"],
              "additional-conditions": [{"data-collection": "shop.orders", "filter": "region = 'eu'"}]}}

- `execute-snapshot`: snapshot the tables named (a name, or a pattern as in source.tables) beside the
  stream (binlake.capture.side_snapshot); a condition limits a table's rows;
- `pause-snapshot`, `resume-snapshot`, `stop-snapshot`: of the tables named, or of every one when none is.

A signal reaches the stream as a row inserted into the signal table (`source.signal-table`,
binlake.source.signal_table), which the stream reads in the binlog with the data, or as a file beside
the lake (`_binlake/signals/`), which `binlake signal` writes where there is no signal table or the
account may not write to it. A row read by a micro-batch becomes such a file before the batch commits;
the stream takes the files between two micro-batches, in the order they were written, removing each
once it has taken effect (a crash before that takes it again: each kind may be taken twice). A signal
that cannot be carried out is refused in one line, in the log and in `binlake status`; the stream goes on.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from binlake.errors import ConfigError
from binlake.lake.storage import Location

KINDS = ("execute-snapshot", "pause-snapshot", "resume-snapshot", "stop-snapshot")


class SignalRefused(ConfigError):
    """A signal that cannot be carried out: `message` is the one line that says why and what to do."""


@dataclass(frozen=True)
class Signal:
    id: str
    kind: str
    tables: tuple[str, ...] = ()  # names or source.tables patterns; none: every table (not for execute)
    conditions: tuple[tuple[str, str], ...] = ()  # (table, SQL condition on its rows)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"data-collections": list(self.tables)}
        if self.conditions:
            data["additional-conditions"] = [{"data-collection": t, "filter": c} for t, c in self.conditions]
        return {"id": self.id, "type": self.kind, "data": data}

    @classmethod
    def parse(cls, text: str, name: str = "signal") -> Signal:
        """The signal in `text` (JSON), or SignalRefused saying what is wrong with it."""
        try:
            found = json.loads(text)
        except ValueError as exc:
            raise SignalRefused(f"{name} is not JSON ({exc}); a signal is "
                                '{"type": "execute-snapshot", "data": {"data-collections": ["db.table"]}}') from None
        if not isinstance(found, dict):
            raise SignalRefused(f"{name} is {type(found).__name__}, not a JSON object; a signal is "
                                '{"type": KIND, "data": {...}}')
        ident = str(found.get("id") or name)
        kind = found.get("type")
        if kind not in KINDS:
            raise SignalRefused(f"signal {ident} has type {kind!r}; binlake takes {', '.join(KINDS)}")
        data = found.get("data") or {}
        if isinstance(data, str):
            data = _json_object(data, ident)
        tables = data.get("data-collections") or []
        if not isinstance(tables, list) or not all(isinstance(t, str) and t for t in tables):
            raise SignalRefused(f"signal {ident} has data-collections {tables!r}; binlake needs a list of table "
                                "names or patterns such as [\"shop.orders\"]")
        if kind == "execute-snapshot" and not tables:
            raise SignalRefused(f"signal {ident} (execute-snapshot) names no table; set data-collections to the "
                                "tables to snapshot, such as [\"shop.orders\"]")
        conditions = []
        for c in data.get("additional-conditions") or []:
            table, condition = (c.get("data-collection"), c.get("filter")) if isinstance(c, dict) else (None, None)
            if not isinstance(table, str) or not isinstance(condition, str) or not condition.strip():
                raise SignalRefused(f"signal {ident} has additional condition {c!r}; binlake needs "
                                    '{"data-collection": "db.table", "filter": "SQL condition"}')
            conditions.append((table, condition.strip()))
        for t in tables:
            try:
                re.compile(t)
            except re.error as exc:
                raise SignalRefused(f"signal {ident} names {t!r}, which is not a pattern ({exc}); name a table "
                                    "as db.table, or a pattern as in source.tables") from None
        return cls(ident, kind, tuple(tables), tuple(conditions))

    def matches(self, table: str) -> bool:
        """Whether the signal names `table` (as a name, or by a pattern matching it whole); a signal
        naming none names every table."""
        return not self.tables or any(t == table or re.fullmatch(t, table) for t in self.tables)

    def condition(self, table: str) -> str | None:
        return next((c for t, c in self.conditions if t == table or re.fullmatch(t, table)), None)


def _json_object(text: str, ident: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise SignalRefused(f"signal {ident} has data that is not JSON ({exc})") from None
    if not isinstance(found, dict):
        raise SignalRefused(f"signal {ident} has data {found!r}; binlake needs a JSON object")
    return found


def make(kind: str, tables: list[str], condition: str | None = None) -> Signal:
    """A new signal, refused here (SignalRefused) as the stream would refuse it."""
    if condition is not None and kind != "execute-snapshot":
        raise SignalRefused(f"a condition limits the rows of an execute-snapshot, not of a {kind}: leave it out")
    conditions = tuple((t, condition) for t in tables) if condition else ()
    signal = Signal(uuid.uuid4().hex[:12], kind, tuple(tables), conditions)
    return Signal.parse(json.dumps(signal.to_dict()))


def write(folder: Location, signal: Signal) -> None:
    """`signal` as a file for the stream to take."""
    (folder / f"{time.time_ns():020d}-{signal.id}.json").write_text(json.dumps(signal.to_dict()))


def note(folder: Location, found: dict[str, Any], seq: int) -> None:
    """A row of the signal table, read at `seq` by a micro-batch, as a file for the stream to take once
    the batch has committed (a batch replayed writes the same file again)."""
    (folder / f"{seq:040d}-table.json").write_text(json.dumps(found))


def waiting(folder: Location) -> list[tuple[Location, Signal | SignalRefused]]:
    """The signals written and not taken yet, oldest first, each read or refused."""
    found: list[tuple[Location, Signal | SignalRefused]] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".json"):
            continue
        try:
            found.append((entry, Signal.parse(entry.read_text(), entry.name)))
        except SignalRefused as refused:
            found.append((entry, refused))
        except OSError:
            continue  # being written: taken at the next look
    return found
