"""The fused training loss equals F.cross_entropy in value and gradient."""

import pytest
import torch
import torch.nn.functional as F

from seq2seq_attn.data.collate import Batch
from seq2seq_attn.data.vocab import PAD_ID
from seq2seq_attn.loss import cross_entropy, token_loss
from seq2seq_attn.modules import build_seq2seq


def loss_and_grad(fn, logits: torch.Tensor, target: torch.Tensor, smoothing: float):
    x = logits.clone().requires_grad_()
    loss = fn(x, target, label_smoothing=smoothing)
    (grad,) = torch.autograd.grad(3.0 * loss, x)  # a non-unit upstream gradient
    return loss.detach(), grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_fused_cross_entropy_matches_torch(smoothing):
    torch.manual_seed(0)
    logits, target = 4 * torch.randn(37, 53, dtype=torch.float64), torch.randint(0, 53, (37,))
    ours = loss_and_grad(cross_entropy, logits.float(), target, smoothing)
    theirs = loss_and_grad(F.cross_entropy, logits, target, smoothing)  # float64 reference
    torch.testing.assert_close(ours[0].double(), theirs[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[1].double(), theirs[1], atol=1e-6, rtol=1e-5)


def test_fused_cross_entropy_stays_finite_when_the_target_probability_underflows():
    logits = torch.zeros(3, 10)
    logits[0, 4] = -200.0  # softmax gives exactly 0 for the target of row 0
    target = torch.tensor([4, 1, 2])
    ours = loss_and_grad(cross_entropy, logits, target, 0.0)
    theirs = loss_and_grad(F.cross_entropy, logits.double(), target, 0.0)
    assert torch.isfinite(ours[0])
    torch.testing.assert_close(ours[0].double(), theirs[0], atol=1e-4, rtol=1e-6)
    torch.testing.assert_close(ours[1].double(), theirs[1], atol=1e-6, rtol=1e-5)


def test_fused_cross_entropy_takes_bf16_logits_and_returns_a_bf16_gradient():
    torch.manual_seed(0)
    logits, target = torch.randn(8, 16).bfloat16(), torch.randint(0, 16, (8,))
    loss, grad = loss_and_grad(cross_entropy, logits, target, 0.0)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, F.cross_entropy(logits.float(), target), atol=1e-6, rtol=1e-6)
    # the gradient of the same (bf16-valued) logits in float64, within bf16's rounding (8 bits: 2**-8)
    reference = loss_and_grad(F.cross_entropy, logits.double(), target, 0.0)[1]
    torch.testing.assert_close(grad.double(), reference, atol=2e-3, rtol=2**-8)


def test_token_loss_is_the_padded_cross_entropy_over_real_tokens():
    torch.manual_seed(0)
    model = build_seq2seq(13, 11, attention="general", flow="luong", emb_size=8, hidden_size=8)
    src = torch.randint(3, 13, (4, 6))
    trg_in, trg_out = torch.randint(3, 11, (4, 6)), torch.randint(3, 11, (4, 6))
    trg_out[1, 4:], trg_out[3, 2:] = PAD_ID, PAD_ID  # padded targets
    lengths = torch.tensor([6, 5, 4, 3])
    batch = Batch(src, lengths, trg_in, trg_out, None, torch.arange(4))
    full = model(src, lengths, trg_in).logits  # (B, T, V) on every position
    expected = F.cross_entropy(full.transpose(1, 2), trg_out, ignore_index=PAD_ID)
    torch.testing.assert_close(token_loss(model, batch), expected, atol=1e-6, rtol=1e-6)
