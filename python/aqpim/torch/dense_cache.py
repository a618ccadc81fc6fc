"""The dense KV cache PQ is measured against, with the same interface as ``PQKVCache``: keys and
values of each layer in one buffer [batch, n_kv_heads, capacity, head_dim] grown by doubling (an
append copies only the new tokens, unlike a ``torch.cat`` per step), and GQA attention that reads
each KV head once for its whole group of query heads (no ``repeat_kv`` copy)."""

import torch


def gqa_attention(q, k, v, scale=None, q_start=None):
    """Causal softmax attention of q [batch, n_heads, n_q, d] over k, v [batch, n_kv_heads, T, d].

    Query head h reads KV head h // (n_heads // n_kv_heads). Query row i sits at position
    q_start + i (default: the last n_q of the T positions) and sees positions <= its own.
    Returns [batch, n_heads, n_q, d] in q's dtype (computed in float32).
    """
    b, n_heads, n_q, d = q.shape
    n_kv, T = k.shape[1], k.shape[2]
    if n_heads % n_kv:
        raise ValueError(f"gqa_attention: {n_heads} query heads for {n_kv} KV heads (not a multiple)")
    group = n_heads // n_kv
    q_start = T - n_q if q_start is None else q_start
    scale = d ** -0.5 if scale is None else scale
    qg = q.to(torch.float32).reshape(b, n_kv, group * n_q, d)         # rows (g, i) of each KV head
    scores = torch.matmul(qg, k.to(torch.float32).transpose(-1, -2)) * scale  # [b, n_kv, group * n_q, T]
    if n_q > 1 or q_start + n_q < T:
        pos = q_start + torch.arange(n_q).repeat(group)             # position of row (g, i)
        scores = scores.masked_fill(torch.arange(T)[None, :] > pos[:, None], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = torch.matmul(p, v.to(torch.float32))                      # [b, n_kv, group * n_q, d]
    return out.reshape(b, n_heads, n_q, d).to(q.dtype)


class DenseKVCache:
    """Dense keys and values per layer in ``dtype`` (float32 by default), HF ``Cache`` convention.

    ``update(k, v, layer_idx)`` appends k, v [batch, n_kv_heads, n, head_dim] and returns every
    token's keys and values so far (views into the buffer); ``attend(q, layer_idx)`` is
    ``gqa_attention`` over them.
    """

    def __init__(self, n_layers, dtype=torch.float32, capacity=256):
        self.n_layers = n_layers
        self.dtype = dtype
        self._capacity = capacity
        self._k = [None] * n_layers
        self._v = [None] * n_layers
        self._n = [0] * n_layers

    def _reserve(self, layer_idx, like, n_total):
        k = self._k[layer_idx]
        if k is not None and k.shape[2] >= n_total:
            return
        b, n_kv, _, d = like.shape
        cap = max(n_total, self._capacity, 2 * (k.shape[2] if k is not None else 0))
        nk = torch.empty(b, n_kv, cap, d, dtype=self.dtype)
        nv = torch.empty(b, n_kv, cap, d, dtype=self.dtype)
        if k is not None:
            n = self._n[layer_idx]
            nk[:, :, :n] = k[:, :, :n]
            nv[:, :, :n] = self._v[layer_idx][:, :, :n]
        self._k[layer_idx], self._v[layer_idx] = nk, nv

    def append(self, key_states, value_states, layer_idx):
        if key_states.shape != value_states.shape or key_states.dim() != 4:
            raise ValueError(f"DenseKVCache: keys {list(key_states.shape)} and values {list(value_states.shape)}: "
                             "expected the same shape [batch, n_kv_heads, n, head_dim]")
        n0, n = self._n[layer_idx], key_states.shape[2]
        k = self._k[layer_idx]
        if k is not None and (k.shape[0], k.shape[1], k.shape[3]) != (key_states.shape[0], key_states.shape[1], key_states.shape[3]):
            raise ValueError(f"DenseKVCache: layer {layer_idx} holds [batch, n_kv_heads, _, head_dim] = "
                             f"{[k.shape[0], k.shape[1], '_', k.shape[3]]}, got {list(key_states.shape)}")
        self._reserve(layer_idx, key_states, n0 + n)
        self._k[layer_idx][:, :, n0:n0 + n] = key_states.detach()
        self._v[layer_idx][:, :, n0:n0 + n] = value_states.detach()
        self._n[layer_idx] = n0 + n

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        self.append(key_states, value_states, layer_idx)
        n = self._n[layer_idx]
        return self._k[layer_idx][:, :, :n], self._v[layer_idx][:, :, :n]

    def attend(self, query_states, layer_idx, scale=None):
        n = self._n[layer_idx]
        return gqa_attention(query_states, self._k[layer_idx][:, :, :n], self._v[layer_idx][:, :, :n], scale)

    def get_seq_length(self, layer_idx=0):
        return self._n[layer_idx]

    def memory(self):
        """Bytes of the tokens held (keys and values, every layer); 'allocated' counts the buffers' capacity."""
        used = sum(2 * k[:, :, :n].numel() * k.element_size() for k, n in zip(self._k, self._n) if k is not None)
        allocated = sum(2 * k.numel() * k.element_size() for k in self._k if k is not None)
        n_elements = sum(2 * k[:, :, :n].numel() for k, n in zip(self._k, self._n) if k is not None)
        return {"n_tokens": self._n[0] * (self._k[0].shape[0] if self._k[0] is not None else 0), "bytes": used,
                "allocated": allocated, "bits_per_element": 8.0 * used / n_elements if n_elements else 0.0}
