"""`binlake check`: is the source set up for lock-free snapshot + binlog handover?

The check reads facts from the server (version, binlog variables, the account's grants, the tables it
can see) and turns every gap into one line naming the setting, the value found, the value needed and
the fix. An empty list means the source is ready. Gathering and judging are separate so that the
judging rules can be exercised with facts no local server produces (a MySQL 8.0.13 without
`binlog_row_metadata`, say).

It also loads the captured tables as a run loads them, with their chunk keys and column lists, and
reports each one a run would refuse to load; `binlake.commands.check` judges those schemas against
the capture options on top (what silver keeps, the row filters), which this side of the package
cannot see.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from binlake.config import MASK, Config, ServerIdRange
from binlake.errors import ConfigError
from binlake.schema import TableSchema
from binlake.source.catalog import load_captured, matches
from binlake.source.connection import connect, encryption, settings, tls_refusal
from binlake.source.dialect import Dialect, registered_replicas

log = logging.getLogger(__name__)


def _dynamic_fix(name: str, value: str) -> str:
    # A global change only reaches sessions opened after it, so the writers must reconnect; the
    # server config keeps the value across restarts.
    return f"SET GLOBAL {name}='{value}', put {name}={value} in the server config and reconnect the writers"


# variable -> (value needed, how to get it)
_REQUIRED_VARIABLES: dict[str, tuple[str, str]] = {
    "log_bin": ("ON", "start the server with log_bin=mysql-bin in its config (it cannot be set at runtime)"),
    "binlog_format": ("ROW", _dynamic_fix("binlog_format", "ROW")),
    "binlog_row_image": ("FULL", _dynamic_fix("binlog_row_image", "FULL")),
    "binlog_row_metadata": ("FULL", _dynamic_fix("binlog_row_metadata", "FULL")),
}

# MySQL variables that write row changes in forms binlake refuses when it meets them in the binlog
# (binlake.source.binlog_reader): variable -> (value refused, what it does)
_REFUSED_VARIABLES: dict[str, tuple[str, str]] = {
    "binlog_transaction_compression": ("ON", "compresses each transaction, which binlake cannot read yet"),
    "binlog_row_value_options": ("PARTIAL_JSON", "logs only the changed part of a JSON value, which binlake "
                                 "does not apply yet"),
}

# MySQL's exact chunk read settles its low watermark by waiting for GTIDs (binlake.source.dialect), so
# it needs gtid_mode=ON; MariaDB settles it by its committed binlog end and has no gtid_mode. gtid_mode
# rises one step at a time, and only to ON once no anonymous transaction is running.
_GTID_MODE_FIX = (
    "SET GLOBAL enforce_gtid_consistency='ON', then SET GLOBAL gtid_mode to OFF_PERMISSIVE, "
    "ON_PERMISSIVE and, once Ongoing_anonymous_transaction_count is 0, ON; put gtid_mode=ON and "
    "enforce_gtid_consistency=ON in the server config"
)

# Privilege spellings as SHOW GRANTS prints them. MariaDB 10.5+ prints REPLICATION CLIENT as
# BINLOG MONITOR, and knows REPLICATION REPLICA as a synonym of REPLICATION SLAVE.
_REPLICATION_SLAVE = frozenset({"REPLICATION SLAVE", "REPLICATION REPLICA"})
_REPLICATION_CLIENT = frozenset({"REPLICATION CLIENT", "BINLOG MONITOR"})
_ALL = frozenset({"ALL", "ALL PRIVILEGES"})

_GRANT_LINE = re.compile(
    r"^GRANT\s+(?P<privileges>.+?)\s+ON\s+(?:(?:TABLE|FUNCTION|PROCEDURE|PACKAGE(?:\s+BODY)?)\s+)?"
    r"(?P<object>\S+)\s+TO\s",
    re.IGNORECASE | re.DOTALL,
)
_OBJECT = re.compile(r"(`(?:[^`]|``)*`|[^.`]+)\.(`(?:[^`]|``)*`|[^.`]+)")


@dataclass(frozen=True)
class Grant:
    """One `GRANT ... ON object` line: table-wide privileges (column grants are dropped) on one object."""

    privileges: frozenset[str]
    database: str | None  # None for *.*; a LIKE pattern for db.* grants
    table: str | None  # None for db.* and *.*

    @classmethod
    def parse(cls, line: str) -> Grant | None:
        m = _GRANT_LINE.match(line.strip())
        if m is None:  # role grants (GRANT `role` TO ...) carry no privileges of their own
            return None
        privileges = frozenset(
            " ".join(p.split()).upper() for p in _split_top_level(m.group("privileges")) if "(" not in p
        )
        database, table = _split_object(m.group("object"))
        return cls(
            privileges=privileges,
            database=None if database == "*" else database,
            table=None if table == "*" else table,
        )

    @property
    def is_global(self) -> bool:
        return self.database is None

    def has(self, names: frozenset[str]) -> bool:
        return bool(self.privileges & (names | _ALL))

    def covers(self, database: str, table: str) -> bool:
        if self.database is None:
            return True
        if not re.fullmatch(_like_to_regex(self.database), database):
            return False
        return self.table is None or self.table == table

    def describe(self) -> str:
        where = "*.*" if self.database is None else f"{self.database}.{self.table or '*'}"
        return f"{', '.join(sorted(self.privileges))} ON {where}"


def _split_top_level(text: str) -> list[str]:
    """Split `SELECT (a, b), INSERT` at the commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _split_object(text: str) -> tuple[str, str]:
    """'`shop`.`orders`' -> ('shop', 'orders'), '*.*' -> ('*', '*'); backquotes may hide dots."""
    m = _OBJECT.fullmatch(text)
    if m is None:
        return text, "*"
    return _unquote(m.group(1)), _unquote(m.group(2))


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _like_to_regex(pattern: str) -> str:
    """Database names in db-level grants are LIKE patterns: `%`, `_`, and `\\_` for a literal `_`."""
    out = []
    escaped = False
    for ch in pattern:
        if escaped:
            out.append(re.escape(ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return "".join(out)


@dataclass(frozen=True)
class SourceFacts:
    """What the check needs to know about the server, read once."""

    version: str
    variables: dict[str, str]  # only the variables the server has
    account: str  # 'user'@'host' as the server authenticated it
    grants: tuple[str, ...]
    visible_tables: tuple[str, ...]  # 'db.table' of every base table the account can see

    @classmethod
    def read(cls, conn: pymysql.connections.Connection) -> SourceFacts:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION(), CURRENT_USER()")
            version, current_user = cur.fetchone() or ("", "")
            names = ", ".join(f"'{v}'" for v in (*_REQUIRED_VARIABLES, *_REFUSED_VARIABLES, "gtid_mode"))
            cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
            variables = {str(name): str(value) for name, value in cur.fetchall()}
            cur.execute("SHOW GRANTS")
            grants = tuple(str(row[0]) for row in cur.fetchall())
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
            )
            visible = tuple(f"{db}.{table}" for db, table in cur.fetchall())
        user, _, host = str(current_user).rpartition("@")
        return cls(str(version), variables, f"'{user}'@'{host}'", grants, visible)


def _product(version: str) -> str:
    """`10.11.19-MariaDB-0+deb12u1` -> `MariaDB 10.11.19`; anything not MariaDB is taken for MySQL."""
    return str(Dialect.from_version(version))


def _server_problem(version: str) -> str | None:
    dialect = Dialect.from_version(version)
    want = f"{dialect.name} {'.'.join(map(str, dialect.minimum_version))} or later"
    if dialect.version == (0, 0, 0):  # no version number in it
        return (
            f"server version is {version!r}, which binlake cannot read; binlake needs {want}: "
            "upgrade the server"
        )
    if dialect.version < dialect.minimum_version:
        return f"server version is {dialect}; binlake needs {want}: upgrade the server"
    return None


def _variable_problems(facts: SourceFacts) -> list[str]:
    out = []
    for name, (needed, fix) in _REQUIRED_VARIABLES.items():
        found = facts.variables.get(name)
        if found is None:
            out.append(
                f"{name} does not exist on {_product(facts.version)}; binlake needs {name}={needed}, "
                f"which MariaDB 10.5+ and MySQL 8.0.14+ have: upgrade the server, then {fix}"
            )
        elif found.upper() != needed:
            out.append(f"{name} is {found}; binlake needs {needed}: {fix}")
    for name, (refused, why) in _REFUSED_VARIABLES.items():
        if (facts.variables.get(name) or "").upper() == refused:
            empty = "OFF" if refused == "ON" else ""
            out.append(f"{name} is {refused}, which {why}; binlake needs '{empty}': {_dynamic_fix(name, empty)}")
    return out


def _gtid_problem(facts: SourceFacts) -> str | None:
    if Dialect.from_version(facts.version).snapshot_method != "settled-gtids":
        return None
    found = facts.variables.get("gtid_mode")
    if found is None:
        return (f"gtid_mode does not exist on {_product(facts.version)}; binlake needs gtid_mode=ON for its "
                f"exact chunk read on MySQL: upgrade the server, then {_GTID_MODE_FIX}")
    if found.upper() == "ON":
        return None
    return f"gtid_mode is {found}; binlake needs ON for its exact chunk read on MySQL: {_GTID_MODE_FIX}"


def _privilege_problems(facts: SourceFacts, table_patterns: list[str]) -> list[str]:
    grants = [g for g in (Grant.parse(line) for line in facts.grants) if g is not None]
    global_privileges = sorted({p for g in grants if g.is_global for p in g.privileges} - {"USAGE"})
    found = f"{facts.account} has {', '.join(global_privileges) or 'no privileges'} ON *.*"
    positions = "to read binlog positions"
    dialect = Dialect.from_version(facts.version)
    if dialect.client_privilege_alias:
        positions += f" ({dialect.client_privilege_alias} on {dialect.name})"
    out = []
    for needed, names, purpose in (
        ("REPLICATION SLAVE", _REPLICATION_SLAVE, "to read the binlog"),
        ("REPLICATION CLIENT", _REPLICATION_CLIENT, positions),
    ):
        if not any(g.is_global and g.has(names) for g in grants):
            out.append(
                f"privilege {needed} is missing: {found}; binlake needs {needed} ON *.* {purpose}: "
                f"GRANT {needed} ON *.* TO {facts.account}"
            )

    selects = [g for g in grants if g.has(frozenset({"SELECT"}))]
    if any(g.is_global for g in selects):
        return out + _table_match_problems(facts, table_patterns)
    if not selects:
        out.append(
            f"privilege SELECT is missing: {found}; binlake needs SELECT on *.* or on the captured "
            f"databases to read the snapshot: GRANT SELECT ON *.* TO {facts.account}"
        )
        return out
    captured = _captured(facts, table_patterns)
    unreadable: dict[str, list[str]] = {}
    for name in captured:
        db, _, table = name.partition(".")
        if not any(g.covers(db, table) for g in selects):
            unreadable.setdefault(db, []).append(name)
    for db, tables in unreadable.items():
        out.append(
            f"privilege SELECT is missing on {', '.join(tables)}: {facts.account} has "
            f"{'; '.join(g.describe() for g in selects)}; binlake needs SELECT on every captured table: "
            f"GRANT SELECT ON `{db}`.* TO {facts.account}"
        )
    return out + _table_match_problems(facts, table_patterns)


def _captured(facts: SourceFacts, table_patterns: list[str]) -> list[str]:
    """The visible tables a run captures (`binlake.source.catalog.matches`)."""
    return [t for t in facts.visible_tables if matches(table_patterns, *t.split(".", 1))]


def _table_match_problems(facts: SourceFacts, table_patterns: list[str]) -> list[str]:
    if not table_patterns or _captured(facts, table_patterns):
        return []
    line = (
        f"source.tables {table_patterns} matches no table {facts.account} can see; binlake needs at least "
        f"one 'db.table' match: fix source.tables, or GRANT SELECT on the tables' database to {facts.account}"
    )
    return [line]


def problems(facts: SourceFacts, table_patterns: list[str]) -> list[str]:
    """Every reason the source described by `facts` is not ready, one line each."""
    out = []
    server = _server_problem(facts.version)
    if server:
        out.append(server)
    out += _variable_problems(facts)
    gtids = _gtid_problem(facts)
    if gtids:
        out.append(gtids)
    out += _privilege_problems(facts, table_patterns)
    return out


def server_id_problem(ids: ServerIdRange, setting: str, replicas: list[tuple[int, str]] | None) -> str | None:
    """A line when a replica registered on the source uses an id of binlake's range: the server lets
    one connection per id read the binlog and drops the other, so both would keep failing."""
    taken = [(sid, host) for sid, host in replicas or [] if ids.first <= sid <= ids.last]
    if not taken:
        return None
    used = {sid for sid, _ in replicas or []}
    first = max(used | {ids.last}) + 1
    sid, host = taken[0]
    return (
        f"source.server-id {setting} includes server id {sid}, which a replica registered on the source "
        f"(host {host or '?'}) uses; binlake needs ids no other replica uses: set source.server-id to a free "
        f"range such as {first}-{first + len(ids) - 1}"
    )


def check_server_ids(cfg: Config) -> None:
    """Fail with a ConfigError before reading when a registered replica uses one of our server ids."""
    conn = connect(cfg.connection())
    try:
        replicas = registered_replicas(conn)
    finally:
        conn.close()
    line = server_id_problem(cfg.server_ids, cfg.get("source.server-id"), replicas)
    if line:
        raise ConfigError(line)


def _source_problem(cfg: Config, what: str, exc: Exception) -> str:
    settings = cfg.connection()
    reason = " ".join(" ".join(str(a) for a in exc.args).split()) or type(exc).__name__
    # PyMySQL does not echo passwords, but a server or proxy message might; a very short password
    # would mangle the whole line, and is no secret worth the garbling.
    if len(settings["password"]) >= 4:
        reason = reason.replace(settings["password"], MASK)
    certificate = " (or, for an account that requires a client certificate, source.tls.cert and source.tls.key)"
    return (
        f"{what} source.hostname={settings['host']} source.port={settings['port']} as "
        f"source.username={settings['user']} ({reason}); binlake needs a reachable server that accepts "
        "these credentials: fix source.hostname, source.port, source.username or source.password"
        + (certificate if exc.args and exc.args[0] == 1045 else "")
    )


def check(cfg: Config) -> list[str]:
    """One line per problem with the source setup; an empty list means binlake can run. The tables'
    own refusals and the capture options are judged by `binlake.commands.check` on top."""
    return inspect(cfg).problems


@dataclass(frozen=True)
class Inspection:
    """What `inspect` found: the problems, how the connection is encrypted ("TLSv1.3 <cipher>"; None: it
    is not, or there is none), and when the server answered, its facts and the captured tables'
    schemas as a run loads them."""

    problems: list[str]
    encrypted: str | None = None
    facts: SourceFacts | None = None
    schemas: tuple[TableSchema, ...] = ()


def inspect(cfg: Config, captured_before: Callable[[str], bool] = lambda name: False) -> Inspection:
    """The source's setup, checked. `captured_before(db.table)`: whether the lake holds the table
    already, whose column list was then checked at its first capture (`load_captured`'s `strict`)."""
    params = cfg.connection()
    try:
        conn = pymysql.connect(**settings(params), charset="utf8mb4")
    except pymysql.MySQLError as exc:
        refused = tls_refusal(params, exc)
        if refused:
            where = f"source.hostname={params['host']} source.port={params['port']}"
            return Inspection([f"cannot connect to {where}: {refused}"])
        return Inspection([_source_problem(cfg, "cannot connect to", exc)])
    try:
        facts = SourceFacts.read(conn)
        replicas = registered_replicas(conn)
        encrypted = encryption(conn)
        schemas, refused_tables = _load(conn, cfg, _captured(facts, cfg.tables), captured_before)
    except pymysql.MySQLError as exc:
        return Inspection([_source_problem(cfg, "cannot read the setup of", exc)])
    finally:
        conn.close()
    log.info("source %s is %s, account %s", cfg.get("source.hostname"), facts.version, facts.account)
    ids = server_id_problem(cfg.server_ids, cfg.get("source.server-id"), replicas)
    found = problems(facts, cfg.tables) + refused_tables + ([ids] if ids else [])
    return Inspection(found, encrypted, facts, tuple(schemas))


def _load(conn: pymysql.connections.Connection, cfg: Config, names: list[str],
          captured_before: Callable[[str], bool]) -> tuple[list[TableSchema], list[str]]:
    """The captured tables' schemas as a run loads them, and the line of each table a run refuses to
    load: no key to chunk by, a `source.chunk-key` or `source.columns` list that does not fit it."""
    schemas, refused = [], []
    for name in names:
        try:
            schemas.append(load_captured(conn, cfg, *name.split(".", 1), strict=not captured_before(name)))
        except ConfigError as exc:
            refused.append(exc.message)
    return schemas, refused
