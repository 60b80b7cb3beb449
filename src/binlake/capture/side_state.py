"""Where each table's snapshot beside the stream stands (binlake.capture.side_snapshot): a small JSON
file per table under `_binlake/snapshots/`, and the last signals refused beside them. Read by the
stream and by `binlake status`, which must not pay for the stream's imports."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from binlake.lake.storage import Location
from binlake.offsets import BinlogPosition, snapshot_seq
from binlake.splits import Bound

RUNNING, PAUSED, DONE, STOPPED = "running", "paused", "done", "stopped"
REFUSALS_KEPT = 20


@dataclass(frozen=True)
class SideSnapshot:
    """Where one table's snapshot beside the stream stands."""

    table: str
    reason: str  # what began it: "signal <id>", "new to the capture", "created while streaming"
    status: str  # running, paused, done, stopped
    head: str  # the binlog head when it began (`file:pos`): changes from it on are the stream's to land
    chunk: int  # the index (bronze's `_chunk`) of the next chunk read
    first: int = 0  # the index of its first chunk: bronze's snapshot rows from it on are this snapshot's
    start: Bound | None = None  # where the next chunk starts (None: the table's first)
    chunks: int = 0  # chunks landed
    rows: int = 0  # snapshot rows landed
    condition: str | None = None  # SQL limiting the rows read (then no row of silver is deleted at the end)
    # a table new to the capture, silver holding nothing of it: the stream passes its changes before
    # `head`, as the handover passes a chunk's before its high watermark
    fresh: bool = False
    estimate: int | None = None  # the table's rows when it began, by the server's estimate (for chunks left)
    began_at: float = 0.0
    updated_at: float = 0.0

    @property
    def since(self) -> int:
        """The `_seq` of `head`: every change the stream lands for the table from the start on is newer."""
        return snapshot_seq(BinlogPosition.parse(self.head))

    def chunks_left(self) -> int | None:
        """About how many chunks are still to land: the rows the server estimated when the snapshot began,
        less those landed, at the rows a landed chunk held on average; at least one until the last has
        landed. None where that is not known: before the first chunk lands, or for a condition's rows.
        The chunks are cut as the snapshot goes (`next_range`), so no count is exact before the end."""
        if self.status == DONE:
            return 0
        if self.estimate is None or self.condition is not None or not self.chunks:
            return None
        per_chunk = max(1, self.rows // self.chunks)
        return max(1, math.ceil((self.estimate - self.rows) / per_chunk))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["start"] = None if self.start is None else list(self.start)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SideSnapshot:
        return cls(**{**d, "start": None if d.get("start") is None else tuple(d["start"])})

    @classmethod
    def load(cls, location: Location) -> SideSnapshot | None:
        """The state written at `location`, or None (none there, or one being replaced)."""
        try:
            return cls.from_dict(json.loads(location.read_text())) if location.exists() else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, location: Location) -> SideSnapshot:
        saved = replace(self, updated_at=time.time())
        location.write_text(json.dumps(saved.to_dict()))
        return saved


def states(folder: Location) -> dict[str, SideSnapshot]:
    """Every table's snapshot beside the stream, by table: running, paused, or how the last one ended."""
    found = [SideSnapshot.load(entry) for entry in folder.iterdir() if entry.name.endswith(".json")]
    return {state.table: state for state in found if state is not None}


def refusals(folder: Location) -> list[dict[str, Any]]:
    """The last signals refused, oldest first: {at, message}."""
    kept = folder / "refused.jsonl"
    if not kept.exists():
        return []
    return [json.loads(line) for line in kept.read_text().splitlines() if line.strip()]


def report(folder: Location) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """For `binlake status`: each table's snapshot beside the stream, and the last signals refused."""
    shown = {name: {**state.to_dict(), "chunks_left": state.chunks_left()}
             for name, state in states(folder).items()}
    return shown, refusals(folder)


def summary(state: dict[str, Any]) -> str:
    """One line of `binlake status` for a table's snapshot beside the stream."""
    began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(state["began_at"]))
    left = state.get("chunks_left")
    about = f", about {left} left" if left and state["status"] != DONE else ""
    return (f"  snapshot beside the stream: {state['status']}, {state['chunks']} chunks{about}, "
            f"{state['rows']} rows ({state['reason']}, began {began})")
