"""Binlog positions and the sequence number that orders every change of a key.

`_seq` is one DECIMAL(38,0) built from (epoch, binlog file index, event start position, row slot):

    seq = epoch * 10**30 + file_index * 10**20 + position * 10**8 + slot

The epoch counts the servers binlake has followed a failover to (binlake.source.identity): 0 for the
server it started on. Another server's binlog has its own file names and positions, so its positions
rank by their epoch first, after every position of the server before.

A binlog row event's rows take slots 2*row + 1 (and 2*row + 2 for the insert half of an update that
changes the primary key); a snapshot row read at high watermark HW takes slot 0 at HW's position.
So a snapshot row ranks after every event that starts before HW and before every event that starts
at or after HW, which is exactly the state it captured.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

EPOCH_FACTOR = 10**30
FILE_FACTOR = 10**20
POS_FACTOR = 10**8
MAX_FILE_INDEX = EPOCH_FACTOR // FILE_FACTOR - 1  # MySQL's and MariaDB's suffixes stop at 2**31 - 1
MAX_ROWS_PER_EVENT = POS_FACTOR // 2 - 1

_SUFFIX = re.compile(r"\.(\d+)$")


@functools.lru_cache(maxsize=256)
def file_index(name: str) -> int:
    """The numeric suffix of a binlog file name.

    Compared as a number, not as text, because the suffix grows past six digits:
    `mysql-bin.999999` comes before `mysql-bin.1000000`, though not in string order. Asked for every
    row change's sequence number, of a few file names: remembered.
    """
    m = _SUFFIX.search(name)
    if not m:
        raise ValueError(f"binlog file name {name!r} has no numeric suffix")
    return int(m.group(1))


@total_ordering
@dataclass(frozen=True)
class BinlogPosition:
    """A point in the binlog: the start of the next event at `pos` in `file`, on the server of `epoch`."""

    file: str
    pos: int
    epoch: int = 0

    def __post_init__(self) -> None:
        file_index(self.file)
        if self.pos < 0:
            raise ValueError(f"binlog position {self.pos} is negative")

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.epoch, file_index(self.file), self.pos)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        return self.key < other.key

    def seq(self, slot: int = 0) -> int:
        return event_seq(self.file, self.pos, slot, self.epoch)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, **({"epoch": self.epoch} if self.epoch else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinlogPosition:
        return cls(str(d["file"]), int(d["pos"]), int(d.get("epoch") or 0))

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}" + (f"@{self.epoch}" if self.epoch else "")

    @classmethod
    def parse(cls, text: str) -> BinlogPosition:
        """The position `str` printed: `file:pos`, and `@epoch` after a failover."""
        text, _, epoch = text.partition("@")
        file, _, pos = text.rpartition(":")
        return cls(file, int(pos), int(epoch or 0))


def event_seq(file: str, pos: int, slot: int, epoch: int = 0) -> int:
    if not 0 <= slot < POS_FACTOR:
        raise ValueError(f"row slot {slot} does not fit the sequence")
    index = file_index(file)
    if index > MAX_FILE_INDEX or pos >= FILE_FACTOR // POS_FACTOR:
        raise ValueError(f"binlog position {file}:{pos} does not fit the sequence")
    return epoch * EPOCH_FACTOR + index * FILE_FACTOR + pos * POS_FACTOR + slot


def row_slot(row_index: int, second_half: bool = False) -> int:
    """Slot of the `row_index`-th row of an event (0-based); slot 0 belongs to snapshot rows."""
    if row_index > MAX_ROWS_PER_EVENT:
        raise ValueError(f"row event with more than {MAX_ROWS_PER_EVENT} rows")
    return 2 * row_index + (2 if second_half else 1)


def snapshot_seq(hw: BinlogPosition) -> int:
    return hw.seq(0)


def position_of_seq(seq: int) -> BinlogPosition:
    """Inverse for logging: the position part of a sequence (the file name is rebuilt generically)."""
    epoch, seq = divmod(seq, EPOCH_FACTOR)
    idx, rest = divmod(seq, FILE_FACTOR)
    return BinlogPosition(f"binlog.{idx:06d}", rest // POS_FACTOR, epoch)
