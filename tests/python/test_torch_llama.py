"""The PyTorch Llama of examples/torch_llama.py against the C++ runtime (aqpim.Model) on the same
safetensors directory: dense on austen-13m, and PQ on a model whose projections are exact.

Why two models: a quantized cache turns float noise into different codes. The PyTorch and C++
matmuls round differently (logits 2e-5 apart with f32 KV), the cache rounds keys and values to f16
on arrival, and a value that lands beside an f16 rounding boundary flips by one f16 ulp: on
austen-13m even the f16 cache's logits then differ by up to 2e-3, and PQ's k-means amplifies it
(docs/python.md gives the figures). So PQ is compared on a model whose Q/K/V/O projections pick
one input each, scaled by a power of two, and whose FFN is zero: every key, value and query is
then computed exactly by both, and any difference left is the integration's (positions, RoPE
pairs and frequencies, GQA mapping, the scheme's context, the order of appends)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter (Debian: python3-torch)")

import aqpim  # noqa: E402
import torch_llama  # noqa: E402  (examples/, put on sys.path by conftest)
from conftest import shared_path  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def max_diff(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def test_dense_logits_equal_the_runtimes_on_austen():
    d = shared_path("models/austen-13m")
    runtime = aqpim.Model(str(d), n_threads=1)
    ids = runtime.tokenize(shared_path("reference/tokens/northanger-first64KB.txt").read_text(encoding="utf-8"))[:300]
    ref = runtime.logits(ids, kv="f32")
    dense = torch_llama.load_llama(d)
    assert max_diff(dense(torch.tensor([ids]), dense.dense_cache())[0], ref) < 1e-4
    # the same through PQAttention and PQKVCache, with the C++ dense f32 cache behind them
    pq = torch_llama.load_llama(d).use_pq_attention()
    assert max_diff(pq(torch.tensor([ids]), pq.pq_cache("f32"))[0], ref) < 1e-4
    assert pq.layers[0].self_attn.q_proj.weight.dtype == torch.float32


def write_exact_model(directory, seed=0, hidden=256, n_heads=4, n_kv_heads=2, head_dim=128, n_layers=2, vocab=512):
    """A Llama of real attention shapes (head_dim 128, GQA 2:1) whose projections are exact in f32."""
    g = torch.Generator().manual_seed(seed)

    def pick(rows, cols):  # one entry per row, +-2^e at a random column
        w = torch.zeros(rows, cols)
        scale = 2.0 ** torch.randint(-1, 2, (rows,), generator=g).float()
        sign = torch.randint(0, 2, (rows,), generator=g).float() * 2 - 1
        w[torch.arange(rows), torch.randint(0, cols, (rows,), generator=g)] = scale * sign
        return w

    t = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g),
         "model.norm.weight": torch.rand(hidden, generator=g) + 0.5,
         "lm_head.weight": torch.randn(vocab, hidden, generator=g) * 0.1}
    for i in range(n_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = torch.rand(hidden, generator=g) + 0.5
        t[p + "post_attention_layernorm.weight"] = torch.rand(hidden, generator=g) + 0.5
        t[p + "self_attn.q_proj.weight"] = pick(n_heads * head_dim, hidden)
        t[p + "self_attn.k_proj.weight"] = pick(n_kv_heads * head_dim, hidden)
        t[p + "self_attn.v_proj.weight"] = pick(n_kv_heads * head_dim, hidden)
        t[p + "self_attn.o_proj.weight"] = pick(hidden, n_heads * head_dim)
        for name, shape in (("gate_proj", (64, hidden)), ("up_proj", (64, hidden)), ("down_proj", (hidden, 64))):
            t[p + "mlp." + name + ".weight"] = torch.zeros(shape)
    torch_llama.write_safetensors(directory / "model.safetensors", t)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": 64, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
              "num_key_value_heads": n_kv_heads, "head_dim": head_dim, "hidden_act": "silu", "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "vocab_size": vocab, "max_position_embeddings": 2048,
              "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def exact_model(tmp_path_factory):
    return write_exact_model(tmp_path_factory.mktemp("exact"))


SCHEMES = ["pq", "pq:calib=128,window=32,refresh=256,page=128", "pq:bits=3,cb=f16,wq=q8_0,refresh=0",
           "pq:nbits=8,m=16,rotation=hadamard"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pq_logits_and_perplexity_equal_the_runtimes(scheme, exact_model):
    runtime = aqpim.Model(str(exact_model), n_threads=1)
    model = torch_llama.load_llama(exact_model).use_pq_attention()
    rng = np.random.default_rng(1)
    ids = [1] + list(rng.integers(3, 512, 599))
    # one prefill of 600 tokens, then 8 decode steps
    ref_cache = runtime.new_cache(scheme, context=608)
    ref = [runtime.logits(ids, cache=ref_cache)]
    cache = model.pq_cache(scheme, context=608)
    got = [model(torch.tensor([ids]), cache)[0]]
    for t in rng.integers(3, 512, 8):
        ref.append(runtime.logits([int(t)], cache=ref_cache))
        got.append(model(torch.tensor([[int(t)]]), cache)[0])
    diff = max(max_diff(a, b) for a, b in zip(got, ref))
    print(f"{scheme}: logits max abs difference {diff:.2e} (logits up to {np.abs(ref[0]).max():.1f})")
    assert diff < 1e-4
    # ... while coding matters: the scheme's logits are far from the f16 cache's
    assert max_diff(ref[0], runtime.logits(ids, kv="f16")) > 100 * diff
    assert cache.memory() == ref_cache.memory()
    # perplexity, llama.cpp's protocol: two chunks of 512 (the scored second halves are coded)
    text = [1] + list(rng.integers(3, 512, 1023))
    r = runtime.perplexity(text, n_ctx=512, kv=scheme, bos=1)
    ppl, kv_bytes = torch_llama.perplexity(model, text, 1, 512, lambda: model.pq_cache(scheme, context=512))
    f16 = runtime.perplexity(text, n_ctx=512, kv="f16", bos=1).ppl
    print(f"{scheme}: perplexity {ppl:.6f} (runtime {r.ppl:.6f}, f16 cache {f16:.6f}), KV bytes {kv_bytes}")
    assert f"{ppl:.4g}" == f"{r.ppl:.4g}" and abs(ppl - r.ppl) < 1e-4 * r.ppl
    assert abs(ppl - f16) > 1e-3 * f16


def test_a_wrong_rope_layout_would_be_seen(exact_model):
    """The comparison above is sharp: keys rotated as interleaved pairs instead of NeoX halves differ."""
    runtime = aqpim.Model(str(exact_model), n_threads=1)
    model = torch_llama.load_llama(exact_model).use_pq_attention()
    ids = [1] + list(np.random.default_rng(2).integers(3, 512, 399))
    ref = runtime.logits(ids, kv="pq")
    c = model.config
    wrong = aqpim.torch.PQKVCache("pq", n_layers=c.num_hidden_layers, n_kv_heads=c.num_key_value_heads,
                                  head_dim=c.head_dim, rope_pairs="interleaved", rope_theta=c.rope_theta, context=400)
    assert max_diff(model(torch.tensor([ids]), wrong)[0], ref) > 1e-2
