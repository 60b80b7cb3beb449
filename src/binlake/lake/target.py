"""Where binlake's Delta tables live: bronze and silver per source table, the split state, the
stream checkpoint. Locally everything sits under `target.path` (a local path, or a Hadoop URI such as
`s3a://bucket/lake`, see `binlake.lake.storage`); on Databricks the tables are Unity Catalog tables
`<catalog>.<schema>.<db>__<table>_{bronze,silver}`.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from binlake.config import Config
from binlake.lake.storage import Location, is_local, location

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
    root: str | Path  # a local path or a Hadoop URI
    catalog: str | None = None
    schema: str | None = None
    # the running SparkSession, through which a URI's files are reached (binlake.lake.storage)
    session: Callable[[], Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, cfg: Config, session: Callable[[], Any] | None = None) -> Target:
        return cls(cfg.target_path, cfg.get("target.catalog"), cfg.get("target.schema"), session)

    def _at(self, *parts: str) -> str:
        return "/".join([str(self.root).rstrip("/"), *parts])

    def storage(self, address: str) -> Location:
        """Any of the lake's addresses (a table's folder, the checkpoint) as a `Location`."""
        return location(address, self.session)

    def _file(self, *parts: str) -> Location:
        return location(self._at("_binlake", *parts), self.session)

    def _ref(self, kind: str, source: str) -> TableRef:
        db, table = source.split(".", 1)
        leaf = f"{_safe(db)}__{_safe(table)}"
        prefix = f"{self.catalog}.{self.schema}." if self.catalog and self.schema else f"{kind}."
        name = f"{prefix}{leaf}_{kind}" if self.catalog and self.schema else f"{prefix}{leaf}"
        return TableRef(name, self._at(kind, leaf))

    def bronze(self, source: str) -> TableRef:
        return self._ref("bronze", source)

    def silver(self, source: str) -> TableRef:
        return self._ref("silver", source)

    @property
    def split_state(self) -> str:
        return self._at("_binlake", "splits")

    @property
    def checkpoint(self) -> str:
        return self._at("_binlake", "checkpoint")

    def captured_schema(self, source: str) -> Location:
        """The table's schema as binlake first captured it: what bronze and silver hold."""
        db, table = source.split(".", 1)
        return self._file("schemas", f"{_safe(db)}__{_safe(table)}.json")

    def resnapshot_intent(self, source: str) -> Location:
        """Present while a table is being set up for a snapshot of its own (see `binlake.capture.resnapshot`)."""
        db, table = source.split(".", 1)
        return self._file("resnapshot", f"{_safe(db)}__{_safe(table)}")

    @property
    def resnapshot_intents(self) -> Location:
        return self._file("resnapshot")

    def side_snapshot(self, source: str) -> Location:
        """The state of a snapshot of the table taken beside the stream (binlake.capture.side_snapshot)."""
        db, table = source.split(".", 1)
        return self._file("snapshots", f"{_safe(db)}__{_safe(table)}.json")

    @property
    def side_snapshots(self) -> Location:
        return self._file("snapshots")

    @property
    def signals(self) -> Location:
        """Signals to the running stream, one file each (binlake.capture.signals)."""
        return self._file("signals")

    @property
    def stream_start(self) -> Location:
        """Where a stream without a snapshot starts (see `binlake.capture.startup`)."""
        return self._file("start.json")

    @property
    def source_lineage(self) -> Location:
        """The server binlake reads and its binlog files' creation times (binlake.source.identity)."""
        return self._file("source.json")

    @property
    def gtid_record(self) -> Location:
        """The GTID state at the stream's last positions, for a failover (binlake.capture.failover)."""
        return self._file("gtids.json")

    @property
    def stream_progress(self) -> Location:
        return self._file("stream.json")

    @property
    def last_error(self) -> Location:
        """The last error a run met (binlake.capture.metrics)."""
        return self._file("error.json")

    @property
    def compaction_record(self) -> Location:
        """Each table's last compaction steps (binlake.lake.compaction)."""
        return self._file("compaction.json")

    @property
    def retention_record(self) -> Location:
        """Each table's last retention pass (binlake.lake.retention)."""
        return self._file("retention.json")

    @property
    def checkpoint_files(self) -> Location:
        """The stream checkpoint's folder, for binlake's own reads of it (binlake.lake.checkpoint)."""
        return self.storage(self.checkpoint)

    @property
    def schemas(self) -> Location:
        return self._file("schemas")

    @property
    def spark_log(self) -> Path:
        """Where Spark's own error reports go (binlake prints one line per failure; the traces are
        here): beside the tables on a local lake, in the machine's temporary folder for a URI's."""
        if is_local(str(self.root)):
            return Path(self._at("_binlake", "spark.log"))
        return Path(tempfile.gettempdir()) / "binlake" / "spark.log"
