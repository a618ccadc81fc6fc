"""aqpim.ProductQuantizer, kmeans, pack_codes, pq_attention / dense_attention on numpy arrays:
round trips, the saved layout (docs/pq-format.md), codes byte-identical to the C++ library's, and
clear errors."""

import pickle
import struct
import threading

import numpy as np
import pytest

import aqpim
from conftest import run_reference

D, M = 64, 16


def data(rng, n=600, d=D):
    # channels of different scales, as keys have
    return (rng.standard_normal((n, d)) * np.linspace(0.2, 3.0, d)).astype(np.float32)


def trained(rng, **kw):
    pq = aqpim.ProductQuantizer(D, M, 4, **kw)
    pq.train(data(rng))
    return pq


def test_encode_decode_round_trip(rng):
    x = data(rng)
    pq = aqpim.ProductQuantizer(D, M, 4)
    stats = pq.train(x)
    assert stats["sse"].shape == (M,) and stats["total_sse"] > 0
    codes = pq.encode(x)
    assert codes.shape == (600, M) and codes.dtype == np.uint8 and codes.max() < 16
    xr = pq.decode(codes)
    rel = ((xr - x) ** 2).sum() / (x ** 2).sum()
    assert 0.01 < rel < 0.5  # 4-bit PQ of Gaussian data: lossy, but far better than nothing
    # centroids are their own nearest centroids: decoding is the inverse of encoding on its image
    assert np.array_equal(pq.encode(xr), codes)
    # the decoded rows are the concatenated centroids (identity transform)
    c = pq.centroids
    assert c.shape == (M, 16, D // M) and not c.flags.writeable
    assert np.array_equal(xr[0], np.concatenate([c[m, codes[0, m]] for m in range(M)]))


def test_lut_scores_equal_dot_products_with_decoded_rows(rng):
    pq = trained(rng, plan="balanced", scale_folding=True, rotation="hadamard")
    x = data(rng, 50)
    codes = pq.encode(x)
    q = rng.standard_normal((3, D)).astype(np.float32)
    lut = pq.lut(q)
    assert lut.shape == (3, M, 16)
    scores = lut[:, np.arange(M)[None, :], codes].sum(-1)  # [3, 50]
    np.testing.assert_allclose(scores, q @ pq.decode(codes).T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(pq.transform_query(q) @ pq.forward(x).T, q @ x.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(pq.inverse(pq.forward(x)), x, rtol=1e-4, atol=1e-4)


def test_saved_bytes_follow_the_documented_layout(rng, tmp_path):
    pq = trained(rng, plan="balanced", scale_folding=True)
    b = pq.to_bytes()
    magic, version, d, m, nbits, pairs, order, rotation, flags = struct.unpack_from("<4s8I", b, 0)
    assert (magic, version, d, m, nbits, order, rotation) == (b"AQPQ", 1, D, M, 4, 1, 0)
    assert flags & 1  # scale section present
    (payload,) = struct.unpack_from("<Q", b, 72)
    assert len(b) == 80 + payload + 4 and payload == pq.parameter_bytes
    assert payload == 16 * D * 4 + D * 4 + (D * 4 if flags & 2 else 0)
    assert pq.bits_per_element() == M * 4 / D
    assert pq.bits_per_element(1000) == pytest.approx((1000 * M * 4 + 8 * payload) / (1000 * D))
    path = tmp_path / "k.aqpq"
    pq.save(str(path))
    assert path.read_bytes() == b
    for other in (aqpim.ProductQuantizer.load(str(path)), aqpim.ProductQuantizer.from_bytes(b), pickle.loads(pickle.dumps(pq))):
        assert other.to_bytes() == b
        x = data(rng, 20)
        assert np.array_equal(other.encode(x), pq.encode(x))


CONFIGS = [
    dict(),
    dict(plan="balanced", pairs="neox", scale_folding=True, seed=7, kmeans_seed=99),
    dict(rotation="hadamard", pairs="interleaved"),
    dict(rotation="random", seed=3),
    dict(nbits=8, plan="balanced"),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_codes_and_saved_quantizer_are_byte_identical_to_the_cpp_library(cfg, rng, tmp_path):
    x = data(rng, 700)
    x.tofile(tmp_path / "x.f32")
    nbits = cfg.get("nbits", 4)
    args = ["pq", "--x", tmp_path / "x.f32", "--n", 700, "--d", D, "--m", M, "--nbits", nbits,
            "--codes", tmp_path / "codes", "--quantizer", tmp_path / "q.aqpq"]
    for key in ("plan", "pairs", "rotation", "seed", "kmeans_seed"):
        if key in cfg:
            args += ["--" + key.replace("_", "-"), cfg[key]]
    if cfg.get("scale_folding"):
        args += ["--scale-folding", "1"]
    run_reference(*args)
    py_cfg = {k: v for k, v in cfg.items() if k != "nbits"}
    pq = aqpim.ProductQuantizer(D, M, nbits, **py_cfg)
    pq.train(x)
    assert pq.encode(x).tobytes() == (tmp_path / "codes").read_bytes()
    assert pq.to_bytes() == (tmp_path / "q.aqpq").read_bytes()


def test_other_float_dtypes_and_strided_views_are_converted(rng):
    pq = trained(rng)
    x = data(rng, 40)
    wide = np.zeros((40, 2 * D), np.float32)
    wide[:, ::2] = x
    assert np.array_equal(pq.encode(x.astype(np.float64)), pq.encode(x))
    assert np.array_equal(pq.encode(wide[:, ::2]), pq.encode(x))


def test_errors_name_the_argument_and_keep_the_library_message(rng):
    pq = aqpim.ProductQuantizer(D, M, 4)
    with pytest.raises(ValueError, match="not trained"):
        pq.encode(data(rng, 4))
    pq.train(data(rng))
    with pytest.raises(ValueError, match=r"encode: x: shape \[4, 32\]: dim 1 must be 64"):
        pq.encode(data(rng, 4, 32))
    with pytest.raises(ValueError, match=r"expected 2 dimensions \[n, D\], got shape \[64\]"):
        pq.encode(data(rng, 1)[0])
    with pytest.raises(TypeError, match="expected a float array.*got dtype int32"):
        pq.encode(np.zeros((4, D), np.int32))
    with pytest.raises(TypeError, match="expected a uint8 array.*got dtype int64"):
        pq.decode(np.zeros((4, M), np.int64))
    bad = np.zeros((2, M), np.uint8)
    bad[1, 3] = 16
    with pytest.raises(aqpim.Error, match="decode: code 16 of vector 1 subspace 3: expected < ksub=16"):
        pq.decode(bad)
    with pytest.raises(aqpim.Error, match=r"truncated at offset 100 while reading 'centroids'"):
        aqpim.ProductQuantizer.from_bytes(pq.to_bytes()[:100])
    corrupt = bytearray(pq.to_bytes())
    corrupt[200] ^= 1
    with pytest.raises(aqpim.Error, match="checksum"):
        aqpim.ProductQuantizer.from_bytes(bytes(corrupt))
    with pytest.raises(aqpim.Error, match="D=64 is not divisible by M=7"):
        aqpim.ProductQuantizer(D, 7)
    with pytest.raises(aqpim.Error, match="nbits=5: expected 4 or 8"):
        aqpim.ProductQuantizer(D, M, 5)
    with pytest.raises(ValueError, match="plan=spiral: expected one of contiguous, balanced"):
        aqpim.ProductQuantizer(D, M, plan="spiral")
    with pytest.raises(aqpim.Error, match="not finite"):
        aqpim.ProductQuantizer(D, M).train(np.full((10, D), np.nan, np.float32))
    assert issubclass(aqpim.Error, RuntimeError)


def test_kmeans_batch_problem_zero_is_the_single_problem_and_reports_its_sse(rng):
    x = rng.standard_normal((5, 200, 4)).astype(np.float32)
    c, stats = aqpim.kmeans(x, 16, seed=5)
    assert c.shape == (5, 16, 4) and stats["sse"].shape == (5,)
    c0, stats0 = aqpim.kmeans(x[0], 16, seed=5)
    assert np.array_equal(c0, c[0]) and stats0["total_sse"] == pytest.approx(stats["sse"][0])
    # the reported SSE is that of the final centroids
    d2 = ((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1).min(-1).sum(-1)
    np.testing.assert_allclose(stats["sse"], d2, rtol=1e-4)
    w = np.ones((5, 200), np.float32)
    w[:, 100:] = 0  # weight 0: never seeds nor moves a centroid, as if the point were absent
    cw, _ = aqpim.kmeans(x, 16, weights=w, seed=5)
    cref, _ = aqpim.kmeans(x[:, :100].copy(), 16, seed=5)
    assert np.array_equal(cw, cref)
    with pytest.raises(ValueError, match="one weight per point"):
        aqpim.kmeans(x, 16, weights=w[:, :10])
    with pytest.raises(aqpim.Error, match="k"):
        aqpim.kmeans(x, 0)


def test_pq_attention_matches_dense_attention_on_the_decoded_rows(rng):
    pk, pv = trained(rng, plan="balanced"), trained(rng)
    x = data(rng, 300)
    kc, vc = pk.encode(x), pv.encode(x[::-1].copy())
    q = rng.standard_normal((4, D)).astype(np.float32)
    out = aqpim.pq_attention(q, kc, vc, pk, pv)
    ref = aqpim.dense_attention(q, pk.decode(kc), pv.decode(vc))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    packed = aqpim.pq_attention(q, aqpim.pack_codes(kc, 4), aqpim.pack_codes(vc, 4), pk, pv)
    assert np.array_equal(packed, out)
    assert np.array_equal(aqpim.pack_codes(kc, 4).unpack(), kc)
    # a dense reference in numpy
    K, V = pk.decode(kc), pv.decode(vc)
    s = q @ K.T / np.sqrt(D)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(ref, (p / p.sum(1, keepdims=True)) @ V, rtol=1e-4, atol=1e-5)
    f16 = aqpim.dense_attention(q, K.astype(np.float16), V.astype(np.float16))
    np.testing.assert_allclose(f16, ref, rtol=1e-2, atol=1e-2)
    i8 = aqpim.pq_attention(q, kc, vc, pk, pv, scores="int8")
    np.testing.assert_allclose(i8, out, rtol=0.05, atol=0.05)
    with pytest.raises(ValueError, match="300 key tokens but 299 value tokens"):
        aqpim.pq_attention(q, kc, vc[:299], pk, pv)
    with pytest.raises(ValueError, match="codes of m=8, nbits=4 for a quantizer of m=16"):
        aqpim.pq_attention(q, kc[:, :8], vc, pk, pv)
    with pytest.raises(ValueError, match="expected < 2.4 = 16"):
        aqpim.pack_codes(np.full((3, M), 200, np.uint8), 4)
    with pytest.raises(ValueError, match="values=fast: expected one of auto, histogram, permute"):
        aqpim.pq_attention(q, kc, vc, pk, pv, values="fast")


def test_long_calls_release_the_gil(rng):
    x = rng.standard_normal((4000, 100, 8)).astype(np.float32)
    worker = threading.Thread(target=lambda: aqpim.kmeans(x, 16, n_threads=1))
    worker.start()
    ticks = 0
    while worker.is_alive():
        ticks += 1
    worker.join()
    # with the GIL held for the whole call this thread could not have run while the worker was alive
    assert ticks > 1000
