"""The optimiser (Adam, fused where this torch has the kernel) and the learning-rate schedules."""

import math
import warnings
from collections.abc import Iterable
from typing import Callable

import torch


def adam(parameters: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam, fused where torch has the kernel: one pass over all parameters instead of
    about ten per tensor (7% of a CPU training step of the Multi30k model).

    torch builds without a fused kernel for the parameters' device (CPU before torch 2.4,
    say) refuse ``fused=True`` when the optimiser is made: then the unfused Adam, with a
    warning, computes the same update.

    The fused kernel can also unscale fp16 gradients itself, and Lightning then refuses
    gradient clipping under mixed precision (``bf16-mixed`` included, which has no scaler at
    all). The optimiser here does not claim that ability: a gradient scaler, where there is
    one, unscales before ``step`` as it does for any optimiser, and clipping works."""
    parameters = list(parameters)
    if all(p.dtype.is_floating_point for p in parameters):
        try:
            optimizer = torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=True)
            optimizer._step_supports_amp_scaling = False
            return optimizer
        except RuntimeError as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            warnings.warn(
                f"fused Adam is not available here ({reason[:120]}): using the unfused Adam, "
                "the same update about 7% slower on CPU (torch >= 2.4 has the CPU kernel)",
                stacklevel=2,
            )
    return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=False)


def lr_factor(schedule: str, total_steps: int, warmup_steps: int = 0) -> Callable[[int], float]:
    """The factor on the learning rate at each optimizer step.

    ``cosine``: linear warm-up, then half a cosine down to 0 at ``total_steps``. ``inverse_sqrt``
    (Vaswani et al. 2017, Eq. 3, scaled so the peak is the configured lr): linear warm-up to 1 at
    ``warmup_steps``, then ``sqrt(warmup_steps / step)``. ``none``: 1."""
    warmup = max(1, warmup_steps)
    total = max(1, total_steps)

    def cosine(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup
        progress = min(step - warmup_steps, total - warmup_steps) / max(1, total - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * progress))

    def inverse_sqrt(step: int) -> float:
        return (step + 1) / warmup if step < warmup_steps else math.sqrt(warmup / max(step, 1))

    return {"cosine": cosine, "inverse_sqrt": inverse_sqrt}.get(schedule, lambda step: 1.0)
