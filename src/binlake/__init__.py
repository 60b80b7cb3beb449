"""binlake: lock-free MySQL/MariaDB change data capture into Delta Lake on Apache Spark."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("binlake")  # the installed package's, as `binlake --version` prints it
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
