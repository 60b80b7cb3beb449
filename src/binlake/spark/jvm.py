"""The local JVM Spark runs in: launched in a session of its own, ended with binlake, its start-up
noise dropped.

pyspark starts the JVM in binlake's own process group. A stop sent to that group (`kill -TERM
-PGID`, tini `-g`, a shell's job control) then reaches the JVM too, which shuts Spark down under the
micro-batch in flight: the stream ends with a failure instead of the clean stop binlake does on its
own SIGTERM (`binlake.stop`). Here the JVM leads a session of its own, so a signal reaches binlake
alone, and it dies with binlake's main thread (`PR_SET_PDEATHSIG`), so a kill -9 of binlake (or of
its group) still takes the JVM along at once, as a crash would -- it does not finish the write it was
in. At a normal exit the JVM ends first, by itself. The JVM's stderr passes through a filter that
drops the lines Java and Spark print at every start, and the tracebacks of Python workers whose JVM
end went away (Spark stopping a stream's reader under it), which go to the Spark log.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from binlake.errors import RuntimeFailure

# printed by Java and Spark at every start; they say nothing to a binlake user
START_UP_LINES = (b"WARNING: Using incubator modules:", b"Setting default log level to",
                  b"To adjust logging level use sc.setLogLevel")
# how a Python worker's traceback ends when its JVM end went away: Spark stopped the worker (a stream's
# reader when its query stops) before or while it spoke. A failure of the worker's own the JVM reports.
DISCONNECTED = (b"EOFError", b"BrokenPipeError", b"ConnectionResetError",
                b"pyspark.errors.exceptions.base.PySparkRuntimeError: [CANNOT_OPEN_SOCKET]")
_TRACEBACK = b"Traceback (most recent call last):"
_CHAINED = (b"During handling of the above exception", b"The above exception was the direct cause")
_PR_SET_PDEATHSIG = 1
# how long binlake's exit waits for the JVM to end by itself
END_SECONDS = 10
_exiting = threading.Event()


def launch(conf: Any) -> Any:
    """A py4j gateway to a new local JVM started with `conf` (a SparkConf), as pyspark's
    `launch_gateway` starts one, for `SparkContext(gateway=...)`."""
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.java_gateway import launch_gateway
    from pyspark.serializers import UTF8Deserializer, read_int

    command = [os.path.join(_find_spark_home(), "bin", "spark-submit")]
    for key, value in conf.getAll():
        command += ["--conf", f"{key}={value}"]
    command += shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    with tempfile.TemporaryDirectory() as folder:
        info = Path(folder) / "gateway"  # the JVM writes its port and secret here once it listens
        env = {**os.environ, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": str(info)}
        # stdin: the JVM exits when it reads EOF there, that is when binlake is gone
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True, preexec_fn=_child_setup())
        # read from the start: a JVM that fails to start may say more than a pipe holds
        threading.Thread(target=_forward, args=(proc.stderr,), name="jvm-stderr", daemon=True).start()
        while proc.poll() is None and not info.is_file():
            time.sleep(0.1)
        if not info.is_file():
            raise RuntimeFailure(f"Spark's JVM ended (exit code {proc.returncode}) before it started; its "
                                 "error is printed above: check that Java 17 is installed and run make setup")
        with open(info, "rb") as f:
            port, secret = read_int(f), UTF8Deserializer().loads(f)
    # pyspark connects to a JVM already running when these are set (and imports its classes)
    os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"] = str(port), secret
    try:
        gateway = launch_gateway(conf)
    finally:
        del os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"]
    gateway.proc = proc
    atexit.register(_end, proc, gateway)
    return gateway


def _end(proc: subprocess.Popen[bytes], gateway: Any) -> None:
    """At binlake's exit: Spark stops (its accumulator server first, which else reports the JVM's end
    as an error) and the py4j gateway closes (else Python objects finalized after the JVM's end still
    call it, and py4j logs each failed call); then EOF on the JVM's stdin ends the JVM as pyspark's own
    JVM ends, through its shutdown hooks (Spark removes its scratch folders). What is not done in time
    is killed with binlake. The first steps run in a thread: a call into the JVM that a stop
    interrupted may hang."""
    from pyspark import SparkContext

    _exiting.set()

    def close() -> None:
        context = SparkContext._active_spark_context
        if context is not None:
            context.stop()
        gateway.shutdown()

    closing = threading.Thread(target=close, name="spark-stop", daemon=True)
    closing.start()
    closing.join(END_SECONDS)
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=END_SECONDS)
    except subprocess.TimeoutExpired:
        pass


def _child_setup() -> Any:
    """What the JVM's process does before it execs: ignore Ctrl-C (as pyspark has it), and die with
    the thread that started it, when that is binlake's main thread (another thread may end first)."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    bound = libc is not None and threading.current_thread() is threading.main_thread()

    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if bound:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return setup


def _forward(stream: IO[bytes]) -> None:
    """The JVM's stderr to binlake's, but for its start-up lines and the tracebacks of disconnected
    Python workers; once binlake exits, all to the Spark log (a JVM stopped under a running query
    prints that query's failure, which is no failure of binlake's)."""
    held: list[bytes] = []  # a traceback, until its last line says what it is
    for line in iter(stream.readline, b""):
        if held and not _continues(held, line):
            _pass(held)
            held = []
        if held or line.startswith(_TRACEBACK):
            held.append(line)
        elif not line.startswith(START_UP_LINES):
            _pass([line])
    _pass(held)


def _continues(held: list[bytes], line: bytes) -> bool:
    """Whether `line` belongs to the traceback `held`: frames, blank lines and chained tracebacks do,
    and the exception line that ends one; not a line after an exception line that chains nothing, nor a
    traceback no chaining line announced."""
    if not line.strip() or line.startswith(_CHAINED):
        return True
    last = _last(held)
    if line.startswith(_TRACEBACK):
        return last.startswith(_CHAINED)
    return last[:1].isspace() or last.startswith((_TRACEBACK, *_CHAINED))


def _last(lines: list[bytes]) -> bytes:
    return next((line for line in reversed(lines) if line.strip()), b"")


def _pass(lines: list[bytes]) -> None:
    if not lines:
        return
    disconnected = lines[0].startswith(_TRACEBACK) and _last(lines).startswith(DISCONNECTED)
    if _exiting.is_set() or disconnected:
        with open(os.environ.get("BINLAKE_SPARK_LOG", os.devnull), "ab") as log:
            log.write(b"".join(lines))
    else:
        os.write(2, b"".join(lines))
