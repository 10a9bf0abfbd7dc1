"""Length penalty, the stop-rule bound, lengths, and teacher-forced log P(Y)."""

import math

import pytest
import torch

from seqlab.decode import (
    best_possible_score,
    gnmt_length_penalty,
    penalised_score,
    sequence_lengths,
    sequence_log_prob,
)
from seqlab.decode.scoring import forbid_eos, step_log_probs
from tests.decode import BOS, EOS, PAD, A, ScriptedDecoder
from tests.decode.test_beam import DEFAULT_1, TREE_1

TOL = 1e-12  # atol, float64


def test_gnmt_length_penalty_values():
    # lp(Y) = ((5 + |Y|) / 6)^α: lp(1) = 1 for every α; α = 0 -> 1; α = 1 -> (5 + n) / 6.
    n = torch.tensor([1, 2, 7])
    assert gnmt_length_penalty(n, 0.6)[0].item() == 1.0
    assert gnmt_length_penalty(n, 0.0).tolist() == [1.0, 1.0, 1.0]
    torch.testing.assert_close(
        gnmt_length_penalty(n, 1.0),
        torch.tensor([1.0, 7 / 6, 2.0], dtype=torch.float64),
        atol=TOL,
        rtol=0,
    )
    assert gnmt_length_penalty(7, 0.6).item() == pytest.approx(2.0**0.6, abs=TOL)
    s = penalised_score(torch.tensor([-2.0], dtype=torch.float64), torch.tensor([7]), 0.6)
    assert s.item() == pytest.approx(-2.0 / 2.0**0.6, abs=TOL)


@pytest.mark.parametrize("alpha", [-0.7, 0.0, 0.6, 1.0, 3.0])
def test_best_possible_score_is_a_tight_bound(alpha):
    """bound(s, t) = max over every completion length n ∈ (t, max_len] and every further
    log-prob decrease d ≥ 0 of (s − d) / lp(n); reached at d = 0."""
    max_len = 9
    s = -torch.tensor([0.0, 0.3, 2.0, 7.5], dtype=torch.float64)  # (4,) raw log P ≤ 0
    for t in range(1, max_len):
        bound = best_possible_score(s, t, max_len, alpha)  # (4,)
        n = torch.arange(t + 1, max_len + 1)  # (n,)
        exact = (s[:, None] / gnmt_length_penalty(n, alpha)[None, :]).max(1).values  # (4,)
        torch.testing.assert_close(bound, exact, atol=TOL, rtol=0)
        worse = ((s[:, None] - 0.1) / gnmt_length_penalty(n, alpha)).max(1).values
        assert (worse <= bound).all()
    assert best_possible_score(torch.tensor([-math.inf]), 2, 5, alpha).item() == -math.inf


def test_sequence_lengths_count_eos():
    tokens = torch.tensor([[1, 2, EOS, PAD], [EOS, PAD, PAD, PAD], [1, 1, 1, 1], [2, EOS, 2, EOS]])
    assert sequence_lengths(tokens, EOS).tolist() == [3, 1, 4, 2]


def test_sequence_log_prob_by_hand():
    # TREE_1: P(b EOS) = .4 · .9; P(a a EOS) = .5 · .3 · .7 (default after (a, a)).
    dec = ScriptedDecoder(TREE_1, DEFAULT_1)
    tokens = torch.tensor([[2, EOS, PAD], [A, A, EOS]])
    log_p = sequence_log_prob(dec, dec.init_state(2), tokens, EOS, bos_id=BOS)
    expected = torch.tensor([math.log(0.36), math.log(0.105)], dtype=torch.float64)
    torch.testing.assert_close(log_p, expected, atol=TOL, rtol=0)
    # Explicit lengths cut the sum: the first token only.
    log_p = sequence_log_prob(
        dec, dec.init_state(2), tokens, EOS, bos_id=BOS, lengths=torch.tensor([1, 1])
    )
    torch.testing.assert_close(
        log_p, torch.log(torch.tensor([0.4, 0.5], dtype=torch.float64)), atol=TOL, rtol=0
    )


def test_step_log_probs_and_forbid_eos():
    logits = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.bfloat16)
    log_p = step_log_probs(logits)
    assert log_p.dtype == torch.float32  # never normalised in bf16
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(1), atol=1e-6, rtol=0)
    before = log_p.clone()
    out = forbid_eos(log_p, 0)
    assert out is log_p  # in place: one column written, no vocabulary-wide copy
    assert out[0, 0] == -math.inf and torch.equal(out[0, 1:], before[0, 1:])  # no renormalising
    beams = torch.randn(2, 3, 5)  # (B, K, V): the EOS column of every row, nothing else
    expected = beams.clone()
    expected[..., 4] = -math.inf
    assert torch.equal(forbid_eos(beams, 4), expected)
