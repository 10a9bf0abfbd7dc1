"""Sampling: the top-k / top-p filters, the sampling distribution, reproducibility, and the
limits that must equal greedy search."""

import math

import pytest
import torch

from seqlab.decode import (
    greedy,
    sample,
    sampling_distribution,
    sequence_log_prob,
    top_k_filter,
    top_p_filter,
)
from tests.decode import BOS, EOS, PAD, ScriptedDecoder
from tests.decode.test_beam import LENGTHS, gru_batch

NEG_INF = float("-inf")
# p = (.05, .5, .3, .15) over (EOS, a, b, c); rows 1 and 2 are permutations of row 0.
P = torch.tensor([[0.05, 0.5, 0.3, 0.15], [0.5, 0.15, 0.05, 0.3], [0.3, 0.05, 0.15, 0.5]])


def kept(logits):
    return torch.isfinite(logits)


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5], [0.0, -1.0, 5.0, 4.0]])
    out = top_k_filter(logits, 2)
    assert kept(out).tolist() == [[False, True, True, False], [False, False, True, True]]
    assert torch.equal(out[kept(out)], logits[kept(out)])  # survivors unchanged
    assert torch.equal(top_k_filter(logits, 0), logits)
    assert torch.equal(top_k_filter(logits, 4), logits)
    assert kept(top_k_filter(logits, 1)).sum(1).tolist() == [1, 1]
    with pytest.raises(ValueError):
        top_k_filter(logits, -1)


def test_top_p_keeps_the_smallest_set_with_mass_at_least_p():
    logits = P.log()
    # sorted masses .5, .3, .15, .05 -> cumulative .5, .8, .95, 1.0
    for p, n_kept in [(0.3, 1), (0.75, 2), (0.81, 3), (0.97, 4), (1e-9, 1)]:
        out = top_p_filter(logits, p)
        assert kept(out).sum(1).tolist() == [n_kept] * 3, p
        mass = (P * kept(out)).sum(1)  # (3,)
        assert (mass >= p).all()
        assert (mass - P.masked_fill(~kept(out), 2.0).min(1).values < p).all()  # smallest
    assert kept(top_p_filter(logits, 0.75)).tolist() == [
        [False, True, True, False],
        [True, False, False, True],
        [True, False, False, True],
    ]
    assert torch.equal(top_p_filter(logits, 1.0), logits)
    with pytest.raises(ValueError):
        top_p_filter(logits, 0.0)


def test_top_p_matches_brute_force_on_random_rows():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(50, 9, generator=g, dtype=torch.float64) * 2  # (50, 9)
    q = logits.softmax(-1)
    for p in torch.rand(20, generator=g).tolist():
        out = top_p_filter(logits, p)
        q_sorted = q.sort(dim=1, descending=True).values  # (50, 9)
        # smallest m with the m largest summing to >= p
        m = (q_sorted.cumsum(1) < p).sum(1) + 1  # (50,)
        assert torch.equal(kept(out).sum(1), m.clamp(max=9))


def test_sampling_distribution_temperature_then_filters():
    log_p = P[:1].log()  # (1, 4)
    q = sampling_distribution(log_p, temperature=2.0)
    expected = P[:1].sqrt() / P[:1].sqrt().sum()  # p^(1/τ), renormalised
    torch.testing.assert_close(q, expected, atol=1e-7, rtol=0)
    q = sampling_distribution(log_p, top_p=0.75)
    torch.testing.assert_close(q, torch.tensor([[0.0, 0.625, 0.375, 0.0]]), atol=1e-7, rtol=0)
    # top-k first: k = 3 keeps {a, b, c}, renormalised .526, .316, .158; then top-p = .82
    # drops c (mass before it .842 ≥ .82). Top-p on the unrenormalised p would keep c
    # (mass before it .8 < .82): the order matters and is temperature, top-k, top-p.
    q = sampling_distribution(log_p, top_k=3, top_p=0.82)
    torch.testing.assert_close(q, torch.tensor([[0.0, 0.625, 0.375, 0.0]]), atol=1e-7, rtol=0)
    assert torch.isfinite(top_p_filter(log_p, 0.82)).sum() == 3


class FixedDecoder:
    """The same next-token distribution P[0] at every step and for every row."""

    def step(self, y_prev, state):
        return P[:1].log().expand(y_prev.size(0), -1), state  # (B, V)


def test_samples_follow_the_filtered_distribution():
    g = torch.Generator().manual_seed(0)
    n = 20_000
    r = sample(FixedDecoder(), None, n, BOS, EOS, max_len=1, top_p=0.75, generator=g)
    freq = torch.bincount(r.tokens[:, 0], minlength=4).double() / n  # (4,)
    # q = (0, .625, .375, 0): filtered tokens never drawn; 5σ = 5·sqrt(.625·.375/n) ≈ .017
    assert freq[0] == 0 and freq[3] == 0
    torch.testing.assert_close(
        freq[1:3], torch.tensor([0.625, 0.375], dtype=torch.float64), atol=0.017, rtol=0
    )
    # The reported score is the model's log p (temperature 1, unfiltered).
    expected = P[0].log()[r.tokens[:, 0]]  # (n,)
    torch.testing.assert_close(r.scores, expected, atol=1e-6, rtol=0)


def test_fixed_generator_reproduces_and_seed_matters():
    dec, memory, mask = gru_batch()

    def run(seed, **kw):
        g = torch.Generator().manual_seed(seed)
        state = dec.init_state(memory, mask)
        return sample(dec, state, len(LENGTHS), BOS, EOS, 10, generator=g, pad_id=PAD, **kw)

    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.scores, b.scores)
    assert not torch.equal(a.tokens[:, :3], c.tokens[:, :3])
    recomputed = sequence_log_prob(dec, dec.init_state(memory, mask), a.tokens, EOS, bos_id=BOS)
    torch.testing.assert_close(recomputed, a.scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kw", [{"temperature": 0.0}, {"top_k": 1}, {"temperature": 1e-4}])
def test_greedy_limits(kw):
    dec, memory, mask = gru_batch()
    g = greedy(dec, dec.init_state(memory, mask), len(LENGTHS), BOS, EOS, 10, pad_id=PAD)
    gen = torch.Generator().manual_seed(0)
    state = dec.init_state(memory, mask)
    s = sample(dec, state, len(LENGTHS), BOS, EOS, 10, generator=gen, pad_id=PAD, **kw)
    assert torch.equal(s.tokens, g.tokens)
    torch.testing.assert_close(s.scores, g.scores, atol=1e-12, rtol=0)


def test_min_len_in_sampling():
    # EOS has p = .9 at every step; forbidden for t ≤ 2, so every sample has |Y| ≥ 3.
    dec = ScriptedDecoder({}, [0.9, 0.05, 0.03, 0.02])
    g = torch.Generator().manual_seed(0)
    r = sample(dec, dec.init_state(200), 200, BOS, EOS, 6, min_len=2, generator=g, pad_id=PAD)
    assert (r.lengths >= 3).all() and (r.tokens[:, :2] != EOS).all()
    assert (r.lengths == 3).float().mean() > 0.8  # EOS (.9) as soon as it is allowed
    first_two = r.tokens[:, :2]  # scored with the model's unrenormalised log p
    torch.testing.assert_close(
        r.scores[r.lengths == 3],
        torch.log(torch.tensor([0.05, 0.03, 0.02], dtype=torch.float64))[
            first_two[r.lengths == 3] - 1
        ].sum(1)
        + math.log(0.9),
        atol=1e-12,
        rtol=0,
    )
    with pytest.raises(ValueError):
        sample(dec, dec.init_state(2), 2, BOS, EOS, 4, temperature=-1.0)
