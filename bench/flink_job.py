"""Flink CDC's MySQL source reading the customer table's snapshot, run by PyFlink in its own virtualenv
(PyFlink pins its own pandas/pyarrow, so it cannot share binlake's). Prints one JSON line.

usage: flink_job.py HOST PORT DATABASE TABLE JARS PARALLELISM CHUNK_SIZE   (JARS separated by ';')
"""

from __future__ import annotations

import json
import sys
import time

COLUMNS = """
  c_customer_sk INT, c_customer_id STRING, c_current_cdemo_sk INT, c_current_hdemo_sk INT,
  c_current_addr_sk INT, c_first_shipto_date_sk INT, c_first_sales_date_sk INT, c_salutation STRING,
  c_first_name STRING, c_last_name STRING, c_preferred_cust_flag STRING, c_birth_day INT,
  c_birth_month INT, c_birth_year INT, c_birth_country STRING, c_login STRING, c_email_address STRING,
  c_last_review_date_sk INT"""


def main() -> None:
    host, port, database, table, jars, parallelism, chunk_size = sys.argv[1:8]
    began = time.monotonic()
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("pipeline.jars", ";".join(f"file://{j}" for j in jars.split(";")))
    conf.set("parallelism.default", parallelism)
    conf.set("taskmanager.memory.process.size", "2g")
    env.execute_sql(f"""
        CREATE TABLE src ({COLUMNS}, PRIMARY KEY (c_customer_sk) NOT ENFORCED) WITH (
          'connector' = 'mysql-cdc', 'hostname' = '{host}', 'port' = '{port}', 'username' = 'root',
          'password' = '', 'database-name' = '{database}', 'table-name' = '{table}',
          'server-id' = '6200-6210', 'server-time-zone' = 'UTC',
          'scan.startup.mode' = 'snapshot',
          'scan.incremental.snapshot.chunk.size' = '{chunk_size}')""")
    env.execute_sql(f"CREATE TABLE sink ({COLUMNS}) WITH ('connector' = 'blackhole')")
    ready = time.monotonic()
    env.execute_sql("INSERT INTO sink SELECT * FROM src").wait()
    job_s = time.monotonic() - ready
    # the count runs as a second job; mini-batches keep its changelog (one update per row otherwise) short
    conf.set("table.exec.mini-batch.enabled", "true")
    conf.set("table.exec.mini-batch.allow-latency", "1 s")
    conf.set("table.exec.mini-batch.size", "100000")
    rows = None
    with env.execute_sql("SELECT COUNT(*) FROM src").collect() as results:
        for row in results:
            rows = row[0] if row.get_row_kind().name in ("INSERT", "UPDATE_AFTER") else rows
    print(json.dumps({"job_s": job_s, "setup_s": ready - began, "rows": rows}), flush=True)


if __name__ == "__main__":
    main()
