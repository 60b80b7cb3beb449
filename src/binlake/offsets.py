"""Binlog positions and the sequence number that orders every change of a key.

`_seq` is one DECIMAL(38,0) built from (binlog file index, event start position, row slot):

    seq = file_index * 10**20 + position * 10**8 + slot

A binlog row event's rows take slots 2*row + 1 (and 2*row + 2 for the insert half of an update that
changes the primary key); a snapshot row read at high watermark HW takes slot 0 at HW's position.
So a snapshot row ranks after every event that starts before HW and before every event that starts
at or after HW, which is exactly the state it captured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

FILE_FACTOR = 10**20
POS_FACTOR = 10**8
MAX_ROWS_PER_EVENT = POS_FACTOR // 2 - 1

_SUFFIX = re.compile(r"\.(\d+)$")


def file_index(name: str) -> int:
    """The numeric suffix of a binlog file name.

    Compared as a number, not as text, because the suffix grows past six digits:
    `mysql-bin.999999` comes before `mysql-bin.1000000`, though not in string order.
    """
    m = _SUFFIX.search(name)
    if not m:
        raise ValueError(f"binlog file name {name!r} has no numeric suffix")
    return int(m.group(1))


@total_ordering
@dataclass(frozen=True)
class BinlogPosition:
    """A point in the binlog: the start of the next event at `pos` in `file`."""

    file: str
    pos: int

    def __post_init__(self) -> None:
        file_index(self.file)
        if self.pos < 0:
            raise ValueError(f"binlog position {self.pos} is negative")

    @property
    def key(self) -> tuple[int, int]:
        return (file_index(self.file), self.pos)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, BinlogPosition):
            return NotImplemented
        return self.key < other.key

    def seq(self, slot: int = 0) -> int:
        return event_seq(self.file, self.pos, slot)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinlogPosition:
        return cls(str(d["file"]), int(d["pos"]))

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    @classmethod
    def parse(cls, text: str) -> BinlogPosition:
        """The position `str` printed: `file:pos`."""
        file, _, pos = text.rpartition(":")
        return cls(file, int(pos))


def event_seq(file: str, pos: int, slot: int) -> int:
    if not 0 <= slot < POS_FACTOR:
        raise ValueError(f"row slot {slot} does not fit the sequence")
    return file_index(file) * FILE_FACTOR + pos * POS_FACTOR + slot


def row_slot(row_index: int, second_half: bool = False) -> int:
    """Slot of the `row_index`-th row of an event (0-based); slot 0 belongs to snapshot rows."""
    if row_index > MAX_ROWS_PER_EVENT:
        raise ValueError(f"row event with more than {MAX_ROWS_PER_EVENT} rows")
    return 2 * row_index + (2 if second_half else 1)


def snapshot_seq(hw: BinlogPosition) -> int:
    return hw.seq(0)


def position_of_seq(seq: int) -> BinlogPosition:
    """Inverse for logging: the position part of a sequence (the file name is rebuilt generically)."""
    idx, rest = divmod(seq, FILE_FACTOR)
    return BinlogPosition(f"binlog.{idx:06d}", rest // POS_FACTOR)
