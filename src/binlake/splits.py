"""Snapshot splits: half-open key ranges of one table, and their read state.

A split covers `[start, end)` of the table's chunk key; `start is None` means -infinity (the first
chunk), `end is None` means +infinity (the last). Bounds are stored as the encoded text of each key
column (see `schema.Column.encode`) so they survive JSON and Delta unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from binlake.offsets import BinlogPosition

Bound = tuple[str, ...]
Status = Literal["planned", "done"]


@dataclass(frozen=True)
class Split:
    table: str  # "db.table"
    table_no: int  # stable small number of the table within this pipeline
    index: int  # 0-based position of the chunk in key order
    start: Bound | None
    end: Bound | None
    group_size: int = 8
    status: Status = "planned"
    hw: BinlogPosition | None = None
    rows: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.start == self.end:
            raise ValueError(f"split {self.id} is empty: start equals end {self.start}")
        if self.index < 0:
            raise ValueError(f"split index {self.index} is negative")
        if self.status == "done" and self.hw is None:
            raise ValueError(f"split {self.id} is done but has no high watermark")

    @property
    def id(self) -> str:
        return f"{self.table}#{self.index}"

    @property
    def group(self) -> int:
        return group_id(self.table_no, self.index, self.group_size)

    @property
    def is_last(self) -> bool:
        return self.end is None

    def finished(self, hw: BinlogPosition, rows: int) -> Split:
        return replace(self, status="done", hw=hw, rows=rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "table_no": self.table_no,
            "chunk": self.index,
            "group_id": self.group,
            "start": None if self.start is None else json.dumps(list(self.start)),
            "end": None if self.end is None else json.dumps(list(self.end)),
            "status": self.status,
            "hw_file": self.hw.file if self.hw else None,
            "hw_pos": self.hw.pos if self.hw else None,
            "rows": self.rows,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], group_size: int = 8) -> Split:
        hw = BinlogPosition(d["hw_file"], int(d["hw_pos"])) if d.get("hw_file") else None
        return cls(
            table=d["table"],
            table_no=int(d["table_no"]),
            index=int(d["chunk"]),
            start=None if d.get("start") is None else tuple(json.loads(d["start"])),
            end=None if d.get("end") is None else tuple(json.loads(d["end"])),
            group_size=group_size,
            status=d.get("status") or "planned",
            hw=hw,
            rows=None if d.get("rows") is None else int(d["rows"]),
        )


GROUP_FACTOR = 1_000_000


def group_id(table_no: int, index: int, group_size: int) -> int:
    """Chunks are read and committed in groups: small ints a Databricks task value can carry."""
    return table_no * GROUP_FACTOR + index // group_size


def table_no_of_group(group: int) -> int:
    return group // GROUP_FACTOR
