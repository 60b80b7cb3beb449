#!/usr/bin/env bash
# The demo: a private MariaDB with the sample shop, checked for binlake, then captured into ./lake.
# Run from anywhere (`make demo` installs what is missing first); safe to run again, the shop
# database is reloaded from fixtures/shop.sql each time.
set -euo pipefail
cd "$(dirname "$0")/.."

BINLAKE=.venv/bin/binlake
DATADIR=.binlake/mariadb

"$BINLAKE" dev-db start --datadir "$DATADIR"
port=$(cat "$DATADIR/binlake.port")

echo "demo: loading fixtures/shop.sql into 127.0.0.1:$port"
# --no-defaults: a ~/.my.cnf must not add a password or a socket to this root login
mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$port" -u root < fixtures/shop.sql
mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$port" -u root --table -e "
  SELECT 'customers' AS shop_table, COUNT(*) AS source_rows FROM shop.customers
  UNION ALL SELECT 'orders', COUNT(*) FROM shop.orders
  UNION ALL SELECT 'order_lines', COUNT(*) FROM shop.order_lines"

export BINLAKE_SOURCE_PORT=$port
"$BINLAKE" check -c binlake.example.yml

# ---- pipeline run -------------------------------------------------------------------------------
# The shop was just reloaded, so the lake starts over too.
rm -rf lake
cfg=binlake.example.yml
log=.binlake/demo-run.log
echo "demo: binlake run (snapshot, then streaming) -- log in $log"
setsid "$BINLAKE" -v run -c "$cfg" > "$log" 2>&1 &
run_pid=$!
trap 'kill -TERM -- -$run_pid 2>/dev/null || true' EXIT

wait_for() {  # wait_for <seconds> <test command...>
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    if ! kill -0 "$run_pid" 2>/dev/null; then echo "demo: binlake run stopped; see $log" >&2; tail -20 "$log" >&2; exit 1; fi
    [ $SECONDS -lt $deadline ] || { echo "demo: timed out; see $log" >&2; exit 1; }
    sleep 1
  done
}
# The snapshot is done and the stream has caught up with the source when binlake says so: its first
# look at the source that finds nothing new to read is recorded at once (stream.heartbeat-seconds), on
# a source where nothing else writes too.
caught_up() {
  "$BINLAKE" status -c "$cfg" --json 2>/dev/null |
    python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['stream'].get('caught_up') else 1)"
}
wait_for 600 caught_up
echo "demo: snapshot done, stream caught up; making live changes in the source"
# the micro-batches landed so far (none yet: -1), read before the changes, so their batch counts
batches() { python3 -c "import json;print(json.load(open('lake/_binlake/stream.json')).get('batch', -1))" 2>/dev/null || echo -1; }
seen=$(batches)
mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$port" -u root shop -e "
  UPDATE customers SET full_name = CONCAT(full_name, ' (VIP)'), email = CONCAT('vip+', email) WHERE id <= 3;
  INSERT INTO orders (customer_id, status, total, ordered_at) VALUES (1, 'new', 42.00, NOW(6));
  DELETE FROM order_lines WHERE order_id = 2;"
advanced() { [ "$(batches)" -gt "$seen" ]; }
wait_for 120 advanced
sleep 3
# SIGTERM to the run's process group, as systemd or `kill -TERM -PGID` stop a job: binlake lets the
# micro-batch in flight commit, says where it stopped, and exits 0
kill -TERM -- -"$run_pid" 2>/dev/null || true
wait "$run_pid" 2>/dev/null || true
grep '^binlake: stopped' "$log" || { echo "demo: binlake run did not stop cleanly; see $log" >&2; exit 1; }
trap - EXIT

.venv/bin/python scripts/show_silver.py -c "$cfg"
"$BINLAKE" status -c "$cfg"
"$BINLAKE" verify -c "$cfg"
