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
# The capture itself (binlake run, then showing the silver tables) goes here.
