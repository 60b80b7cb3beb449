"""Configuration: one YAML file, `${ENV}` interpolation, environment and flag overrides.

Precedence, lowest first: built-in defaults, the YAML file, `BINLAKE_<SECTION>_<KEY>` environment
variables (dashes become underscores: `BINLAKE_SNAPSHOT_CHUNK_SIZE`), then `--set section.key=value`
flags. Unknown keys are refused with the closest valid key suggested. Secrets are never printed.

Every setting has a declared type and a value is read by it, as written: `--set source.username=no`
is the user 'no', and a port that is no number is refused in one line (binlake.config_values).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from binlake.columns import ColumnChoice, choices
from binlake.config_values import (
    CHUNK_KEYS,
    COLUMNS,
    ROW_FILTERS,
    OPTIONAL_TEXT,
    OPTIONAL_WHOLE,
    TEXT,
    TEXT_LIST,
    WHOLE,
    Kind,
    Loader,
    choice,
    typed,
    written,
)
from binlake.duration import DURATION, OPTIONAL_DURATION
from binlake.errors import ConfigError
from binlake.source.tls import MODES as TLS_MODES
from binlake.source.tls import Tls

SECRET_KEYS = frozenset({"source.password"})
MASK = "******"


ON_PURGED = ("fail", "resnapshot")
TYPE_CHANGES = ("rewrite", "widen")
ON_SOURCE_CHANGE = ("fail", "resnapshot")
SCHEMA_CHANGES = ("evolve", "lenient", "ignore", "fail")
STARTUP_MODES = ("initial", "snapshot", "latest", "earliest", "specific", "timestamp")
SILVER_DELETES = ("hard", "soft")
SILVER_HISTORY = ("1", "2")
COMPACTION = ("on", "off")


# section -> key -> (declared type, default, description); see binlake.config_values
SCHEMA: dict[str, dict[str, tuple[Kind, Any, str]]] = {
    "source": {
        "hostname": (TEXT, "127.0.0.1", "MySQL/MariaDB host"),
        "port": (WHOLE, 3306, "MySQL/MariaDB port"),
        "username": (TEXT, "root", "user with SELECT, REPLICATION SLAVE, REPLICATION CLIENT"),
        "password": (TEXT, "", "password; use ${BINLAKE_SOURCE_PASSWORD}"),
        "tables": (TEXT_LIST, [], "regexes over db.table"),
        "server-id": (TEXT, "5400-5404", "replica server ids, one per concurrent binlog reader"),
        "chunk-key": (CHUNK_KEYS, {}, "db.table -> chunk key columns (tables without a primary key)"),
        "columns": (COLUMNS, {}, "db.table -> `{include: [columns]}` or `{exclude: [columns]}`: the columns "
                    "captured (the key always is); a column left out is never read, nor in bronze or silver"),
        "row-filter": (ROW_FILTERS, {}, "db.table -> one Spark SQL predicate over its captured columns: silver "
                       "holds the rows that match it now"),
        "signal-table": (OPTIONAL_TEXT, None, "db.table in the source whose inserted rows (id, type, data) are "
                         "signals to the running stream, as Debezium's signal table (binlake signal writes them)"),
        "connect-timeout": (WHOLE, 10, "seconds"),
        "read-timeout": (WHOLE, 60, "seconds a read from the source (or a write to it, TLS's handshake "
                         "included) may wait before it fails: a half-open connection, or a binlog position the "
                         "server reported written but does not serve (not yet synced)"),
        "tls.mode": (choice(*TLS_MODES), "preferred",
                     "`disabled`, `preferred` (TLS when the server offers it), `required` (TLS, certificate not "
                     "verified), `verify-ca` (signed by `tls.ca`), `verify-identity` (and naming the host)"),
        "tls.ca": (OPTIONAL_TEXT, None, "CA certificate (PEM file, or the PEM text) the verify modes check the server "
                   "against; unset: the system's CAs"),
        "tls.cert": (OPTIONAL_TEXT, None, "client certificate (PEM file), for an account that requires one"),
        "tls.key": (OPTIONAL_TEXT, None, "the client certificate's private key (PEM file)"),
        "reconnect-timeout": (WHOLE, 300, "seconds the stream keeps reconnecting to a lost source "
                              "(backoff 0.5 s doubling to 10 s) before it fails; `0` fails at once"),
    },
    "target": {
        "path": (TEXT, "./lake", "warehouse root: a local path, or a Hadoop URI (s3a://, gs://, abfss://, file:)"),
        "catalog": (OPTIONAL_TEXT, None, "Unity Catalog catalog (Databricks)"),
        "schema": (OPTIONAL_TEXT, None, "Unity Catalog schema (Databricks)"),
        "type-changes": (choice(*TYPE_CHANGES), "rewrite",
                         "a captured column's type widens (INT to BIGINT, FLOAT to DOUBLE, a wider DECIMAL): "
                         "`rewrite` the table's files at the new type, so every common Delta reader still reads "
                         "it (a rewrite of the whole table, bronze and silver, at each such change), or `widen` "
                         "with Delta's type widening (metadata only, but delta-rs, Polars and DuckDB cannot "
                         "read the table afterwards)"),
    },
    "snapshot": {
        "chunk-size": (WHOLE, 8096, "rows per chunk"),
        "parallelism": (WHOLE, 2, "chunks read at once (tables read, and a micro-batch's tables written, at once: twice this)"),
        "group-size": (WHOLE, 16, "chunks committed to bronze together (the resume grain)"),
    },
    "stream": {
        "trigger-seconds": (WHOLE, 1, "micro-batch interval"),
        "heartbeat-seconds": (WHOLE, 30, "seconds between two records of where a stream with no captured change "
                              "stands (`binlake status`: caught up at a position, so long ago; a restart reads on "
                              "from there); `0`: none"),
        "startup-mode": (choice(*STARTUP_MODES), "initial",
                         "`initial` (snapshot, then stream), `snapshot` (snapshot only), or stream without a "
                         "snapshot from `latest`, `earliest`, `specific` (a position) or `timestamp`"),
        "startup-position": (OPTIONAL_TEXT, None, "`file:position`, a MySQL GTID set or a MariaDB GTID position where startup mode "
                             "`specific` starts"),
        "startup-timestamp": (OPTIONAL_WHOLE, None, "Unix seconds from which startup mode `timestamp` streams"),
        "schema-changes": (choice(*SCHEMA_CHANGES), "evolve",
                           "a captured table's columns change: `evolve` (silver adds, drops, renames, widens "
                           "them), `lenient` (silver only adds: dropped columns stay, renamed ones come in under the "
                           "new name too), `ignore` (silver keeps its columns), or `fail` (stop with the change)"),
        "on-purged": (choice(*ON_PURGED), "fail",
                      "the stored binlog position's file was purged from the server: `fail` (exit code 1, "
                      "naming the file), or `resnapshot` the captured tables"),
        "on-source-change": (choice(*ON_SOURCE_CHANGE), "fail",
                             "the server at source.hostname no longer holds the binlog history of the stored "
                             "position (another server, a new data directory, a restore from an older backup): "
                             "`fail` (exit code 1, saying what was stored and what the server has), or "
                             "`resnapshot` the captured tables"),
    },
    "silver": {
        "deletes": (choice(*SILVER_DELETES), "hard",
                    "a row deleted at the source: `hard` (gone from silver), or `soft` (kept, with `_deleted` true "
                    "and the delete's `_seq` and `_ts`; a key inserted again is live again)"),
        "history": (choice(*SILVER_HISTORY), "1",
                    "`1`: one row per key, its current state (SCD type 1); `2`: every version of each row, "
                    "from `__START_AT` (its change's `_seq`) to `__END_AT` (the next change's; NULL while "
                    "current), as Databricks AUTO CDC's SCD type 2"),
    },
    "lake": {
        "retention": (OPTIONAL_DURATION, "7d", "how long a file stays on disk after it left a table (bronze, silver, the "
                      "split state), as Delta's VACUUM: time travel and a reader's scan within it keep working; "
                      "`off`: nothing is removed, and disk grows with every MERGE"),
        "retention-interval": (DURATION, "1h", "how often the running stream removes each table's expired files, "
                               "one table between two micro-batches"),
        "compaction": (choice(*COMPACTION), "on", "`on`: the running stream merges a local table's small files "
                       "(bronze's, and silver's in key order) into files of about `lake.file-size`, a bounded step "
                       "between two micro-batches of the table; `off`: never"),
        "file-size": (WHOLE, 128, "MiB: the size compaction aims a file at"),
    },
    "metrics": {
        "port": (WHOLE, 0, "port on which `binlake run` and `binlake stream` serve their metrics in Prometheus's text "
                 "format (`/metrics`); `0`: no metrics served"),
        "host": (TEXT, "127.0.0.1", "address the metrics are served on: `127.0.0.1` (this machine only), `0.0.0.0` "
                 "(every interface), or another of the machine's addresses"),
    },
    "databricks": {
        "secret-scope": (OPTIONAL_TEXT, None, "secret scope holding the source password"),
        "secret-key": (OPTIONAL_TEXT, None, "secret key of the source password"),
        "tls-ca-secret-key": (OPTIONAL_TEXT, None, "secret key, in the same scope, holding the PEM text of the CA "
                              "that `source.tls.ca` names (instead of a file)"),
    },
}


@dataclass(frozen=True)
class ServerIdRange:
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> ServerIdRange:
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
        if not m:
            raise ConfigError(
                f"source.server-id is {text!r}; binlake needs a number or a range like 5400-5404: "
                "set source.server-id"
            )
        first = int(m.group(1))
        last = int(m.group(2) or first)
        if not 1 <= first <= last < 2**32:
            raise ConfigError(
                f"source.server-id is {text!r}; binlake needs 1 <= first <= last < 2^32: "
                "set source.server-id to an increasing range"
            )
        return cls(first, last)

    def __len__(self) -> int:
        return self.last - self.first + 1

    def pick(self, slot: int) -> int:
        """The server id for reader `slot` (0 is the stream, 1.. the chunk readers)."""
        return self.first + slot % len(self)


@dataclass(frozen=True)
class Config:
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    origin: str = "<defaults>"

    def get(self, dotted: str) -> Any:
        section, key = dotted.split(".", 1)
        return self.values[section][key]

    # typed accessors for the keys the code uses everywhere
    @property
    def tables(self) -> list[str]:
        return list(self.get("source.tables"))

    @property
    def column_choices(self) -> dict[str, ColumnChoice]:
        """`source.columns`, each table's include or exclude list (binlake.columns)."""
        return choices(self.get("source.columns"))

    @property
    def chunk_size(self) -> int:
        return int(self.get("snapshot.chunk-size"))

    @property
    def parallelism(self) -> int:
        return int(self.get("snapshot.parallelism"))

    @property
    def server_ids(self) -> ServerIdRange:
        return ServerIdRange.parse(self.get("source.server-id"))

    @property
    def target_path(self) -> str:
        """The warehouse root: a local path made absolute, or a Hadoop URI as given."""
        given = str(self.get("target.path"))
        found = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", given)
        if found is None or len(found.group(1)) == 1:  # C: is a drive, not a scheme
            return str(Path(given).expanduser().resolve())
        if found.group(1).lower() in ("s3", "s3n"):
            raise ConfigError(f"target.path is {given}; binlake reaches S3 through Hadoop's S3A connector, which "
                              f"needs the s3a:// scheme: set target.path to s3a://{given.split('://', 1)[-1]}")
        return given.rstrip("/")

    def connection(self) -> dict[str, Any]:
        """Connection settings for PyMySQL / mysqlclient / mysql-replication."""
        return {
            "host": self.get("source.hostname"),
            "port": int(self.get("source.port")),
            "user": self.get("source.username"),
            "password": self.get("source.password"),
            "connect_timeout": int(self.get("source.connect-timeout")),
            "read_timeout": int(self.get("source.read-timeout")),
            "tls": {k: self.get(f"source.tls.{k}") for k in ("mode", "ca", "cert", "key")},
        }

    def masked(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for section, keys in self.values.items():
            out[section] = {}
            for key, value in keys.items():
                secret = f"{section}.{key}" in SECRET_KEYS and value
                out[section][key] = MASK if secret else value
        return out

    def dump(self) -> str:
        return yaml.safe_dump(self.masked(), sort_keys=False)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(value: Any, where: str, env: dict[str, str]) -> Any:
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                f"{where} refers to ${{{name}}}, which is not set; binlake needs the variable: "
                f"export {name}=... or write the value in the file"
            )
        return _ENV_REF.sub(sub, value)
    if isinstance(value, list):
        return [_interpolate(v, where, env) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v, f"{where}.{written(k)}", env) for k, v in value.items()}
    return value


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(sorted(choices))}"


def _all_keys() -> list[str]:
    return [f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys]


def _set(values: dict[str, dict[str, Any]], dotted: str, raw: Any, origin: str, as_text: bool = False) -> None:
    """Set `dotted` from `raw`: text (an environment variable, `--set`) when `as_text`, else a value
    from the YAML file (see binlake.config_values)."""
    if "." not in dotted:
        if dotted in SCHEMA and isinstance(raw, dict):
            for k, v in raw.items():
                _set(values, f"{dotted}.{written(k)}", v, origin)
            return
        raise ConfigError(f"unknown configuration key '{dotted}' in {origin}{_suggest(dotted, _all_keys())}")
    section, key = dotted.split(".", 1)
    if section in SCHEMA and isinstance(raw, dict) and any(k.startswith(f"{key}.") for k in SCHEMA[section]):
        for k, v in raw.items():  # a nested group such as source.tls
            _set(values, f"{dotted}.{written(k)}", v, origin)
        return
    if section not in SCHEMA or key not in SCHEMA[section]:
        raise ConfigError(f"unknown configuration key '{dotted}' in {origin}{_suggest(dotted, _all_keys())}")
    kind, _default, _description = SCHEMA[section][key]
    try:
        values[section][key] = kind.from_text(raw) if as_text else kind.from_file(raw)
    except ValueError as exc:
        shown = MASK if dotted in SECRET_KEYS else repr(raw if as_text else typed(raw))
        raise ConfigError(f"{dotted} is {shown} in {origin}; binlake needs {exc}: fix {dotted}") from None


def _read_file(p: Path, values: dict[str, dict[str, Any]], env: dict[str, str]) -> None:
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; binlake needs a YAML file: pass -c FILE")
    try:
        doc = yaml.load(p.read_text(), Loader=Loader) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {p} is not valid YAML{line}; fix the syntax") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {p} holds a {type(typed(doc)).__name__}; binlake needs a mapping of sections")
    for section, body in doc.items():
        section = written(section)
        if section not in SCHEMA:
            raise ConfigError(
                f"unknown configuration section '{section}' in {p}{_suggest(str(section), list(SCHEMA))}"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"section '{section}' in {p} is not a mapping; write 'key: value' lines under it")
        for key, raw in body.items():
            dotted = f"{section}.{written(key)}"
            _set(values, dotted, _interpolate(raw, dotted, env), str(p))


def load(
    path: str | os.PathLike[str] | None = None,
    overrides: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Config:
    """Build the configuration from defaults, the file, the environment and `section.key=value` flags."""
    env = dict(os.environ if env is None else env)
    values: dict[str, dict[str, Any]] = {s: {k: d for k, (_, d, _) in keys.items()} for s, keys in SCHEMA.items()}
    origin = "<defaults>"
    if path is not None:
        _read_file(Path(path), values, env)
        origin = str(Path(path))
    for section, keys in SCHEMA.items():
        for key in keys:
            name = f"BINLAKE_{section}_{key}".upper().replace("-", "_").replace(".", "_")
            if name in env:
                _set(values, f"{section}.{key}", env[name], f"environment variable {name}", as_text=True)
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} has no '='; binlake needs --set section.key=value")
        dotted, raw = item.split("=", 1)
        _set(values, dotted.strip(), raw, "--set", as_text=True)
    cfg = Config(values, origin)
    cfg.server_ids  # validate early
    cfg.column_choices
    for pattern in cfg.tables:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"source.tables pattern {pattern!r} is not a valid regex ({exc}); fix source.tables") from None
    signal_table = cfg.get("source.signal-table")
    if signal_table is not None:
        db, dot, table = str(signal_table).partition(".")
        if not dot or not db or not table:
            raise ConfigError(f"source.signal-table is {signal_table!r}; binlake needs db.table, such as "
                              "binlake.signal: fix source.signal-table")
        if any(re.fullmatch(p, signal_table) for p in cfg.tables):
            raise ConfigError(f"source.signal-table {signal_table} is matched by source.tables too; its rows are "
                              "signals, not data to capture: leave it out of source.tables")
    if cfg.get("source.read-timeout") <= 0:
        raise ConfigError(f"source.read-timeout is {cfg.get('source.read-timeout')}; binlake needs at least 1 "
                          "second: fix source.read-timeout")
    if cfg.get("source.reconnect-timeout") < 0:
        raise ConfigError(f"source.reconnect-timeout is {cfg.get('source.reconnect-timeout')}; binlake needs "
                          "0 (no reconnecting) or more seconds: fix source.reconnect-timeout")
    if not 0 <= cfg.get("metrics.port") <= 65535:
        raise ConfigError(f"metrics.port is {cfg.get('metrics.port')}; binlake needs 0 (no metrics) or a port from 1 "
                          "to 65535: fix metrics.port")
    tls = Tls.of(cfg.connection()).problem()
    if tls:
        raise ConfigError(tls)
    for name in ("snapshot.chunk-size", "snapshot.parallelism", "snapshot.group-size"):
        if cfg.get(name) < 1:
            raise ConfigError(f"{name} is {cfg.get(name)}; binlake needs a number >= 1: fix {name}")
    return cfg
