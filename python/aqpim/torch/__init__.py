"""aqpim in PyTorch (docs/python.md):

- ``PQKVCache``: the KV cache of any aqpim scheme behind the Hugging Face ``Cache`` calling
  convention (``update``), plus ``attend(query_states, layer_idx)``: attention computed on the PQ
  codes by the C++ cache;
- ``PQAttention``: replaces a Llama block's attention (its projections and weights kept) and routes
  keys and values through a ``PQKVCache``;
- ``DenseKVCache``: the dense baseline with the same interface;
- the operator ``torch.ops.aqpim.pq_attention`` (registered through ``torch.library``; one graph
  node under ``torch.jit.trace`` / ``torch.jit.script``; inference only), with ``pq_attention``,
  ``quantizer_tensor`` and ``packed_codes_tensor`` to call it.
"""

from .rope import RotaryEmbedding, apply_rotary, rotate_half
from .ops import pq_attention, quantizer_tensor, packed_codes_tensor
from .dense_cache import DenseKVCache, gqa_attention
from .pq_cache import PQKVCache
from .attention import PQAttention

__all__ = [
    "DenseKVCache",
    "PQAttention",
    "PQKVCache",
    "RotaryEmbedding",
    "apply_rotary",
    "gqa_attention",
    "packed_codes_tensor",
    "pq_attention",
    "quantizer_tensor",
    "rotate_half",
]
