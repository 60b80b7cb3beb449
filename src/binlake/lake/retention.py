"""Retention: the files a Delta table no longer holds are removed from disk once they left it more
than `lake.retention` ago (Delta's VACUUM), so a lake's disk follows what it holds, not every
version it ever held: each silver MERGE replaces the files it rewrites, and before this nothing ever
removed the old ones (a 120 MB silver's folder reached 22.7 GB in ten minutes of random-key updates).

The rule, for one table at its newest version N (`binlake.lake.table_log.replay` reads its log):
- kept: every file a live add of N names, and its deletion vector's file (one such file may hold
  the vectors of many data files: it is kept while any live add names it);
- kept: every file a tombstone (a `remove` action) names that was removed less than the retention
  ago, by the tombstone's `deletionTimestamp`, with its deletion vector's file;
- removed: any other file under the table's folder whose last write is older than the retention:
  files removed longer ago, files whose tombstone Delta's checkpoints have since dropped, and files
  never committed (a write cut short), which no version names;
- never touched: the log (`_delta_log`), any name starting with `.` or `_`; a file's Hadoop
  checksum (`.name.crc`) goes with it, and empty folders older than the retention go too.
The log itself is not ours to trim: each writer (Spark, delta-rs) removes commits older than the
table's `delta.logRetentionDuration` (30 days by default), and only up to a checkpoint, whenever it
writes a checkpoint; a retention shorter than that keeps time travel whole within the retention.

Why a reader is never broken (a scan, time travel): a reader opens the files of a version V. A file
of V leaves the table only when a later version removes it, at a time T no earlier than when V
stopped being the newest, and it leaves the disk only once T is more than the retention ago. A scan
that starts at time S reads the version newest at S, so T >= S and its files stay until S plus the
retention at least: a scan shorter than the retention (any scan, with days of it) never misses a
file; and time travel to any version that was the newest at some moment within the retention reads
whole. A file a writer wrote and has yet to commit is kept by its write time: a write shorter than
the retention is safe too.

A local table (a path Python's file calls reach) is cleaned here, not by delta-rs's
`DeltaTable.vacuum`, because delta-rs 1.6's vacuum breaks binlake's tables or leaves them growing:
its full mode removes a deletion vector's file that live adds name (it counts only data files as
live), which leaves the table unreadable to Spark and delta-rs; its lite mode never removes a
deletion vector's file nor a file never committed; its retention is whole hours; and each run
commits twice (VACUUM START and END; a writer's overwrite meanwhile made those commits fail, never
the writer's). A pass here writes no commit, so a writer committing meanwhile never sees it. A pass
stops removing once it has run `budget` seconds (the rest is the next pass's; reading the log and
listing the folder always finish: 0.6 s for a table of 40,000 files on 2 cores); it may be killed at
any moment: a file is removed only when no version within the retention names it, so a pass cut
short leaves only files the next pass removes.

A table behind a URI (`s3a://`, `abfss://`, `file:`) is cleaned by Delta's own VACUUM through
Spark, which knows deletion vectors. Delta rounds a VACUUM's retention to whole hours; binlake gives
it the retention in hours rounded up, never less than asked. Delta 4.4 ignores a retention other
than 0 hours (taking the table's `delta.deletedFileRetentionDuration`) and refuses one under a week
unless two settings say otherwise, which binlake sets for the call (SPARK_SETTINGS). Delta's VACUUM
writes two commits (VACUUM START and END) that hold no file action, which a writer's commit
meanwhile retries past. It runs whole: no budget.

A table's tombstones live in its checkpoints for `delta.deletedFileRetentionDuration` (a week by
default); a file removed longer ago counts as never committed, kept until its own write is older
than the retention. With a retention of more than a week, set that property as long on the tables.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from binlake import duration, faults
from binlake.config import Config
from binlake.lake import storage
from binlake.lake.table_log import UnreadableLog, replay
from binlake.lake.target import Target

log = logging.getLogger(__name__)

# seconds of removing one pass may take between two micro-batches (the rest is the next pass's)
BUDGET = 2.0
LOG = "_delta_log"


@dataclass(frozen=True)
class Cleaned:
    """One retention pass over the table at `location`."""

    location: str
    at: float  # when the pass began, seconds since the epoch
    removed_files: int = 0
    removed_bytes: int = 0
    finished: bool = True  # False: it stopped at its budget (or an error); the rest is the next pass's
    seconds: float = 0.0
    error: str | None = None  # why nothing (more) was removed, when something went wrong
    total_removed_bytes: int = 0  # over every pass the record holds
    waiting_bytes: int | None = None  # left on disk after the pass, not in the table (None: not known)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cleaned:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class _File:
    path: str
    size: int  # with its checksum's
    written: float  # its last write, seconds since the epoch
    checksum: str | None  # its `.name.crc`, when it has one


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _listing(root: str) -> tuple[list[_File], list[str]]:
    """Every file under the table's folder the rule looks at (a data or deletion vector file, one
    never committed, or a checksum whose file is gone), and every folder below the root."""
    files: list[_File] = []
    folders: list[str] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = {e.name: e for e in os.scandir(folder)}
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name, entry in entries.items():
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not _hidden(name):
                        pending.append(entry.path)
                        folders.append(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                if _hidden(name):
                    lone = name.startswith(".") and name.endswith(".crc") and name[1:-4] not in entries
                    if lone:  # a checksum left by a removal cut short between the two
                        info = entry.stat(follow_symlinks=False)
                        files.append(_File(entry.path, info.st_size, info.st_mtime, None))
                    continue
                info = entry.stat(follow_symlinks=False)
                crc = entries.get(f".{name}.crc")
                extra = crc.stat(follow_symlinks=False).st_size if crc is not None else 0
                files.append(_File(entry.path, info.st_size + extra, info.st_mtime,
                                   crc.path if crc is not None else None))
            except FileNotFoundError:  # removed meanwhile (by another pass, or a writer's staging file)
                continue
    return files, folders


def _expired(location: str, retention: float, now: float) -> tuple[list[_File], list[str], float, int]:
    """The files of the local table at `location` that the rule removes at `now`, the folders that
    may go once empty, the cut-off time, and the bytes on disk the table's version does not hold."""
    state = replay(location)
    cutoff = now - retention
    keep = state.live | {p for p, at in state.removed.items() if at >= cutoff}
    files, folders = _listing(os.path.realpath(location))  # the paths `replay` gives
    gone = [f for f in files if f.path not in keep and f.written < cutoff]
    return gone, folders, cutoff, sum(f.size for f in files if f.path not in state.live)


def _remove(file: _File) -> bool:
    """Remove `file`, its checksum first (a kill in between leaves the file, which the next pass
    removes); whether this call removed it."""
    if file.checksum is not None:
        try:
            os.unlink(file.checksum)
        except FileNotFoundError:
            pass
    try:
        os.unlink(file.path)
        return True
    except FileNotFoundError:
        return False


def _clean_here(location: str, retention: float, now: float, budget: float | None,
                clock: Callable[[], float]) -> Cleaned:
    began = clock()
    gone, folders, cutoff, waiting = _expired(location, retention, now)
    removed, size = 0, 0
    for file in gone:
        if budget is not None and clock() - began > budget:
            return Cleaned(location, now, removed, size, False, clock() - began, waiting_bytes=waiting - size)
        faults.point("mid_retention", file.path)
        if _remove(file):
            removed, size = removed + 1, size + file.size
    for folder in sorted(folders, key=len, reverse=True):  # the deepest first
        try:
            if os.stat(folder).st_mtime < cutoff:
                os.rmdir(folder)  # only an empty one: a writer's new file keeps it
        except OSError:
            pass
    return Cleaned(location, now, removed, size, True, clock() - began, waiting_bytes=waiting - size)


# Delta 4's VACUUM ignores a RETAIN other than 0 hours unless the first is off (it takes the table's
# `delta.deletedFileRetentionDuration` instead), and refuses one under a week unless the second is
SPARK_SETTINGS = {"spark.databricks.delta.vacuum.retentionWindowIgnore.enabled": "false",
                  "spark.databricks.delta.retentionDurationCheck.enabled": "false"}
LISTING = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def _spark(session: Callable[[], Any] | None) -> Any:
    """The Spark session a table behind a URI is reached through: `session`'s, else the active one."""
    from pyspark.sql import SparkSession

    spark = session() if session is not None else SparkSession.getActiveSession()
    if spark is None:
        raise RuntimeError("a table behind a URI is cleaned through Spark, and no Spark session runs")
    return spark


def _clean_by_spark(location: str, retention: float, session: Callable[[], Any] | None,
                    clock: Callable[[], float], now: float) -> Cleaned:
    from delta.tables import DeltaTable

    spark = _spark(session)
    hours = max(1, math.ceil(retention / 3600))  # Delta rounds to whole hours: never below what was asked
    # Delta lists the table's folder in a job of this many tasks: Spark's default of 10,000 cost a
    # 20-file local table 54 s of its 59 s (5 s with the session's parallelism) on 2 busy cores
    settings = {**SPARK_SETTINGS, LISTING: str(spark.sparkContext.defaultParallelism)}
    began, before = clock(), {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        table = DeltaTable.forPath(spark, location)
        last = table.history(1).collect()[0]["version"]
        table.vacuum(float(hours))
        # its own two commits (none when Delta logs no vacuum), other writers' aside
        ours = [r for r in table.history().where(f"version > {last}").collect()
                if r["operation"] in ("VACUUM START", "VACUUM END")]
    finally:
        for key, value in before.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)
    metrics: dict[str, str] = {}
    for row in ours:
        metrics.update(row["operationMetrics"] or {})
        asked = (row["operationParameters"] or {}).get("specifiedRetentionMillis")
        if row["operation"] == "VACUUM START" and asked != str(hours * 3_600_000):
            log.warning("retention of %s: Delta's VACUUM kept files for %s ms, not the %d hours asked (the "
                        "table's delta.deletedFileRetentionDuration then)", location, asked, hours)
    files = int(metrics.get("numDeletedFiles", metrics.get("numFilesToDelete", 0)))
    return Cleaned(location, now, files, int(metrics.get("sizeOfDataToDelete", 0)), True, clock() - began)


def clean(location: str, retention: float, *, budget: float | None = None, now: float | None = None,
          session: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic) -> Cleaned:
    """One retention pass over the Delta table at `location`: remove the files it left more than
    `retention` seconds ago (see the module), removing for at most `budget` seconds (None: all).
    `session` gives the Spark session a table behind a URI is vacuumed through. A local table whose
    log cannot be read whole is left as it is (the pass's `error` says why)."""
    now = time.time() if now is None else now
    if not storage.is_local(location):
        return _clean_by_spark(location, retention, session, clock, now)
    try:
        return _clean_here(location, retention, now, budget, clock)
    except UnreadableLog as exc:
        return Cleaned(location, now, finished=False, error=str(exc))


def waiting_bytes(location: str, session: Callable[[], Any] | None = None) -> int:
    """The bytes on disk under the table at `location` that its newest version does not hold (files
    it removed, within the retention or not yet cleaned, and files never committed): what retention
    removes in time. A local table's are counted file by file; one behind a URI's are its folder's
    bytes less its log's and its live files' (Delta's `sizeInBytes`). 0 for no table."""
    if storage.is_local(location):
        if not storage.has_commit(location):
            return 0
        state = replay(location)
        files, _ = _listing(os.path.realpath(location))
        return sum(f.size for f in files if f.path not in state.live)
    return _waiting_by_spark(location, session)


def _waiting_by_spark(location: str, session: Callable[[], Any] | None) -> int:
    spark = _spark(session)
    if not storage.table_exists(spark, location):
        return 0
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    folder = jvm.org.apache.hadoop.fs.Path(location)
    fs = folder.getFileSystem(conf)
    whole = fs.getContentSummary(folder).getLength()
    logged = fs.getContentSummary(jvm.org.apache.hadoop.fs.Path(f"{location.rstrip('/')}/{LOG}")).getLength()
    live = spark.sql(f"DESCRIBE DETAIL delta.`{location}`").collect()[0]["sizeInBytes"]
    return max(0, int(whole) - int(logged) - int(live or 0))



def last_passes(target: Target) -> dict[str, Cleaned]:
    """Each table's last retention pass, by its location, as the lake records them (for `status`)."""
    try:
        data = json.loads(target.retention_record.read_text())
    except FileNotFoundError:
        return {}
    return {location: Cleaned.from_dict(entry) for location, entry in data.get("tables", {}).items()}


class Retention:
    """The running stream's retention: each call of `run_one` between two micro-batches cleans at
    most one table of the lake (the split state, each source table's bronze and silver), in turn,
    each at most once every `every` seconds, and for at most `budget` seconds of removing; a table
    whose pass stopped at its budget goes on at its next turn. Each pass is recorded
    (`last_passes`). `retention` None (`lake.retention: off`): nothing is ever removed.

    `sources` may be replaced (a table captured since) between calls."""

    def __init__(self, target: Target, sources: Iterable[str], retention: float | None, every: float = 3600.0,
                 budget: float | None = BUDGET, clock: Callable[[], float] = time.time) -> None:
        self.target = target
        self.sources = list(sources)
        self.retention = retention
        self.every = every
        self.budget = budget
        self.clock = clock
        self.passes = last_passes(target)
        self._turn = 0
        self._absent: dict[str, float] = {}  # a table not created yet, by when it was last looked for

    @classmethod
    def of(cls, cfg: Config, target: Target, sources: Iterable[str]) -> Retention:
        """The retention `cfg` asks for (`lake.retention`, `lake.retention-interval`)."""
        every = duration.seconds(cfg.get("lake.retention-interval"))
        return cls(target, sources, duration.seconds(cfg.get("lake.retention")), float(every or 3600))

    def tables(self) -> list[str]:
        """The locations of the lake's tables, in the order of their turns."""
        places = [self.target.split_state]
        for source in self.sources:
            places += [self.target.bronze(source).location, self.target.silver(source).location]
        return places

    def _exists(self, location: str, now: float) -> bool:
        """Whether the table at `location` has a commit; one found absent is looked for again only
        `every` later (a look behind a URI costs Spark a call, and `due` runs between micro-batches)."""
        if now - self._absent.get(location, -math.inf) < self.every:
            return False
        if storage.is_local(location):
            found = storage.has_commit(location)
        else:
            found = self.target.session is not None and storage.table_exists(self.target.session(), location)
        if found:
            self._absent.pop(location, None)
        else:
            self._absent[location] = now
        return found

    def _order(self) -> list[str]:
        """The tables, from the one whose turn is next."""
        places = self.tables()
        return places[self._turn % len(places):] + places[:self._turn % len(places)]

    def due(self) -> str | None:
        """The next table whose turn it is (its last pass is `every` old, or stopped short), or None."""
        if self.retention is None:
            return None
        now = self.clock()
        for location in self._order():
            last = self.passes.get(location)
            if (last is None or not last.finished or now - last.at >= self.every) and self._exists(location, now):
                return location
        return None

    def run_one(self) -> Cleaned | None:
        """Clean the next table whose turn it is, and record the pass; None when none is due. A pass
        that fails is recorded with its error (and logged); the stream goes on."""
        location = self.due()
        if location is None or self.retention is None:
            return None
        places = self.tables()
        self._turn = (places.index(location) + 1) % len(places)
        now = self.clock()
        try:
            done = clean(location, self.retention, budget=self.budget, now=now, session=self.target.session)
        except Exception as exc:  # noqa: BLE001 - a failed pass removes nothing more; the stream goes on
            done = Cleaned(location, now, finished=True, error=f"{type(exc).__name__}: {exc}")
        if done.error:
            log.warning("retention of %s: %s", location, done.error)
            done = replace(done, finished=True)  # tried again at its next turn after `every`
        else:
            log.info("retention of %s: %d files, %d bytes removed in %.2f s%s", location, done.removed_files,
                     done.removed_bytes, done.seconds, "" if done.finished else " (more next turn)")
        before = self.passes.get(location)
        done = replace(done, total_removed_bytes=(before.total_removed_bytes if before else 0) + done.removed_bytes)
        self.passes[location] = done
        self._save()
        return done

    def _save(self) -> None:
        record = {"tables": {location: p.to_dict() for location, p in self.passes.items()}}
        self.target.retention_record.write_text(json.dumps(record, indent=1, sort_keys=True))
