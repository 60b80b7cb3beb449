"""The PySpark streaming source `binlake_binlog`: Spark's calls answered by the binlog's micro-batches
(`binlake.capture.binlog_batches`), whose Arrow batches are bronze's flat change rows (`CHANGES`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from binlake.capture.binlog_batches import BinlogReader
from binlake.lake.bronze import CHANGES


@dataclass
class BinlogPartition(InputPartition):
    start: dict[str, Any]
    end: dict[str, Any]


class BinlogStreamReader(BinlogReader, DataSourceStreamReader):
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[BinlogPartition]:
        return [BinlogPartition(r.start, r.end) for r in super().partitions(start, end)]


class BinlogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake_binlog"

    def schema(self) -> str:
        return CHANGES

    def streamReader(self, schema: Any) -> BinlogStreamReader:
        return BinlogStreamReader(dict(self.options))
