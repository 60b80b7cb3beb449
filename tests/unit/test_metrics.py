"""The metrics' pure parts: the settings, seconds behind the source, the figures as served, the last
error kept (without secrets, once), and a port that cannot be had refused in one line."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from binlake import config
from binlake.capture import metrics
from binlake.errors import ConfigError, RuntimeFailure, SchemaChangedError, Stopped
from binlake.lake.target import Target

SECRET = "Pw-metrics-7731!"


class SparkLike(Exception):
    """What a failed Spark job raises: the executor's binlake error inside its text."""


def cfg(tmp_path: Path, port: int = 0, **more: str) -> config.Config:
    sets = [f"target.path={tmp_path / 'lake'}", f"metrics.port={port}", *(f"{k}={v}" for k, v in more.items())]
    return config.load(None, sets, env={"BINLAKE_SOURCE_PASSWORD": SECRET})


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_are_off_unless_a_port_is_set(tmp_path: Path) -> None:
    loaded = config.load(None, [], env={})
    assert loaded.get("metrics.port") == 0 and loaded.get("metrics.host") == "127.0.0.1"
    assert config.load(None, [], env={"BINLAKE_METRICS_PORT": "9464"}).get("metrics.port") == 9464
    with metrics.serving(cfg(tmp_path)) as served:
        assert metrics._served is False
        assert served.registry is metrics._metrics.registry


@pytest.mark.parametrize("value, needs", [("70000", "0 (no metrics) or a port from 1 to 65535"),
                                          ("-1", "0 (no metrics) or a port from 1 to 65535"),
                                          ("nine", "a whole number in decimal digits")])
def test_a_bad_port_is_refused_in_one_line(value: str, needs: str) -> None:
    with pytest.raises(ConfigError) as refused:
        config.load(None, [f"metrics.port={value}"], env={})
    message = refused.value.message
    assert "\n" not in message and message.startswith("metrics.port is ") and needs in message, message
    assert "fix metrics.port" in message


def test_a_port_in_use_is_refused_at_start_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as refused, metrics.serving(cfg(tmp_path, port)):
            pytest.fail("served on a port in use")
    message = refused.value.message
    assert message == (f"metrics.port is {port} on metrics.host 127.0.0.1, which binlake cannot listen on (Address "
                       "already in use); binlake needs a free port on a local address: set metrics.port to another "
                       "port (0 turns the metrics off) or fix metrics.host")
    assert not (tmp_path / "lake" / "_binlake" / "error.json").exists()  # no run began


def test_seconds_behind_follow_the_head_reached_and_the_last_look() -> None:
    behind = metrics.Behind()
    assert behind.seconds(now=1000.0) is None  # not streaming
    behind.streaming(["db.b", "db.a"], covered_at=990.0)  # an earlier run's head, from the progress file
    assert behind.seconds(now=1000.0) == 10.0
    behind.landed(head_at=995.0)
    assert behind.seconds(now=1000.0) == 5.0
    assert behind.seconds(now=1060.0) == 65.0  # a stalled stream falls behind, scrape by scrape
    behind.looked(found_new=False)
    assert behind.seconds(now=1060.0) == 0.0  # its last look at the source found nothing new
    behind.looked(found_new=True)
    assert behind.seconds(now=1061.0) == 66.0
    [family] = list(behind.collect())
    assert [(s.labels["table"], s.value > 0) for s in family.samples] == [("db.a", True), ("db.b", True)]


def test_the_figures_as_served(tmp_path: Path) -> None:
    port = free_port()
    with metrics.serving(cfg(tmp_path, port)):
        metrics.chunks("db.t", 6, 2)
        metrics.snapshot_rows("db.t", 40)
        metrics.snapshot_rows("db.t", 20)
        metrics.chunks("db.t", 6, 6)
        metrics.streaming(["db.t"], Target.of(cfg(tmp_path)).stream_progress)  # no progress file yet
        metrics.batch({"db.t": 7, "db.u": 0}, time.monotonic() - 0.3)
        metrics.batch({"db.t": 3}, time.monotonic() - 0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            got = samples(answer.read().decode())
    assert got[("binlake_chunks_planned", (("table", "db.t"),))] == 6
    assert got[("binlake_chunks_done", (("table", "db.t"),))] == 6
    assert got[("binlake_rows_captured_total", (("phase", "snapshot"), ("table", "db.t")))] == 60
    assert got[("binlake_rows_captured_total", (("phase", "stream"), ("table", "db.t")))] == 10
    assert got[("binlake_micro_batch_rows_count", ())] == 2 and got[("binlake_micro_batch_rows_sum", ())] == 10
    assert got[("binlake_micro_batch_rows_bucket", (("le", "1.0"),))] == 0
    assert got[("binlake_micro_batch_rows_bucket", (("le", "10.0"),))] == 2
    assert 0.4 <= got[("binlake_micro_batch_duration_seconds_sum", ())] < 5
    assert 0 <= got[("binlake_seconds_behind_source", (("table", "db.t"),))] < 5
    assert ("process_cpu_seconds_total", ()) in got  # the standard process figures too
    with pytest.raises(OSError):  # the server ends with the block
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_the_error_that_ends_a_run_is_counted_once_and_kept_without_secrets(tmp_path: Path) -> None:
    kept = tmp_path / "lake" / "_binlake" / "error.json"
    kept.parent.mkdir(parents=True)  # a lake binlake has written to
    changed = SchemaChangedError(f"captured table db.t changed; the password {SECRET} must never show")
    with pytest.raises(SchemaChangedError), metrics.serving(cfg(tmp_path)):
        metrics.error(changed)  # the stream met it, and raised it on (it could not recover)
        raise changed
    got = samples(metrics.render().decode())
    assert got[("binlake_errors_total", (("kind", "SchemaChangedError"),))] == 1
    record = json.loads(kept.read_text())
    assert record["kind"] == "SchemaChangedError" and record["exit_code"] == 1
    assert SECRET not in kept.read_text() and "the password ****** must never show" in record["message"]
    assert got[("binlake_last_error_timestamp_seconds", (("kind", "SchemaChangedError"),))] == record["at"]

    # the next run serves it as the last error until it meets one of its own, which replaces it
    with pytest.raises(RuntimeError), metrics.serving(cfg(tmp_path)):
        got = samples(metrics.render().decode())
        assert got[("binlake_last_error_timestamp_seconds", (("kind", "SchemaChangedError"),))] == record["at"]
        assert not any(name == "binlake_errors_total" for name, _ in got)
        raise RuntimeError(f"a JVM trace naming {SECRET}")
    got = samples(metrics.render().decode())
    assert [k for k in got if k[0] == "binlake_last_error_timestamp_seconds"] == [
        ("binlake_last_error_timestamp_seconds", (("kind", "RuntimeError"),))]
    assert json.loads(kept.read_text())["message"] == "an unexpected RuntimeError; its trace is in the log"

    # a requested stop is no error; an error raised in Spark is known by the binlake error inside it
    with pytest.raises(Stopped), metrics.serving(cfg(tmp_path)):
        raise Stopped("stopped at mysql-bin.000001:4")
    assert json.loads(kept.read_text())["kind"] == "RuntimeError"
    with pytest.raises(SparkLike), metrics.serving(cfg(tmp_path)):
        raise SparkLike("Py4JJavaError ... binlake.errors.RuntimeFailure: lost the source 127.0.0.1:1")
    assert json.loads(kept.read_text())["kind"] == RuntimeFailure.__name__
    assert json.loads(kept.read_text())["message"] == "lost the source 127.0.0.1:1"


def test_status_text_shows_the_last_batch_and_the_last_error() -> None:
    from binlake.commands.status import render

    report = {"source": {"reachable": True, "stored": None, "now": "mariadb 10.11 (server_id 1)", "history": None},
              "stream": {"position": "mysql-bin.000002:910", "last_batch_at": 0.0 + 86400,
                         "last_batch": {"id": 7, "rows": 45, "seconds": 1.234}},
              "tables": [],
              "last_error": {"kind": "SchemaChangedError", "message": "captured table db.t changed; ...",
                             "at": 2 * 86400.0, "exit_code": 1}}
    lines = render(report).splitlines()
    assert lines[1] == ("stream: at mysql-bin.000002:910, last batch committed 1970-01-02 00:00:00 UTC "
                        "(45 changes in 1.2s)")
    assert lines[-1] == "last error (SchemaChangedError, 1970-01-03 00:00:00 UTC): captured table db.t changed; ..."


def test_status_text_shows_each_table_s_upkeep() -> None:
    from binlake.commands.status import render

    now = time.time()
    bronze = {"location": "/lake/bronze/db__t", "files": 6, "bytes": 2_100_000, "last_compaction": now - 12,
              "waiting_bytes": 0, "last_retention": now - 60}
    silver = {"location": "/lake/silver/db__t", "files": 3, "bytes": 120_000_000, "last_compaction": None,
              "waiting_bytes": 40_000_000, "last_retention": now - 60}
    table = {"source": "db.t", "phase": "binlog", "chunks": {"done": 1, "planned": 1}, "rows": 10,
             "binlog": {"position": "mysql-bin.000002:910", "lag_seconds": 0.0},
             "bronze": {"location": bronze["location"]}, "silver": {"location": silver["location"]},
             "maintenance": {"bronze": bronze, "silver": silver}}
    report = {"source": {"reachable": True, "stored": None, "now": "mariadb 10.11 (server_id 1)", "history": None},
              "stream": {"position": None, "last_batch_at": None}, "tables": [table]}
    lines = render(report).splitlines()
    assert lines[-2] == "  bronze /lake/bronze/db__t (6 files, 2.1 MB; compacted 12 s ago)"
    assert lines[-1] == "  silver /lake/silver/db__t (3 files, 120.0 MB; 40.0 MB waiting for retention)"
    silver.update(files=None, bytes=None, waiting_bytes=None)  # a silver behind a URI, no pass yet
    assert render(report).splitlines()[-1] == "  silver /lake/silver/db__t"


class Query:
    def __init__(self, message: str, data: bool) -> None:
        self.status = {"message": message, "isDataAvailable": data, "isTriggerActive": False}


def test_a_query_is_caught_up_once_a_trigger_found_nothing_new(tmp_path: Path) -> None:
    with metrics.serving(cfg(tmp_path, free_port())) as served:
        served.behind.streaming(["db.t"], covered_at=time.time() - 30)
        metrics.looked(Query("Initializing sources", False))  # no trigger yet: it has not looked
        assert (served.behind.seconds() or 0) >= 30
        metrics.looked(Query("Waiting for next trigger", False))
        assert served.behind.seconds() == 0.0
        metrics.looked(Query("Processing new data", True))
        assert (served.behind.seconds() or 0) >= 30


def test_nothing_is_kept_in_a_lake_binlake_never_wrote_to(tmp_path: Path) -> None:
    with pytest.raises(SchemaChangedError), metrics.serving(cfg(tmp_path)):
        raise SchemaChangedError("refused before anything was written")
    assert not (tmp_path / "lake").exists()


def test_a_lake_behind_a_uri_is_read_for_the_kept_error_once_spark_runs(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # no Spark session at the start of a run (another test of this worker may have left one running):
    # the kept error is looked for when the stream starts
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    uri = config.load(None, [f"target.path=file:{tmp_path / 'lake'}", f"metrics.port={free_port()}"], env={})
    with metrics.serving(uri) as served:
        assert served.kept_shown is False  # and the run goes on
