"""PQAttention: the attention of a Llama block (projections, RoPE, GQA, output projection) with its
keys and values in a PQKVCache and attention computed on the codes."""

import torch
from torch import nn

from .rope import RotaryEmbedding, apply_rotary


class PQAttention(nn.Module):
    """Drop-in for a Hugging Face-style Llama attention (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``
    ``nn.Linear`` modules, which it shares, so the weights are kept).

    ``forward(hidden_states, position_embeddings=None, attention_mask=None, past_key_value=cache,
    position_ids=None, **kwargs) -> (attn_output, None)``: hidden_states [batch, seq, hidden];
    position_embeddings the (cos, sin) [batch or 1, seq, head_dim] the model computed (else the
    module's own RoPE tables at position_ids, default the positions after what the cache holds);
    past_key_value a ``PQKVCache`` (or anything with ``append`` and ``attend``, e.g. ``DenseKVCache``).
    Attention is causal over the cache; sequences of a batch have equal lengths, so a padding mask
    (a 2-D attention_mask with zeros) is refused rather than ignored.
    """

    def __init__(self, q_proj, k_proj, v_proj, o_proj, *, n_heads, n_kv_heads, head_dim, layer_idx,
                 rope_theta=10000.0, rope_inv_freq=None):
        super().__init__()
        if n_heads % n_kv_heads:
            raise ValueError(f"PQAttention: {n_heads} query heads for {n_kv_heads} KV heads (not a multiple)")
        for name, proj, rows in (("q_proj", q_proj, n_heads * head_dim), ("k_proj", k_proj, n_kv_heads * head_dim),
                                 ("v_proj", v_proj, n_kv_heads * head_dim)):
            if proj.out_features != rows:
                raise ValueError(f"PQAttention: {name} gives {proj.out_features} features, expected {rows} "
                                 f"(heads x head_dim)")
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.layer_idx = layer_idx
        self.scale = head_dim ** -0.5
        self.rope = RotaryEmbedding(head_dim, rope_theta, rope_inv_freq)

    @classmethod
    def from_attention(cls, attn, layer_idx=None, **overrides):
        """Wrap an existing attention module: its projections and shapes (``num_heads`` /
        ``num_key_value_heads`` / ``head_dim`` attributes or its ``config``) and its ``layer_idx``."""
        config = getattr(attn, "config", None)

        def pick(*names):
            for holder in (attn, config):
                for n in names:
                    if holder is not None and getattr(holder, n, None) is not None:
                        return getattr(holder, n)
            return None

        args = dict(n_heads=pick("num_heads", "num_attention_heads"),
                    n_kv_heads=pick("num_key_value_heads", "num_kv_heads"),
                    head_dim=pick("head_dim"), layer_idx=pick("layer_idx") if layer_idx is None else layer_idx,
                    rope_theta=pick("rope_theta") or 10000.0)
        args.update(overrides)
        missing = [k for k, v in args.items() if v is None]
        if missing:
            raise ValueError(f"PQAttention.from_attention: cannot tell {', '.join(missing)} from the module; pass them")
        return cls(attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, **args)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_value=None,
                position_ids=None, **kwargs):
        if past_key_value is None:
            raise ValueError("PQAttention needs past_key_value: a PQKVCache holding this layer's keys and values")
        if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
            raise ValueError("PQAttention: padding masks are not supported (sequences of a batch must have equal lengths)")
        b, n, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, n, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, n, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if position_embeddings is None:
            if position_ids is None:
                position_ids = past_key_value.get_seq_length(self.layer_idx) + torch.arange(n)
            position_embeddings = self.rope(position_ids)
        cos, sin = position_embeddings
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        past_key_value.append(k, v, self.layer_idx)
        out = past_key_value.attend(q, self.layer_idx, self.scale)  # [b, n_heads, n, head_dim]
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.n_heads * self.head_dim)), None
