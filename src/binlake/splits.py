"""Snapshot splits: half-open key ranges of one table, and their read state.

A split covers `[start, end)` of the table's chunk key; `start is None` means -infinity (the first
chunk), `end is None` means +infinity (the last). Bounds are stored as the encoded text of each key
column (see `schema.Column.encode`) so they survive JSON and Delta unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from binlake.offsets import BinlogPosition

Bound = tuple[str, ...]
Status = Literal["planned", "landed", "done"]
# planned: bounds known; landed: rows and high watermark in bronze; done: also applied to silver
STATUS_RANK: dict[str, int] = {"planned": 0, "landed": 1, "done": 2}


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
    lw: BinlogPosition | None = None  # where its read began (None: planned, or landed before binlake kept it)

    def __post_init__(self) -> None:
        if self.start is not None and self.start == self.end:
            raise ValueError(f"split {self.id} is empty: start equals end {self.start}")
        if self.index < 0:
            raise ValueError(f"split index {self.index} is negative")
        if self.status != "planned" and self.hw is None:
            raise ValueError(f"split {self.id} is {self.status} but has no high watermark")

    @property
    def id(self) -> str:
        return f"{self.table}#{self.index}"

    @property
    def group(self) -> int:
        return group_id(self.table_no, self.index, self.group_size)

    @property
    def is_last(self) -> bool:
        return self.end is None

    @property
    def landed(self) -> bool:
        """Its rows and high watermark are in bronze (it may be applied to silver too)."""
        return self.status != "planned"

    def landed_at(self, hw: BinlogPosition, rows: int, lw: BinlogPosition | None = None) -> Split:
        return replace(self, status="landed", hw=hw, rows=rows, lw=lw)

    def applied(self) -> Split:
        return replace(self, status="done")

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
            "lw_file": self.lw.file if self.lw else None,
            "lw_pos": self.lw.pos if self.lw else None,
            "epoch": self.hw.epoch if self.hw else None,  # the low watermark's too: one read, one server
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], group_size: int = 8) -> Split:
        epoch = int(d.get("epoch") or 0)
        hw = BinlogPosition(d["hw_file"], int(d["hw_pos"]), epoch) if d.get("hw_file") else None
        lw = BinlogPosition(d["lw_file"], int(d["lw_pos"]), epoch) if d.get("lw_file") else None
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
            lw=lw,
        )


def newest(rows: Iterable[dict[str, Any]], group_size: int) -> dict[str, list[Split]]:
    """Splits by table in chunk order from split-state rows, which are appended, never updated:
    of a chunk's rows the one furthest along (planned < landed < done) is its state, and of two
    planned rows the one with a bound end (the open last split once cut again, see
    `pipeline.read_tail`)."""
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        k = (r["table"], int(r["chunk"]))
        if k not in best:
            best[k] = r
            continue
        rank, held = STATUS_RANK[r["status"] or "planned"], STATUS_RANK[best[k]["status"] or "planned"]
        # the open last split, cut again while the snapshot ran, has a second planned row with a
        # bound end: an end only ever narrows from +inf to a bound, never back
        if rank > held or (rank == held and best[k]["end"] is None and r["end"] is not None):
            best[k] = r
    out: dict[str, list[Split]] = {}
    for k in sorted(best):
        out.setdefault(k[0], []).append(Split.from_dict(best[k], group_size))
    return out


GROUP_FACTOR = 1_000_000


def group_id(table_no: int, index: int, group_size: int) -> int:
    """Chunks are read and committed in groups: small ints a Databricks task value can carry."""
    return table_no * GROUP_FACTOR + index // group_size


def table_no_of_group(group: int) -> int:
    return group // GROUP_FACTOR
