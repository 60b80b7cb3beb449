"""The bundle's YAML: parsed by databricks-bundles, the task graph, the wiring to the entry points and
the configuration, and no secret anywhere."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from databricks.bundles.jobs import Job
from databricks.bundles.pipelines import Pipeline

from binlake import config as config_mod
from binlake.databricks import entrypoints, pipeline_source
from binlake.databricks.entrypoints import TASK_VALUE_KEY, TASK_VALUE_LIMIT_BYTES, task_value_for
from binlake.errors import ConfigError

from .conftest import ROOT, Bundle

VAR_REF = re.compile(r"\$\{var\.([A-Za-z0-9_]+)\}")
JOB_PARAM_REF = re.compile(r"\{\{job\.parameters\.([A-Za-z0-9_]+)\}\}")
EXPECTED_VARIABLES = {
    "source_host", "source_port", "source_user", "password_secret_scope", "password_secret_key",
    "tables", "state_volume", "catalog", "schema", "chunk_size", "snapshot_concurrency", "scd_type", "silver_deletes",
    "schedule", "columns", "row_filter",
}
PLAN_NOTEBOOK = ROOT / "src" / "notebooks" / "plan.py"


def tasks_by_key(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_key"]: t for t in job["tasks"]}


def all_tasks(bundle: Bundle) -> Iterator[dict[str, Any]]:
    for job in bundle.jobs.values():
        for task in job["tasks"]:
            inner = task.get("for_each_task", {}).get("task")
            yield from (t for t in (task, inner) if t)


def wheel_tasks(bundle: Bundle) -> Iterator[dict[str, Any]]:
    return (t for t in all_tasks(bundle) if "python_wheel_task" in t)


def notebook_tasks(bundle: Bundle) -> Iterator[dict[str, Any]]:
    return (t for t in all_tasks(bundle) if "notebook_task" in t)


def job_parameters(job: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: str(p["default"]) for p in job.get("parameters", [])}


def task_argv(task: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """What the entry point receives, with each job parameter's value (its default) in place of its
    reference: a wheel task's parameters, or the plan notebook's widgets turned into parameters as the
    notebook turns them. A notebook task's widgets are the job's parameters (Databricks pushes job
    parameters down to notebook tasks), and its own base_parameters."""
    params = job_parameters(job)
    if "python_wheel_task" in task:
        return [JOB_PARAM_REF.sub(lambda m: params[m.group(1)], str(p))
                for p in task["python_wheel_task"]["parameters"]]
    widgets = {**params, **{k: str(v) for k, v in task["notebook_task"].get("base_parameters", {}).items()}}
    return entrypoints.argv_from_widgets(widgets.get)


# -- databricks-bundles parses every resource ---------------------------------------------------

def test_every_job_parses_with_databricks_bundles(bundle: Bundle) -> None:
    assert bundle.jobs, "no job found under resources/"
    for name, body in bundle.jobs.items():
        job = Job.from_dict(copy.deepcopy(body))
        assert job.name == name


def test_every_pipeline_parses_with_databricks_bundles(bundle: Bundle) -> None:
    assert bundle.pipelines, "no pipeline found under resources/"
    for name, body in bundle.pipelines.items():
        pipeline = Pipeline.from_dict(copy.deepcopy(body))
        assert pipeline.name == name


@pytest.mark.parametrize("where", ["job", "task", "for_each inner task", "wheel task", "notebook task"])
def test_an_unknown_job_field_is_refused(bundle: Bundle, where: str) -> None:
    body = copy.deepcopy(bundle.jobs["binlake"])
    tasks = tasks_by_key(body)
    target = {
        "job": body,
        "task": tasks["plan"],
        "for_each inner task": tasks["snapshot"]["for_each_task"]["task"],
        "wheel task": tasks["snapshot"]["for_each_task"]["task"]["python_wheel_task"],
        "notebook task": tasks["plan"]["notebook_task"],
    }[where]
    target["entrypoint"] = "binlake-plan"  # a plausible typo of entry_point
    with pytest.raises(ValueError, match="Unexpected field 'entrypoint'"):
        Job.from_dict(body)


@pytest.mark.parametrize("where", ["pipeline", "environment"])
def test_an_unknown_pipeline_field_is_refused(bundle: Bundle, where: str) -> None:
    body = copy.deepcopy(bundle.pipelines["binlake_pipeline"])
    (body if where == "pipeline" else body["environment"])["dependency"] = ["../dist/*.whl"]
    with pytest.raises(ValueError, match="Unexpected field 'dependency'"):
        Pipeline.from_dict(body)


# -- the task graph ------------------------------------------------------------------------------

def test_task_graph_is_plan_then_for_each_snapshot_then_stream(bundle: Bundle) -> None:
    tasks = tasks_by_key(bundle.jobs["binlake"])
    assert set(tasks) == {"plan", "snapshot", "stream"}
    deps = {k: [d["task_key"] for d in t.get("depends_on", [])] for k, t in tasks.items()}
    assert deps == {"plan": [], "snapshot": ["plan"], "stream": ["snapshot"]}

    # the plan is a notebook: Databricks documents dbutils.jobs.taskValues.set for notebooks only
    plan = tasks["plan"]["notebook_task"]
    assert (ROOT / "resources" / plan["notebook_path"]).resolve() == PLAN_NOTEBOOK

    for_each = tasks["snapshot"]["for_each_task"]
    assert for_each["inputs"] == "{{tasks.plan.values." + TASK_VALUE_KEY + "}}"
    assert for_each["concurrency"] == "${var.snapshot_concurrency}"
    inner = for_each["task"]["python_wheel_task"]
    assert (inner["package_name"], inner["entry_point"]) == ("binlake", "binlake-snapshot")
    params = inner["parameters"]
    assert params[params.index("--group") + 1] == "{{input}}"

    stream = tasks["stream"]["pipeline_task"]
    assert stream["pipeline_id"] == "${resources.pipelines.binlake_pipeline.id}"
    assert "binlake_pipeline" in bundle.pipelines


def test_one_run_at_a_time(bundle: Bundle) -> None:
    assert bundle.jobs["binlake"]["max_concurrent_runs"] == 1


def test_tasks_are_serverless_with_the_wheel(bundle: Bundle) -> None:
    job = bundle.jobs["binlake"]
    envs = {e["environment_key"]: e["spec"] for e in job["environments"]}
    assert set(envs) == {"default"}
    spec = envs["default"]
    assert "environment_version" in spec or "client" in spec
    assert "../dist/*.whl" in spec["dependencies"]
    assert "job_clusters" not in job
    for task in all_tasks(bundle):
        assert not {"new_cluster", "existing_cluster_id", "job_cluster_key"} & set(task)
    for task in wheel_tasks(bundle):
        assert task["environment_key"] == "default"
    # a serverless notebook task takes no environment_key; the notebook installs binlake itself
    for task in notebook_tasks(bundle):
        assert "environment_key" not in task
        assert "libraries" not in task


def test_the_plan_notebook_installs_binlake_and_runs_the_plan() -> None:
    text = PLAN_NOTEBOOK.read_text()
    assert text.startswith("# Databricks notebook source\n")
    cells = [c.strip() for c in text.split("# COMMAND ----------")]
    (pip,) = [c for c in cells if "%pip" in c]
    assert pip.startswith("# MAGIC %pip install"), "a magic command must open its cell"
    target = pip.split()[-1]
    assert (PLAN_NOTEBOOK.parent / target).resolve() == ROOT  # the deployed bundle root: pyproject.toml
    restart = cells.index(pip) + 1
    assert cells[restart].startswith("dbutils.library.restartPython()")
    assert "plan_in_notebook(dbutils)" in cells[-1]
    compile(text, str(PLAN_NOTEBOOK), "exec")


def test_the_plan_notebook_is_not_packaged_in_the_wheel() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["binlake*"]


def project_scripts() -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def test_entry_points_are_registered_in_the_wheel() -> None:
    scripts = project_scripts()
    assert scripts["binlake-plan"] == "binlake.databricks.entrypoints:plan_main"
    assert scripts["binlake-snapshot"] == "binlake.databricks.entrypoints:snapshot_main"


def test_wheel_task_entry_points_resolve(bundle: Bundle) -> None:
    scripts = project_scripts()
    for task in wheel_tasks(bundle):
        target = scripts[task["python_wheel_task"]["entry_point"]]
        module, func = target.split(":")
        assert callable(getattr(__import__(module, fromlist=[func]), func))


SAMPLE_VARS = {
    "source_host": "db.internal", "source_port": "3307", "source_user": "cdc",
    "password_secret_scope": "binlake", "password_secret_key": "source-password",
    "tables": r"shop\.orders,shop\.customer.*", "catalog": "main", "schema": "cdc",
    "chunk_size": "4096", "snapshot_concurrency": "8", "state_volume": "binlake", "scd_type": "1",
    "schedule": "0 0 * * * ?", "columns": "{shop.customers: {exclude: [ssn]}}",
    "row_filter": "{shop.orders: 'tenant_id = 7'}",
}


def _resolve(value: str, extra: dict[str, str] | None = None) -> str:
    out = VAR_REF.sub(lambda m: SAMPLE_VARS[m.group(1)], value)
    for k, v in (extra or {}).items():
        out = out.replace(k, v)
    return out


def test_task_parameters_build_the_intended_config(bundle: Bundle) -> None:
    """Each task's parameters (the plan notebook's widgets, the snapshot wheel task's parameters),
    with the variables filled in, parse into the configuration the variables name; the password
    comes from the scope and key, never from a parameter."""
    tasks = list(wheel_tasks(bundle)) + list(notebook_tasks(bundle))
    assert {t["task_key"] for t in tasks} == {"plan", "snapshot_group"}
    for task in tasks:
        params = [_resolve(p, {"{{input}}": "3"}) for p in task_argv(task, bundle.jobs["binlake"])]
        parser = entrypoints._parser("t", "t")
        if "--group" in params:
            parser.add_argument("--group", type=int)
        ns = parser.parse_args(params)
        cfg = entrypoints.load_config(ns, lambda: _StandInSecrets())
        assert cfg.get("source.hostname") == "db.internal"
        assert cfg.get("source.port") == 3307
        assert cfg.get("source.username") == "cdc"
        assert cfg.tables == [r"shop\.orders", r"shop\.customer.*"]
        assert cfg.get("databricks.secret-scope") == "binlake"
        assert cfg.get("databricks.secret-key") == "source-password"
        assert cfg.get("target.path") == "/Volumes/main/cdc/binlake"
        assert (cfg.get("target.catalog"), cfg.get("target.schema")) == ("main", "cdc")
        assert cfg.chunk_size == 4096
        assert cfg.get("source.columns") == {"shop.customers": {"exclude": ["ssn"]}}
        assert cfg.get("source.row-filter") == {"shop.orders": "tenant_id = 7"}
        assert cfg.get("source.password") == "pw-from-binlake/source-password"
        flags = {p for p in task_argv(task, bundle.jobs["binlake"]) if str(p).startswith("--")}
        assert flags <= set(entrypoints.PARAMETERS) | {"--group"}, flags


def test_the_plan_widgets_are_named_after_the_parameters(bundle: Bundle) -> None:
    """The job's parameters are the plan notebook's widgets, one per entry-point parameter; the
    notebook task repeats none of them."""
    (plan,) = notebook_tasks(bundle)
    assert not plan["notebook_task"].get("base_parameters")
    widgets = set(job_parameters(bundle.jobs["binlake"]))
    assert widgets == {entrypoints.widget_name(f) for f in entrypoints.PARAMETERS}
    assert entrypoints.widget_name("--password-secret-scope") == "password_secret_scope"


def test_each_setting_is_named_once_as_a_job_parameter(bundle: Bundle) -> None:
    """The wheel task takes every setting from a job parameter, never from ${var.*} again; every
    reference names a job parameter, and each job parameter is used."""
    job = bundle.jobs["binlake"]
    params = job_parameters(job)
    (wheel,) = wheel_tasks(bundle)
    values = [str(p) for p in wheel["python_wheel_task"]["parameters"] if not str(p).startswith("--")]
    assert not [v for v in values if VAR_REF.search(v)], values
    refs = [m for v in values for m in JOB_PARAM_REF.findall(v)]
    assert set(refs) <= set(params), set(refs) - set(params)
    assert set(refs) == set(params), set(params) - set(refs)


class _StandInSecrets:
    class secrets:  # mirrors dbutils.secrets
        @staticmethod
        def get(scope: str, key: str) -> str:
            return f"pw-from-{scope}/{key}"


# -- the pipeline ----------------------------------------------------------------------------------

def test_pipeline_is_serverless_and_runs_the_pipeline_source(bundle: Bundle) -> None:
    p = bundle.pipelines["binlake_pipeline"]
    assert p["serverless"] is True
    assert (p["catalog"], p["schema"]) == ("${var.catalog}", "${var.schema}")
    paths = [lib["file"]["path"] for lib in p["libraries"]]
    assert paths == ["../src/binlake/databricks/pipeline_source.py"]
    resolved = (ROOT / "resources" / paths[0]).resolve()
    assert resolved == ROOT / "src" / "binlake" / "databricks" / "pipeline_source.py"
    assert "../dist/*.whl" in p["environment"]["dependencies"]
    assert not {"clusters", "continuous"} & set(p), "a job's pipeline_task needs a triggered pipeline"


def test_pipeline_configuration_names_real_config_keys(bundle: Bundle) -> None:
    conf = bundle.pipelines["binlake_pipeline"]["configuration"]
    valid = {f"binlake.{s}.{k}" for s, keys in config_mod.SCHEMA.items() for k in keys}
    assert set(conf) <= valid | pipeline_source.PIPELINE_ONLY_KEYS, set(conf) - valid
    assert "binlake.source.password" not in conf
    expected = {
        "binlake.source.hostname": "${var.source_host}",
        "binlake.source.port": "${var.source_port}",
        "binlake.source.username": "${var.source_user}",
        "binlake.source.tables": "${var.tables}",
        "binlake.target.path": "/Volumes/${var.catalog}/${var.schema}/${var.state_volume}",
        "binlake.databricks.secret-scope": "${var.password_secret_scope}",
        "binlake.databricks.secret-key": "${var.password_secret_key}",
        "binlake.target.catalog": "${var.catalog}",
        "binlake.target.schema": "${var.schema}",
        "binlake.snapshot.chunk-size": "${var.chunk_size}",
        "binlake.source.columns": "${var.columns}",
        "binlake.source.row-filter": "${var.row_filter}",
        "binlake.silver.history": "${var.scd_type}",
        "binlake.silver.deletes": "${var.silver_deletes}",
    }
    assert conf == expected


def test_job_and_pipeline_feed_each_config_key_from_the_same_variable(bundle: Bundle) -> None:
    conf = bundle.pipelines["binlake_pipeline"]["configuration"]
    for task in list(wheel_tasks(bundle)) + list(notebook_tasks(bundle)):
        params = task_argv(task, bundle.jobs["binlake"])
        for flag, (key, _help) in entrypoints.PARAMETERS.items():
            assert flag in params, f"{task['task_key']} does not pass {flag}"
            assert params[params.index(flag) + 1] == conf[f"binlake.{key}"], flag


# -- bundle settings -------------------------------------------------------------------------------

def test_bundle_name_include_and_wheel_artifact(bundle: Bundle) -> None:
    root = bundle.root
    assert root["bundle"]["name"] == "binlake"
    assert root["include"] == ["resources/*.yml"]
    (artifact,) = root["artifacts"].values()
    assert artifact["type"] == "whl"
    assert artifact["path"] == "."
    assert re.search(r"(uv build|python3? -m build).*--wheel", artifact["build"])


def test_targets_dev_and_prod(bundle: Bundle) -> None:
    targets = bundle.targets
    assert targets["dev"]["mode"] == "development"
    assert targets["dev"]["default"] is True
    assert targets["prod"]["mode"] == "production"
    assert not targets["prod"].get("default")


def test_variables(bundle: Bundle) -> None:
    variables = bundle.variables
    assert EXPECTED_VARIABLES <= set(variables)
    assert variables["chunk_size"]["default"] == 8096 == config_mod.SCHEMA["snapshot"]["chunk-size"][1]
    assert variables["snapshot_concurrency"]["default"] == 8
    assert variables["scd_type"]["default"] == 1
    assert variables["silver_deletes"]["default"] == "hard" == config_mod.SCHEMA["silver"]["deletes"][1]
    assert variables["columns"]["default"] == "" and config_mod.SCHEMA["source"]["columns"][1] == {}
    assert variables["row_filter"]["default"] == "" and config_mod.SCHEMA["source"]["row-filter"][1] == {}
    for name, body in variables.items():
        assert body.get("description"), f"variable {name} has no description"


def test_every_variable_is_defined_and_used(bundle: Bundle) -> None:
    texts = {path: path.read_text() for path in bundle.files}
    used = {m for text in texts.values() for m in VAR_REF.findall(text)}
    assert used <= set(bundle.variables), used - set(bundle.variables)
    assert set(bundle.variables) <= used, set(bundle.variables) - used


def test_only_the_source_host_and_tables_must_be_given(bundle: Bundle) -> None:
    """Every other variable has a default or a value in each target."""
    without_default = {n for n, b in bundle.variables.items() if "default" not in b}
    for name, target in bundle.targets.items():
        missing = without_default - set(target.get("variables") or {})
        assert missing == {"source_host", "tables"}, (name, missing)


# -- no secret in any YAML -------------------------------------------------------------------------

SECRET_NAME = re.compile(
    r"(password|passwd|pwd|token|secret|api[_-]?key|access[_-]?key|credential)", re.IGNORECASE
)
# names that say where a secret lives (a scope and a key), not the secret itself
SECRET_POINTER = re.compile(r"secret[_.-]?(scope|key)$", re.IGNORECASE)
SECRET_LOOKING = [
    re.compile(r"dapi[0-9a-f]{32}"),  # Databricks personal access token
    re.compile(r"dose[0-9a-f]{32}"),  # Databricks OAuth secret
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/])"),  # long base64 blob
    re.compile(r"\b[0-9a-f]{32,}\b"),  # long hex blob
]
REFERENCE = re.compile(r"^\s*(\$\{[^}]+\}|\{\{[^}]+\}\})\s*$")


def _secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and not SECRET_POINTER.search(name)


def secret_findings(doc: Any, text: str, where: str) -> list[str]:
    """Literal values under secret-like names, and anything that looks like a key or token."""
    found: list[str] = []

    def walk(node: Any, path: str, secret_parent: bool) -> None:
        if isinstance(node, dict):
            # a variable or job parameter named like a secret: its default or value must not be literal
            holder = secret_parent or _secret_name(str(node.get("name", "")))
            for k, v in node.items():
                here = f"{path}.{k}"
                scalar = isinstance(v, (str, int, float)) and not isinstance(v, bool)
                named = _secret_name(str(k)) or (holder and k in ("default", "value"))
                if scalar and named and not REFERENCE.match(str(v)):
                    found.append(f"{where}: {here} holds a literal value")
                walk(v, here, _secret_name(str(k)))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]", False)

    walk(doc, "", False)
    for n, line in enumerate(text.splitlines(), 1):
        for pattern in SECRET_LOOKING:
            if pattern.search(line):
                found.append(f"{where}:{n}: looks like a key or token")
        code = "" if line.lstrip().startswith("#") else line
        m = re.match(r"\s*-?\s*([\w.-]+)\s*:\s*(\S.*)$", code)
        secret_key = m and re.fullmatch(r"(password|passwd|pwd|token|secret)", m.group(1), re.IGNORECASE)
        if m and secret_key and not REFERENCE.match(m.group(2)):
            found.append(f"{where}:{n}: {m.group(1)} has a literal value")
    return found


def test_no_literal_secret_in_any_yaml(bundle: Bundle) -> None:
    findings = []
    for path, doc in bundle.files.items():
        findings += secret_findings(doc, path.read_text(), str(path.relative_to(ROOT)))
    assert findings == []


@pytest.mark.parametrize("planted", [
    "password: hunter2",
    "token: " + "dapi" + "0123456789abcdef" * 2,
    "variables:\n  source_password:\n    default: hunter2",
    "spark_conf:\n  fs.azure.account.key: " + "QUJD" * 16,
    "resources:\n  jobs:\n    j:\n      parameters:\n        - name: api_token\n          default: abc",
])
def test_the_secret_scan_finds_planted_secrets(planted: str) -> None:
    assert secret_findings(yaml.safe_load(planted), planted, "planted")


def test_the_secret_scan_accepts_scope_and_key_names() -> None:
    text = "variables:\n  password_secret_scope:\n    default: binlake\n  password_secret_key:\n" \
           "    default: source-password\nconfiguration:\n  binlake.databricks.secret-key: ${var.k}\n"
    assert secret_findings(yaml.safe_load(text), text, "ok") == []


def test_the_password_reaches_the_tasks_only_as_scope_and_key(bundle: Bundle) -> None:
    texts = "\n".join(p.read_text() for p in bundle.files)
    assert "source.password" not in texts
    assert "BINLAKE_SOURCE_PASSWORD" not in texts
    assert "{{secrets/" not in texts


# -- the task value stays under Databricks' 48 KiB -------------------------------------------------

def simulated_group_ids(rows: int, chunk_size: int, group_size: int, max_groups: int = 1000) -> list[int]:
    """Group ids for one table as the planner cuts it: chunks of chunk_size rows, group_size chunks
    per group, and never more than max_groups groups per table (by design)."""
    chunks = math.ceil(rows / chunk_size)
    return list(range(min(math.ceil(chunks / group_size), max_groups)))


def test_task_value_for_a_100_million_row_table_is_small() -> None:
    chunk_size = config_mod.SCHEMA["snapshot"]["chunk-size"][1]
    group_size = config_mod.SCHEMA["snapshot"]["group-size"][1]
    assert math.ceil(10**8 / chunk_size) == 12352
    capped = simulated_group_ids(10**8, chunk_size, group_size)
    uncapped = simulated_group_ids(10**8, chunk_size, group_size, max_groups=10**9)
    assert len(uncapped) == math.ceil(12352 / group_size)  # 772 at the default group size of 16
    assert len(capped) == min(1000, len(uncapped))
    for ids in (capped, uncapped, list(range(1000))):
        text = task_value_for(ids)
        assert len(text.encode()) < TASK_VALUE_LIMIT_BYTES / 4, len(text)
    assert len(task_value_for(list(range(1000)))) == 4890  # the most groups one table gets


def test_task_value_with_the_planners_group_ids() -> None:
    """The same table's groups numbered by binlake.splits.group_id, first or tenth table captured."""
    from binlake.splits import group_id

    group_size = config_mod.SCHEMA["snapshot"]["group-size"][1]
    for table_no in (0, 9):
        ids = sorted({group_id(table_no, index, group_size) for index in range(12352)})
        assert len(ids) == math.ceil(12352 / group_size)
        assert len(task_value_for(ids)) < TASK_VALUE_LIMIT_BYTES / 2


def test_task_value_limit_is_reached_near_8400_groups() -> None:
    assert len(task_value_for(list(range(8377)))) <= TASK_VALUE_LIMIT_BYTES
    with pytest.raises(ConfigError, match=r"snapshot.group-size") as err:
        task_value_for(list(range(8378)))
    assert "49152" in err.value.message


@pytest.mark.parametrize("bad", [[1, -2], [True], ["3"], [1.5]])
def test_task_value_refuses_what_is_not_a_group_id(bad: list[Any]) -> None:
    with pytest.raises(Exception, match="group ids"):
        task_value_for(bad)


def test_bundle_files_are_where_a_databricks_user_expects_them() -> None:
    assert (ROOT / "databricks.yml").is_file()
    names = sorted(p.name for p in (ROOT / "resources").glob("*.yml"))
    assert names == ["binlake.job.yml", "binlake.pipeline.yml"]
    assert Path(entrypoints.__file__).resolve().parent == ROOT / "src" / "binlake" / "databricks"
