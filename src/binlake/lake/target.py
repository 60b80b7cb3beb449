"""Where binlake's Delta tables live: bronze and silver per source table, the split state, the
stream checkpoint. Locally everything sits under `target.path`; on Databricks the tables are
Unity Catalog tables `<catalog>.<schema>.<db>__<table>_{bronze,silver}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from binlake.config import Config

# Set on every table binlake creates. Delta writes a checkpoint of a table's log every this many
# commits, and a checkpoint costs seconds where a small commit costs a fraction of one; at Delta's
# default of 10, every tenth micro-batch or split-state append paid one. Reading a table replays at
# most this many small commit files after its last checkpoint, which stays cheap at 100.
CHECKPOINT_INTERVAL = "100"


def _safe(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


@dataclass(frozen=True)
class TableRef:
    name: str
    location: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "location": self.location}


@dataclass(frozen=True)
class Target:
    root: Path
    catalog: str | None = None
    schema: str | None = None

    @classmethod
    def of(cls, cfg: Config) -> Target:
        return cls(cfg.target_path, cfg.get("target.catalog"), cfg.get("target.schema"))

    def _ref(self, kind: str, source: str) -> TableRef:
        db, table = source.split(".", 1)
        leaf = f"{_safe(db)}__{_safe(table)}"
        prefix = f"{self.catalog}.{self.schema}." if self.catalog and self.schema else f"{kind}."
        name = f"{prefix}{leaf}_{kind}" if self.catalog and self.schema else f"{prefix}{leaf}"
        return TableRef(name, str(self.root / kind / leaf))

    def bronze(self, source: str) -> TableRef:
        return self._ref("bronze", source)

    def silver(self, source: str) -> TableRef:
        return self._ref("silver", source)

    @property
    def split_state(self) -> str:
        return str(self.root / "_binlake" / "splits")

    @property
    def checkpoint(self) -> str:
        return str(self.root / "_binlake" / "checkpoint")

    def captured_schema(self, source: str) -> Path:
        """The table's schema as binlake first captured it: what bronze and silver hold."""
        db, table = source.split(".", 1)
        return self.root / "_binlake" / "schemas" / f"{_safe(db)}__{_safe(table)}.json"

    def resnapshot_intent(self, source: str) -> Path:
        """Present while a table is being set up for a snapshot of its own (see `binlake.capture.resnapshot`)."""
        db, table = source.split(".", 1)
        return self.root / "_binlake" / "resnapshot" / f"{_safe(db)}__{_safe(table)}"

    @property
    def resnapshot_intents(self) -> Path:
        return self.root / "_binlake" / "resnapshot"

    @property
    def stream_start(self) -> Path:
        """Where a stream without a snapshot starts (see `binlake.capture.startup`)."""
        return self.root / "_binlake" / "start.json"

    @property
    def source_lineage(self) -> Path:
        """The server binlake reads and its binlog files' creation times (binlake.source.identity)."""
        return self.root / "_binlake" / "source.json"

    @property
    def gtid_record(self) -> Path:
        """The GTID state at the stream's last positions, for a failover (binlake.capture.failover)."""
        return self.root / "_binlake" / "gtids.json"

    @property
    def stream_progress(self) -> Path:
        return self.root / "_binlake" / "stream.json"

    @property
    def spark_log(self) -> Path:
        """Where Spark's own error reports go (binlake prints one line per failure; the traces are here)."""
        return self.root / "_binlake" / "spark.log"
