"""What a silver table keeps beyond each key's current row: soft deletes (`silver.deletes`) and every
version of a row (`silver.history`, SCD type 2). The MERGE for each is in `binlake.lake.silver` (type
1) and `binlake.lake.history` (type 2); this module holds the choice and its columns, light enough for
the checks that run before Spark starts.

- `deletes: soft`: a delete is kept as the row's last image with `_deleted` true and the delete's
  `_seq` and `_ts`. Ordering is unchanged (the newest `_seq` wins), so the tombstone is the record
  a late snapshot row loses to, and a key inserted again (a newer `_seq`) is live again.
- `history: 2`: one row per change of a key, `__START_AT` its `_seq` and `__END_AT` the `_seq` of the
  key's next change (NULL while it is current), as Databricks AUTO CDC stores SCD type 2. A hard
  delete ends the current version and starts none; a soft one starts a version with `_deleted` true.

Under a row filter (`binlake.lake.row_filter`) a change whose row is out of it leaves silver outright
in either shape: no tombstone, no version, the key's current one ended.

Neither applies to a key-less table (`TableSchema.multiset`): its identical rows are told apart by
a count alone, so no row has a deletion or a version of its own to keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from binlake.config import Config
from binlake.schema import TableSchema

DELETED, START, END = "_deleted", "__START_AT", "__END_AT"
Deletes = Literal["hard", "soft"]


@dataclass(frozen=True)
class Shape:
    deletes: Deletes = "hard"
    history: int = 1

    def __post_init__(self) -> None:
        if self.deletes not in ("hard", "soft") or self.history not in (1, 2):
            raise ValueError(f"no silver shape {self.deletes!r}, {self.history!r}")

    @classmethod
    def of(cls, cfg: Config) -> Shape:
        return cls(cfg.get("silver.deletes"), int(cfg.get("silver.history")))

    @property
    def soft(self) -> bool:
        return self.deletes == "soft"

    @property
    def versions(self) -> bool:
        """Whether silver keeps every version (SCD type 2)."""
        return self.history == 2

    @property
    def plain(self) -> bool:
        """Today's silver: one live row per key, deletes gone."""
        return not self.soft and not self.versions

    def columns(self) -> list[str]:
        """The metadata columns this shape adds after `_seq` and `_ts`, in order."""
        return ([DELETED] if self.soft else []) + ([START, END] if self.versions else [])

    def live(self) -> str | None:
        """A Spark SQL predicate true of silver's current, live rows (one per key that exists in the
        source now: no tombstone, no ended version), or None where every row is one."""
        terms = ([f"{END} IS NULL"] if self.versions else []) + ([f"NOT {DELETED}"] if self.soft else [])
        return " AND ".join(terms) or None

    def settings(self) -> str:
        return f"silver.deletes: {self.deletes}, silver.history: {self.history}"

    def refusal(self, schema: TableSchema) -> str | None:
        """Why `schema`'s table cannot be kept in this shape, or None."""
        if schema.multiset and not self.plain:
            return (f"{schema.name} has no unique key (no primary key, and its source.chunk-key is not a UNIQUE "
                    f"NOT NULL index), and {self.settings()} needs one: identical rows of a key-less table are "
                    "only counted, so none has a deletion or versions of its own; add a primary key, set "
                    "source.chunk-key to a unique index's columns, or leave this table out of source.tables")
        return None

    def filter_refusal(self, schema: TableSchema) -> str | None:
        """Why `schema`'s row filter cannot be kept, or None: every shape keeps one
        (`binlake.lake.row_filter`), but not on a table without a unique key."""
        if schema.row_filter and schema.multiset:
            return (f"source.row-filter for {schema.name}: the table has no unique key, and binlake counts its "
                    "identical rows over its whole change log; add a primary key, or leave the filter out")
        return None

    def mismatch(self, location: str, have: list[str]) -> str | None:
        """Why the existing silver table at `location`, with the columns `have`, was not built in this
        shape (turning an option on or off would mix two meanings in one table), or None."""
        built = [n for n in (DELETED, START, END) if n in have]
        if built == self.columns():
            return None
        was = Shape("soft" if DELETED in built else "hard", 2 if START in built else 1)
        return (f"the silver table at {location} was built with {was.settings()}; the configuration now says "
                f"{self.settings()}: set them back, or snapshot the tables again into a new target.path")


PLAIN = Shape()
