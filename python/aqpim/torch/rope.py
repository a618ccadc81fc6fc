"""RoPE as Hugging Face Llama checkpoints apply it (``rotate_half``: pairs (i, i + head_dim/2)),
with the tables computed as the aqpim runtime computes them: angles in double, cos/sin rounded to
float32, so a PyTorch model rotates its keys bit for bit as ``aqpim.Model`` does."""

import math

import torch


class RotaryEmbedding:
    """cos/sin tables for positions: ``cos, sin = rope(positions)``, each [..., n_positions, head_dim].

    ``inv_freq`` [head_dim / 2] gives the pair frequencies (e.g. with a RoPE scaling already
    applied); by default ``theta ** (-2 i / head_dim)``.
    """

    def __init__(self, head_dim, theta=10000.0, inv_freq=None):
        if head_dim % 2:
            raise ValueError(f"RotaryEmbedding: head_dim={head_dim} must be even")
        if inv_freq is None:
            inv_freq = [math.pow(theta, -2.0 * i / head_dim) for i in range(head_dim // 2)]
        self.inv_freq = torch.as_tensor(inv_freq, dtype=torch.float64)
        if self.inv_freq.shape != (head_dim // 2,):
            raise ValueError(f"RotaryEmbedding: inv_freq has shape {tuple(self.inv_freq.shape)}, expected ({head_dim // 2},)")
        self.head_dim = head_dim
        self._cos = torch.empty(0, head_dim)
        self._sin = torch.empty(0, head_dim)

    def _grow(self, n):
        angles = torch.arange(n, dtype=torch.float64)[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(angles).to(torch.float32), torch.sin(angles).to(torch.float32)
        self._cos = torch.cat([cos, cos], dim=-1)
        self._sin = torch.cat([sin, sin], dim=-1)

    def __call__(self, positions):
        positions = torch.as_tensor(positions, dtype=torch.long)
        n = int(positions.max()) + 1 if positions.numel() else 0
        if n > self._cos.shape[0]:
            self._grow(max(n, 2 * self._cos.shape[0]))
        return self._cos[positions], self._sin[positions]


def rotate_half(x):
    """[..., d] -> [-x[d/2:], x[:d/2]] (HF)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x, cos, sin):
    """x [batch, heads, n, head_dim] rotated by cos/sin [n, head_dim] or [batch, n, head_dim]."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    return x * cos + rotate_half(x) * sin
