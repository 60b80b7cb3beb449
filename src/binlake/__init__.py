"""binlake: lock-free MySQL/MariaDB change data capture into Delta Lake on Apache Spark."""

__version__ = "0.1.0"
