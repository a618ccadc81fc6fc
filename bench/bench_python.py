#!/usr/bin/env python3
"""The Python interface's costs, each beside its baseline in the same run (docs/python.md):

  boundary   aqpim.KvCache.attend for one decode token from Python (numpy and PQKVCache) vs the
             same call in a C++ loop; calls/s and the ratio
  operator   torch.ops.aqpim.pq_attention vs aqpim.pq_attention (numpy) on the same codes
  model      one decode step of austen-13m through aqpim.Model from Python (logits per token) vs
             the C++ decode loop (Model.generate), per kv scheme: the boundary's share of a step
  llama      the PyTorch Llama of examples/torch_llama.py decoding with PQKVCache vs its dense
             cache: a random-weight head_dim-128 model (written as safetensors) at 1K-8K contexts,
             and austen-13m at 1K

One thread everywhere (torch.set_num_threads(1), KvCache/Model n_threads=1), and every time is the
CPU time of that thread (time.thread_time): the development VM's 2 cores are shared by many
processes, and wall time there mostly measures the others (rounds alternate the compared sides and
the best or median is kept, as each row says). Run:
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_python.py [--quick] [--json FILE]
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import aqpim  # noqa: E402
import torch_llama  # noqa: E402
from aqpim.torch import PQKVCache, packed_codes_tensor, quantizer_tensor  # noqa: E402

SHARED = ROOT.parent / "shared"
AUSTEN = SHARED / "models" / "austen-13m"
TEXT = SHARED / "text" / "northanger-abbey.txt"
rows = []


def report(section, name, **fields):
    rows.append({"section": section, "name": name, **fields})
    print(f"  {name:<44} " + "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items()),
          flush=True)


clock = time.thread_time  # CPU seconds of this thread: the work, not the other processes' turns


def per_call(fn, n):
    t0 = clock()
    for _ in range(n):
        fn()
    return (clock() - t0) / n


def best_of(fn, n, rounds=5):
    return min(per_call(fn, n) for _ in range(rounds))


def bench_boundary(n_calls):
    print("boundary: KvCache.attend, one decode token (austen-13m shape: 2 KV heads x GQA 2 x head_dim 128), 1 layer")
    model = aqpim.Model(str(AUSTEN), n_threads=1)
    ids = model.tokenize(TEXT.read_text(encoding="utf-8")[:20000])[:1024]
    for kv in ("f16", "pq"):
        tcache = PQKVCache.for_model(model, kv, context=1024)
        cache = tcache.cache
        model.logits(ids, cache=cache)  # real keys and values
        q = np.random.default_rng(0).standard_normal((1, 4, 128)).astype(np.float32)
        out = np.empty_like(q)
        cpp = best_of(lambda: cache._time_attend(0, q, n_calls), 1) / n_calls  # the loop runs in C++
        py = best_of(lambda: cache.attend(0, q, out=out), n_calls)
        qt = torch.from_numpy(q).transpose(0, 1)[None]  # [1, 4, 1, 128]
        tq = best_of(lambda: tcache.attend(qt, 0), n_calls)
        report("boundary", f"{kv} @1024: C++ loop", calls_per_s=1 / cpp, us=cpp * 1e6)
        report("boundary", f"{kv} @1024: aqpim.KvCache.attend (numpy)", calls_per_s=1 / py, us=py * 1e6,
               x_cpp_time=py / cpp, added_us=(py - cpp) * 1e6)
        report("boundary", f"{kv} @1024: PQKVCache.attend (torch)", calls_per_s=1 / tq, us=tq * 1e6,
               x_cpp_time=tq / cpp, added_us=(tq - cpp) * 1e6)


def bench_operator(n_calls):
    print("operator: attention of 4 query heads over 4096 coded tokens (D 128, M 32, 4-bit)")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4096, 128)).astype(np.float32)
    pq = aqpim.ProductQuantizer(128, 32, 4)
    pq.train(x[:1024])
    codes = pq.encode(x)
    packed = aqpim.pack_codes(codes, 4)
    q = rng.standard_normal((4, 128)).astype(np.float32)
    kb, n = packed_codes_tensor(codes, 4)
    qt, qq = quantizer_tensor(pq), torch.from_numpy(q)
    np_call = best_of(lambda: aqpim.pq_attention(q, packed, packed, pq, pq), n_calls)
    with torch.no_grad():
        op = best_of(lambda: torch.ops.aqpim.pq_attention(qq, kb, kb, n, qt, qt, 0.088), n_calls)
    report("operator", "aqpim.pq_attention (numpy, PackedCodes)", us=np_call * 1e6)
    report("operator", "torch.ops.aqpim.pq_attention", us=op * 1e6, x_numpy_time=op / np_call,
           added_us=(op - np_call) * 1e6)


def bench_model(n_steps, rounds):
    print(f"model: austen-13m, {n_steps} greedy decode steps after a 64-token prompt through aqpim.Model, {rounds} rounds")
    model = aqpim.Model(str(AUSTEN), n_threads=1)
    prompt = model.tokenize(TEXT.read_text(encoding="utf-8")[:2000])[:64]
    for kv in ("f16", "pq"):
        steps, forward, cpp = [], [], []
        for _ in range(rounds):
            r = model.generate(prompt, n_predict=n_steps + 1, kv=kv, temperature=0, stop_at_eos=False)
            cpp.append(r.decode_seconds / r.n_decode_steps)  # wall time of the C++ loop, as the runtime reports it
            cache = model.new_cache(kv, context=len(prompt) + n_steps + 1)
            logits = model.logits(prompt, cache=cache, last_only=True)
            for _ in range(n_steps):
                t0 = clock()
                logits = model.logits([int(logits.argmax())], cache=cache, last_only=True)
                steps.append(clock() - t0)
                forward.append(model._last_forward_cpu_seconds)  # the same step's forward pass, timed in C++
        # Paired: each step's Python call minus its own forward pass, so the VM's noise cancels.
        added = [s - f for s, f in zip(steps, forward)]
        step = statistics.median(forward)
        report("model", f"{kv}: forward pass of a decode step (C++)", ms_per_step=step * 1e3,
               cpp_loop_wall_ms=statistics.median(cpp) * 1e3)
        report("model", f"{kv}: the Python call around it (logits + argmax)",
               added_us_per_step=statistics.median(added) * 1e6, fastest_added_us=min(added) * 1e6,
               added_percent=100 * statistics.median(added) / step)


def write_random_llama(directory, hidden=1024, ffn=2816, n_layers=4, n_heads=8, n_kv_heads=2, head_dim=128, vocab=4096):
    g = torch.Generator().manual_seed(0)
    w = lambda *s: (torch.randn(*s, generator=g) * s[-1] ** -0.5).to(torch.float16)  # noqa: E731
    t = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": torch.ones(hidden, dtype=torch.float16),
         "lm_head.weight": w(vocab, hidden)}
    for i in range(n_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.float16)
        t[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.float16)
        t[p + "self_attn.q_proj.weight"] = w(n_heads * head_dim, hidden)
        t[p + "self_attn.k_proj.weight"] = w(n_kv_heads * head_dim, hidden)
        t[p + "self_attn.v_proj.weight"] = w(n_kv_heads * head_dim, hidden)
        t[p + "self_attn.o_proj.weight"] = w(hidden, n_heads * head_dim)
        t[p + "mlp.gate_proj.weight"] = w(ffn, hidden)
        t[p + "mlp.up_proj.weight"] = w(ffn, hidden)
        t[p + "mlp.down_proj.weight"] = w(hidden, ffn)
    torch_llama.write_safetensors(directory / "model.safetensors", t)
    (directory / "config.json").write_text(json.dumps({
        "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "head_dim": head_dim, "vocab_size": vocab, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 131072}))


def decode_steps(model, cache, n_steps):
    """Median CPU seconds of a greedy decode step after what the cache holds."""
    tok = torch.tensor([[5]])
    times = []
    for _ in range(n_steps):
        t0 = clock()
        logits = model(tok, cache, last_only=True)
        times.append(clock() - t0)
        tok = logits.argmax(-1)[:, None]
    return statistics.median(times)


def fill(cache, config, n, rng):
    """n tokens of random keys and values in every layer (a prefill's worth, without its O(n^2) attention)."""
    for layer in range(config.num_hidden_layers):
        k = torch.from_numpy(rng.standard_normal((1, config.num_key_value_heads, n, config.head_dim)).astype(np.float32))
        v = torch.from_numpy(rng.standard_normal((1, config.num_key_value_heads, n, config.head_dim)).astype(np.float32))
        cache.append(k, v, layer)


def bench_llama(contexts, n_steps, scheme):
    print(f"llama: PyTorch Llama decode, {scheme} (PQKVCache) vs dense f32 (DenseKVCache), median of {n_steps} steps")
    with tempfile.TemporaryDirectory() as d:
        write_random_llama(Path(d))
        dense = torch_llama.load_llama(d)
        pq = torch_llama.load_llama(d).use_pq_attention()
    c = dense.config
    print(f"  random-weight model: hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} heads / "
          f"{c.num_key_value_heads} KV heads of {c.head_dim}, FFN {c.intermediate_size}, vocab {c.vocab_size}, f32 weights")
    for n in contexts:
        rng = np.random.default_rng(n)
        dc, pc = dense.dense_cache(), pq.pq_cache(scheme, context=n + n_steps)
        fill(dc, c, n, np.random.default_rng(n))
        fill(pc, c, n, rng)
        td, tp = decode_steps(dense, dc, n_steps), decode_steps(pq, pc, n_steps)
        report("llama", f"synth hd128 @{n}", dense_tokens_per_s=1 / td, pq_tokens_per_s=1 / tp, pq_speedup=td / tp,
               dense_kv_mb=dc.memory()["bytes"] / 1e6, pq_kv_mb=pc.memory()["bytes"] / 1e6)
    if AUSTEN.exists():
        dense, pq = torch_llama.load_llama(AUSTEN), torch_llama.load_llama(AUSTEN).use_pq_attention()
        ids = aqpim.Model(str(AUSTEN), n_threads=1).tokenize(TEXT.read_text(encoding="utf-8")[:20000])[:1000]
        dc, pc = dense.dense_cache(), pq.pq_cache(scheme, context=1024)
        dense(torch.tensor([ids]), dc)
        pq(torch.tensor([ids]), pc)
        td, tp = decode_steps(dense, dc, n_steps), decode_steps(pq, pc, n_steps)
        report("llama", "austen-13m @1000 (real prefill)", dense_tokens_per_s=1 / td, pq_tokens_per_s=1 / tp,
               pq_speedup=td / tp, dense_kv_mb=dc.memory()["bytes"] / 1e6, pq_kv_mb=pc.memory()["bytes"] / 1e6)


def main():
    p = argparse.ArgumentParser(description="the Python interface's costs (docs/python.md)")
    p.add_argument("--quick", action="store_true", help="fewer calls and steps, contexts 1K and 8K")
    p.add_argument("--sections", default="boundary,operator,model,llama")
    p.add_argument("--scheme", default="pq", help="PQ scheme of the llama section")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args()
    torch.set_num_threads(1)
    aqpim.set_default_threads(1)
    sections = args.sections.split(",")
    need_austen = {"boundary", "model"} & set(sections)
    if need_austen and not AUSTEN.exists():
        sys.exit(f"bench_python: {AUSTEN} not found (the boundary and model sections run austen-13m)")
    if "boundary" in sections:
        bench_boundary(500 if args.quick else 3000)
    if "operator" in sections:
        bench_operator(200 if args.quick else 1000)
    if "model" in sections:
        bench_model(16, 3 if args.quick else 12)
    if "llama" in sections:
        bench_llama([1024, 8192] if args.quick else [1024, 2048, 4096, 8192], 8 if args.quick else 24, args.scheme)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
