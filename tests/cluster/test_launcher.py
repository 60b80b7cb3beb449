"""binlake under spark-submit without a cluster: a Spark without Delta's classes is refused in one
line naming the package to add, and with them `binlake status` reads an empty `file:` lake."""

from __future__ import annotations

from pathlib import Path

from .parts import free_port, said, submit, submit_command


def config(tmp_path: Path) -> Path:
    path = tmp_path / "binlake.yml"  # a source nobody listens on: status says so and goes on
    path.write_text(f"source:\n  port: {free_port()}\n  tables: ['shop\\.t']\ntarget:\n  path: file:{tmp_path}/lake\n")
    return path


def test_a_spark_without_delta_is_refused_in_one_line(tmp_path: Path) -> None:
    command = submit_command("local[1]", tmp_path, "status", "-c", str(config(tmp_path)))
    jars = command.index("--jars")
    done = submit(command[:jars] + command[jars + 2:])
    assert done.returncode == 2, said(done)
    assert ("binlake: the Spark that launched binlake has no Delta classes; binlake needs "
            "io.delta:delta-spark_4.2_2.13:4.4.0: pass --packages io.delta:delta-spark_4.2_2.13:4.4.0 to spark-submit"
            in done.stdout.splitlines()), said(done)


def test_status_of_a_file_lake_under_spark_submit(tmp_path: Path) -> None:
    done = submit(submit_command("local[1]", tmp_path, "status", "-c", str(config(tmp_path)), "--json"))
    assert done.returncode == 0, said(done)
    assert '"tables"' in done.stdout, done.stdout
