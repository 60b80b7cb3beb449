"""The real parts the cluster tests start: a SeaweedFS server with its S3 gateway, a standalone Spark
cluster (a master and a worker, from the pyspark package's own `spark-class`), and `binlake run`
given to `spark-submit` as a user runs it (README, "Running on a Spark cluster").

No pytest here: the benchmark's snapshot section starts its standalone cluster and submits with
these too (bench/snapshot_cluster.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from binlake.spark.session import DELTA_JARS, jars_dir

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_TOOLS = Path(os.environ.get("BINLAKE_CLUSTER_DIR", Path(sys.prefix) / "share" / "binlake" / "cluster"))
S3_JARS = ("hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar", "analyticsaccelerator-s3-1.3.1.jar")
# test-only credentials of the test's own S3 server, on 127.0.0.1
ACCESS_KEY, SECRET_KEY, REGION = "binlaketest", "binlake-test-secret", "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing_tools() -> str | None:
    """What `make setup-cluster` has not built yet, if anything."""
    needed = [CLUSTER_TOOLS / "weed", *(CLUSTER_TOOLS / "jars" / j for j in S3_JARS)]
    gone = [str(p) for p in needed if not p.is_file()]
    return f"{', '.join(gone)} missing: run make setup-cluster" if gone else None


def missing_cluster_tools() -> str | None:
    """What a standalone cluster and a `spark-submit` of binlake need that is not here, if anything:
    pyspark's own scripts and Delta's jars (`make setup`; the SeaweedFS and S3A parts of `make
    setup-cluster` are for S3 lakes only)."""
    needed = [spark_home() / "bin" / name for name in ("spark-class", "spark-submit")]
    needed += [jars_dir() / j for j in DELTA_JARS]
    gone = [str(p) for p in needed if not p.is_file()]
    return f"{', '.join(gone)} missing: run make setup" if gone else None


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _wait(what: str, ready: Any, proc: subprocess.Popen[bytes], log: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} ended (exit {proc.returncode}): {log.read_text()[-3000:]}")
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready in {seconds:.0f} s: {log.read_text()[-3000:]}")


def _start(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class S3:
    endpoint: str
    bucket: str = "lake"

    def hadoop_conf(self) -> dict[str, str]:
        """The S3A settings of docs/operating.md's "The lake on S3, GCS or ABFS", for this endpoint (the keys come
        from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment)."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint, "spark.hadoop.fs.s3a.endpoint.region": REGION,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"}

    def store(self) -> Any:
        """pyarrow's own S3 client on this server: a third reader, for the bucket's objects."""
        from pyarrow import fs

        return fs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION, scheme="http",
                               endpoint_override=self.endpoint.removeprefix("http://"), allow_bucket_creation=True)

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options for the same bucket."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}


def credentials() -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}


@contextmanager
def seaweedfs(folder: Path) -> Iterator[S3]:
    """`weed server -s3` on 127.0.0.1: master, volume server, filer and S3 gateway, every port a free
    one, no telemetry, the keys of `credentials()` an admin identity (buckets made on first upload)."""
    folder.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("master", "master.grpc", "volume", "volume.grpc", "filer",
                                            "filer.grpc", "s3", "s3.grpc")}
    command = [str(CLUSTER_TOOLS / "weed"), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={folder}",
               "-s3", "-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-volume.max=16",
               f"-filer.localSocket={folder}/filer.sock", f"-s3.localSocket={folder}/s3.sock",
               *(f"-{name.replace('.grpc', '.port.grpc') if '.grpc' in name else name + '.port'}={port}"
                 for name, port in ports.items())]
    log = folder / "weed.log"
    proc = _start(command, log, env={**os.environ, **credentials()})
    endpoint = f"http://127.0.0.1:{ports['s3']}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(endpoint, timeout=2)
        except urllib.error.HTTPError:
            return True  # an S3 error document: the gateway is up
        except OSError:
            return False
        return True

    try:
        _wait("SeaweedFS", answers, proc, log)
        bucket = S3(endpoint)
        bucket.store().create_dir(bucket.bucket)
        yield bucket
    finally:
        _end(proc)


@dataclass
class Cluster:
    url: str  # the master's
    work: Path  # the worker's folder: an application's executors each have one in it
    worker: int  # the worker JVM's pid: the executors it starts are its children

    def executors(self) -> dict[str, list[str]]:
        """Per application the worker ran, the ids of its executors."""
        return {app.name: sorted(e.name for e in app.iterdir() if e.is_dir()) for app in self.work.glob("app-*")}


@contextmanager
def standalone_cluster(folder: Path, cores: int = 2) -> Iterator[Cluster]:
    """A Spark master and one worker with `cores` cores, each a JVM of its own started by pyspark's
    `spark-class`. Executors the worker starts are JVMs of their own too."""
    folder.mkdir(parents=True, exist_ok=True)
    home = spark_home()
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, **credentials(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(home),
           "SPARK_LOG_DIR": str(folder), "SPARK_WORKER_DIR": str(folder / "work")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    klass = str(home / "bin" / "spark-class")
    master = _start([klass, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)], folder / "master.log", env)
    url = f"spark://127.0.0.1:{port}"
    worker: subprocess.Popen[bytes] | None = None

    def workers() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except OSError:
            return -1

    try:
        _wait("the Spark master", lambda: workers() >= 0, master, folder / "master.log")
        worker = _start([klass, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                         "--cores", str(cores), "--memory", "3g", "--webui-port", str(worker_ui),
                         "--work-dir", str(folder / "work")], folder / "worker.log", env)
        _wait("the Spark worker", lambda: workers() >= 1, worker, folder / "worker.log")
        yield Cluster(url, folder / "work", worker.pid)
    finally:
        for proc in (worker, master):
            if proc is not None:
                _end(proc)


def binlake_zip(folder: Path) -> Path:
    """binlake's own modules as one zip for `--py-files`: what reaches the executors' Python when
    binlake is not installed there (its dependencies are, in the Python spark.pyspark.python names)."""
    out = folder / "binlake.zip"
    with zipfile.ZipFile(out, "w") as z:
        for f in sorted((ROOT / "src" / "binlake").rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f.relative_to(ROOT / "src"))
    return out


def submit_command(master: str, folder: Path, *args: str, conf: dict[str, str] | None = None,
                   s3: bool = False) -> list[str]:
    """spark-submit of binlake's launcher, as README's "Running on a Spark cluster" has it: Delta's
    jars, binlake's modules by --py-files, this virtualenv's Python for the driver and the executors,
    two executors of one core each. For an s3a:// lake, hadoop-aws and the AWS SDK go on the class
    paths from where setup-cluster put them (the SDK is 650 MB: --jars would copy it to each executor)."""
    settings = {"spark.pyspark.python": sys.executable, "spark.executor.cores": "1", "spark.cores.max": "2",
                "spark.executor.memory": "1g", "spark.driver.memory": "1g", "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false", **(conf or {})}
    classpath: list[str] = []
    if s3:
        jars = ":".join(str(CLUSTER_TOOLS / "jars" / j) for j in S3_JARS)
        classpath = ["--driver-class-path", jars]
        settings["spark.executor.extraClassPath"] = jars
    launcher = subprocess.run([sys.executable, "-m", "binlake", "launcher"], capture_output=True, text=True,
                              check=True).stdout.strip()  # the README's "$(binlake launcher)"
    return [str(spark_home() / "bin" / "spark-submit"), "--master", master,
            "--jars", ",".join(str(jars_dir() / j) for j in DELTA_JARS), *classpath,
            "--py-files", str(binlake_zip(folder)),
            *(a for k, v in settings.items() for a in ("--conf", f"{k}={v}")), launcher, *args]


def submit_env() -> dict[str, str]:
    env = {**os.environ, **credentials(), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(spark_home()),
           "JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    for name in ("PYSPARK_SUBMIT_ARGS", "BINLAKE_RUN_PGID", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
        env.pop(name, None)
    return env


def said(done: subprocess.CompletedProcess[str]) -> str:
    """The end of what a submitted run printed: binlake's own lines are on stdout (spark-submit's
    PythonRunner passes the Python driver's stdout and stderr on as its stdout), Spark's on stderr."""
    return f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"


def submit(command: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, env=submit_env(), capture_output=True, text=True, timeout=timeout, check=False,
                          start_new_session=True)


def silver(location: str, storage_options: dict[str, str] | None = None, where: str = "TRUE") -> list[tuple[Any, ...]]:
    """The workload table's rows in a silver (or bronze) table as delta-rs reads them, sorted: a reader
    independent of binlake's Spark code."""
    import deltalake
    import pyarrow

    table = deltalake.DeltaTable(location, storage_options=storage_options)
    rows = pyarrow.table(deltalake.QueryBuilder().register("t", table)
                         .execute(f"SELECT id, k, v, amount, updated, note FROM t WHERE {where}").read_all())
    return sorted(tuple(r.values()) for r in rows.to_pylist())
