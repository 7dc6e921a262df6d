"""Rotary position embeddings (Su et al. 2021, RoFormer, Sec. 3.2-3.4): relative positions in attention.

A query or key at position ``m`` is rotated pair by pair: its dimensions ``(2i, 2i+1)`` turn by the angle
``m * theta_i`` with ``theta_i = base ** (-2i / d)``. The dot product of a query rotated at ``m`` with a key
rotated at ``n`` then depends on the positions only through ``m - n``, so attention sees how far apart two
tokens are and in which direction, never where they are: nothing the model learns is tied to an absolute
position it may not have seen in training. The rotation is applied to queries and keys before the
attention product, so ``torch.nn.functional.scaled_dot_product_attention`` keeps its fused path, and a key
cached during incremental decoding is rotated once, when its position is known.
"""

import torch
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError


class Rotary(nn.Module):
    """Rotates ``(..., N, d_h)`` queries or keys at positions ``start..start+N-1``.

    Args:
        size: the head size ``d_h`` (even).
        base: the wavelength base of RoFormer's ``theta_i`` (10,000 in the paper).
        positions: positions the cos/sin table is precomputed for; longer inputs extend it once.
    """

    def __init__(self, size: int, base: float = 10000.0, positions: int = 1024) -> None:
        super().__init__()
        if size % 2:
            raise ConfigError(f"rotary positions need an even head size (emb_size / heads), got {size}")
        self.size, self.base = size, base
        self._table(positions, torch.device("cpu"))

    def _table(self, positions: int, device: torch.device) -> None:
        theta = self.base ** (-torch.arange(0, self.size, 2, dtype=torch.float64) / self.size)  # (d_h/2,)
        angles = torch.arange(positions, dtype=torch.float64).unsqueeze(1) * theta  # (P, d_h/2)
        self.register_buffer("cos", angles.cos().float().to(device), persistent=False)
        self.register_buffer("sin", angles.sin().float().to(device), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """Args: x ``(..., N, d_h)`` at positions ``start..start+N-1``. Returns ``x`` rotated, same shape."""
        end = start + x.size(-2)
        if end > self.cos.size(0):
            self._table(2 * end, x.device)
        cos, sin = self.cos[start:end].to(x.dtype), self.sin[start:end].to(x.dtype)  # (N, d_h/2)
        pairs = x.unflatten(-1, (-1, 2))  # (..., N, d_h/2, 2)
        even, odd = pairs[..., 0], pairs[..., 1]  # (..., N, d_h/2)
        rotated = (even * cos - odd * sin, even * sin + odd * cos)  # each (..., N, d_h/2)
        return torch.stack(rotated, dim=-1).flatten(-2)  # (..., N, d_h), pairs (2i, 2i+1) again
