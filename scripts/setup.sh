#!/usr/bin/env bash
# Install the Debian 12 packages aqpim builds and tests with (skips what is already installed).
set -euo pipefail
packages=(g++ cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev
          nlohmann-json3-dev libcli11-dev libfaiss-dev libopenblas-dev libpcre2-dev
          pkg-config python3-matplotlib
          libcpp-httplib-dev                                   # aqpim serve (HTTP)
          python3-pybind11 python3-numpy python3-torch python3-pytest python3-dev python3-venv  # python/
          redis-server libhiredis-dev                          # KV store shared through Redis
          clang-14 libclang-rt-14-dev)                         # fuzzing, sanitizers, the clang build
# Node.js and npm run the official `openai` client in the server tests; a machine that has a
# Node.js of its own (with npm) keeps it (Debian's npm conflicts with NodeSource's nodejs).
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# The official openai npm client the server tests run (tests/serve/client, versions pinned by its
# package-lock.json; node_modules is ignored by git).
client="$(cd "$(dirname "$0")/.." && pwd)/tests/serve/client"
if command -v npm >/dev/null 2>&1 && [ ! -d "$client/node_modules/openai" ]; then
  echo "setup: npm ci in tests/serve/client (the openai client)"
  (cd "$client" && npm ci --no-audit --no-fund --loglevel=error)
fi
