#!/usr/bin/env bash
# The official openai npm client (installed by scripts/setup.sh into tests/serve/client/node_modules)
# against `aqpim serve` on a loopback port, with a synth model. Exit 77 (ctest: skipped) only when
# npm itself is missing.
set -euo pipefail
aqpim=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "skipped: npm/node are not installed (scripts/setup.sh installs them)"; exit 77
fi
if [ ! -d "$here/client/node_modules/openai" ]; then
  echo "error: the openai npm package is missing: run scripts/setup.sh (npm ci in tests/serve/client)"; exit 1
fi
work=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$aqpim" synth --shape custom --hidden 128 --ffn 256 --heads 4 --kv-heads 2 --layers 2 --vocab 600 --ctx 512 \
  -o "$work/m.gguf" >/dev/null
# run_client [SERVER OPTION] [CLIENT MODE]: a server on a free port, the client against it, a clean stop.
run_client() {
  "$aqpim" serve -m "$work/m.gguf" --kv pq --kv-budget 64MiB --parallel 4 -c 512 --port 0 --api-key sk-test \
    --reasoning-format deepseek -t 1 $1 2>"$work/serve.log" &
  server=$!
  port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.log")
    [ -n "$port" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { echo "error: the server did not start"; cat "$work/serve.log"; exit 1; }
  node "$here/client/openai_client.mjs" "http://127.0.0.1:$port/v1" sk-test $2
  kill -TERM "$server"
  wait "$server" || { echo "error: the server exited with $?"; cat "$work/serve.log"; exit 1; }
  server=""
  grep -q "aqpim serve: stopped" "$work/serve.log" || { echo "error: no clean stop"; cat "$work/serve.log"; exit 1; }
}
run_client "" ""
run_client --no-cache-prompt no-cache
