#!/usr/bin/env bash
# The main job in one go: generate text with a real model (speed on stderr), then adaptive PQ on
# that model's real keys and values, then the headline table (f16, q4_0 and pq at 3/2/1 bits). Without ../shared, a random-weight model from `aqpim synth`
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
  echo
  echo "== aqpim eval: f16, q4_0 and pq at 3, 2 and 1 bits: bytes, quality, needles, speed =="
  echo "   (2 chunks of the second half of Northanger Abbey, on which no setting was chosen; docs/kv-pq.md)"
  "$aqpim" eval -m "$shared/models/austen-13m/austen-13m-f16.gguf" -f "$shared/text/northanger-abbey.txt" \
    --part 2/2 -c 1024 --chunks 2 --needles --kv "q4_0;pq:bits=3;pq:bits=2;pq:bits=1" 2>/dev/null
else
  model="$(mktemp -d)/synth.gguf"
  echo "== ../shared is absent: a random-weight model from aqpim synth =="
  "$aqpim" synth --shape custom --hidden 512 --ffn 1408 --heads 4 --kv-heads 2 --layers 4 --vocab 4096 \
    --type f16 -o "$model"
  "$aqpim" run -m "$model" -p "Hello" -n 32 --seed 1
  "$aqpim" demo --synthetic
fi
