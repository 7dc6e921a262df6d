"""Attention scorers: one small class each, registered by name.

A scorer only scores. ``prepare_keys`` runs once per batch on the encoder
memory (everything that does not depend on the decoder query); ``forward``
scores T queries against the prepared keys. Masking, softmax and the weighted
sum live in :class:`seq2seq_attn.modules.attention.Attention`.

Adding a scorer = one class here with ``@register_scorer("name")``; the tests
parametrise over :data:`SCORERS`, so it is tested without further edits.
"""

import math
from typing import Callable, Optional

import torch
from torch import Tensor, nn

from seq2seq_attn.errors import ConfigError

SCORERS: dict[str, type["Scorer"]] = {}


def register_scorer(name: str) -> Callable[[type["Scorer"]], type["Scorer"]]:
    """Class decorator: make a scorer selectable as ``attention: <name>``."""

    def add(cls: type["Scorer"]) -> type["Scorer"]:
        SCORERS[name] = cls
        cls.name = name
        return cls

    return add


# how a multiplicative energy is scaled (``model.score_scale``): as Luong et al. wrote it, or divided by
# sqrt(d) as Vaswani et al.'s dot product is (the energies then stay near unit scale as the weights grow)
SCORE_SCALES = ("none", "sqrt_d")


def build_scorer(
    name: str,
    query_size: int,
    key_size: int,
    attn_size: Optional[int] = None,
    coverage: bool = False,
    max_source_length: int = 100,
    score_scale: str = "none",
) -> "Scorer":
    """Instantiate the scorer registered as ``name``; unknown names and impossible options fail in one line.

    ``coverage`` goes to the scorers of the additive family, ``max_source_length`` to ``location``,
    ``score_scale`` ``sqrt_d`` to ``dot`` and ``general`` (their energy divided by sqrt(D))."""
    if name not in SCORERS:
        raise ConfigError(f"unknown attention scorer {name!r}: choose one of {sorted(SCORERS)}")
    cls, options = SCORERS[name], {}
    if score_scale not in SCORE_SCALES:
        raise ConfigError(f"unknown score_scale {score_scale!r}: choose one of {list(SCORE_SCALES)}")
    if score_scale == "sqrt_d":
        takes = sorted(n for n, c in SCORERS.items() if issubclass(c, ProductScorer) and not c.fixed_scale)
        if name not in takes:
            raise ConfigError(
                f"score_scale 'sqrt_d' divides the energy of the {takes} scorers, not {name!r}: "
                "pick one of them or score_scale none"
            )
        options["scale"] = 1 / math.sqrt(query_size)
    if coverage:
        if not issubclass(cls, TanhScorer):
            takes = sorted(n for n, c in SCORERS.items() if issubclass(c, TanhScorer))
            raise ConfigError(
                f"coverage enters the energy of the {takes} scorers, not {name!r}: pick one or coverage false"
            )
        options["coverage"] = True
    if issubclass(cls, LocationScorer):
        options["max_source_length"] = max_source_length
    return cls(query_size, key_size, attn_size, **options)


class Scorer(nn.Module):
    """Interface: energies ``e(q, h)`` of T queries against S keys.

    Every scorer takes ``(query_size, key_size, attn_size)`` so that one grid
    can sweep all of them; ``attn_size`` (A) is used by the scorers with a
    hidden attention layer (``additive``, ``concat``) and ignored by the others.
    """

    name = "scorer"
    # submodules whose weights forward reads as tensors instead of calling them: they stay
    # in float when seq2seq_attn.quantize swaps the called Linear layers for int8 ones
    raw_weights: tuple[str, ...] = ()
    uses_coverage = False  # True: forward also takes the coverage ``(B, S)`` (attention summed so far)

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None) -> None:
        super().__init__()
        self.query_size = query_size
        self.key_size = key_size

    def prepare_keys(self, memory: Tensor) -> Tensor:
        """Once per batch. Args: memory ``(B, S, H)``. Returns keys ``(B, S, K)``."""
        return memory

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """Args: query ``(B, T, D)``, keys ``(B, S, K)``. Returns energies ``(B, T, S)``."""
        raise NotImplementedError


class ProductScorer(Scorer):
    """Shared energy of the multiplicative family: ``e = scale · qᵀ k`` with ``k`` the prepared keys.

    ``scale`` is 1 in Luong et al.'s equations; ``model.score_scale: sqrt_d`` makes it ``1 / sqrt(D)``.
    The product of two D-dimensional vectors grows with D and with the weights behind them; under Adam
    the unscaled energies can reach tens of nats, where the softmax is one-hot and passes no gradient.
    """

    fixed_scale = False  # True: the scorer's own equation fixes the scale (score_scale does not apply)

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None, scale: float = 1.0) -> None:
        super().__init__(query_size, key_size)
        self.scale = scale

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        energies = query @ keys.transpose(1, 2)  # (B, T, S)
        return energies if self.scale == 1.0 else energies * self.scale


@register_scorer("dot")
class DotScorer(ProductScorer):
    """Luong et al. 2015, Eq. 8 "dot": ``e = qᵀ h``. No parameters."""

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None, scale: float = 1.0) -> None:
        super().__init__(query_size, key_size, scale=scale)
        if query_size != key_size:
            raise ConfigError(
                f"attention 'dot' needs equal query and key sizes, got decoder {query_size} "
                f"and encoder output {key_size}: use attention 'general' or match the sizes"
            )


@register_scorer("scaled_dot")
class ScaledDotScorer(DotScorer):
    """Vaswani et al. 2017: ``e = qᵀ h / sqrt(d)``, the dot score kept at unit scale."""

    fixed_scale = True

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None) -> None:
        super().__init__(query_size, key_size, scale=1 / math.sqrt(key_size))


@register_scorer("general")
class GeneralScorer(ProductScorer):
    """Luong et al. 2015, Eq. 8 "general": ``e = qᵀ W h``; ``W h`` is precomputed."""

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None, scale: float = 1.0) -> None:
        super().__init__(query_size, key_size, scale=scale)
        self.key_proj = nn.Linear(key_size, query_size, bias=False)

    def prepare_keys(self, memory: Tensor) -> Tensor:
        return self.key_proj(memory)  # (B, S, D)


class TanhScorer(Scorer):
    """Shared energy of the additive family: ``e = vᵀ tanh(q' + k')``.

    Subclasses say how the query and keys are projected into the attention
    space of size A; the key projection runs once per batch.
    """

    raw_weights = ("v",)

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None, coverage: bool = False) -> None:
        super().__init__(query_size, key_size)
        self.attn_size = attn_size or query_size
        self.v = nn.Linear(self.attn_size, 1, bias=False)
        # Tu et al. 2016, See et al. 2017: e = vᵀ tanh(W q + U h + w_c c_t), c_t the attention summed so far
        self.uses_coverage = coverage
        self.coverage_weight = nn.Parameter(torch.empty(self.attn_size).uniform_(-0.1, 0.1)) if coverage else None

    def project_query(self, query: Tensor) -> Tensor:
        """Args: query ``(B, T, D)``. Returns ``(B, T, A)``."""
        raise NotImplementedError

    def forward(self, query: Tensor, keys: Tensor, coverage: Optional[Tensor] = None) -> Tensor:
        """Args: query ``(B, T, D)``, keys ``(B, S, A)``; coverage ``(B, S)`` when ``uses_coverage`` (T = 1)."""
        q = self.project_query(query)  # (B, T, A)
        v = self.v.weight.view(-1)  # (A,)
        if self.uses_coverage:  # one step (T = 1): its keys are U h + w_c c_t
            return TanhEnergy.apply(q, keys, v, coverage, self.coverage_weight).unsqueeze(1)  # (B, 1, S)
        # One target step at a time: the full (B, T, S, A) tanh block does not fit in cache and
        # trained 20% slower on CPU than (B, S, A) blocks (benchmarks/step_speed.py, T = S = 30).
        energies = [TanhEnergy.apply(q[:, t].unsqueeze(1), keys, v) for t in range(q.size(1))]  # (B, S) each
        return torch.stack(energies, dim=1)  # (B, T, S)


class TanhEnergy(torch.autograd.Function):
    """``e = tanh(q + k [+ c w_c]) v`` for one target step, its (B, S, A) tanh block recomputed in backward.

    Autograd would keep that block for every step until the backward pass: T x B x S x A
    floats, 330 MB for a batch of 64 pairs of 50 tokens with A = 512, the largest memory of
    the additive models. Recomputing it costs one tanh per step. Coverage models add
    ``c w_c`` (the coverage ``(B, S)`` times its weight ``(A,)``) inside the same block, so their
    per-step keys are not kept either.
    """

    @staticmethod
    def _hidden(q: Tensor, keys: Tensor, coverage: Optional[Tensor], weight: Optional[Tensor]) -> Tensor:
        hidden = torch.add(q, keys)  # (B, S, A)
        if coverage is not None:
            hidden.addcmul_(coverage.unsqueeze(-1), weight)  # + c_s w_c
        return hidden.tanh_()

    @staticmethod
    def forward(
        ctx, q: Tensor, keys: Tensor, v: Tensor, coverage: Optional[Tensor] = None, weight: Optional[Tensor] = None
    ) -> Tensor:
        """Args: q ``(B, 1, A)``, keys ``(B, S, A)``, v ``(A,)``; coverage ``(B, S)`` and its weight ``(A,)``
        or None. Returns ``(B, S)``."""
        ctx.save_for_backward(q, keys, v, coverage, weight)
        return TanhEnergy._hidden(q, keys, coverage, weight) @ v  # (B, S)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        q, keys, v, coverage, weight = ctx.saved_tensors
        hidden = TanhEnergy._hidden(q, keys, coverage, weight)  # (B, S, A) recomputed
        grad_v = grad.reshape(1, -1) @ hidden.reshape(-1, hidden.size(-1))  # (1, A)
        # d e / d(q + k) = (1 - tanh^2) * (grad v): torch's fused tanh backward, one pass
        grad_keys = torch.ops.aten.tanh_backward(grad.unsqueeze(-1) * v, hidden)  # (B, S, A)
        grad_coverage = grad_weight = None
        if coverage is not None:
            grad_coverage = grad_keys @ weight  # (B, S)
            grad_weight = coverage.reshape(1, -1) @ grad_keys.reshape(-1, grad_keys.size(-1))  # (1, A)
            grad_weight = grad_weight.view(-1)
        return grad_keys.sum(1, keepdim=True), grad_keys, grad_v.view(-1), grad_coverage, grad_weight


@register_scorer("additive")
class AdditiveScorer(TanhScorer):
    """Bahdanau et al. 2015, App. A.1.2: ``e = vᵀ tanh(W q + U h)``; ``U h`` is precomputed."""

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None, coverage: bool = False) -> None:
        super().__init__(query_size, key_size, attn_size, coverage)
        self.query_proj = nn.Linear(query_size, self.attn_size, bias=False)
        self.key_proj = nn.Linear(key_size, self.attn_size, bias=False)

    def project_query(self, query: Tensor) -> Tensor:
        return self.query_proj(query)  # (B, T, A)

    def prepare_keys(self, memory: Tensor) -> Tensor:
        return self.key_proj(memory)  # (B, S, A)


@register_scorer("concat")
class ConcatScorer(TanhScorer):
    """Luong et al. 2015, Eq. 8 "concat": ``e = vᵀ tanh(W [q; h])``.

    One matrix ``W`` of shape ``(A, D + H)`` as in the paper, applied as its two
    column blocks so that the key half ``W[:, D:] h`` is computed once per batch.
    """

    raw_weights = ("v", "weight")

    def __init__(self, query_size: int, key_size: int, attn_size: Optional[int] = None, coverage: bool = False) -> None:
        super().__init__(query_size, key_size, attn_size, coverage)
        self.weight = nn.Linear(query_size + key_size, self.attn_size, bias=False)

    def project_query(self, query: Tensor) -> Tensor:
        return query @ self.weight.weight[:, : self.query_size].t()  # (B, T, A)

    def prepare_keys(self, memory: Tensor) -> Tensor:
        return memory @ self.weight.weight[:, self.query_size :].t()  # (B, S, A)


@register_scorer("location")
class LocationScorer(Scorer):
    """Luong et al. 2015, Eq. 9 "location": ``a_t = softmax(W_a h_t)``: one energy per source position
    from the query alone, without looking at the keys. ``W_a`` has ``max_source_length`` rows: positions
    beyond it get energy ``-inf`` (no weight); those beyond each sentence are masked by :class:`Attention`.
    """

    def __init__(
        self, query_size: int, key_size: int, attn_size: Optional[int] = None, max_source_length: int = 100
    ) -> None:
        super().__init__(query_size, key_size)
        self.max_source_length = max_source_length
        self.positions = nn.Linear(query_size, max_source_length)  # W_a

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        energies = self.positions(query)  # (B, T, Smax)
        source = keys.size(1)  # S
        if source > self.max_source_length:
            beyond = energies.new_full((*energies.shape[:2], source - self.max_source_length), float("-inf"))
            energies = torch.cat([energies, beyond], dim=-1)  # (B, T, S)
        return energies[..., :source]  # (B, T, S)
