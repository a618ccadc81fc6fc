"""aqpim.KvCache: every --kv scheme on numpy arrays; attention against a numpy reference, memory
accounting against `aqpim info`, errors with the library's own messages."""

import re

import numpy as np
import pytest

import aqpim
from conftest import run_cli

L, H_KV, HD, H = 2, 2, 64, 4


def softmax_attention(q, k, v, pos):
    """q [rows, H, hd], k/v [n, H_KV, hd]; row i sees tokens 0..pos[i]; GQA head h reads KV head h // (H / H_KV)."""
    group = q.shape[1] // k.shape[1]
    out = np.empty_like(q)
    for i, p in enumerate(pos):
        for h in range(q.shape[1]):
            s = k[:p + 1, h // group] @ q[i, h] / np.sqrt(q.shape[2])
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ v[:p + 1, h // group]
    return out


def kv_data(rng, n):
    return [rng.standard_normal((n, H_KV, HD)).astype(np.float32) for _ in range(2)]


def test_dense_cache_attention_is_causal_gqa_softmax(rng):
    cache = aqpim.KvCache("f32", L, H_KV, HD)
    k, v = kv_data(rng, 40)
    for layer in range(L):
        cache.append(layer, k[:30], v[:30])
        cache.append(layer, k[30:], v[30:])
    assert cache.n_tokens(0, 1) == 40
    q = rng.standard_normal((5, H, HD)).astype(np.float32)
    pos = np.array([0, 7, 20, 38, 39])
    np.testing.assert_allclose(cache.attend(1, q, pos=pos), softmax_attention(q, k, v, pos), rtol=1e-5, atol=1e-6)
    # default positions: the last rows; `out` receives the result in place
    out = np.zeros((5, H, HD), np.float32)
    res = cache.attend(1, q, out=out)
    assert res is out or np.shares_memory(res, out)
    np.testing.assert_allclose(out, softmax_attention(q, k, v, range(35, 40)), rtol=1e-5, atol=1e-6)


def test_sequences_are_independent(rng):
    cache = aqpim.KvCache("f16", L, H_KV, HD)
    cache.add_sequence(3)
    k0, v0 = kv_data(rng, 10)
    k3, v3 = kv_data(rng, 12)
    cache.append(0, k0, v0, 0)
    cache.append(0, k3, v3, 3)
    q = rng.standard_normal((1, H, HD)).astype(np.float32)
    ref = softmax_attention(q, k3.astype(np.float16).astype(np.float32), v3.astype(np.float16).astype(np.float32), [11])
    np.testing.assert_allclose(cache.attend(0, q, 3), ref, rtol=1e-5, atol=1e-6)
    assert cache.has_sequence(3) and cache.memory()["n_tokens"] == 22
    cache.remove_sequence(3)
    assert not cache.has_sequence(3) and cache.memory()["n_tokens"] == 10


def test_pq_prefill_equals_token_by_token_decode(rng):
    k, v = kv_data(rng, 400)
    q = rng.standard_normal((1, H, HD)).astype(np.float32)
    batched = aqpim.KvCache("pq:calib=128", L, H_KV, HD, rope_pairs="neox", rope_theta=10000.0)
    stepped = aqpim.KvCache("pq:calib=128", L, H_KV, HD, rope_pairs="neox", rope_theta=10000.0)
    batched.append(0, k, v)
    for t in range(400):
        stepped.append(0, k[t:t + 1], v[t:t + 1])
    assert np.array_equal(batched.attend(0, q), stepped.attend(0, q))
    spans = batched.layout(0)
    assert spans[0] == {"first": 0, "n": 4, "version": -1, "page": -1} and any(s["version"] == 0 for s in spans)
    # attention on codes is close to, but not, the exact attention
    exact = softmax_attention(q, k, v, [399])
    err = np.abs(batched.attend(0, q) - exact).max()
    assert 1e-5 < err < 0.2


@pytest.mark.parametrize("scheme", ["f16", "q4_0", "kivi2", "turbo", "qjl", "pq", "pq:cb=f16,wq=q8_0,refresh=0"])
def test_memory_is_counted_as_aqpim_info_counts_it(scheme, synth_gguf, rng):
    context = 700
    model = aqpim.Model(str(synth_gguf), n_threads=1)
    cache = model.new_cache(scheme, context=context)
    status, out, err = run_cli("info", "-m", synth_gguf, "--kv", scheme, "--context", context)
    assert status == 0, err
    row = next(line for line in out.splitlines() if line.split() and line.split()[0] == scheme)
    info_bytes, info_bits = int(row.split()[2]), float(row.split()[3])
    assert cache.sequence_bytes(context) == info_bytes
    # a sequence decoded to `context` tokens holds what info predicts
    k, v = kv_data(rng, context)
    for t in range(context):
        for layer in range(L):
            cache.append(layer, k[t:t + 1], v[t:t + 1])
    mem = cache.memory()
    # parts shared by the sequences (turbo's rotations, qjl's projections) are held once, not per sequence
    shared = sum(b for part, b in mem["parts"].items() if "(shared)" in part)
    assert mem["n_tokens"] == context and mem["bytes"] == sum(mem["parts"].values())
    assert mem["bytes"] - shared == info_bytes
    # scratch is counted apart: attend's workspace grows on the first call and not on a repeat
    before = cache.scratch_bytes()
    q = rng.standard_normal((1, H, HD)).astype(np.float32)
    cache.attend(0, q)
    warm = cache.scratch_bytes()
    assert warm > before
    cache.attend(0, q)
    assert cache.scratch_bytes() == warm and cache.memory()["bytes"] == mem["bytes"]
    if not shared:
        assert mem["bits_per_element"] == pytest.approx(info_bits, abs=5e-4)


@pytest.mark.parametrize("scheme", ["f16", "q8_0", "pq:calib=64,window=16,page=32,refresh=64"])
def test_a_saved_sequence_restores_and_forks_to_the_same_attention(scheme, rng):
    k, v = kv_data(rng, 200)
    q = rng.standard_normal((1, H, HD)).astype(np.float32)
    cache = aqpim.KvCache(scheme, L, H_KV, HD, rope_pairs="neox", rope_theta=10000.0)
    for layer in range(L):
        cache.append(layer, k, v)
    data = cache.save_sequence(0)
    other = aqpim.KvCache(scheme, L, H_KV, HD, rope_pairs="neox", rope_theta=10000.0)
    other.restore_sequence(5, data)
    assert np.array_equal(other.attend(1, q, 5), cache.attend(1, q))
    cache.fork_sequence(0, 2)
    assert np.array_equal(cache.attend(1, q, 2), cache.attend(1, q))
    with pytest.raises(aqpim.Error):
        other.restore_sequence(6, data[: len(data) // 2])
    assert not other.has_sequence(6)


def cli_error(*args):
    status, _, err = run_cli(*args)
    assert status == 1
    return re.search(r"aqpim: error: (.*)", err).group(1)


@pytest.mark.parametrize("scheme", ["bogus", "pq:wndow=3", "pq:m=3", "int8:g=0"])
def test_bad_schemes_raise_the_commands_message(scheme, synth_gguf):
    expected = cli_error("run", "-m", synth_gguf, "-n", 1, "-p", "a", "--kv", scheme)
    with pytest.raises(aqpim.Error) as e:
        aqpim.KvCache(scheme, L, H_KV, HD)
    assert str(e.value) == expected


def test_shape_and_dtype_errors_are_clear(rng):
    cache = aqpim.KvCache("f32", L, H_KV, HD)
    k, v = kv_data(rng, 3)
    with pytest.raises(ValueError, match=r"append: k: shape \[3, 3, 64\]: dim 1 must be 2 \(n_kv_heads\)"):
        cache.append(0, rng.standard_normal((3, 3, HD)).astype(np.float32), v)
    with pytest.raises(ValueError, match="dim 0 must be 3 .n, as many tokens as k"):
        cache.append(0, k, v[:2])
    with pytest.raises(ValueError, match=r"layer 2 out of range \[0, 2\)"):
        cache.append(2, k, v)
    with pytest.raises(TypeError, match="got dtype complex64"):
        cache.append(0, k.astype(np.complex64), v)
    cache.append(0, k, v)
    q = rng.standard_normal((1, H, HD)).astype(np.float32)
    with pytest.raises(ValueError, match="dim 1 must be the query heads, a multiple of n_kv_heads=2"):
        cache.attend(0, rng.standard_normal((1, 3, HD)).astype(np.float32))
    with pytest.raises(ValueError, match=r"pos\[0\] = 3: expected 0 <= pos < 3"):
        cache.attend(0, q, pos=[3])
    with pytest.raises(ValueError, match="4 query rows but sequence 0 holds 3 tokens"):
        cache.attend(0, np.zeros((4, H, HD), np.float32))
    with pytest.raises(ValueError, match="no sequence 5"):
        cache.attend(0, q, 5)
    with pytest.raises(TypeError, match="out must be a writeable C-contiguous float32"):
        cache.attend(0, q, out=np.zeros((1, H, HD), np.float64))
    with pytest.raises(ValueError, match="give rope_theta or rope_inv_freq, not both"):
        aqpim.KvCache("pq", L, H_KV, HD, rope_theta=1e4, rope_inv_freq=np.ones(HD // 2, np.float32))
    with pytest.raises(ValueError, match="head_dim / 2, one frequency per RoPE pair"):
        aqpim.KvCache("pq", L, H_KV, HD, rope_inv_freq=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="rope_pairs=halves: expected one of none, interleaved, neox"):
        aqpim.KvCache("pq", L, H_KV, HD, rope_pairs="halves")
