#!/usr/bin/env bash
# The main job in one go: generate text with a real model (speed on stderr), then adaptive PQ on
# that model's real keys and values. Without ../shared, a random-weight model from `aqpim synth`
# and generated K/V stand in.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
aqpim="${AQPIM:-$root/build/bin/aqpim}"
shared="$root/../shared"

if [ -f "$shared/models/austen-13m/austen-13m-f16.gguf" ]; then
  echo "== aqpim run: austen-13m (GGUF f16), greedy continuation =="
  "$aqpim" run -m "$shared/models/austen-13m/austen-13m-f16.gguf" --temp 0 -n 48 \
    -p "It is a truth universally acknowledged, that a single man in possession of a good fortune"
  echo
  echo "== aqpim ppl: austen-13m on the first 64 KB of Northanger Abbey (llama.cpp protocol) =="
  "$aqpim" ppl -m "$shared/models/austen-13m/austen-13m-f16.gguf" -c 1024 --chunks 4 \
    -f "$shared/reference/tokens/northanger-first64KB.txt"
  echo
  echo "== aqpim demo: adaptive PQ on austen-13m's real layer-0 keys and values =="
  "$aqpim" demo
else
  model="$(mktemp -d)/synth.gguf"
  echo "== ../shared is absent: a random-weight model from aqpim synth =="
  "$aqpim" synth --shape custom --hidden 512 --ffn 1408 --heads 4 --kv-heads 2 --layers 4 --vocab 4096 \
    --type f16 -o "$model"
  "$aqpim" run -m "$model" -p "Hello" -n 32 --seed 1
  "$aqpim" demo --synthetic
fi
