"""The operator ``aqpim::pq_attention``, registered through ``torch.library`` so that attention on
PQ codes is one node of a graph (``torch.jit.trace``, ``torch.jit.script``, saved TorchScript
that is loaded after ``import aqpim.torch``).

    aqpim::pq_attention(Tensor query, Tensor k_blocks, Tensor v_blocks, int n_tokens,
                        Tensor k_quantizer, Tensor v_quantizer, float scale) -> Tensor

query [n_q, d] (float32, float16 or bfloat16; the result has its dtype); k_blocks / v_blocks uint8
[n_blocks, block_bytes], codes packed by ``packed_codes_tensor``; the quantizers as uint8 tensors
of their saved bytes (``quantizer_tensor``, the layout of docs/pq-format.md). CPU only.

Inference only: a query that requires grad gives an output whose backward raises RuntimeError.
"""

import weakref

import torch

import aqpim

_SCHEMA = ("pq_attention(Tensor query, Tensor k_blocks, Tensor v_blocks, int n_tokens, "
           "Tensor k_quantizer, Tensor v_quantizer, float scale) -> Tensor")
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_lib = torch.library.Library("aqpim", "DEF")
_lib.define(_SCHEMA)


class InferenceOnly(torch.autograd.Function):
    """Passes a result through and refuses its backward: aqpim's kernels have no gradient."""

    @staticmethod
    def forward(ctx, name, source, result):
        # `source` (an input that requires grad) puts this node into the graph; `result` passes through.
        ctx.name = name
        return result.view_as(result)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(f"{ctx.name} is inference-only: aqpim computes attention on codes without a gradient "
                           "(run it under torch.no_grad(), or detach its inputs)")


def _require(cond, message):
    if not cond:
        raise ValueError(f"aqpim::pq_attention: {message}")


def _cpu_tensor(t, name, dtypes, ndim):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"aqpim::pq_attention: {name} must be a tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"aqpim::pq_attention: {name} is on {t.device}; aqpim's kernels run on the CPU")
    if t.dtype not in dtypes:
        raise TypeError(f"aqpim::pq_attention: {name} has dtype {t.dtype}, expected one of "
                        + ", ".join(str(d) for d in dtypes))
    _require(t.dim() == ndim, f"{name} has shape {list(t.shape)}, expected {ndim} dimensions")
    return t.detach().contiguous()


# Quantizer tensors already parsed: id(tensor) -> (weak reference, version counter, ProductQuantizer).
# The entry goes with its tensor, and an in-place change bumps the version: the bytes are read again.
_parsed = {}


def _forget(key, ref):
    if _parsed.get(key, (None,))[0] is ref:
        del _parsed[key]


def _quantizer(t, name):
    hit = _parsed.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2]
    pq = aqpim.ProductQuantizer.from_bytes(_cpu_tensor(t, name, (torch.uint8,), 1).numpy().tobytes())
    key = id(t)
    _parsed[key] = (weakref.ref(t, lambda ref: _forget(key, ref)), t._version, pq)
    return pq


def _pq_attention_cpu(query, k_blocks, v_blocks, n_tokens, k_quantizer, v_quantizer, scale):
    q = _cpu_tensor(query, "query", _FLOAT_DTYPES, 2)
    kb = _cpu_tensor(k_blocks, "k_blocks", (torch.uint8,), 2)
    vb = _cpu_tensor(v_blocks, "v_blocks", (torch.uint8,), 2)
    pq_k = _quantizer(k_quantizer, "k_quantizer")
    pq_v = _quantizer(v_quantizer, "v_quantizer")
    k = aqpim.PackedCodes(kb.numpy(), n_tokens, pq_k.m, pq_k.nbits)
    v = aqpim.PackedCodes(vb.numpy(), n_tokens, pq_v.m, pq_v.nbits)
    out = aqpim.pq_attention(q.to(torch.float32).numpy(), k, v, pq_k, pq_v, scale=scale)
    return torch.from_numpy(out).to(query.dtype)


def _pq_attention_autograd(query, k_blocks, v_blocks, n_tokens, k_quantizer, v_quantizer, scale):
    guard = torch._C._AutoDispatchBelowAutograd()  # noqa: F841 (released when the call returns)
    result = torch.ops.aqpim.pq_attention(query, k_blocks, v_blocks, n_tokens, k_quantizer, v_quantizer, scale)
    del guard
    if torch.is_grad_enabled() and query.requires_grad:
        return InferenceOnly.apply("aqpim::pq_attention", query, result)
    return result


_lib.impl("pq_attention", _pq_attention_cpu, "CPU")
_lib.impl("pq_attention", _pq_attention_autograd, "Autograd")


def quantizer_tensor(pq):
    """A trained ``aqpim.ProductQuantizer`` as the uint8 tensor of its saved bytes (docs/pq-format.md)."""
    return torch.frombuffer(bytearray(pq.to_bytes()), dtype=torch.uint8)


def packed_codes_tensor(codes, nbits):
    """Codes [n_tokens, m] (uint8 tensor or array, as ``encode`` gives) packed into blocks for the operator:
    returns (blocks uint8 [n_blocks, block_bytes], n_tokens)."""
    if isinstance(codes, torch.Tensor):
        codes = codes.detach().cpu().numpy()
    packed = aqpim.pack_codes(codes, nbits)
    return torch.from_numpy(packed.blocks), packed.n_tokens


def pq_attention(query, k_codes, v_codes, pq_k, pq_v, scale=None):
    """``torch.ops.aqpim.pq_attention`` on codes [n_tokens, m] and trained quantizers: query [n_q, d]."""
    kb, n = packed_codes_tensor(k_codes, pq_k.nbits)
    vb, n_v = packed_codes_tensor(v_codes, pq_v.nbits)
    _require(n == n_v, f"{n} key tokens but {n_v} value tokens")
    if scale is None:
        scale = query.shape[-1] ** -0.5
    return torch.ops.aqpim.pq_attention(query, kb, vb, n, quantizer_tensor(pq_k), quantizer_tensor(pq_v), float(scale))
