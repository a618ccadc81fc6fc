"""PQKVCache: an aqpim KV cache (any ``--kv`` scheme; PQ by default) behind the Hugging Face
``Cache`` calling convention, with attention computed on the codes by the C++ cache."""

import numpy as np
import torch

import aqpim

from .ops import InferenceOnly

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_states(t, name, n_heads=None, head_dim=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"PQKVCache: {name} must be a tensor, got {type(t).__name__}")
    if t.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"PQKVCache: {name} has dtype {t.dtype}, expected float32, float16 or bfloat16")
    if t.device.type != "cpu":
        raise ValueError(f"PQKVCache: {name} is on {t.device}; the aqpim cache runs on the CPU")
    if t.dim() != 4:
        raise ValueError(f"PQKVCache: {name} has shape {list(t.shape)}, expected [batch, heads, seq, head_dim]")
    if head_dim is not None and t.shape[3] != head_dim:
        raise ValueError(f"PQKVCache: {name} has shape {list(t.shape)}: head_dim must be {head_dim}")
    if n_heads is not None and t.shape[1] != n_heads:
        raise ValueError(f"PQKVCache: {name} has shape {list(t.shape)}: dim 1 must be n_kv_heads = {n_heads}")


def _rows(t):
    """[batch, heads, seq, d] -> numpy float32 [batch, seq, heads, d], C-contiguous (the C++ cache's row
    layout): a view when the tensor is float32 and seq is 1 (a decode step), else one copy."""
    if t.requires_grad:
        t = t.detach()
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    return np.ascontiguousarray(t.numpy().transpose(0, 2, 1, 3))


class PQKVCache:
    """Keys and values of every layer in an ``aqpim.KvCache`` of ``scheme`` ('pq', 'pq:bits=2,...',
    any ``--kv`` scheme: docs/kv-pq.md), for tensors [batch, heads, seq, head_dim] in float32,
    float16 or bfloat16 on the CPU. Batch row b is the cache's sequence b.

    ``append(k, v, layer_idx)`` stores new tokens; ``attend(q, layer_idx)`` returns the attention
    output [batch, n_heads, seq, head_dim] of the query rows (the last seq tokens of each
    sequence, causal) computed by the C++ cache on the codes. ``update()`` is the HF convention
    for code that does its own attention: it returns every token's keys and values, which needs
    ``dense_fallback=True`` (a dense copy kept beside the codes, not counted by ``memory()``).

    rope_pairs / rope_theta (or rope_inv_freq) describe how keys were rotated: 'neox' for Hugging
    Face Llama checkpoints (rotate_half). ``for_model(aqpim.Model)`` takes them from a model file.
    ``cache`` is the ``aqpim.KvCache`` underneath (batch row b = its sequence b). Inference only
    (the codes have no gradient).
    """

    def __init__(self, scheme="pq", *, n_layers, n_kv_heads, head_dim, rope_pairs="neox", rope_theta=10000.0,
                 rope_inv_freq=None, context=0, memory_budget=0, dense_fallback=False, n_threads=1):
        if rope_inv_freq is not None:
            rope_theta = 0.0
        self._make = lambda: aqpim.KvCache(scheme, n_layers, n_kv_heads, head_dim, rope_pairs=rope_pairs,
                                           rope_theta=rope_theta, rope_inv_freq=rope_inv_freq, context=context,
                                           memory_budget=memory_budget, n_threads=n_threads)
        self.dense_fallback = dense_fallback
        self.reset()

    @classmethod
    def for_model(cls, model, scheme="pq", *, context=0, memory_budget=0, dense_fallback=False, n_threads=1):
        """The cache ``aqpim.Model(path).new_cache(scheme)`` would be: the model's layers, heads and RoPE."""
        obj = cls.__new__(cls)
        obj._make = lambda: model.new_cache(scheme, context=context, memory_budget=memory_budget, n_threads=n_threads)
        obj.dense_fallback = dense_fallback
        obj.reset()
        return obj

    def reset(self):
        """Drop every token (a new, empty cache of the same scheme)."""
        self.cache = self._make()
        self._batch = None
        self._dense_k = [None] * self.cache.n_layers
        self._dense_v = [None] * self.cache.n_layers

    @property
    def scheme(self):
        return self.cache.scheme

    @property
    def n_layers(self):
        return self.cache.n_layers

    def _sequences(self, batch):
        if self._batch is None:
            for b in range(1, batch):
                self.cache.add_sequence(b)
            self._batch = batch
        elif batch != self._batch:
            raise ValueError(f"PQKVCache: batch of {batch} for a cache holding {self._batch} sequences (call reset())")

    def append(self, key_states, value_states, layer_idx):
        """Store k, v [batch, n_kv_heads, seq, head_dim] (keys after RoPE) after the tokens layer_idx holds."""
        _check_states(key_states, "key_states", self.cache.n_kv_heads, self.cache.head_dim)
        _check_states(value_states, "value_states", self.cache.n_kv_heads, self.cache.head_dim)
        if key_states.shape != value_states.shape:
            raise ValueError(f"PQKVCache: key_states {list(key_states.shape)} and value_states "
                             f"{list(value_states.shape)} differ")
        self._sequences(key_states.shape[0])
        k, v = _rows(key_states), _rows(value_states)
        for b in range(k.shape[0]):
            self.cache.append(layer_idx, k[b], v[b], b)
        if self.dense_fallback:
            dk, dv = key_states.detach(), value_states.detach()
            if self._dense_k[layer_idx] is not None:
                dk = torch.cat([self._dense_k[layer_idx], dk], dim=2)
                dv = torch.cat([self._dense_v[layer_idx], dv], dim=2)
            self._dense_k[layer_idx], self._dense_v[layer_idx] = dk, dv

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        """HF ``Cache.update``: store, then return every token's (keys, values) [batch, n_kv_heads, T, head_dim]."""
        if not self.dense_fallback:
            raise RuntimeError("PQKVCache.update returns dense keys and values, which this cache does not keep: "
                               "call append() and attend(query_states, layer_idx), or make the cache with "
                               "dense_fallback=True")
        self.append(key_states, value_states, layer_idx)
        return self._dense_k[layer_idx], self._dense_v[layer_idx]

    def attend(self, query_states, layer_idx, scale=None):
        """Attention of q [batch, n_heads, seq, head_dim] (after RoPE) over the layer's tokens, on the codes.

        Row i of the seq query rows sits at the i-th of each sequence's last seq positions and sees
        the tokens at or before it. Returns [batch, n_heads, seq, head_dim] in q's dtype.
        """
        _check_states(query_states, "query_states", head_dim=self.cache.head_dim)
        if self.cache.n_tokens(0, layer_idx) == 0:
            raise ValueError(f"PQKVCache.attend: layer {layer_idx} holds no tokens yet (append keys and values first)")
        batch = self._batch or 1  # the cache may have been filled through .cache (e.g. by aqpim.Model.logits)
        if query_states.shape[0] != batch:
            raise ValueError(f"PQKVCache.attend: batch of {query_states.shape[0]} for a cache of {batch} sequences")
        q = _rows(query_states)
        out = np.empty_like(q)
        for b in range(q.shape[0]):
            self.cache.attend(layer_idx, q[b], b, scale=scale, out=out[b])
        result = torch.from_numpy(out).transpose(1, 2)
        if result.dtype != query_states.dtype:
            result = result.to(query_states.dtype)
        if torch.is_grad_enabled() and query_states.requires_grad:
            return InferenceOnly.apply("PQKVCache.attend", query_states, result)
        return result

    # ---- the rest of HF's Cache interface --------------------------------------------------------
    def get_seq_length(self, layer_idx=0):
        return self.cache.n_tokens(0, layer_idx)

    def get_max_length(self):
        return None

    def __len__(self):
        return self.cache.n_layers

    def memory(self):
        """Every byte the aqpim cache holds, by part (``aqpim.KvCache.memory``; dense_fallback copies not included)."""
        return self.cache.memory()

    @property
    def kv_bytes(self):
        return self.cache.memory()["bytes"]

    def __repr__(self):
        return f"PQKVCache({self.cache!r}, batch={self._batch})"
