"""GNMT's coverage penalty (Wu et al. 2016, §7) for the RNN attention models:

    score(Y) = log P(Y) / lp(Y) + β Σ_i log min(Σ_j α_ij, 1)

bahdanau and luong keep Σ_j α_j in their decoder state (``cov``) and expose it to beam
search through ``attention_coverage``. Checked on random float64 models: the state's sum
equals the teacher-forced attention maps summed over the steps taken (atol 1e-10); every
n-best score equals log P / lp + cp recomputed by teacher forcing; β = 0 is the search
without it; the translation search settings carry β and refuse a model without coverage.
"""

import dataclasses
import math

import pytest
import torch

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, gnmt_length_penalty, repeat_rows
from seqlab.tasks.translation_eval import SearchSettings, coverage_of, decode_ids
from tests.models.test_rnn_seq2seq import (  # noqa: F401  (_one_thread: autouse fixture)
    ATTENTIONAL,
    TOL,
    _one_thread,
    batch,
    build,
    ids,
)


@pytest.mark.parametrize("variant", ATTENTIONAL, ids=ids)
def test_state_coverage_is_the_sum_of_the_attention_so_far(variant):
    name, kw = variant
    model, _ = build(name, **kw)
    model.eval()
    b = batch()
    alpha = model.attention_maps(b.src, b.src_mask, b.y_in, b.tgt_mask)["cross"]  # (B, T, S)
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    cov, mask = model.attention_coverage(state)
    assert (cov == 0).all() and torch.equal(mask, b.src_mask)
    with torch.no_grad():
        for t in range(b.y_in.size(1)):
            _, state = model.step(b.y_in[:, t], state)
            cov, _ = model.attention_coverage(state)
            torch.testing.assert_close(cov, alpha[:, : t + 1].sum(1), atol=TOL, rtol=0)


def wide(name):
    """A random model drawn from U(−1, 1): at the tests' default U(−0.1, 0.1) an untrained
    model repeats one token and never ends, so no β could change its best output."""
    model, _ = build(name, init_range=1.0)
    return model.eval()


def search(model, b, **kw):
    state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
    kw = {"beam_size": 3, "pad_id": PAD_ID, "coverage": model.attention_coverage, **kw}
    return beam_search(model, state, b.src.size(0), BOS_ID, EOS_ID, 7, **kw)


@pytest.mark.parametrize("name", ["bahdanau", "luong"])
@pytest.mark.parametrize(("beta", "alpha"), [(0.2, 0.0), (1.0, 0.6), (5.0, 1.0)])
def test_scores_are_log_p_over_lp_plus_teacher_forced_coverage(name, beta, alpha):
    """For every n-best entry of a batch of 5: score = log P / lp + β Σ_i log min(Σ_t α_it,
    1) with α from the teacher-forced pass on the hypothesis (EOS step included)."""
    model = wide(name)
    b = batch(n=5, seed=3)
    B, N = b.src.size(0), 3
    r = search(model, b, n_best=N, alpha=alpha, coverage_penalty=beta)
    tokens = r.tokens.flatten(0, 1)  # (B·N, T)
    inside = torch.arange(tokens.size(1)) < r.lengths.flatten()[:, None]  # (B·N, T)
    y = tokens.masked_fill(~inside, PAD_ID)  # (B·N, T)
    y_in = torch.cat([torch.full_like(y[:, :1], BOS_ID), y[:, :-1]], 1)  # (B·N, T)
    src, mask = repeat_rows((b.src, b.src_mask), B, N, y.device)  # (B·N, S) each
    with torch.no_grad():
        log_p = model(src, mask, y_in, inside).log_softmax(-1)  # (B·N, T, V)
        a = model.attention_maps(src, mask, y_in, inside)["cross"]  # (B·N, T, S)
    log_P = (log_p.gather(2, y[..., None]).squeeze(2) * inside).sum(1)  # (B·N,)
    cov = (a * inside[:, :, None]).sum(1)  # (B·N, S)
    cp = beta * cov.clamp(max=1.0).log().masked_fill(~mask, 0.0).sum(1)  # (B·N,)
    lp = gnmt_length_penalty(r.lengths.flatten(), alpha)  # (B·N,)
    torch.testing.assert_close(log_P.view(B, N), r.log_probs, atol=TOL, rtol=0)
    torch.testing.assert_close((log_P / lp + cp).view(B, N), r.scores, atol=TOL, rtol=0)
    assert (r.scores[:, :-1] >= r.scores[:, 1:]).all()


@pytest.mark.parametrize("name", ["bahdanau", "luong"])
def test_beta_zero_is_the_search_without_it_and_a_large_beta_changes_outputs(name):
    model = wide(name)
    b = batch(n=6, seed=5)
    plain = search(model, b, alpha=0.6, coverage=None)
    zero = search(model, b, alpha=0.6, coverage_penalty=0.0)
    assert torch.equal(plain.tokens, zero.tokens)
    torch.testing.assert_close(plain.scores, zero.scores, atol=0, rtol=0)
    strong = search(model, b, alpha=0.6, coverage_penalty=50.0)

    def best(r):
        return [row[:n] for row, n in zip(r.tokens[:, 0].tolist(), r.lengths[:, 0].tolist())]

    assert best(strong) != best(plain)


def test_translation_search_settings_carry_beta_to_the_search():
    """decode_ids with β: the n-best of a direct beam search with the same β; greedy
    ignores β; a bad β and a model without coverage are refused with what to do."""
    model = wide("bahdanau")
    b = batch(n=4, seed=2)
    sources = [row[: int(m.sum())].tolist() for row, m in zip(b.src, b.src_mask)]
    settings = SearchSettings(beam=3, nbest=2, max_len_a=0.0, max_len_b=7, length_penalty=0.6)
    with_cp = dataclasses.replace(settings, coverage_penalty=2.0)
    got = decode_ids(model, sources, with_cp)
    want = search(model, b, n_best=2, alpha=0.6, coverage_penalty=2.0)
    for i, nbest in enumerate(got):
        for n, (hyp, score, log_p) in enumerate(nbest):
            L = int(want.lengths[i, n])
            ref = want.tokens[i, n, :L].tolist()
            assert hyp == (ref[:-1] if ref and ref[-1] == EOS_ID else ref)
            # decode_ids hands scores out as float32 values (``.float().tolist()``)
            assert score == float(want.scores[i, n].float())
            assert log_p == float(want.log_probs[i, n].float())
    assert got != decode_ids(model, sources, settings)  # β = 2 changes something here
    greedy = SearchSettings(beam=1, max_len_a=0.0, max_len_b=7)
    assert decode_ids(model, sources, greedy) == decode_ids(
        model, sources, dataclasses.replace(greedy, coverage_penalty=2.0)
    )
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="coverage_penalty must be finite and >= 0"):
            SearchSettings(coverage_penalty=bad)
    sutskever, _ = build("sutskever")
    with pytest.raises(ValueError, match="set the coverage penalty to 0"):
        coverage_of(sutskever, 2.0)
    with pytest.raises(ValueError, match="set the coverage penalty to 0"):
        decode_ids(sutskever, sources, with_cp)
    assert decode_ids(sutskever, sources, dataclasses.replace(greedy, coverage_penalty=2.0))
    assert coverage_of(model, 2.0) == model.attention_coverage
