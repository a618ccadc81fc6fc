"""aqpim.torch: PQKVCache against the C++ cache called directly, the dense path against plain
PyTorch attention, the aqpim::pq_attention operator (trace, script, save/load, no backward),
PQAttention, and the errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter (Debian: python3-torch)")

import aqpim  # noqa: E402
from aqpim.torch import DenseKVCache, PQAttention, PQKVCache, gqa_attention, packed_codes_tensor, quantizer_tensor  # noqa: E402
from conftest import run_reference  # noqa: E402

L, H_KV, HD, H = 2, 2, 64, 4
SCHEME = "pq:calib=68,window=16,page=32,refresh=64"


def cpp_attend(tmp_path, k, v, q, chunks, scheme=SCHEME, layer=1):
    """The C++ cache (aqpim_py_reference kv): k, v [L, n, H_KV, HD] appended in chunks; q [rows, H, HD]."""
    k.astype(np.float32).tofile(tmp_path / "k")
    v.astype(np.float32).tofile(tmp_path / "v")
    q.astype(np.float32).tofile(tmp_path / "q")
    run_reference("kv", "--scheme", scheme, "--layers", L, "--kv-heads", H_KV, "--head-dim", HD, "--pairs", "neox",
                  "--rope-theta", 10000, "--k", tmp_path / "k", "--v", tmp_path / "v", "--n", k.shape[1],
                  "--chunks", ",".join(map(str, chunks)), "--layer", layer, "--q", tmp_path / "q", "--heads", H,
                  "--rows", q.shape[0], "--out", tmp_path / "out")
    return np.fromfile(tmp_path / "out", np.float32).reshape(q.shape)


def pq_cache(scheme=SCHEME, **kw):
    return PQKVCache(scheme, n_layers=L, n_kv_heads=H_KV, head_dim=HD, rope_pairs="neox", rope_theta=10000.0, **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,prefill,rows", [(150, 150, 5), (200, 150, 1)], ids=["prefill", "decode"])
def test_pq_cache_attention_equals_the_cpp_caches(dtype, n, prefill, rows, tmp_path):
    """A prefill of 150 tokens and 5 query rows; or then 50 one-token steps and the last step's row."""
    g = torch.Generator().manual_seed(1)
    batch = 2
    k = torch.randn(batch, L, H_KV, n, HD, generator=g).to(dtype)  # per batch row and layer: [H_KV, n, HD]
    v = torch.randn(batch, L, H_KV, n, HD, generator=g).to(dtype)
    q = torch.randn(batch, H, rows, HD, generator=g).to(dtype)
    cache = pq_cache()
    for t0, t1 in [(0, prefill)] + [(t, t + 1) for t in range(prefill, n)]:
        for layer in range(L):
            cache.append(k[:, layer, :, t0:t1], v[:, layer, :, t0:t1], layer)
    out = cache.attend(q, 1)
    assert out.shape == (batch, H, rows, HD) and out.dtype == dtype
    for b in range(batch):
        ref = cpp_attend(tmp_path, k[b].float().transpose(1, 2).numpy(), v[b].float().transpose(1, 2).numpy(),
                         q[b].float().transpose(0, 1).numpy(), [prefill, 1])
        got = out[b].float().transpose(0, 1).numpy()
        if dtype == torch.float32:
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        else:  # the same computation, its output rounded to the query's dtype
            np.testing.assert_array_equal(got, torch.from_numpy(ref).to(dtype).float().numpy())
    mem = cache.memory()
    assert mem["n_tokens"] == batch * n and mem["parts"]["codes"] > 0 and cache.kv_bytes == mem["bytes"]
    assert cache.get_seq_length(1) == n


def test_dense_scheme_through_the_cache_equals_pytorch_attention():
    g = torch.Generator().manual_seed(2)
    k, v = torch.randn(2, H_KV, 50, HD, generator=g), torch.randn(2, H_KV, 50, HD, generator=g)
    q = torch.randn(2, H, 50, HD, generator=g)
    cache, dense = pq_cache("f32"), DenseKVCache(L)
    cache.append(k[:, :, :30], v[:, :, :30], 0)
    cache.append(k[:, :, 30:], v[:, :, 30:], 0)
    dense.update(k, v, 0)
    # causal prefill rows, and the plain-PyTorch reference with repeat_kv
    rep = lambda t: t.repeat_interleave(H // H_KV, dim=1)  # noqa: E731
    s = q @ rep(k).transpose(-1, -2) / HD ** 0.5
    s = s.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ rep(v)
    torch.testing.assert_close(cache.attend(q, 0), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dense.attend(q, 0), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gqa_attention(q[:, :, -1:], k, v), ref[:, :, -1:], rtol=1e-5, atol=1e-5)


def test_update_returns_dense_keys_only_with_the_fallback():
    k, v = torch.randn(1, H_KV, 5, HD), torch.randn(1, H_KV, 5, HD)
    with pytest.raises(RuntimeError, match="dense_fallback=True"):
        pq_cache().update(k, v, 0)
    cache = pq_cache(dense_fallback=True)
    cache.update(k[:, :, :2], v[:, :, :2], 0)
    kk, vv = cache.update(k[:, :, 2:], v[:, :, 2:], 0)
    assert torch.equal(kk, k) and torch.equal(vv, v)
    assert cache.memory()["bytes"] > 0 and len(cache) == L


def test_errors_are_clear():
    cache = pq_cache()
    k = torch.randn(1, H_KV, 4, HD)
    with pytest.raises(ValueError, match="layer 0 holds no tokens yet"):
        cache.attend(torch.randn(1, H, 1, HD), 0)
    with pytest.raises(TypeError, match="dtype torch.int64, expected float32, float16 or bfloat16"):
        cache.append(k.long(), k, 0)
    with pytest.raises(ValueError, match=r"shape \[2, 4, 64\], expected \[batch, heads, seq, head_dim\]"):
        cache.append(k[0], k[0], 0)
    with pytest.raises(ValueError, match="dim 1 must be n_kv_heads = 2"):
        cache.append(torch.randn(1, 3, 4, HD), torch.randn(1, 3, 4, HD), 0)
    with pytest.raises(ValueError, match="head_dim must be 64"):
        cache.append(torch.randn(1, H_KV, 4, 32), torch.randn(1, H_KV, 4, 32), 0)
    cache.append(k, k, 0)
    with pytest.raises(ValueError, match="batch of 2 for a cache holding 1 sequences"):
        cache.append(torch.randn(2, H_KV, 1, HD), torch.randn(2, H_KV, 1, HD), 0)
    with pytest.raises(ValueError, match="a multiple of n_kv_heads=2"):
        cache.attend(torch.randn(1, 3, 1, HD), 0)
    with pytest.raises(aqpim.Error, match="unknown KV cache scheme 'pqq'"):
        pq_cache("pqq")
    q = torch.randn(1, H, 1, HD, requires_grad=True)
    out = cache.attend(q, 0)
    with pytest.raises(RuntimeError, match="PQKVCache.attend is inference-only"):
        out.sum().backward()


def trained_codes(rng, n=300, d=128, m=32):
    x = rng.standard_normal((n, d)).astype(np.float32)
    pk, pv = aqpim.ProductQuantizer(d, m, 4), aqpim.ProductQuantizer(d, m, 4, plan="balanced")
    pk.train(x)
    pv.train(x[::-1].copy())
    return pk, pv, pk.encode(x), pv.encode(x)


class CodesAttention(torch.nn.Module):
    """Attention on codes held as buffers: what a traced graph keeps."""

    def __init__(self, pk, pv, kc, vc):
        super().__init__()
        kb, self.n = packed_codes_tensor(kc, 4)
        vb, _ = packed_codes_tensor(vc, 4)
        self.register_buffer("kb", kb)
        self.register_buffer("vb", vb)
        self.register_buffer("qk", quantizer_tensor(pk))
        self.register_buffer("qv", quantizer_tensor(pv))

    def forward(self, q):
        return torch.ops.aqpim.pq_attention(q * 2.0, self.kb, self.vb, self.n, self.qk, self.qv, 0.125) + 1.0


def test_the_operator_is_one_graph_node_and_equals_the_numpy_call(rng, tmp_path):
    pk, pv, kc, vc = trained_codes(rng)
    module = CodesAttention(pk, pv, kc, vc)
    q = torch.randn(4, 128)
    ref = aqpim.pq_attention(q.numpy() * 2.0, kc, vc, pk, pv, scale=0.125) + 1.0
    np.testing.assert_array_equal(module(q).numpy(), ref)
    traced = torch.jit.trace(module, q)
    kinds = [n.kind() for n in traced.graph.nodes()]
    assert kinds.count("aqpim::pq_attention") == 1
    q2 = torch.randn(4, 128)
    torch.testing.assert_close(traced(q2), module(q2), rtol=0, atol=0)
    scripted = torch.jit.script(module)
    assert "aqpim::pq_attention" in str(scripted.graph)
    torch.testing.assert_close(scripted(q2), module(q2), rtol=0, atol=0)
    traced.save(str(tmp_path / "m.pt"))
    torch.testing.assert_close(torch.jit.load(str(tmp_path / "m.pt"))(q2), module(q2), rtol=0, atol=0)
    half = torch.ops.aqpim.pq_attention(q.half(), module.kb, module.vb, module.n, module.qk, module.qv, 0.125)
    assert half.dtype == torch.float16


def test_the_operator_is_inference_only_and_checks_its_inputs(rng):
    pk, pv, kc, vc = trained_codes(rng)
    m = CodesAttention(pk, pv, kc, vc)
    q = torch.randn(4, 128, requires_grad=True)
    out = m(q)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="aqpim::pq_attention is inference-only"):
        out.sum().backward()
    with torch.no_grad():
        assert not m(q).requires_grad
    op = torch.ops.aqpim.pq_attention
    with pytest.raises(TypeError, match="query has dtype torch.float64"):
        op(q.detach().double(), m.kb, m.vb, m.n, m.qk, m.qv, 0.1)
    with pytest.raises(ValueError, match=r"query has shape \[128\], expected 2 dimensions"):
        op(q.detach()[0], m.kb, m.vb, m.n, m.qk, m.qv, 0.1)
    with pytest.raises(ValueError, match="ceil.n_tokens / 32. blocks"):
        op(q.detach(), m.kb, m.vb, m.n + 40, m.qk, m.qv, 0.1)
    with pytest.raises(aqpim.Error, match="magic"):
        op(q.detach(), m.kb, m.vb, m.n, torch.zeros(100, dtype=torch.uint8), m.qv, 0.1)
    # an in-place change of a quantizer tensor is seen (parsed again)
    qk = m.qk.clone()
    first = op(q.detach(), m.kb, m.vb, m.n, qk, m.qv, 0.1)
    other = aqpim.ProductQuantizer(128, 32, 4)
    other.train(rng.standard_normal((300, 128)).astype(np.float32))
    qk[:] = quantizer_tensor(other)
    assert not torch.equal(op(q.detach(), m.kb, m.vb, m.n, qk, m.qv, 0.1), first)


class TinyAttention(torch.nn.Module):
    """An HF-style attention module to wrap: projections and shape attributes."""

    def __init__(self):
        super().__init__()
        self.num_heads, self.num_key_value_heads, self.head_dim, self.layer_idx = H, H_KV, HD, 1
        self.q_proj = torch.nn.Linear(96, H * HD, bias=False)
        self.k_proj = torch.nn.Linear(96, H_KV * HD, bias=False)
        self.v_proj = torch.nn.Linear(96, H_KV * HD, bias=False)
        self.o_proj = torch.nn.Linear(H * HD, 96, bias=False)


def test_pq_attention_module_keeps_the_weights_and_attends_through_the_cache():
    base = TinyAttention()
    pq = PQAttention.from_attention(base)
    assert pq.q_proj is base.q_proj and pq.o_proj.weight is base.o_proj.weight and pq.layer_idx == 1
    x = torch.randn(2, 20, 96)
    with torch.no_grad():
        out_f32, _ = pq(x, past_key_value=pq_cache("f32"))
        out_dense, _ = pq(x, past_key_value=DenseKVCache(L))
        out_pq, _ = pq(x, past_key_value=pq_cache("pq:calib=8,window=4,page=32,refresh=0"))
    torch.testing.assert_close(out_f32, out_dense, rtol=1e-5, atol=1e-5)
    err = (out_pq - out_dense).abs().max() / out_dense.abs().max()
    assert 1e-4 < err < 0.3  # on codes: close, not equal
    with pytest.raises(ValueError, match="padding masks are not supported"):
        pq(x, attention_mask=torch.tensor([[1] * 20, [0] + [1] * 19]), past_key_value=pq_cache())
    with pytest.raises(ValueError, match="needs past_key_value"):
        pq(x)
    with pytest.raises(ValueError, match="q_proj gives 256 features, expected 128"):
        PQAttention(base.q_proj, base.k_proj, base.v_proj, base.o_proj, n_heads=2, n_kv_heads=2, head_dim=HD, layer_idx=0)
