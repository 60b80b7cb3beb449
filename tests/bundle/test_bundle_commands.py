"""The bundle commands the README and docs/databricks.md print, checked as `databricks bundle validate`
would check them (the CLI needs a workspace to log in to, so it cannot run here): each command, with
the variables its own text sets (`export BUNDLE_VAR_*`, `--var`), gives every variable a value, names
a target the bundle has and, for `run`, a job the bundle deploys; and the settings a production
bundle carries (uuid, permissions, run_as, a schedule) are there."""

from __future__ import annotations

import copy
import re
import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from databricks.bundles.jobs import Job

from .conftest import ROOT, Bundle
from .test_bundle import VAR_REF

DOCS = [ROOT / "README.md", ROOT / "docs" / "databricks.md"]
SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)


@dataclass
class Command:
    """One `databricks bundle ...` line, with the environment the lines before it exported."""

    verb: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def option(self, *names: str) -> str | None:
        for i, a in enumerate(self.args):
            if a in names and i + 1 < len(self.args):
                return self.args[i + 1]
            for n in names:
                if a.startswith(n + "="):
                    return a.split("=", 1)[1]
        return None

    def vars(self) -> dict[str, str]:
        out = {k.removeprefix("BUNDLE_VAR_"): v for k, v in self.env.items() if k.startswith("BUNDLE_VAR_")}
        for i, a in enumerate(self.args):
            if a == "--var":
                name, _, value = self.args[i + 1].partition("=")
                out[name] = value
        return out

    def positional(self) -> list[str]:
        out, skip = [], False
        for a in self.args:
            if skip:
                skip = False
            elif a in ("-t", "--target", "--var", "-p", "--profile"):
                skip = True
            elif not a.startswith("-"):
                out.append(a)
        return out


def bundle_commands(text: str) -> list[Command]:
    """Every `databricks bundle` command of the text's sh blocks, in order, each with what the
    block's `export` lines set before it."""
    found: list[Command] = []
    for block in SH_BLOCK.findall(text):
        env: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():  # a command continued over lines is one
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"]:
                env.update(w.split("=", 1) for w in words[1:] if "=" in w)
            elif words[:2] == ["databricks", "bundle"]:
                found.append(Command(words[2], words[3:], dict(env)))
    return found


def problems(bundle: Bundle, cmd: Command) -> list[str]:
    """What `databricks bundle <verb>` would refuse in `cmd`: a target the bundle lacks, a variable
    without a value (from --var, BUNDLE_VAR_*, the target or a default), a reference to a variable
    that is not declared, a run of a resource the bundle does not deploy."""
    out: list[str] = []
    target = cmd.option("-t", "--target") or next(n for n, t in bundle.targets.items() if t.get("default"))
    if target not in bundle.targets:
        return [f"target {target} is not in databricks.yml"]
    given = cmd.vars()
    unknown = set(given) - set(bundle.variables)
    out += [f"--var {n}: no such variable" for n in sorted(unknown)]
    in_target = set((bundle.targets[target] or {}).get("variables") or {})
    for name, body in bundle.variables.items():
        if "default" not in body and name not in in_target and name not in given:
            out.append(f"variable {name} has no value in `databricks bundle {cmd.verb} -t {target}`")
    for path in bundle.files:
        for name in VAR_REF.findall(path.read_text()):
            if name not in bundle.variables:
                out.append(f"{path.name} references undeclared variable {name}")
    if cmd.verb == "run":
        (key,) = cmd.positional()
        if key not in bundle.jobs and key not in bundle.pipelines:
            out.append(f"bundle run {key}: no such job or pipeline")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_documented_commands_would_validate(bundle: Bundle, doc: Path) -> None:
    cmds = bundle_commands(doc.read_text())
    assert [c.verb for c in cmds] == ["validate", "deploy", "run"], cmds
    for cmd in cmds:
        assert problems(bundle, cmd) == [], (doc.name, cmd)
    run = cmds[-1]
    assert run.positional() == ["binlake"] and run.option("-t") == "dev"


def test_a_required_variable_without_a_value_is_found(bundle: Bundle) -> None:
    """The check fails as validate does: without the README's export, and with a variable added
    without a default."""
    (validate, _, run) = bundle_commands((ROOT / "README.md").read_text())
    bare = Command("run", run.args)
    assert problems(bundle, bare) == [
        "variable source_host has no value in `databricks bundle run -t dev`",
        "variable tables has no value in `databricks bundle run -t dev`",
    ]
    planted = copy.deepcopy(bundle)
    planted.root["variables"]["warehouse_id"] = {"description": "a new required one"}
    assert problems(planted, validate) == ["variable warehouse_id has no value in `databricks bundle validate -t dev`"]
    assert problems(bundle, Command("run", ["nightly", "-t", "dev"], validate.env)) == [
        "bundle run nightly: no such job or pipeline"]


def test_the_bundle_has_a_uuid(bundle: Bundle) -> None:
    assert uuid.UUID(bundle.root["bundle"]["uuid"]).version == 4


def test_prod_sets_permissions_and_run_as(bundle: Bundle) -> None:
    prod = bundle.targets["prod"]
    assert prod["mode"] == "production"
    assert {"level": "CAN_MANAGE", "user_name": "${workspace.current_user.userName}"} in prod["permissions"]
    assert prod["run_as"] == {"user_name": "${workspace.current_user.userName}"}
    assert "run_as" not in bundle.targets["dev"]  # development mode runs as the deploying user


def test_the_job_runs_on_a_schedule_well_inside_a_day(bundle: Bundle) -> None:
    """The binlog must be read before the source purges it (MySQL keeps it 30 days by default, a
    managed server often one day or less): the default schedule is hourly, in Quartz syntax, and the
    job parses with it."""
    job = bundle.jobs["binlake"]
    schedule = job["schedule"]
    assert schedule["quartz_cron_expression"] == "${var.schedule}"
    assert schedule["pause_status"] == "UNPAUSED"
    cron = bundle.variables["schedule"]["default"]
    fields = cron.split()
    assert len(fields) in (6, 7) and fields[0].isdigit() and fields[1].isdigit() and fields[2] == "*", cron
    resolved = copy.deepcopy(job)
    resolved["schedule"]["quartz_cron_expression"] = cron
    assert Job.from_dict(resolved).schedule is not None
    assert job["max_concurrent_runs"] == 1  # a run still going when the next is due: that one is skipped


class _StandInDbutils:
    class secrets:  # mirrors dbutils.secrets
        @staticmethod
        def get(scope: str, key: str) -> str:
            return f"pw-from-{scope}/{key}"


def test_the_documented_status_snippet_reads_the_password_from_the_secret() -> None:
    """docs/databricks.md's notebook snippet, run as written up to its status call, with a stand-in
    for the notebook's dbutils: the configuration it hands `status` holds the secret's password."""
    text = (ROOT / "docs" / "databricks.md").read_text()
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "status(cfg)" in b]
    before_status = snippet[:snippet.index("print(render(status(cfg)))")]
    scope: dict[str, object] = {"dbutils": _StandInDbutils()}
    exec(compile(before_status, "docs/databricks.md", "exec"), scope)  # noqa: S102 - the documented text, as written
    cfg = scope["cfg"]
    assert cfg.get("source.password") == "pw-from-binlake/source-password"  # type: ignore[attr-defined]
    assert cfg.get("target.path") == "/Volumes/main/binlake_me/binlake"  # type: ignore[attr-defined]
