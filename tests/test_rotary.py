"""Rotary positions against RoFormer's own formulas (Su et al. 2021), and in the Transformer."""

import math

import pytest
import torch
from helpers import V_SRC, V_TRG, gold_prefix

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules.rotary import Rotary
from seq2seq_attn.modules.transformer import build_transformer


def roformer_matrix(m: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer eq. (15): the block-diagonal d x d rotation R^d_{Theta,m}, theta_i = base^(-2(i-1)/d)."""
    r = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = m * base ** (-2 * i / d)
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
        )
    return r


def test_each_position_is_roformers_rotation_matrix_times_the_vector():
    torch.manual_seed(0)
    d, n, start = 8, 6, 3
    x = torch.randn(2, 3, n, d, dtype=torch.float64)  # (B, h, N, d_h)
    got = Rotary(d)(x.float(), start).double()
    for j in range(n):
        want = x[:, :, j] @ roformer_matrix(start + j, d).T  # (B, h, d): R x for each row x
        torch.testing.assert_close(got[:, :, j], want, atol=1e-5, rtol=1e-5)


def test_equals_the_complex_number_form():
    """RoFormer eq. (34)'s reading: pair (2i, 2i+1) as a complex number, multiplied by e^{i m theta_i}."""
    torch.manual_seed(1)
    d, n = 16, 40
    x = torch.randn(n, d, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(n, d // 2, dtype=torch.float64), torch.arange(n).unsqueeze(1) * theta)
    want = torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2)).contiguous()) * turn).flatten(-2)
    torch.testing.assert_close(Rotary(d)(x.float()).double(), want, atol=1e-5, rtol=1e-5)


def test_scores_depend_on_the_offset_only():
    torch.manual_seed(2)
    rotary, q, k = Rotary(8), torch.randn(1, 8), torch.randn(1, 8)
    score = lambda m, n: (rotary(q, m) * rotary(k, n)).sum()  # noqa: E731
    for m, n in [(0, 5), (7, 2), (4, 4)]:
        torch.testing.assert_close(score(m, n), score(m + 100, n + 100), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(score(0, 5), score(5, 0), atol=1e-3)  # direction matters, not only distance


def test_positions_beyond_the_table_extend_it_exactly():
    torch.manual_seed(3)
    x = torch.randn(2, 9, 8)
    short, long = Rotary(8, positions=4), Rotary(8, positions=64)
    torch.testing.assert_close(short(x, 10), long(x, 10))
    assert short.cos.size(0) >= 19


def test_rotary_transformer_sees_order_without_position_embeddings(src_batch):
    torch.manual_seed(4)
    model = build_transformer(V_SRC, V_TRG, size=8, heads=2, layers=2, ffn_size=16, dropout=0.0, positions="rotary",
                              norm="pre", tie_embeddings=False, max_positions=12).eval()  # fmt: skip
    assert model.src_embed.table is None and model.src_embed.learned is None
    src, lengths = src_batch
    flipped = src.clone()
    for b, n in enumerate(lengths.tolist()):  # each source reversed within its length
        flipped[b, :n] = src[b, :n].flip(0)
    trg = gold_prefix()
    assert not torch.allclose(model(src, lengths, trg).logits, model(flipped, lengths, trg).logits, atol=1e-4)


def test_an_odd_head_size_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="even head size"):
        build_transformer(V_SRC, V_TRG, size=6, heads=2, layers=1, ffn_size=8, dropout=0.0, positions="rotary",
                          norm="pre", tie_embeddings=False, max_positions=12)  # fmt: skip
