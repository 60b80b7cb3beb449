"""A run's metrics: what `binlake run` and `binlake stream` count while they work, served in
Prometheus's text format on `metrics.host:metrics.port` (off unless a port is set), and the last error,
which is kept in the lake for `binlake status` and the next run.

The figures are counted on the driver, where it learns of the work: a group of chunks when its read
returns (the chunks themselves are read in Spark's Python workers), a micro-batch when its
`foreachBatch` has landed it. Counters count from the process's start, as Prometheus expects
(`rate()` and `increase()` take a restart in their stride); `binlake status --json` gives the totals
since the capture began, from the lake's own files.

Seconds behind the source are worked out when scraped, so a stream that stalls shows a growing figure:
0 while the stream's last look at the source found nothing new to read (Spark asks the source for its
binlog head at each trigger); else the time since the head that the last committed micro-batch
reached was current (each batch reads up to the head the source had when it began). The stream reads
every table at one position, so each table's figure is the stream's, as in `binlake status`.

Errors are counted by kind (the exception's class), never by message: a label is an index of
Prometheus's, and the message is for the log and `binlake status`. The error that ends a run and
those it recovers from by itself (a failover, a snapshot taken again) are counted and kept in
`_binlake/error.json`, which a new run serves as the last error until it meets one of its own.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from binlake.capture.side_state import RUNNING, SideSnapshot
from binlake.config import MASK, Config
from binlake.errors import BinlakeError, ConfigError, raised_in_spark
from binlake.lake.storage import Location
from binlake.lake.target import Target

log = logging.getLogger(__name__)

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
ROWS_BUCKETS = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)


class Behind(Collector):
    """`binlake_seconds_behind_source`, worked out when scraped (see the module)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: list[str] = []
        self.covered_at: float | None = None  # wall time of the head the stream has read up to
        self.caught_up = False  # the last look at the source found nothing new

    def streaming(self, tables: list[str], covered_at: float | None) -> None:
        with self.lock:
            self.tables, self.covered_at, self.caught_up = sorted(tables), covered_at, False

    def landed(self, head_at: float) -> None:
        with self.lock:
            self.covered_at = head_at

    def looked(self, found_new: bool) -> None:
        with self.lock:
            self.caught_up = not found_new

    def seconds(self, now: float | None = None) -> float | None:
        with self.lock:
            if self.caught_up:
                return 0.0
            if self.covered_at is None:
                return None
            return max(0.0, (time.time() if now is None else now) - self.covered_at)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("binlake_seconds_behind_source",
                                   "Seconds the stream is behind the source's binlog head (0 when caught up)",
                                   labels=["table"])
        lag = self.seconds()
        if lag is not None:
            for table in self.tables:
                family.add_metric([table], lag)
        yield family


class Metrics:
    """The figures of one process, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        for standard in (ProcessCollector, PlatformCollector, GCCollector):
            standard(registry=r)
        self.rows = Counter("binlake_rows_captured", "Rows captured by this process: snapshot rows read, binlog "
                            "changes landed", ["table", "phase"], registry=r)
        self.planned = Gauge("binlake_chunks_planned", "Snapshot chunks planned", ["table"], registry=r)
        self.done = Gauge("binlake_chunks_done", "Snapshot chunks done", ["table"], registry=r)
        self.side_chunks = Gauge("binlake_side_snapshot_chunks_done", "Chunks landed by the table's snapshot beside "
                                 "the stream", ["table"], registry=r)
        self.side_rows = Gauge("binlake_side_snapshot_rows", "Rows landed by the table's snapshot beside the stream",
                               ["table"], registry=r)
        self.side_left = Gauge("binlake_side_snapshot_chunks_left", "About how many chunks the table's "
                               "snapshot beside the stream has still to land (by the server's estimate)",
                               ["table"], registry=r)
        self.side_running = Gauge("binlake_side_snapshot_running", "1 while the table's snapshot beside the stream "
                                  "runs, 0 once paused, stopped or done", ["table"], registry=r)
        self.behind = Behind()
        r.register(self.behind)
        self.batch_seconds = Histogram("binlake_micro_batch_duration_seconds", "Seconds a micro-batch took to land "
                                       "in bronze and silver", registry=r, buckets=DURATION_BUCKETS)
        self.batch_rows = Histogram("binlake_micro_batch_rows", "Changes a micro-batch landed", registry=r,
                                    buckets=ROWS_BUCKETS)
        self.last_batch = Gauge("binlake_last_micro_batch_timestamp_seconds", "When the last micro-batch landed "
                                "(Unix seconds)", registry=r)
        self.heartbeat = Gauge("binlake_stream_heartbeat_timestamp_seconds", "When the stream last recorded where "
                               "it stands with no change to land (Unix seconds; stream.heartbeat-seconds)",
                               registry=r)
        self.compactions = Counter("binlake_compaction_steps", "Compaction steps taken by this process, by table "
                                   "and side (bronze, silver)", ["table", "side"], registry=r)
        self.last_compaction = Gauge("binlake_last_compaction_timestamp_seconds", "When a table's last compaction "
                                     "step committed (Unix seconds)", ["table", "side"], registry=r)
        self.live_files = Gauge("binlake_table_live_files", "A table's live data files at the last look of its "
                                "compaction", ["table", "side"], registry=r)
        self.live_bytes = Gauge("binlake_table_live_bytes", "A table's live data files' bytes at the last look of "
                                "its compaction", ["table", "side"], registry=r)
        self.waiting = Gauge("binlake_table_waiting_bytes", "Bytes on disk under a table that its current version "
                             "does not hold, as its last retention pass left them (lake.retention)", ["location"],
                             registry=r)
        self.errors = Counter("binlake_errors", "Errors met by this process, by kind: the one that ended it and "
                              "those it recovered from", ["kind"], registry=r)
        self.last_error = Gauge("binlake_last_error_timestamp_seconds", "When the last error was met (Unix "
                                "seconds), labelled with its kind; an earlier run's until this one meets one",
                                ["kind"], registry=r)
        self.cfg: Config | None = None  # the run's, while `serving`
        self.error_file: Location | None = None
        self.kept_shown = False  # the error an earlier run kept is served (or there is none)
        self.met_error = False  # this process met an error (see `error`)
        self.secret = ""

    def show_error(self, kind: str, at: float) -> None:
        self.last_error.clear()  # one sample: the last error's
        self.last_error.labels(kind=kind).set(at)


_metrics = Metrics()
_served = False  # whether anything reads the figures (then `looked` asks Spark for the query's status)


def chunks(table: str, planned: int, done: int) -> None:
    """`table`'s snapshot has `planned` chunks, `done` of them done."""
    _metrics.planned.labels(table=table).set(planned)
    _metrics.done.labels(table=table).set(done)


def snapshot_rows(table: str, rows: int) -> None:
    """`rows` more rows of `table` read by the snapshot."""
    _metrics.rows.labels(table=table, phase="snapshot").inc(rows)


def side_snapshot(state: SideSnapshot) -> None:
    """Where a table's snapshot beside the stream stands now."""
    table, left = state.table, state.chunks_left()
    _metrics.side_chunks.labels(table=table).set(state.chunks)
    _metrics.side_rows.labels(table=table).set(state.rows)
    _metrics.side_running.labels(table=table).set(1 if state.status == RUNNING else 0)
    if left is not None:
        _metrics.side_left.labels(table=table).set(left)


def streaming(tables: list[str], progress: Location) -> None:
    """The stream starts on `tables`; `progress` is its progress file (`binlake.lake.checkpoint`), whose
    head time says how far an earlier run got."""
    try:
        head_at = json.loads(progress.read_text()).get("head_at") if progress.exists() else None
    except (OSError, ValueError):
        head_at = None
    _metrics.behind.streaming(tables, head_at)
    _show_kept()


def batch(changes: dict[str, int], began: float) -> None:
    """A micro-batch landed `changes` per table; it began at `began` (time.monotonic), reading up to
    the head the source had then."""
    now = time.time()
    seconds = time.monotonic() - began
    for table, n in changes.items():
        _metrics.rows.labels(table=table, phase="stream").inc(n)
    _metrics.batch_seconds.observe(seconds)
    _metrics.batch_rows.observe(sum(changes.values()))
    _metrics.last_batch.set(now)
    _metrics.behind.landed(now - seconds)


def compacted(table: str, side: str, at: float) -> None:
    """A compaction step of `table`'s `side` (bronze, silver) committed at `at` (Unix seconds)."""
    _metrics.compactions.labels(table=table, side=side).inc()
    _metrics.last_compaction.labels(table=table, side=side).set(at)


def live_files(table: str, side: str, files: int, size: int) -> None:
    """`table`'s `side` (bronze, silver) has `files` live data files of `size` bytes."""
    _metrics.live_files.labels(table=table, side=side).set(files)
    _metrics.live_bytes.labels(table=table, side=side).set(size)


def waiting(location: str, size: int) -> None:
    """The table at `location` has `size` bytes waiting for retention after its last pass."""
    _metrics.waiting.labels(location=location).set(size)


def heartbeat(at: float, caught_up: bool) -> None:
    """The stream recorded where it stands at `at` (Unix seconds), caught up with the source's head or
    not (binlake.capture.heartbeat)."""
    del caught_up  # the look itself reports it (`found`); the record's time is the figure
    _metrics.heartbeat.set(at)


def looked(query: Any) -> None:
    """What the running query's last trigger found: new data to read, or nothing (caught up)."""
    if not _served:
        return
    try:
        status = query.status
    except Exception:  # noqa: BLE001 - the query ending under us (py4j's error): the next look or its end says so
        return
    # before its first trigger a query says "Initializing ..." with no data available: it has not looked yet
    if not str(status.get("message", "")).startswith("Initializing"):
        found(bool(status.get("isDataAvailable")))


def found(new: bool) -> None:
    """What the stream's last look at the source found: changes to read, or none (caught up)."""
    if _served:
        _metrics.behind.looked(new)


def error(exc: BaseException) -> None:
    """Count `exc` and keep it as the last error (`_binlake/error.json`, when serving); once, however
    often it is handed in (an error a step recovers from when it can is raised on when it cannot)."""
    if getattr(exc, "binlake_counted", False):
        return
    try:
        exc.binlake_counted = True  # type: ignore[attr-defined]
    except AttributeError:  # an exception type without a __dict__
        pass
    raised = exc if isinstance(exc, BinlakeError) else raised_in_spark(exc)
    kind = type(raised or exc).__name__
    at = time.time()
    _metrics.errors.labels(kind=kind).inc()
    _metrics.met_error = True
    _metrics.show_error(kind, at)
    if _metrics.error_file is None:
        return
    # a binlake error is one line without secrets; another's text may carry anything (a JVM's trace)
    message = raised.message if raised is not None else f"an unexpected {kind}; its trace is in the log"
    if len(_metrics.secret) >= 4:  # a shorter one would mask letters of every message
        message = message.replace(_metrics.secret, MASK)
    record = {"kind": kind, "message": message, "at": at,
              "exit_code": raised.exit_code if raised is not None else 1}
    try:
        # only in a lake binlake has written to: a run refused before that (a server id in use, a bad
        # setting) leaves nothing behind
        if _metrics.error_file.parent.exists():
            _metrics.error_file.write_text(json.dumps(record))
    except Exception as failed:  # noqa: BLE001 - a lake unreachable too: never in the way of the error itself
        log.warning("could not keep the last error in %s (%s)", _metrics.error_file, type(failed).__name__)


def last_error(target: Target) -> dict[str, Any] | None:
    """The last error kept in the lake (see `error`), or None."""
    f = target.last_error
    try:
        return dict(json.loads(f.read_text())) if f.exists() else None
    except (OSError, ValueError):
        return None


def _show_kept() -> None:
    """Serve the last error an earlier run kept, once the lake can be read: a lake behind a URI is
    read through Spark (binlake.lake.storage), which a run starts after the metrics."""
    if _metrics.error_file is None or _metrics.kept_shown:
        return
    try:
        kept = last_error(Target.of(_metrics.cfg)) if _metrics.cfg is not None else None
    except BinlakeError:  # no Spark session yet: `streaming` looks again
        return
    _metrics.kept_shown = True
    if kept is not None and not _metrics.met_error:  # this run's own is the last
        _metrics.show_error(str(kept.get("kind")), float(kept.get("at") or 0))


def render() -> bytes:
    """The figures in Prometheus's text format, as served."""
    return generate_latest(_metrics.registry)


@contextmanager
def serving(cfg: Config) -> Iterator[Metrics]:
    """Count a run's figures, and serve them on `metrics.host:metrics.port` unless the port is 0; an
    error that ends the block is counted and kept (`error`). A port that cannot be had is refused at
    once, in one line naming the setting."""
    global _metrics, _served
    _metrics = Metrics()
    _metrics.cfg, _metrics.error_file = cfg, Target.of(cfg).last_error
    _metrics.secret = str(cfg.get("source.password") or "")
    _show_kept()
    server = _start(cfg, _metrics)
    _served = server is not None
    try:
        yield _metrics
    except BaseException as exc:
        if isinstance(exc, Exception):  # not a requested stop (binlake.errors.Stopped) nor Ctrl-C
            error(exc)
        raise
    finally:
        _served = False
        if server is not None:
            server.shutdown()
            server.server_close()


def _start(cfg: Config, metrics: Metrics) -> Any:
    """The HTTP server of `metrics`, serving in a thread of its own; None when metrics.port is 0."""
    port, host = int(cfg.get("metrics.port")), str(cfg.get("metrics.host"))
    if port == 0:
        return None
    try:
        server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"metrics.port is {port} on metrics.host {host}, which binlake cannot listen on "
                          f"({reason}); binlake needs a free port on a local address: set metrics.port to "
                          "another port (0 turns the metrics off) or fix metrics.host") from None
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server
