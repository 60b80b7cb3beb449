"""The `binlake` command line. Each command is a thin call into the module that does the work."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable

from binlake import __version__, stop
from binlake import config as config_mod
from binlake.capture import metrics, signals
from binlake.capture.context import Context
from binlake.commands.check import check, options_in_use
from binlake.commands.devdb import DevDb
from binlake.commands.status import render, status
from binlake.config import STARTUP_MODES
from binlake.errors import BinlakeError, Stopped, raised_in_spark
from binlake.lake.target import Target
from binlake.memory import tune
from binlake.source import binlog_types, signal_table
from binlake.source.validation import check_server_ids

log = logging.getLogger("binlake")


def _load(args: argparse.Namespace) -> config_mod.Config:
    overrides = list(args.set or [])
    if getattr(args, "parallelism", None):
        overrides.append(f"snapshot.parallelism={args.parallelism}")
    if getattr(args, "startup_mode", None):
        overrides.append(f"stream.startup-mode={args.startup_mode}")
    if getattr(args, "startup_position", None):
        overrides.append(f"stream.startup-position={args.startup_position}")
    if getattr(args, "startup_timestamp", None) is not None:
        overrides.append(f"stream.startup-timestamp={args.startup_timestamp}")
    return config_mod.load(args.config, overrides)


def cmd_dev_db(args: argparse.Namespace) -> int:
    datadir = args.datadir or f".binlake/{args.server}"
    db = DevDb(datadir=Path(datadir), port=args.port, server=args.server)
    if args.action == "start":
        port = db.start()
        print(f"dev-db running on 127.0.0.1:{port} (user root, no password; datadir {db.datadir})")
    elif args.action == "stop":
        db.stop()
        print("dev-db stopped")
    else:
        print(f"dev-db {db.status()}")
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    print(_load(args).dump(), end="")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    cfg = _load(args)
    found = check(cfg)
    for p in found.problems:
        print(p, file=sys.stderr)
    if found.problems:
        return 2
    print("source ok: binlog on, ROW format, FULL row image and metadata, privileges present")
    options = options_in_use(cfg)
    if options:
        print(f"capture options ok: {options} fit the captured tables")
    mode = cfg.get("source.tls.mode")
    print(f"connection encrypted: {found.encrypted} (source.tls.mode={mode})" if found.encrypted else
          f"connection NOT encrypted (source.tls.mode={mode}): set source.tls.mode=required or stricter to "
          "refuse a plain connection")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from binlake.capture.plan import plan

    stop.install()
    plan(_load(args))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from binlake.capture.plan import plan
    from binlake.capture.snapshot import snapshot

    binlog_types.check_version()  # the commands that read the binlog refuse another release at once
    stop.install()
    cfg = _load(args)
    plan(cfg)
    snapshot(cfg)
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    from binlake.capture.stream import stream

    binlog_types.check_version()
    stop.install()
    cfg = _load(args)
    with metrics.serving(cfg):
        stream(cfg, until_caught_up=args.until_caught_up)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from binlake.capture.run import run

    binlog_types.check_version()
    stop.install()
    cfg = _load(args)
    with metrics.serving(cfg):
        run(cfg, until_caught_up=args.until_caught_up)
    return 0


def cmd_resnapshot(args: argparse.Namespace) -> int:
    from binlake.capture import resnapshot

    cfg = _load(args)
    check_server_ids(cfg)
    resnapshot.request(Context(cfg), args.tables)
    return 0


def cmd_signal(args: argparse.Namespace) -> int:
    cfg = _load(args)
    signal, table = signals.make(args.kind, args.tables, args.condition), cfg.get("source.signal-table")
    if table and signal_table.insert(cfg.connection(), table, signal.to_dict()):
        where = f"inserted into {table}"
    else:
        signals.write(Target.of(cfg).signals, signal)
        where = "written beside the lake" + (f" (the account may not write to {table})" if table else "")
    print(f"signal {signal.id} ({signal.kind}) {where}; the running stream takes it between two micro-batches "
          "(binlake status shows where it stands)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    report = status(_load(args))
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from binlake.commands.verify import render, verify

    report = verify(_load(args))
    print(render(report))
    return 0 if report["ok"] else 1


def cmd_launcher(args: argparse.Namespace) -> int:
    print(Path(__file__).with_name("__main__.py"))
    return 0


def startup_flags(p: argparse.ArgumentParser) -> None:
    # free text, not argparse choices: a bad value gets binlake's one-line error and exit code 2
    p.add_argument("--startup-mode", metavar="|".join(STARTUP_MODES), help="stream.startup-mode")
    p.add_argument("--startup-position", metavar="FILE:POS|GTIDS", help="stream.startup-position (mode specific)")
    p.add_argument("--startup-timestamp", type=int, metavar="UNIX_SECONDS",
                   help="stream.startup-timestamp (mode timestamp)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binlake",
        description="Lock-free MySQL/MariaDB change data capture into Delta Lake on Apache Spark.",
    )
    parser.add_argument("--version", action="version", version=f"binlake {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each step")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,
                config: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        # after the command too (`binlake run -v`); SUPPRESS keeps a -v given before it
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log each step")
        if config:
            p.add_argument("-c", "--config", default=None, help="YAML configuration file")
            p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                           help="override one configuration key (repeatable)")
        return p

    p = command("run", cmd_run, "plan, snapshot and stream; resumes where the last run stopped")
    p.add_argument("--until-caught-up", action="store_true",
                   help="stop once the binlog is drained up to the position current when streaming started")
    p.add_argument("--parallelism", type=int, help="chunks read at once")
    startup_flags(p)
    command("plan", cmd_plan, "plan the snapshot chunks into the split state")
    p = command("snapshot", cmd_snapshot, "read every unfinished chunk into bronze and silver")
    p.add_argument("--parallelism", type=int, help="chunks read at once")
    p = command("stream", cmd_stream, "stream the binlog into bronze and silver")
    p.add_argument("--until-caught-up", action="store_true",
                   help="stop once the binlog is drained up to the position current when streaming started")
    startup_flags(p)
    p = command("resnapshot", cmd_resnapshot,
                "snapshot tables again (bronze and silver anew); the stream keeps its place for the others")
    p.add_argument("tables", nargs="+", metavar="DB.TABLE", help="captured tables")
    p = command("signal", cmd_signal,
                "signal the running stream: snapshot tables beside it, pause, resume or stop such a snapshot")
    p.add_argument("kind", choices=["execute-snapshot", "pause-snapshot", "resume-snapshot", "stop-snapshot"])
    p.add_argument("tables", nargs="*", metavar="DB.TABLE",
                   help="tables or source.tables patterns (execute-snapshot needs one; else every table)")
    p.add_argument("--condition", metavar="SQL",
                   help="execute-snapshot: only the rows this SQL condition matches (Debezium's additional-conditions)")
    p = command("status", cmd_status, "per table: chunks, rows, phase, binlog position and lag")
    p.add_argument("--json", action="store_true", help="one JSON object")
    command("verify", cmd_verify, "compare every silver table with its source, chunk by chunk")
    command("check", cmd_check,
            "verify the source server is set up for binlake, and the capture options fit its tables")
    p = command("dev-db", cmd_dev_db, "a private MariaDB or MySQL server for the demo and the tests", config=False)
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--server", choices=["mariadb", "mysql"], default="mariadb",
                   help="MariaDB from Debian (default) or MySQL 9.7 from make setup's private root")
    p.add_argument("--datadir", default=None, help="data directory (default .binlake/SERVER)")
    p.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    command("launcher", cmd_launcher, "print the file to give spark-submit: spark-submit [options] FILE run -c ...",
            config=False)
    p = command("config", cmd_config_show, "show the effective configuration, secrets masked")
    p.add_argument("action", choices=["show"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tune()
    os.environ.setdefault("BINLAKE_RUN_PGID", str(os.getpgid(0)))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except BinlakeError as exc:
        print(f"binlake: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # a Spark job failed: an error a reader raised comes back inside its text
        raised = raised_in_spark(exc)
        if raised is None:
            raise
        print(f"binlake: {raised.message}", file=sys.stderr)
        return raised.exit_code
    except Stopped as stopped:  # binlake.stop: SIGTERM or Ctrl-C during run, stream, snapshot, plan
        print(f"binlake: {stopped.message}", file=sys.stderr)
        return stopped.exit_code
    except KeyboardInterrupt:
        return 130
    finally:
        stop.done()
