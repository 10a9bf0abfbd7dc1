"""GNMT's coverage penalty in beam search (Wu et al. 2016, §7):

    score(Y) = log P(Y) / lp(Y) + cp(X; Y),   cp = β Σ_i log min(Σ_j p_ij, 1)

A hand-computed value, a hand-checked tree where β changes the winner, then invariants on
a random pointer-generator (float64): the returned score is log P / lp + cp recomputed by
teacher forcing from the model's own attention, stopping early changes nothing, each input
decoded alone gives what it gets in the batch, and β = 0 is the search without it.
"""

import math
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, repeat_rows
from seqlab.decode.scoring import gnmt_coverage_penalty, gnmt_length_penalty
from tests.decode import B_, BOS, EOS, PAD, A, ScriptedDecoder, ScriptState
from tests.models.test_pointer_generator import build, copy_batch, teacher_forced_hypotheses


def test_coverage_penalty_by_hand():
    """β = 0.2; sums 0.5, 1.5 (counts as 1), 0.25 and a padded position (not counted):
    0.2 · (log 0.5 + log 1 + log 0.25) = 0.2 · (−0.693147 − 1.386294) = −0.415888."""
    cov = torch.tensor([[0.5, 1.5, 0.25, 7.0], [2.0, 1.0, 3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False], [True, True, True, False]])
    cp = gnmt_coverage_penalty(cov, mask, 0.2)
    want = torch.tensor([0.2 * (math.log(0.5) + math.log(0.25)), 0.0], dtype=torch.float64)
    torch.testing.assert_close(cp, want, atol=1e-15, rtol=0)
    # A position that received no attention at all counts as the smallest normal float,
    # so the hypothesis stays rankable (finite), far below any attended one.
    zero = gnmt_coverage_penalty(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), 1.0)
    assert torch.isfinite(zero).all() and zero.item() < -170


@dataclass
class CovScriptState:
    """prefix (B, t); cov (B, S) the attention sums so far; mask (B, S); steps."""

    prefix: Tensor
    cov: Tensor
    mask: Tensor
    steps: int = 0


class CoveringScript(ScriptedDecoder):
    """The scripted tree, plus a hand-written attention over S = 2 source positions for the
    step that predicts the token after each prefix (``attention[prefix]``)."""

    def __init__(self, table, default, attention, default_attention) -> None:
        super().__init__(table, default)
        self.attention, self.default_attention = attention, default_attention

    def init_state(self, batch_size: int) -> CovScriptState:
        return CovScriptState(
            torch.zeros(batch_size, 0, dtype=torch.long),
            torch.zeros(batch_size, 2, dtype=torch.float64),
            torch.ones(batch_size, 2, dtype=torch.bool),
        )

    def step(self, y_prev: Tensor, state: CovScriptState) -> tuple[Tensor, CovScriptState]:
        log_p, s = super().step(y_prev, ScriptState(state.prefix, state.steps))  # (B, V)
        att = [self.attention.get(tuple(p), self.default_attention) for p in s.prefix.tolist()]
        cov = state.cov + torch.tensor(att, dtype=torch.float64)  # (B, 2)
        return log_p, CovScriptState(s.prefix, cov, state.mask, s.steps)

    @staticmethod
    def coverage(state: CovScriptState) -> tuple[Tensor, Tensor]:
        return state.cov, state.mask


#        EOS   a     b     c            (tests/decode/test_beam.py, tree 1)
TREE = {
    (): [0.04, 0.50, 0.40, 0.06],
    (A,): [0.40, 0.30, 0.20, 0.10],
    (B_,): [0.90, 0.05, 0.03, 0.02],
}
# Attention of the step after each prefix: "a …" attends to both source words,
# "b …" looks at the first word twice and barely at the second.
ATTENTION = {(): [0.9, 0.1], (A,): [0.6, 0.4], (B_,): [0.05, 0.05]}


@pytest.mark.parametrize(
    ("beta", "winner", "score"),
    [
        # β = 0: "b EOS" (log .36) beats "a EOS" (log .20), as without the penalty.
        (0.0, [B_, EOS], math.log(0.36)),
        # β = 0.2: b EOS covers (0.95, 0.15): log .36 + 0.2 (log .95 + log .15) = −1.411;
        # a EOS covers (1.5, 0.5): log .20 + 0.2 log .5 = −1.748; "a a" (finalised at
        # max_len 2, covers like "a EOS"): log .15 + 0.2 log .5 = −2.036. b EOS wins.
        (0.2, [B_, EOS], math.log(0.36) + 0.2 * (math.log(0.95) + math.log(0.15))),
        # β = 1: a EOS −2.303 beats b EOS −2.970 and a a −2.590: coverage wins.
        (1.0, [A, EOS], math.log(0.20) + math.log(0.5)),
    ],
)
def test_coverage_penalty_changes_the_winner_by_hand(beta, winner, score):
    dec = CoveringScript(TREE, [0.7, 0.1, 0.1, 0.1], ATTENTION, [0.5, 0.5])
    r = beam_search(
        dec,
        dec.init_state(1),
        1,
        BOS,
        EOS,
        max_len=2,
        beam_size=2,
        pad_id=PAD,
        coverage_penalty=beta,
        coverage=dec.coverage if beta else None,
    )
    assert r.tokens[0, 0].tolist() == winner
    assert r.scores[0, 0].item() == pytest.approx(score, abs=1e-12)
    assert r.log_probs[0, 0].item() == pytest.approx(math.log(0.36 if winner[0] == B_ else 0.2))
    assert r.meta["coverage_penalty"] == beta
    assert ("cp(X; Y)" in r.meta["score"]) == (beta > 0)


# ------------------------------------------------- invariants on a random pointer-generator


def pg_search(model, b, rows=None, **kw):
    """Beam search over the rows ``rows`` of batch ``b`` (all by default)."""
    idx = torch.arange(b.src.size(0)) if rows is None else torch.tensor(rows)
    src, mask, ext = b.src[idx], b.src_mask[idx], b.src_ext[idx]
    S = int(mask.sum(1).max())  # alone, a row is not padded beyond its own length
    src, mask, ext = src[:, :S], mask[:, :S], ext[:, :S]
    state = model.init_state(model.encode(src, mask, ext, b.n_oov), mask)
    kw = {"beam_size": 3, "pad_id": PAD_ID, "coverage": model.attention_coverage, **kw}
    return beam_search(model, state, idx.numel(), BOS_ID, EOS_ID, 7, **kw)


@pytest.mark.parametrize(("beta", "alpha"), [(0.2, 0.0), (1.0, 0.6), (5.0, 1.0)])
def test_scores_are_log_p_over_lp_plus_teacher_forced_coverage(beta, alpha):
    """For every n-best entry: score = log P / lp + β Σ_i log min(Σ_t a_i^t, 1), with a^t
    from the teacher-forced pass on the hypothesis (the EOS step included), atol 1e-10."""
    model, _ = build()
    b = copy_batch(n=4, seed=7)
    B, N = b.src.size(0), 3
    r = pg_search(model, b, n_best=N, alpha=alpha, coverage_penalty=beta)
    log_P, out, inside = teacher_forced_hypotheses(model, b, r)  # (B·N,), …, (B·N, T)
    mask = repeat_rows(b.src_mask, B, N, b.src.device)  # (B·N, S)
    cov = (out.attention * inside[:, :, None]).sum(1)  # (B·N, S)
    cp = beta * cov.clamp(max=1.0).log().masked_fill(~mask, 0.0).sum(1)  # (B·N,)
    lp = gnmt_length_penalty(r.lengths.flatten(), alpha)  # (B·N,)
    torch.testing.assert_close(log_P.view(B, N), r.log_probs, atol=1e-10, rtol=0)
    torch.testing.assert_close((log_P / lp + cp).view(B, N), r.scores, atol=1e-10, rtol=0)
    assert (r.scores[:, :-1] >= r.scores[:, 1:]).all()  # ranked by the penalised score


@pytest.mark.parametrize("beta", [0.2, 2.0])
def test_stop_rule_stays_exact_with_the_coverage_penalty(beta):
    model, _ = build()
    b = copy_batch(n=5, seed=3)
    early = pg_search(model, b, n_best=2, alpha=0.6, coverage_penalty=beta)
    full = pg_search(model, b, n_best=2, alpha=0.6, coverage_penalty=beta, stop_early=False)
    T = early.tokens.size(2)
    assert torch.equal(full.tokens[:, :, :T], early.tokens)
    torch.testing.assert_close(full.scores, early.scores, atol=0, rtol=0)


def test_batched_equals_each_input_alone_with_the_coverage_penalty():
    """Padding and dropped done inputs (``compact_done``) change nothing: each input
    decoded alone gets the tokens and score it gets in the batch."""
    model, _ = build()
    b = copy_batch(n=5, seed=4, min_len=1, max_len=6)
    batched = pg_search(model, b, n_best=2, alpha=0.6, coverage_penalty=1.0)
    for i in range(b.src.size(0)):
        alone = pg_search(model, b, rows=[i], n_best=2, alpha=0.6, coverage_penalty=1.0)
        T = alone.tokens.size(2)
        assert torch.equal(alone.tokens[0], batched.tokens[i, :, :T])
        torch.testing.assert_close(alone.scores[0], batched.scores[i], atol=1e-10, rtol=0)


def test_beta_zero_is_the_search_without_it_and_a_large_beta_changes_outputs():
    model, _ = build()
    b = copy_batch(n=6, seed=5)
    plain = pg_search(model, b, alpha=0.6, coverage=None)
    zero = pg_search(model, b, alpha=0.6, coverage_penalty=0.0)
    assert torch.equal(plain.tokens, zero.tokens)
    torch.testing.assert_close(plain.scores, zero.scores, atol=0, rtol=0)
    strong = pg_search(model, b, alpha=0.6, coverage_penalty=50.0)

    def best(r):
        return [row[:n] for row, n in zip(r.tokens[:, 0].tolist(), r.lengths[:, 0].tolist())]

    assert best(strong) != best(plain)


def test_bad_settings_raise():
    model, _ = build()
    b = copy_batch(n=2, seed=1)
    with pytest.raises(ValueError, match="needs the model's attention coverage"):
        pg_search(model, b, coverage_penalty=0.2, coverage=None)
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="coverage_penalty must be a finite number >= 0"):
            pg_search(model, b, coverage_penalty=bad)
