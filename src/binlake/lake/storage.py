"""The lake's storage: the files binlake keeps beside its Delta tables, and whether a table exists.

Every file under `target.path/_binlake` (split-state aside, which is a Delta table) -- captured
schemas, the stream's start and progress, the source's lineage, GTID states, re-snapshot intents --
and the stream checkpoint binlake reads back are reached through a `Location`, which speaks the
lake's own address:

- a local path (the default, and a Databricks volume) with Python's file calls, as before;
- a Hadoop URI (`s3a://`, `gs://`, `abfss://`, `hdfs://`, `file:`) with Hadoop's FileSystem of the
  running Spark session. Hadoop rather than an fsspec library: the files then live behind exactly the
  connector, credentials and settings (`spark.hadoop.fs.s3a.*`, instance roles, ABFS OAuth) that Delta
  uses for the tables beside them -- one configuration, no second client to install and keep in step
  -- and Hadoop 3.5's S3A makes conditional puts (`If-None-Match: *`), which fsspec's S3 client
  does not offer through its file API.

What must appear whole appears whole without a rename where a rename is a copy: on an object store
(S3, GCS) an object is published only when its stream closes, so a write replaces the old one
whole, and on S3 a first write (`create_text`) is a conditional put that loses to an object already
there. Elsewhere (a local disk, `file:`, HDFS, ABFS) the text goes to a temporary file renamed over
the target (atomic on a local disk and HDFS; ABFS deletes the target first).

Creating a Delta table makes its `_delta_log` folder before it writes the first commit. A process
stopped in between (a kill, a stop at once) leaves a folder with no commit, which Delta then takes
for a table it cannot read (`DELTA_TABLE_NOT_FOUND`) instead of creating one. Such a folder holds
nothing (no commit, so no data), and is removed before the table is created again.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from binlake.errors import ConfigError

# where an object appears whole when its stream closes and a rename is a copy
OBJECT_STORES = ("s3a", "gs")
CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"  # Hadoop 3.5's If-None-Match: * on S3A


def is_local(location: str) -> bool:
    """A path Python's own file calls reach (not a URI, `file:` ones included: Hadoop reads those)."""
    return not ("://" in location or location.startswith(("dbfs:", "file:")))


def scheme(location: str) -> str:
    return location.split(":", 1)[0].lower() if not is_local(location) else ""


def location(address: str, session: Callable[[], Any] | None = None) -> Location:
    """The `Location` of a path or URI; `session` gives the running SparkSession a URI is reached through."""
    return LocalLocation(Path(address)) if is_local(address) else HadoopLocation(address, session)


class Location:
    """A file or folder of the lake, with the few calls binlake makes on one (a subset of `Path`'s)."""

    def __truediv__(self, name: str) -> Location:
        raise NotImplementedError

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def parent(self) -> Location:
        raise NotImplementedError

    def exists(self) -> bool:
        raise NotImplementedError

    def is_dir(self) -> bool:
        raise NotImplementedError

    def read_text(self) -> str:
        """The file's text; FileNotFoundError when there is none."""
        raise NotImplementedError

    def write_text(self, text: str) -> None:
        """Replace the file with `text`, whole: a reader sees the old text or the new one."""
        raise NotImplementedError

    def create_text(self, text: str) -> bool:
        """Write `text` only if no file is there, whole; whether this call wrote it (else another was first)."""
        raise NotImplementedError

    def unlink(self, missing_ok: bool = False) -> None:
        raise NotImplementedError

    def remove_tree(self) -> None:
        """Remove the folder and all under it; nothing when it is not there."""
        raise NotImplementedError

    def iterdir(self) -> Iterator[Location]:
        """The entries of the folder (none when it is not there)."""
        raise NotImplementedError

    def __str__(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


class LocalLocation(Location):
    """A local file: a temporary file renamed over it, a hard link for a first write (both atomic)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __truediv__(self, name: str) -> Location:
        return LocalLocation(self.path / name)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def parent(self) -> Location:
        return LocalLocation(self.path.parent)

    def exists(self) -> bool:
        return self.path.exists()

    def is_dir(self) -> bool:
        return self.path.is_dir()

    def read_text(self) -> str:
        return self.path.read_text()

    def _staged(self, text: str) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staged = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        staged.write_text(text)
        return staged

    def write_text(self, text: str) -> None:
        self._staged(text).replace(self.path)

    def create_text(self, text: str) -> bool:
        staged = self._staged(text)
        try:
            os.link(staged, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            staged.unlink()

    def unlink(self, missing_ok: bool = False) -> None:
        self.path.unlink(missing_ok=missing_ok)

    def remove_tree(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def iterdir(self) -> Iterator[Location]:
        if self.path.is_dir():
            yield from (LocalLocation(p) for p in sorted(self.path.iterdir()) if not p.name.endswith(".tmp"))

    def __str__(self) -> str:
        return str(self.path)


class HadoopLocation(Location):
    """A file behind a Hadoop URI, through the FileSystem of the running Spark session (see the module)."""

    def __init__(self, uri: str, session: Callable[[], Any] | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.session = session

    def _spark(self) -> Any:
        if self.session is not None:
            return self.session()
        from pyspark.sql import SparkSession  # deferred: only a URI lake needs Spark for its files

        active = SparkSession.getActiveSession()
        if active is None:
            raise ConfigError(f"target.path is {self.uri.split('/_binlake')[0]}, which binlake reaches through "
                              "Spark's Hadoop FileSystem, but no Spark session runs: start one first")
        return active

    def _fs(self) -> tuple[Any, Any, Any]:
        """(the JVM, this Hadoop Path, its FileSystem)."""
        spark = self._spark()
        jvm = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.uri)
        return jvm, path, path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def __truediv__(self, name: str) -> Location:
        return HadoopLocation(f"{self.uri}/{name}", self.session)

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return HadoopLocation(self.uri.rsplit("/", 1)[0], self.session)

    def exists(self) -> bool:
        _, path, fs = self._fs()
        return bool(fs.exists(path))

    def is_dir(self) -> bool:
        _, path, fs = self._fs()
        return bool(fs.exists(path) and fs.getFileStatus(path).isDirectory())

    def read_text(self) -> str:
        jvm, path, fs = self._fs()
        if not fs.exists(path):
            raise FileNotFoundError(self.uri)
        stream = fs.open(path)
        try:
            return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()
        finally:
            stream.close()

    def _put(self, fs: Any, path: Any, text: str, conditional: bool) -> None:
        """One object, published when its stream closes; `conditional`: only where none is."""
        if conditional:
            builder = fs.createFile(path).overwrite(False)
            stream = builder.must(CONDITIONAL_CREATE, True).build() if scheme(self.uri) == "s3a" else builder.build()
        else:
            stream = fs.create(path, True)
        try:
            stream.write(text.encode())
        finally:
            stream.close()

    def write_text(self, text: str) -> None:
        jvm, path, fs = self._fs()
        if scheme(self.uri) in OBJECT_STORES:
            self._put(fs, path, text, conditional=False)
            return
        staged = jvm.org.apache.hadoop.fs.Path(f"{self.uri.rsplit('/', 1)[0]}/.{self.name}.{uuid.uuid4().hex}.tmp")
        self._put(fs, staged, text, conditional=False)
        if fs.rename(staged, path):  # a local disk's rename replaces; HDFS's and ABFS's refuse to
            return
        spark = self._spark()
        context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(path.toUri(),
                                                                      spark.sparkContext._jsc.hadoopConfiguration())
        rename = getattr(jvm.org.apache.hadoop.fs, "Options$Rename")
        options = spark.sparkContext._gateway.new_array(rename, 1)
        options[0] = rename.OVERWRITE
        context.rename(staged, path, options)  # HDFS replaces atomically; elsewhere delete, then rename

    def create_text(self, text: str) -> bool:
        from py4j.protocol import Py4JJavaError  # deferred with pyspark

        _, path, fs = self._fs()
        if scheme(self.uri) not in OBJECT_STORES:
            # a look first: one driver writes a lake at a time (Delta's S3 log store needs that too)
            if fs.exists(path):
                return False
            self.write_text(text)
            return True
        try:
            self._put(fs, path, text, conditional=True)
            return True
        except Py4JJavaError:  # the store's 412 (or a 409 race), or an object found at create
            if fs.exists(path):
                return False
            raise

    def unlink(self, missing_ok: bool = False) -> None:
        _, path, fs = self._fs()
        if not fs.delete(path, False) and not missing_ok and not fs.exists(path):
            raise FileNotFoundError(self.uri)

    def remove_tree(self) -> None:
        _, path, fs = self._fs()
        fs.delete(path, True)

    def iterdir(self) -> Iterator[Location]:
        _, path, fs = self._fs()
        if not fs.exists(path):
            return
        names = sorted(str(s.getPath().getName()) for s in fs.listStatus(path))
        yield from (self / n for n in names if not n.endswith((".tmp", ".crc")))

    def __str__(self) -> str:
        return self.uri


def _committed(name: str) -> bool:
    return name.endswith(".json") or (".checkpoint" in name and name.endswith(".parquet"))


def has_commit(location: str) -> bool:
    """Whether the local table at `location` has a commit."""
    log = Path(location) / "_delta_log"
    return log.is_dir() and (any(log.glob("*.json")) or any(log.glob("*.checkpoint*.parquet")))


def clear_uncommitted(location: str, session: Callable[[], Any] | None = None) -> None:
    """Remove the `_delta_log` of a table that has no commit: a local folder, or one behind a URI with
    folders (`file:`, HDFS, ABFS) or an empty-folder marker (S3A's)."""
    if is_local(location):
        if (Path(location) / "_delta_log").is_dir() and not has_commit(location):
            shutil.rmtree(Path(location) / "_delta_log")
        return
    log = HadoopLocation(location, session) / "_delta_log"
    if log.is_dir() and not any(_committed(f.name) for f in log.iterdir()):
        log.remove_tree()


def table_exists(spark: Any, location: str) -> bool:
    """Whether a Delta table has a commit at `location` (a creation cut short is cleared first). A
    local one is looked at directly: the stream's start asks for every table, and Spark's answer
    costs about 70 ms a table."""
    from delta.tables import DeltaTable

    clear_uncommitted(location, lambda: spark)
    if is_local(location):
        return has_commit(location)
    return bool(DeltaTable.isDeltaTable(spark, location))
