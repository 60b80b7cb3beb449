"""The idle stream's heartbeat: where a stream with no captured change to land stands, recorded at a
steady interval (`stream.heartbeat-seconds`), so that `binlake status` tells a stream that is caught up
and idle from one that is stuck, and says since when.

Flink CDC (`heartbeat.interval`) and Debezium (`heartbeat.interval.ms`) send heartbeats for the other
half of the same problem: an offset that stays behind while the server's binlog moves on in tables
nobody captures, until a restart asks for a purged file. binlake's stream already commits a batch
whenever the binlog moves, captured rows or not (an empty batch moves the checkpoint), so the restart
position never lags the head by more than a batch; what was missing is the record that says so while
nothing is landed. It is a record beside the checkpoint (`binlake.lake.checkpoint.write_heartbeat`),
never a Delta commit, so a thousand idle tables cost one small file write per interval.

The first look of a run that finds the stream caught up is recorded at once (a run's start is when
someone is waiting to see it: `make demo` waits for it), then at most one record per interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from binlake.capture import metrics
from binlake.lake.checkpoint import write_heartbeat
from binlake.lake.storage import Location
from binlake.offsets import BinlogPosition


class Heartbeat:
    """Records of where the stream stands, to `path`, at most one every `every` seconds (0: none)."""

    def __init__(self, path: Location, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.every, self.clock = path, every, clock
        self.last: float | None = None  # when the last record was written (clock)
        self.caught_up_shown = False  # this run has recorded a caught-up look

    def beat(self, position: dict[str, Any], caught_up: bool) -> bool:
        """The stream stands at `position`; its last look at the source found nothing past it when
        `caught_up`. Whether a record was written."""
        if self.every <= 0:
            return False
        now = self.clock()
        first = caught_up and not self.caught_up_shown
        if not first and self.last is not None and now - self.last < self.every:
            return False
        if not first and self.last is None and not caught_up:
            self.last = now  # a busy start: the interval counts from here, batches record their own progress
            return False
        write_heartbeat(self.path, position, caught_up)
        metrics.heartbeat(time.time(), caught_up)
        self.last = now
        self.caught_up_shown = self.caught_up_shown or caught_up
        return True


def report(progress: dict[str, Any]) -> dict[str, Any]:
    """What the progress file `progress` says of the stream's last heartbeat, for `binlake status`:
    `caught_up` when it found nothing past its position and no batch landed since, `heartbeat_at`
    (Unix seconds) and `heartbeat_position`; None each when there is none."""
    beat = progress.get("heartbeat")
    if not beat:
        return {"caught_up": None, "heartbeat_at": None, "heartbeat_position": None}
    landed_since = float(progress.get("updated") or 0) > float(beat["at"])
    return {"caught_up": bool(beat["caught_up"]) and not landed_since, "heartbeat_at": beat["at"],
            "heartbeat_position": str(BinlogPosition.from_dict(beat["position"]))}


def line(stream: dict[str, Any], now: float | None = None) -> str | None:
    """The status line of an idle stream's heartbeat (`report`'s keys), or None when it has none newer
    than the last batch: `caught up at <position>, <n> s ago`."""
    if stream.get("heartbeat_at") is None or (stream.get("last_batch_at") or 0) > stream["heartbeat_at"]:
        return None
    ago = max(0, round((time.time() if now is None else now) - stream["heartbeat_at"]))
    state = "caught up" if stream.get("caught_up") else "reading"
    return f"stream: {state} at {stream['heartbeat_position']}, {ago} s ago"
