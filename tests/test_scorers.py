"""Attention scorers and the Attention wrapper: properties every scorer must have."""

import pytest
import torch

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.modules import SCORERS, Attention, NoAttention, build_attention, build_scorer
from seq2seq_attn.modules.attention import AttentionOptions
from seq2seq_attn.modules.scorers import ConcatScorer, TanhEnergy

B, S, T, D = 3, 5, 4, 6
LENGTHS = torch.tensor([5, 3, 1])
MASK = torch.arange(S).unsqueeze(0) < LENGTHS.unsqueeze(1)  # (B, S)


def attend(attention, query, memory):
    """One call from a fresh state: ``(context, weights)``."""
    out = attention(query, memory, attention.init_state(memory))
    return out.context, out.weights


def make(name, dtype=torch.float32):
    attention = build_attention(name, D, D, AttentionOptions(attn_size=7)).to(dtype)
    values = torch.randn(B, S, D, dtype=dtype)
    memory = attention.prepare(values, MASK, values[:, 0])
    return attention, memory


@pytest.mark.parametrize("name", sorted(SCORERS))
@pytest.mark.parametrize("steps", [1, T])
def test_weights_are_a_masked_distribution(name, steps):
    attention, memory = make(name)
    context, weights = attend(attention, torch.randn(B, steps, D), memory)
    assert weights.shape == (B, steps, S) and context.shape == (B, steps, D)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, steps), atol=1e-6, rtol=0)
    assert (weights.masked_select(~MASK.unsqueeze(1)) == 0).all()


def reference_energy(scorer, q, h, position):
    """The paper's energy of one query ``(D,)`` and one source state ``(H,)``, in float64, written
    from the equations (not from the scorers' batched code)."""
    weight = {name: p.detach().double() for name, p in scorer.named_parameters()}
    if scorer.name == "dot":
        return (q * h).sum()
    if scorer.name == "scaled_dot":
        return (q * h).sum() / len(h) ** 0.5
    if scorer.name == "general":  # q^T W h
        return q @ (weight["key_proj.weight"] @ h)
    if scorer.name == "additive":  # v^T tanh(W q + U h)
        return weight["v.weight"][0] @ torch.tanh(weight["query_proj.weight"] @ q + weight["key_proj.weight"] @ h)
    if scorer.name == "concat":  # v^T tanh(W [q; h])
        return weight["v.weight"][0] @ torch.tanh(weight["weight.weight"] @ torch.cat([q, h]))
    if scorer.name == "location":  # (W_a q)_s: the query alone, one row per source position s
        return (weight["positions.weight"] @ q + weight["positions.bias"])[position]
    raise AssertionError(f"no reference energy for scorer {scorer.name!r}: add its equation here")


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_context_and_weights_equal_the_equations_in_float64(name):
    attention, memory = make(name)
    query = torch.randn(B, T, D)
    context, weights = attend(attention, query, memory)
    values = memory.values.double()
    for b in range(B):
        n = int(LENGTHS[b])
        for t in range(T):
            q = query[b, t].double()
            energies = torch.stack([reference_energy(attention.scorer, q, values[b, s], s) for s in range(n)])
            expected = torch.exp(energies - energies.max()) / torch.exp(energies - energies.max()).sum()
            torch.testing.assert_close(weights[b, t, :n].double(), expected, atol=1e-5, rtol=1e-5)
            expected_context = sum(expected[s] * values[b, s] for s in range(n))
            torch.testing.assert_close(context[b, t].double(), expected_context, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_padded_positions_change_nothing(name):
    attention, memory = make(name)
    query = torch.randn(B, T, D)
    context, weights = attend(attention, query, memory)
    noisy_values = torch.where(MASK.unsqueeze(-1), memory.values, torch.randn(B, S, D) * 100)
    noisy = attention.prepare(noisy_values, MASK, memory.summary)
    context2, weights2 = attend(attention, query, noisy)
    torch.testing.assert_close(context, context2, rtol=0, atol=0)
    torch.testing.assert_close(weights, weights2, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_finite_at_source_length_one(name):
    attention = build_attention(name, D, D)
    values = torch.randn(2, 1, D)
    memory = attention.prepare(values, torch.ones(2, 1, dtype=torch.bool), values[:, 0])
    context, weights = attend(attention, torch.randn(2, 3, D) * 50, memory)
    assert torch.isfinite(context).all() and (weights == 1).all()


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_scorer_gradcheck(name):
    scorer = build_scorer(name, D, D, attn_size=3).double()
    query = torch.randn(2, 2, D, dtype=torch.double, requires_grad=True)
    memory = torch.randn(2, 3, D, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, m: scorer(q, scorer.prepare_keys(m)), (query, memory))


def test_tanh_energy_recomputes_exact_gradients_for_query_keys_and_v():
    q = torch.randn(2, 1, 4, dtype=torch.double, requires_grad=True)
    keys = torch.randn(2, 3, 4, dtype=torch.double, requires_grad=True)
    v = torch.randn(4, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(TanhEnergy.apply, (q, keys, v))
    torch.testing.assert_close(TanhEnergy.apply(q, keys, v), torch.tanh(q + keys) @ v)


def test_tanh_energy_with_coverage_recomputes_exact_gradients_for_coverage_and_its_weight():
    q = torch.randn(2, 1, 4, dtype=torch.double, requires_grad=True)
    keys = torch.randn(2, 3, 4, dtype=torch.double, requires_grad=True)
    v, weight = (torch.randn(4, dtype=torch.double, requires_grad=True) for _ in range(2))
    coverage = torch.rand(2, 3, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(TanhEnergy.apply, (q, keys, v, coverage, weight))
    expected = torch.tanh(q + keys + coverage.unsqueeze(-1) * weight) @ v  # (B, S)
    torch.testing.assert_close(TanhEnergy.apply(q, keys, v, coverage, weight), expected)


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_attention_gradcheck_and_zero_grad_on_padding(name):
    attention, memory = make(name, torch.double)
    values = memory.values.clone().requires_grad_(True)
    query = torch.randn(B, 2, D, dtype=torch.double, requires_grad=True)

    def run(q, v):
        return attend(attention, q, attention.prepare(v, MASK, v[:, 0]))[0]

    assert torch.autograd.gradcheck(run, (query, values))
    run(query, values).sum().backward()
    assert (values.grad.masked_select(~MASK.unsqueeze(-1)) == 0).all()
    assert values.grad.masked_select(MASK.unsqueeze(-1)).abs().sum() > 0


def test_concat_equals_literal_concatenation():
    scorer = ConcatScorer(D, 5, attn_size=7)
    query, memory = torch.randn(B, T, D), torch.randn(B, S, 5)
    pairs = torch.cat(
        [query.unsqueeze(2).expand(-1, -1, S, -1), memory.unsqueeze(1).expand(-1, T, -1, -1)], dim=-1
    )  # (B, T, S, D+5)
    literal = scorer.v(torch.tanh(scorer.weight(pairs))).squeeze(-1)  # (B, T, S)
    torch.testing.assert_close(scorer(query, scorer.prepare_keys(memory)), literal)


def test_prepare_keys_runs_once_per_batch():
    calls = []
    attention = build_attention("additive", D, D)
    attention.scorer.key_proj.register_forward_hook(lambda *a: calls.append(1))
    values = torch.randn(B, S, D)
    memory = attention.prepare(values, MASK, values[:, 0])
    for _ in range(5):
        attend(attention, torch.randn(B, 1, D), memory)
    assert len(calls) == 1


def test_dot_with_unequal_sizes_suggests_general():
    with pytest.raises(ConfigError, match="general") as err:
        build_scorer("dot", 8, 6)
    assert "\n" not in str(err.value)


def test_unknown_scorer_lists_valid_names():
    with pytest.raises(ConfigError) as err:
        build_attention("bahdanau_typo", D, D)
    message = str(err.value)
    assert "\n" not in message and all(name in message for name in [*SCORERS, "none"])


def test_no_attention_returns_the_summary():
    attention = NoAttention()
    values = torch.randn(B, S, D)
    memory = attention.prepare(values, MASK, values[:, -1])
    context, weights = attend(attention, torch.randn(B, T, D), memory)
    assert weights is None
    torch.testing.assert_close(context, values[:, -1:].expand(-1, T, -1))
    assert isinstance(build_attention("general", D, D), Attention)


@pytest.mark.parametrize("name", ["dot", "general"])
def test_score_scale_sqrt_d_divides_the_energies_by_sqrt_d(name):
    torch.manual_seed(3)
    plain = build_scorer(name, D, D).double()
    torch.manual_seed(3)
    scaled = build_scorer(name, D, D, score_scale="sqrt_d").double()
    query, values = torch.randn(B, T, D, dtype=torch.double), torch.randn(B, S, D, dtype=torch.double)
    energies = plain(query, plain.prepare_keys(values))  # (B, T, S)
    torch.testing.assert_close(scaled(query, scaled.prepare_keys(values)), energies / D**0.5, rtol=1e-12, atol=0)
    # the literal equation by hand: qᵀ h or qᵀ W h, over sqrt(D)
    weight = torch.eye(D, dtype=torch.double) if name == "dot" else plain.key_proj.weight
    by_hand = torch.einsum("btd,de,bse->bts", query, weight, values) / D**0.5
    torch.testing.assert_close(scaled(query, scaled.prepare_keys(values)), by_hand, rtol=1e-10, atol=1e-12)
    assert scaled.scale == pytest.approx(D**-0.5) and plain.scale == 1.0


def test_score_scale_of_general_is_the_query_size_when_the_key_size_differs():
    """``qᵀ W h`` lives in the query's D dimensions (W h: H -> D), so sqrt_d divides by sqrt(D), not sqrt(H)."""
    query_size, key_size = 12, 5
    scorer = build_scorer("general", query_size, key_size, score_scale="sqrt_d").double()
    query, values = torch.randn(B, T, query_size, dtype=torch.double), torch.randn(B, S, key_size, dtype=torch.double)
    by_hand = torch.einsum("btd,de,bse->bts", query, scorer.key_proj.weight, values) / query_size**0.5
    torch.testing.assert_close(scorer(query, scorer.prepare_keys(values)), by_hand, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "name,scale,expected",
    [
        ("additive", "sqrt_d", "divides the energy of the \\['dot', 'general'\\] scorers, not 'additive'"),
        ("scaled_dot", "sqrt_d", "not 'scaled_dot'"),
        ("general", "sqrt", "unknown score_scale 'sqrt': choose one of \\['none', 'sqrt_d'\\]"),
    ],
)
def test_score_scale_errors_name_what_takes_it(name, scale, expected):
    with pytest.raises(ConfigError, match=expected):
        build_attention(name, D, D, AttentionOptions(score_scale=scale))
    with pytest.raises(ConfigError, match="unknown score_scale"):
        build_attention("general", D, D, AttentionOptions(heads=2, score_scale="sqrt"))
