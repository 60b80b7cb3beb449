"""Which columns of a captured table binlake reads: `source.columns`, an include or an exclude list
per table (Debezium's `column.include.list` / `column.exclude.list`, Lakeflow Connect's column
selection).

    source.columns: {shop.customers: {exclude: [ssn, notes]}, shop.orders: {include: [id, total]}}

A column left out is never read: the chunk SELECT does not name it, the binlog's row decoders step
over its bytes, and it is in neither bronze nor silver. The key (the primary key, or
`source.chunk-key`) is always captured: an include list need not name it, an exclude list that
names a key column is refused, as is a name the table does not have (when the table is first
captured) and a table given both lists.
Names compare as MySQL compares column names, without regard to case. A column added to the table
later is captured under an exclude list and left out under an include list; a schema change that
touches only columns left out changes nothing downstream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from binlake.errors import ConfigError

Mode = Literal["include", "exclude"]
MODES: tuple[Mode, ...] = ("include", "exclude")


@dataclass(frozen=True)
class ColumnChoice:
    """One table's list: `include` keeps only the columns named (and the key), `exclude` all but them."""

    mode: Mode
    names: tuple[str, ...]
    _folded: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"column choice mode {self.mode!r}")
        object.__setattr__(self, "_folded", frozenset(n.lower() for n in self.names))

    def keeps(self, name: str) -> bool:
        """Whether a column of this name is captured, the key aside (which always is)."""
        return (name.lower() in self._folded) == (self.mode == "include")

    def refusal(self, table: str, columns: Iterable[str], key: Iterable[str]) -> str | None:
        """Why this list cannot be applied to `table` with these columns and key, one line; None if it can."""
        have = {c.lower() for c in columns}
        unknown = [n for n in self.names if n.lower() not in have]
        if unknown:
            return (f"source.columns for {table} names column {unknown[0]!r}, which the table does not have; "
                    f"binlake needs columns of {table} ({', '.join(sorted(columns))}): fix the {self.mode} list")
        dropped = [k for k in key if not self.keeps(k)] if self.mode == "exclude" else []
        if dropped:
            return (f"source.columns for {table} leaves out key column {dropped[0]!r}; binlake always captures "
                    f"the primary key and the chunk key: take {dropped[0]} out of the exclude list")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {self.mode: list(self.names)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ColumnChoice:
        mode = next(m for m in MODES if m in d)
        return cls(mode, tuple(d[mode]))


def choices(value: dict[str, dict[str, list[str]]]) -> dict[str, ColumnChoice]:
    """`source.columns` as each table's choice; ConfigError in one line for a table given both lists."""
    out: dict[str, ColumnChoice] = {}
    for table, lists in value.items():
        given = [m for m in MODES if m in lists]
        if len(given) != 1:
            raise ConfigError(
                f"source.columns for {table} has {' and '.join(given) or 'neither include nor exclude'}; binlake "
                f"needs one list per table, include or exclude: keep one of them for {table}"
            )
        out[table] = ColumnChoice(given[0], tuple(lists[given[0]]))
    return out
