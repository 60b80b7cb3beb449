"""The bundle's task entry points as thin wrappers: parameters in, `binlake.capture.plan` and `snapshot` called, the
task value set, the password read from the secret scope and never printed.

`binlake.capture.plan` and `snapshot` are replaced by a recording module here: these tests check the wrapper only; the
engine itself is tested against a real MariaDB elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import databricks.sdk
import pytest

from binlake.config import Config
from binlake.databricks.entrypoints import PARAMETERS, plan_in_notebook, plan_main, snapshot_main, widget_name
from binlake.errors import ConfigError

PASSWORD = "pw-Zq8#xT!s3cr3t"
PARAMS = [
    "--source-host", "db.internal", "--source-port", "3307", "--source-user", "cdc",
    "--password-secret-scope", "binlake", "--password-secret-key", "source-password",
    "--tables", r"shop\.orders,shop\.customer.*", "--catalog", "main", "--schema", "cdc",
    "--chunk-size", "8096",
]


@dataclass
class StandInDbUtils:
    """Records what the entry points ask of dbutils."""

    secret: str = PASSWORD
    fail_secret: Exception | None = None
    task_values: list[tuple[str, Any]] = field(default_factory=list)
    secret_reads: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Secrets:
            def get(self, scope: str, key: str) -> str:
                outer.secret_reads.append((scope, key))
                if outer.fail_secret:
                    raise outer.fail_secret
                return outer.secret

        class TaskValues:
            def set(self, key: str, value: Any) -> None:
                outer.task_values.append((key, value))

        self.secrets = Secrets()
        self.jobs = types.SimpleNamespace(taskValues=TaskValues())
        self.widgets = StandInWidgets()


@dataclass
class StandInWidgets:
    """dbutils.widgets of a notebook task: `values` are the job's base_parameters."""

    values: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)

    def text(self, name: str, defaultValue: str) -> None:
        self.created.append(name)
        self.values.setdefault(name, defaultValue)

    def get(self, name: str) -> str:
        return self.values[name]


@dataclass
class RecordingPipeline:
    groups: list[int] = field(default_factory=lambda: list(range(1000)))
    calls: list[tuple[str, Config, Any]] = field(default_factory=list)

    def module(self) -> types.ModuleType:
        mod = types.ModuleType("binlake.capture.steps")
        mod.plan = lambda cfg: self.calls.append(("plan", cfg, None))  # type: ignore[attr-defined]

        def group_ids(cfg: Config) -> list[int]:
            self.calls.append(("group_ids", cfg, None))
            return list(self.groups)

        def snapshot(cfg: Config, groups: list[int] | None = None, apply_silver: bool = True) -> None:
            assert not apply_silver, "on Databricks silver is the pipeline's AUTO CDC, not the snapshot task's"
            self.calls.append(("snapshot", cfg, groups))

        mod.group_ids = group_ids  # type: ignore[attr-defined]
        mod.snapshot = snapshot  # type: ignore[attr-defined]
        return mod


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> RecordingPipeline:
    rec = RecordingPipeline()
    for step in ("binlake.capture.plan", "binlake.capture.snapshot"):
        monkeypatch.setitem(sys.modules, step, rec.module())
    monkeypatch.delenv("BINLAKE_SOURCE_PASSWORD", raising=False)
    return rec


def assert_password_never_shown(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err
    assert PASSWORD not in caplog.text
    return out + err


def test_plan_sets_the_groups_task_value(pipeline: RecordingPipeline, capsys: pytest.CaptureFixture[str],
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    dbutils = StandInDbUtils()
    plan_main(PARAMS, dbutils=dbutils)

    assert [c[0] for c in pipeline.calls] == ["plan", "group_ids"]
    cfg = pipeline.calls[0][1]
    assert cfg.get("source.hostname") == "db.internal"
    assert cfg.get("source.port") == 3307
    assert cfg.tables == [r"shop\.orders", r"shop\.customer.*"]
    assert (cfg.get("target.catalog"), cfg.get("target.schema")) == ("main", "cdc")
    assert cfg.get("source.password") == PASSWORD
    assert PASSWORD not in cfg.dump()
    assert dbutils.secret_reads == [("binlake", "source-password")]
    assert dbutils.task_values == [("groups", list(range(1000)))]
    shown = assert_password_never_shown(capsys, caplog)
    assert "1000 snapshot groups" in shown


def test_plan_refuses_a_task_value_over_48_kib(pipeline: RecordingPipeline,
                                               capsys: pytest.CaptureFixture[str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    pipeline.groups = list(range(9000))
    dbutils = StandInDbUtils()
    with pytest.raises(SystemExit) as exit_:
        plan_main(PARAMS, dbutils=dbutils)
    assert exit_.value.code == 2
    assert dbutils.task_values == []
    err = assert_password_never_shown(capsys, caplog)
    assert "task value 'groups'" in err and "49152" in err and "snapshot.group-size" in err
    assert len(err.strip().splitlines()) == 1


def test_plan_reports_an_unreadable_secret_without_a_traceback(pipeline: RecordingPipeline,
                                                               capsys: pytest.CaptureFixture[str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    denied = PermissionError("User does not have READ permission on scope binlake")
    dbutils = StandInDbUtils(fail_secret=denied)
    with pytest.raises(SystemExit) as exit_:
        plan_main(PARAMS, dbutils=dbutils)
    assert exit_.value.code == 1
    assert pipeline.calls == [] and dbutils.task_values == []
    err = assert_password_never_shown(capsys, caplog)
    assert "scope 'binlake'" in err and "READ" in err


def test_a_scope_without_a_key_is_a_configuration_error(pipeline: RecordingPipeline,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    params = PARAMS[:PARAMS.index("--password-secret-key")] + PARAMS[PARAMS.index("--tables"):]
    with pytest.raises(SystemExit) as exit_:
        plan_main(params, dbutils=StandInDbUtils())
    assert exit_.value.code == 2
    assert "databricks.secret-key is not set" in capsys.readouterr().err
    assert pipeline.calls == []


def test_without_a_scope_the_password_comes_from_the_environment(pipeline: RecordingPipeline,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BINLAKE_SOURCE_PASSWORD", "from-env")
    params = PARAMS[:PARAMS.index("--password-secret-scope")] + PARAMS[PARAMS.index("--tables"):]
    dbutils = StandInDbUtils()
    plan_main(params, dbutils=dbutils)
    assert pipeline.calls[0][1].get("source.password") == "from-env"
    assert dbutils.secret_reads == []


def test_snapshot_reads_the_group_it_is_given(pipeline: RecordingPipeline, capsys: pytest.CaptureFixture[str],
                                              caplog: pytest.LogCaptureFixture) -> None:
    snapshot_main([*PARAMS, "--group", "17"], dbutils=StandInDbUtils())
    ((name, cfg, groups),) = pipeline.calls
    assert (name, groups) == ("snapshot", [17])
    assert cfg.get("source.password") == PASSWORD
    assert cfg.chunk_size == 8096
    assert_password_never_shown(capsys, caplog)


def test_snapshot_without_a_group_reads_every_unfinished_group(pipeline: RecordingPipeline) -> None:
    snapshot_main(PARAMS, dbutils=StandInDbUtils())
    assert pipeline.calls[0][2] is None


@pytest.mark.parametrize("group", ["-1", "x", "{{input}}"])
def test_snapshot_refuses_what_is_not_a_group_id(pipeline: RecordingPipeline, group: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        snapshot_main([*PARAMS, "--group", group], dbutils=StandInDbUtils())
    assert exit_.value.code == 2
    assert "not a group id" in capsys.readouterr().err
    assert pipeline.calls == []


def test_parameters_reach_the_config_verbatim(pipeline: RecordingPipeline) -> None:
    """Values YAML would read as something else stay the text the job passed."""
    tricky = ["--source-host", "null", "--source-user", "*cdc", "--tables", r"a #b,c: d,[e],yes,x\d{2}",
              "--schema", "007", "--set", "snapshot.group-size=16"]
    snapshot_main([*PARAMS, *tricky], dbutils=StandInDbUtils())
    cfg = pipeline.calls[0][1]
    assert cfg.get("source.hostname") == "null"
    assert cfg.get("source.username") == "*cdc"
    assert cfg.tables == ["a #b", "c: d", "[e]", "yes", r"x\d{2}"]
    assert cfg.get("target.schema") == "007"
    assert cfg.get("snapshot.group-size") == 16


def test_a_bad_value_names_the_setting(pipeline: RecordingPipeline,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        plan_main([*PARAMS, "--chunk-size", "lots"], dbutils=StandInDbUtils())
    assert exit_.value.code == 2
    assert "snapshot.chunk-size" in capsys.readouterr().err


# -- dbutils from the Databricks runtime -------------------------------------------------------------

def _fake_runtime(monkeypatch: pytest.MonkeyPatch, *, local: bool, dbutils: StandInDbUtils) -> None:
    runtime = types.ModuleType("databricks.sdk.runtime")
    runtime.is_local_implementation = local  # type: ignore[attr-defined]
    runtime.dbutils = dbutils  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "databricks.sdk.runtime", runtime)
    monkeypatch.setattr(databricks.sdk, "runtime", runtime, raising=False)


def test_plan_uses_the_runtime_dbutils_of_a_job_run(pipeline: RecordingPipeline,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    dbutils = StandInDbUtils()
    _fake_runtime(monkeypatch, local=False, dbutils=dbutils)
    plan_main(PARAMS)
    assert dbutils.task_values == [("groups", list(range(1000)))]


def test_plan_refuses_the_sdk_stand_in_whose_task_values_go_nowhere(
    pipeline: RecordingPipeline, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_runtime(monkeypatch, local=True, dbutils=StandInDbUtils())
    with pytest.raises(SystemExit) as exit_:
        plan_main(PARAMS)
    assert exit_.value.code == 1
    assert "jobs.taskValues.set stores nothing" in capsys.readouterr().err
    assert pipeline.calls == [], "planned although nobody could read the groups"


def test_snapshot_may_read_secrets_through_the_sdk_stand_in(pipeline: RecordingPipeline,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    dbutils = StandInDbUtils()
    _fake_runtime(monkeypatch, local=True, dbutils=dbutils)
    snapshot_main([*PARAMS, "--group", "0"])
    assert dbutils.secret_reads == [("binlake", "source-password")]


def test_outside_databricks_plan_says_where_it_runs(pipeline: RecordingPipeline,
                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    for name in list(os.environ):
        if name.startswith(("DATABRICKS_", "ARM_", "AZURE_", "GOOGLE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "none.cfg"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delitem(sys.modules, "databricks.sdk.runtime", raising=False)
    monkeypatch.delattr(databricks.sdk, "runtime", raising=False)
    with pytest.raises(SystemExit) as exit_:
        plan_main(PARAMS)
    assert exit_.value.code == 1
    assert "runs as a task of the binlake job" in capsys.readouterr().err
    assert pipeline.calls == []


# -- the plan notebook ---------------------------------------------------------------------------------

def notebook_widgets(params: list[str]) -> dict[str, str]:
    return {widget_name(flag): value for flag, value in zip(params[::2], params[1::2])}


def test_the_plan_notebook_turns_its_widgets_into_the_plan(pipeline: RecordingPipeline,
                                                           capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    dbutils = StandInDbUtils()
    dbutils.widgets.values = notebook_widgets(PARAMS)
    plan_in_notebook(dbutils)  # type: ignore[arg-type]

    assert sorted(dbutils.widgets.created) == sorted(widget_name(f) for f in PARAMETERS)
    assert [c[0] for c in pipeline.calls] == ["plan", "group_ids"]
    cfg = pipeline.calls[0][1]
    assert (cfg.get("source.hostname"), cfg.get("source.port")) == ("db.internal", 3307)
    assert cfg.tables == [r"shop\.orders", r"shop\.customer.*"]
    assert cfg.get("source.password") == PASSWORD
    assert dbutils.task_values == [("groups", list(range(1000)))]
    assert_password_never_shown(capsys, caplog)


def test_an_empty_widget_leaves_the_default(pipeline: RecordingPipeline) -> None:
    dbutils = StandInDbUtils()
    dbutils.widgets.values = {**notebook_widgets(PARAMS), "source_port": "", "chunk_size": ""}
    plan_in_notebook(dbutils)  # type: ignore[arg-type]
    cfg = pipeline.calls[0][1]
    assert (cfg.get("source.port"), cfg.chunk_size) == (3306, 8096)


def test_the_plan_notebook_fails_its_task_with_the_binlake_error(pipeline: RecordingPipeline) -> None:
    """A notebook has no exit code: the error itself, one line naming the fix, fails the task."""
    dbutils = StandInDbUtils()
    dbutils.widgets.values = {**notebook_widgets(PARAMS), "password_secret_key": ""}
    with pytest.raises(ConfigError, match="databricks.secret-key is not set.*--password-secret-key"):
        plan_in_notebook(dbutils)  # type: ignore[arg-type]
    assert pipeline.calls == [] and dbutils.task_values == []
