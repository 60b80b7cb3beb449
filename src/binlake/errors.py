"""The exceptions binlake raises, as data.

BinlakeError
├── ConfigError        bad configuration or unsupported source setup (exit code 2)
│   ├── SourceSetupError   a server variable or privilege the algorithm needs is missing
│   ├── UnconvertibleValueError  a captured value binlake cannot encode (nothing of its chunk or
│   │                      batch is written)
│   └── LibraryVersionError  an installed library is not the release binlake relies on
└── RuntimeFailure     the pipeline could not do its work (exit code 1)
    ├── PositionGoneError  a stored binlog position is no longer on the server
    ├── SourceChangedError the server no longer holds the history of the stored position (replaced,
    │                      restored, another server)
    ├── SchemaChangedError a captured table changed in a way the stream cannot follow in place
    │   └── SnapshotChangedError  ... while it was being snapshotted (the snapshot is taken again)
    └── NewTableError      a table created while streaming now matches source.tables (the stream
                           snapshots it and restarts; the error escapes only where it cannot)

Stopped is apart: a requested stop (SIGTERM, Ctrl-C; `binlake.stop`), exit code 0. It derives from
BaseException, as KeyboardInterrupt does, so that no `except Exception` of a retry loop swallows it.

Every message is one line that names the setting, the value found, the value needed and the fix.
Exceptions keep their message through pickling, because errors raised on Spark executors reach the
driver as text.
"""

from __future__ import annotations

import re


class BinlakeError(Exception):
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.message,))

    def __str__(self) -> str:
        return self.message


class ConfigError(BinlakeError):
    exit_code = 2


class SourceSetupError(ConfigError):
    pass


class UnconvertibleValueError(ConfigError):
    pass


class LibraryVersionError(ConfigError):
    """binlake adjusts a library's private methods (binlake.source.binlog_types): another release may
    have changed them."""


class RuntimeFailure(BinlakeError):
    exit_code = 1


class PositionGoneError(RuntimeFailure):
    pass


class SourceChangedError(RuntimeFailure):
    """The server no longer holds the binlog history of the stored position (binlake.source.identity)."""


class SchemaChangedError(RuntimeFailure):
    """Its message names the table as `captured table <db.table>` followed by what happened."""

    @property
    def table(self) -> str | None:
        m = re.search(r"captured table (.+?)(?:'s | changed | is | has )", self.message)
        return m.group(1) if m else None


class SnapshotChangedError(SchemaChangedError):
    pass


class NewTableError(RuntimeFailure):
    pass


class NotBuiltError(BinlakeError):
    exit_code = 2


class Stopped(BaseException):
    """A requested stop: its message says where binlake stopped (`stopped at <position>`)."""

    exit_code = 0

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


_RAISED = re.compile(r"binlake\.errors\.(\w+): (.+)")


def raised_in_spark(exc: BaseException) -> BinlakeError | None:
    """The binlake error a Spark executor raised, rebuilt from the text Spark carries to the driver
    (the Python worker's traceback ends with `binlake.errors.<Class>: <message>`)."""
    found = _RAISED.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    cls = globals().get(name)
    return cls(message.strip()) if isinstance(cls, type) and issubclass(cls, BinlakeError) else None
