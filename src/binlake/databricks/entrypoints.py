"""The entry points of the bundle's tasks: `binlake-plan` (run by the plan notebook) and
`binlake-snapshot` (a python_wheel_task).

Each parses the task parameters into a `Config` (the same keys `binlake --set` takes), reads the
source password from the Databricks secret scope and key named by the parameters, and calls
`binlake.capture.plan` and `binlake.capture.snapshot`. They hold no algorithm of their own.

`binlake-plan` hands the chunk-group ids to the job's for_each task as the task value `groups`. The
Databricks docs support `dbutils.jobs.taskValues.set` in Python notebooks only, so the job runs it
from the notebook `src/notebooks/plan.py`, which turns its widgets into these parameters
(`argv_from_widgets`).
Databricks stores a task value only if its JSON is at most 48 KiB, so the list is measured before it
is set: ids 0..999 (the most groups one table gets) take 4,890 bytes, and the limit is reached at
8,377 groups, whatever the tables.

Outside a Databricks job run, `databricks.sdk.runtime` hands out the SDK's remote dbutils, whose
`jobs.taskValues.set` stores nothing. `binlake-plan` refuses to run with it rather than plan a
snapshot that no task would read.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from binlake import config as config_mod
from binlake.errors import BinlakeError, ConfigError, RuntimeFailure
from binlake.memory import tune

TASK_VALUE_KEY = "groups"
TASK_VALUE_LIMIT_BYTES = 48 * 1024

# task parameter -> (configuration key, help); the bundle's job passes these from ${var.*}
PARAMETERS: dict[str, tuple[str, str]] = {
    "--source-host": ("source.hostname", "MySQL/MariaDB host"),
    "--source-port": ("source.port", "MySQL/MariaDB port"),
    "--source-user": ("source.username", "source user"),
    "--tables": ("source.tables", "comma-separated regexes over db.table"),
    "--password-secret-scope": ("databricks.secret-scope", "secret scope holding the source password"),
    "--password-secret-key": ("databricks.secret-key", "secret key of the source password"),
    "--target-path": ("target.path", "root of the split state and bronze, shared by every task (a UC volume)"),
    "--catalog": ("target.catalog", "Unity Catalog catalog"),
    "--schema": ("target.schema", "Unity Catalog schema"),
    "--chunk-size": ("snapshot.chunk-size", "rows per chunk"),
    "--columns": ("source.columns", "the columns captured of each table, as YAML: {db.table: {exclude: [col]}}"),
    "--row-filter": ("source.row-filter", "the rows of each table silver keeps, as YAML: {db.table: 'tenant_id = 7'}"),
}


def widget_name(flag: str) -> str:
    """The plan notebook's widget for a task parameter: `--source-host` -> `source_host`."""
    return flag.removeprefix("--").replace("-", "_")


def argv_from_widgets(get: Callable[[str], str | None]) -> list[str]:
    """Task parameters from notebook widgets (`dbutils.widgets.get`); an empty widget is left out."""
    argv: list[str] = []
    for flag in PARAMETERS:
        value = get(widget_name(flag))
        if value:
            argv += [flag, value]
    return argv


class SecretsUtil(Protocol):
    def get(self, scope: str, key: str) -> str: ...


class TaskValuesUtil(Protocol):
    def set(self, key: str, value: Any) -> None: ...


class JobsUtil(Protocol):
    @property
    def taskValues(self) -> TaskValuesUtil: ...  # dbutils' own spelling


class DbUtils(Protocol):
    """The part of Databricks' `dbutils` the entry points use; tests pass a stand-in."""

    @property
    def secrets(self) -> SecretsUtil: ...

    @property
    def jobs(self) -> JobsUtil: ...


class WidgetsUtil(Protocol):
    def text(self, name: str, defaultValue: str) -> None: ...  # dbutils' own spelling

    def get(self, name: str) -> str: ...


class NotebookDbUtils(DbUtils, Protocol):
    @property
    def widgets(self) -> WidgetsUtil: ...


def task_value_for(group_ids: Sequence[int]) -> str:
    """The JSON of the `groups` task value, refused when Databricks would not store it.

    The size is measured on `json.dumps` with its default `", "` separators, the longer of the usual
    spellings, so the check holds however the runtime serialises the list.
    """
    bad = [g for g in group_ids if isinstance(g, bool) or not isinstance(g, int) or g < 0]
    if bad:
        raise RuntimeFailure(
            f"snapshot group ids must be whole numbers >= 0; the planner returned {bad[:3]!r}: "
            "this is a bug in binlake.capture.plan.group_ids, please report it"
        )
    text = json.dumps(list(group_ids))
    size = len(text.encode("utf-8"))
    if size > TASK_VALUE_LIMIT_BYTES:
        raise ConfigError(
            f"the task value '{TASK_VALUE_KEY}' is {size} bytes of JSON for {len(group_ids)} "
            f"snapshot groups; Databricks stores at most {TASK_VALUE_LIMIT_BYTES} bytes: raise "
            "snapshot.group-size (--set snapshot.group-size=N) or capture fewer tables per job"
        )
    return text


def plan_main(argv: Sequence[str] | None = None, *, dbutils: DbUtils | None = None) -> None:
    """`binlake-plan`: plan the snapshot chunks and set the task value `groups`."""
    _run("binlake-plan", lambda: _plan(argv, dbutils))


def plan_in_notebook(dbutils: NotebookDbUtils) -> None:
    """The plan notebook's body: its widgets become `binlake-plan`'s parameters.

    A notebook has no exit code, so a failure is raised as the binlake error itself -- its one-line
    message names the setting and the fix -- and fails the task.
    """
    for flag in PARAMETERS:
        dbutils.widgets.text(widget_name(flag), "")  # the job's base_parameters fill them in
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _plan(argv_from_widgets(dbutils.widgets.get), dbutils)


def snapshot_main(argv: Sequence[str] | None = None, *, dbutils: DbUtils | None = None) -> None:
    """`binlake-snapshot --group N`: read one group of chunks (all unfinished ones without --group)."""
    _run("binlake-snapshot", lambda: _snapshot(argv, dbutils))


def _plan(argv: Sequence[str] | None, dbutils: DbUtils | None) -> None:
    args = _parser("binlake-plan", "Plan the snapshot chunks and hand their group ids to the snapshot task.")
    ns = args.parse_args(argv)
    # Fetched before planning: without a working taskValues the plan would be read by nobody.
    utils = dbutils if dbutils is not None else runtime_dbutils("binlake-plan", needs_task_values=True)
    cfg = load_config(ns, lambda: utils)

    from binlake.capture.plan import group_ids, plan

    plan(cfg)
    ids = group_ids(cfg)
    text = task_value_for(ids)
    utils.jobs.taskValues.set(key=TASK_VALUE_KEY, value=list(ids))
    print(f"binlake-plan: {len(ids)} snapshot groups; task value '{TASK_VALUE_KEY}' is {len(text)} bytes")


def _snapshot(argv: Sequence[str] | None, dbutils: DbUtils | None) -> None:
    args = _parser("binlake-snapshot", "Read one group of snapshot chunks into bronze.")
    args.add_argument("--group", type=_group_id, default=None, metavar="N",
                      help="the group id, one of the plan task's 'groups' (default: every unfinished group)")
    ns = args.parse_args(argv)

    def utils() -> DbUtils:
        if dbutils is not None:
            return dbutils
        return runtime_dbutils("binlake-snapshot", needs_task_values=False)

    cfg = load_config(ns, utils)

    from binlake.capture.snapshot import snapshot

    snapshot(cfg, groups=None if ns.group is None else [ns.group], apply_silver=False)
    print(f"binlake-snapshot: group {'all' if ns.group is None else ns.group} done")


def load_config(ns: argparse.Namespace, dbutils: Callable[[], DbUtils]) -> config_mod.Config:
    """The configuration from the task parameters, with the password read from the secret scope.

    Without a scope and key the password comes from BINLAKE_SOURCE_PASSWORD, as locally.
    """
    return load_with_secret(overrides_from(ns), dbutils, flag_hint=True)


def load_with_secret(
    overrides: list[str], dbutils: Callable[[], DbUtils], *, flag_hint: bool = False
) -> config_mod.Config:
    """`config.load(None, overrides)`, then the password from databricks.secret-scope/secret-key, and
    the TLS CA from databricks.tls-ca-secret-key when it is set.

    `dbutils` is called only when a scope and key are set, so nothing asks Databricks for a secret
    locally. Without them the password comes from BINLAKE_SOURCE_PASSWORD (or stays empty).
    """
    cfg = config_mod.load(None, overrides)
    scope, key = cfg.get("databricks.secret-scope"), cfg.get("databricks.secret-key")
    ca_key = cfg.get("databricks.tls-ca-secret-key")
    if ca_key and not scope:
        raise ConfigError("databricks.tls-ca-secret-key is set but databricks.secret-scope is not; binlake reads "
                          "the CA from that scope: set databricks.secret-scope")
    if ca_key and cfg.get("source.tls.ca"):
        raise ConfigError("databricks.tls-ca-secret-key and source.tls.ca are both set; binlake needs one CA: "
                          "unset one of them")
    if bool(scope) != bool(key) and not (scope and ca_key):  # a scope for the CA alone needs no password key
        have, missing = ("secret-scope", "secret-key") if scope else ("secret-key", "secret-scope")
        fix = f"pass --password-{missing}" if flag_hint else f"set databricks.{missing}"
        raise ConfigError(
            f"databricks.{missing} is not set but databricks.{have} is; binlake needs both to read the "
            f"source password: {fix}"
        )
    found: list[str] = []
    if ca_key:  # PEM text, its lines kept: a text setting takes the text as given
        found.append(f"source.tls.ca={_read_secret(dbutils(), str(scope), str(ca_key))}")
    if scope and key:
        found.append(f"source.password={_read_secret(dbutils(), str(scope), str(key))}")
    return config_mod.load(None, [*overrides, *found]) if found else cfg


def overrides_from(ns: argparse.Namespace) -> list[str]:
    """`section.key=value` overrides for `config.load` from the parsed task parameters."""
    out: list[str] = []
    given = vars(ns)
    for key, _help in PARAMETERS.values():
        value = given.get(key)
        if value is not None:
            # text, read by the setting's type: a regex like shop\.orders keeps its backslash and a host
            # named 'null' stays a name
            out.append(f"{key}={value}")
    out.extend(given.get("set") or [])
    return out


def runtime_dbutils(prog: str, *, needs_task_values: bool) -> DbUtils:
    """Databricks' `dbutils` of the running task, via `databricks.sdk.runtime`."""
    try:
        from databricks.sdk import runtime
    except Exception as exc:  # noqa: BLE001 - the SDK raises ValueError when it finds no credentials
        raise RuntimeFailure(
            f"{prog} found no Databricks runtime ({type(exc).__name__}: {_first_line(exc)}); it runs as a "
            "task of the binlake job: deploy the bundle and run the job, or use the `binlake` command locally"
        ) from None
    if needs_task_values and runtime.is_local_implementation:
        raise RuntimeFailure(
            f"{prog} got the Databricks SDK's remote dbutils, whose jobs.taskValues.set stores nothing, so "
            "the snapshot task would never see the planned groups; binlake needs the dbutils of a job run: "
            "run it as the plan task of the binlake job"
        )
    return cast(DbUtils, runtime.dbutils)


def _read_secret(dbutils: DbUtils, scope: str, key: str) -> str:
    try:
        return dbutils.secrets.get(scope=scope, key=key)
    except Exception as exc:  # noqa: BLE001 - dbutils raises whatever its backend raised
        raise RuntimeFailure(
            f"reading secret '{key}' from scope '{scope}' failed ({type(exc).__name__}: {_first_line(exc)}); "
            "binlake needs READ on that scope and the key present: check databricks.secret-scope and "
            "databricks.secret-key (--password-secret-scope, --password-secret-key)"
        ) from None


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag, (key, help_text) in PARAMETERS.items():
        parser.add_argument(flag, dest=key, default=None, metavar="VALUE", help=f"{help_text} ({key})")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override any other configuration key (repeatable)")
    return parser


def _group_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a group id (a whole number >= 0)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a group id (a whole number >= 0)")
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no message"


def _run(prog: str, step: Callable[[], None]) -> None:
    """Run one entry point; a binlake error becomes its one-line message and exit code."""
    tune()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        step()
    except BinlakeError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
