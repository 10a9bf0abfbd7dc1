"""Beam search: hand-checked trees, then invariants on a random neural decoder.

Scripted vocabulary (tests/decode/__init__.py): EOS = 0, a = 1, b = 2, c = 3; outputs are
padded with PAD = −1. lp(n) = ((5 + n) / 6)^α; with α = 1: lp(1) = 1, lp(2) = 7/6,
lp(3) = 4/3, lp(5) = 5/3.
"""

import math

import pytest
import torch

from seqlab.decode import beam_search, best_possible_score, greedy, sequence_log_prob
from seqlab.decode.beam import select_candidates
from seqlab.decode.scoring import gnmt_length_penalty
from seqlab.decode.state import repeat_rows
from tests.decode import (
    B_,
    BOS,
    EOS,
    PAD,
    A,
    AttnGRUDecoder,
    ScriptedDecoder,
    padded_memory,
    random_memories,
)

TOL = 1e-12  # atol on float64 scores of the scripted decoder (exact arithmetic up to rounding)

# Tree 1: greedy takes "a" (0.5 > 0.4) and ends with P(a EOS) = 0.5·0.4 = 0.20, while
# "b EOS" has P = 0.4·0.9 = 0.36.
#                      EOS    a     b     c
TREE_1 = {
    (): [0.04, 0.50, 0.40, 0.06],
    (A,): [0.40, 0.30, 0.20, 0.10],
    (B_,): [0.90, 0.05, 0.03, 0.02],
}
DEFAULT_1 = [0.70, 0.10, 0.10, 0.10]


def scripted(table, default=DEFAULT_1, B=1):
    dec = ScriptedDecoder(table, default)
    return dec, dec.init_state(B)


def test_greedy_misses_what_beam_two_finds():
    dec, state = scripted(TREE_1)
    g = greedy(dec, state, 1, BOS, EOS, max_len=5, pad_id=PAD)
    assert g.tokens.tolist() == [[A, EOS]]
    assert g.scores.item() == pytest.approx(math.log(0.20), abs=TOL)

    # K = 2, α = 0. Step 1: live a (.5), b (.4); EOS (.04) ranks 4th, not among the K best.
    # Step 2, the 2K = 4 best of the 8 extensions: b EOS .36, a EOS .20, a a .15, a b .10.
    # Both EOS ones rank < K: finished {b EOS: log .36, a EOS: log .20}; live {aa, ab}.
    # Stop: 2 finished and the best live log .15 ≤ worst kept log .20, so t = 2 is the end.
    dec, state = scripted(TREE_1, B=1)
    r = beam_search(dec, state, 1, BOS, EOS, max_len=5, beam_size=2, n_best=2, pad_id=PAD)
    assert r.tokens.tolist() == [[[B_, EOS], [A, EOS]]]
    assert r.lengths.tolist() == [[2, 2]]
    torch.testing.assert_close(
        r.scores, torch.log(torch.tensor([[0.36, 0.20]], dtype=torch.float64)), atol=TOL, rtol=0
    )
    torch.testing.assert_close(r.log_probs, r.scores, atol=0, rtol=0)  # α = 0: lp = 1
    assert r.meta["steps"] == 2
    assert dec.batch_sizes == [1, 2]  # step 1 on the B inputs, then the fixed B·K shape


# Tree 2: the length penalty changes the winner. "EOS" alone has P = 0.5 (|Y| = 1); after
# "a" the model is certain of "a a a EOS", so "a a a a EOS" has P = 0.4 (|Y| = 5).
#   α = 0: log .5 = −0.693147 > log .4 = −0.916291                    -> "EOS"
#   α = 1: −0.693147 / lp(1) = −0.693147 < −0.916291 / (10/6) = −0.549774 -> "a a a a EOS"
#                    EOS   a    b    c
TREE_2 = {
    (): [0.5, 0.4, 0.1, 0.0],
    (A,): [0.0, 1.0, 0.0, 0.0],
    (A, A): [0.0, 1.0, 0.0, 0.0],
    (A, A, A): [0.0, 1.0, 0.0, 0.0],
}
DEFAULT_2 = [1.0, 0.0, 0.0, 0.0]  # any other prefix ends: P(EOS) = 1


def test_length_penalty_changes_the_winner():
    dec, state = scripted(TREE_2, DEFAULT_2)
    r0 = beam_search(dec, state, 1, BOS, EOS, max_len=6, beam_size=2, alpha=0.0, pad_id=PAD)
    # α = 0, t = 1: EOS (.5) ranks first -> finished; bound = best live log .4 ≤ log .5: stop.
    assert r0.tokens.tolist() == [[[EOS]]] and r0.meta["steps"] == 1
    assert r0.scores.item() == pytest.approx(math.log(0.5), abs=TOL)

    # α = 1, max_len = 6, lp(6) = 11/6.
    # t = 1: finished {EOS: −0.693147}; live a (log .4), b (log .1). The bound is
    #   log .4 / lp(6) = −0.916291 / (11/6) = −0.499795 > −0.693147: continue.
    # t = 2: a a (.4) live; b EOS (.1) finishes, −2.302585 / (7/6) = −1.973645, not kept;
    #   the other live slot holds a P = 0 extension. Same bound: continue (t = 3, 4 alike).
    # t = 5: a a a a EOS finishes: −0.916291 / (10/6) = −0.549774, the new best; every live
    #   extension now has P = 0, bound −∞: stop.
    # n_best = 1 (stops on the first finished one if the bound allows) and n_best = 2.
    dec, state = scripted(TREE_2, DEFAULT_2)
    r = beam_search(dec, state, 1, BOS, EOS, max_len=6, beam_size=2, alpha=1.0, pad_id=PAD)
    assert r.tokens.tolist() == [[[A, A, A, A, EOS]]] and r.meta["steps"] == 5
    dec, state = scripted(TREE_2, DEFAULT_2)
    r1 = beam_search(
        dec, state, 1, BOS, EOS, max_len=6, beam_size=2, n_best=2, alpha=1.0, pad_id=PAD
    )
    assert r1.tokens.tolist() == [[[A, A, A, A, EOS], [EOS, PAD, PAD, PAD, PAD]]]
    assert r1.lengths.tolist() == [[5, 1]]
    assert r1.meta["steps"] == 5
    expected = torch.tensor([[math.log(0.4) / (10 / 6), math.log(0.5)]], dtype=torch.float64)
    torch.testing.assert_close(r1.scores, expected, atol=TOL, rtol=0)
    raw = torch.tensor([[math.log(0.4), math.log(0.5)]], dtype=torch.float64)
    torch.testing.assert_close(r1.log_probs, raw, atol=TOL, rtol=0)


def test_naive_stop_rules_would_have_stopped_too_early():
    """At t = 1 of tree 2 (α = 1) the naive bounds s / lp(t) and s / lp(t + 1) say no live
    hypothesis can beat "EOS" (OpenNMT-py#1320); the bound s / lp(max_len) says one can,
    and a a a a EOS does."""
    s, best_finished = math.log(0.4), math.log(0.5)
    assert s / gnmt_length_penalty(1, 1.0).item() < best_finished  # −0.916291
    assert s / gnmt_length_penalty(2, 1.0).item() < best_finished  # −0.785393
    bound = best_possible_score(torch.tensor(s, dtype=torch.float64), 1, 6, 1.0).item()
    assert bound == pytest.approx(s / (11 / 6), abs=TOL)  # −0.499795
    assert bound > best_finished


def test_max_len_finalises_live_hypotheses():
    # Tree 2, α = 1, max_len = 3: a a a EOS no longer fits. At t = 3 the live a a a (P = .4)
    # is finalised without EOS: log .4 / lp(3) = −0.916291 / (4/3) = −0.687218 beats "EOS"
    # (−0.693147).
    dec, state = scripted(TREE_2, DEFAULT_2)
    r = beam_search(
        dec, state, 1, BOS, EOS, max_len=3, beam_size=2, n_best=2, alpha=1.0, pad_id=PAD
    )
    assert r.tokens.tolist() == [[[A, A, A], [EOS, PAD, PAD]]]
    assert r.lengths.tolist() == [[3, 1]]
    assert r.scores[0, 0].item() == pytest.approx(math.log(0.4) / (8 / 6), abs=TOL)

    # Never-ending default (EOS .05 always loses): the best of K = 2 is a a a, P = .55³.
    dec, state = scripted({}, [0.05, 0.55, 0.30, 0.10])
    r = beam_search(dec, state, 1, BOS, EOS, max_len=3, beam_size=2, pad_id=PAD)
    assert r.tokens.tolist() == [[[A, A, A]]] and r.lengths.tolist() == [[3]]
    assert r.scores.item() == pytest.approx(3 * math.log(0.55), abs=TOL)


def test_min_len_forbids_early_eos_without_renormalising():
    # Tree 1, min_len = 2: EOS is −∞ at t ≤ 2, so a EOS / b EOS are gone. t = 2 live: a a .15,
    # a b .10; t = 3 (default, EOS .7): a a EOS .105 wins. Score = log .105 (unrenormalised).
    dec, state = scripted(TREE_1)
    r = beam_search(dec, state, 1, BOS, EOS, max_len=5, beam_size=2, min_len=2, pad_id=PAD)
    assert r.tokens.tolist() == [[[A, A, EOS]]]
    assert r.scores.item() == pytest.approx(math.log(0.5 * 0.3 * 0.7), abs=TOL)
    dec, state = scripted(TREE_1)
    g = greedy(dec, state, 1, BOS, EOS, max_len=5, min_len=2, pad_id=PAD)
    assert g.tokens.tolist() == [[A, A, EOS]]
    assert g.scores.item() == pytest.approx(math.log(0.5 * 0.3 * 0.7), abs=TOL)


def test_select_candidates_keeps_k_live_and_finishes_top_k_eos():
    # B = 1, K = 2, V = 3. Slot 0 (log P = 0): EOS .6, a .3, b .1; slot 1 (log .5): EOS .5, …
    live = torch.log(torch.tensor([[1.0, 0.5]]))  # (1, 2)
    p = torch.tensor([[[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]])  # (1, 2, 3)
    cand = select_candidates(live, p.log(), eos_id=0)
    # Extensions: 0EOS .6, 0a .3, 0b .1, 1EOS .25, 1a .2, 1b .05; 2K = 4 best: .6 .3 .25 .2
    torch.testing.assert_close(
        cand.log_prob.exp(), torch.tensor([[0.6, 0.3, 0.25, 0.2]]), atol=1e-6, rtol=0
    )
    assert cand.finishes.tolist() == [[True, False, False, False]]  # 1EOS ranks 3rd ≥ K
    assert cand.live.tolist() == [[1, 3]]  # 0a and 1a: K non-EOS extensions
    assert cand.beam.gather(1, cand.live).tolist() == [[0, 1]]


# ---------------------------------------------------------------- neural invariants

LENGTHS = [5, 2, 7, 3]  # source lengths of the batch


def gru_batch(eos_bias=-2.0, eos_ramp=0.5, seed=0):
    """A random decoder whose hypotheses end after ~4–6 tokens, in float64."""
    torch.manual_seed(seed)
    dec = AttnGRUDecoder(eos_bias=eos_bias, eos_ramp=eos_ramp)
    memory, mask = padded_memory(random_memories(LENGTHS), S=9)
    return dec, memory, mask


def run_beam(dec, memory, mask, **kw):
    kw = {"max_len": 8, "beam_size": 3, "pad_id": PAD, **kw}
    return beam_search(dec, dec.init_state(memory, mask), memory.size(0), BOS, EOS, **kw)


def test_beam_one_equals_greedy():
    dec, memory, mask = gru_batch()
    g = greedy(dec, dec.init_state(memory, mask), len(LENGTHS), BOS, EOS, 8, pad_id=PAD)
    r = run_beam(dec, memory, mask, beam_size=1)
    assert torch.equal(r.tokens[:, 0], g.tokens)
    assert torch.equal(r.lengths[:, 0], g.lengths)
    torch.testing.assert_close(r.scores[:, 0], g.scores, atol=1e-10, rtol=0)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_batched_equals_unbatched(alpha):
    """Each source decoded alone, padded differently (S_i + 1 with other garbage), gives the
    same hypotheses as inside the batch padded to S = 9."""
    dec, memory, mask = gru_batch()
    batched = run_beam(dec, memory, mask, n_best=3, alpha=alpha)
    for i, m in enumerate(random_memories(LENGTHS)):
        mem_i, mask_i = padded_memory([m], S=m.size(0) + 1, seed=10 + i)
        alone = run_beam(dec, mem_i, mask_i, n_best=3, alpha=alpha)
        T = alone.tokens.size(2)
        assert torch.equal(alone.tokens[0], batched.tokens[i, :, :T])
        assert (batched.tokens[i, :, T:] == PAD).all()
        assert torch.equal(alone.lengths[0], batched.lengths[i])
        torch.testing.assert_close(alone.scores[0], batched.scores[i], atol=1e-9, rtol=0)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_n_best_does_not_change_the_one_best(alpha):
    dec, memory, mask = gru_batch()
    results = [run_beam(dec, memory, mask, beam_size=4, n_best=n, alpha=alpha) for n in (1, 2, 4)]
    for r in results[1:]:
        T = results[0].tokens.size(2)
        assert torch.equal(r.tokens[:, 0, :T], results[0].tokens[:, 0])
        torch.testing.assert_close(r.scores[:, 0], results[0].scores[:, 0], atol=0, rtol=0)
        assert (r.scores[:, :-1] >= r.scores[:, 1:]).all()  # sorted best first


@pytest.mark.parametrize("alpha", [-0.5, 0.0, 0.6, 2.0])
def test_stop_rule_is_exact(alpha):
    """Stopping early gives exactly what running every input to max_len gives."""
    dec, memory, mask = gru_batch()
    early = run_beam(dec, memory, mask, max_len=10, n_best=2, alpha=alpha)
    full = run_beam(dec, memory, mask, max_len=10, n_best=2, alpha=alpha, stop_early=False)
    assert full.meta["steps"] == 10
    T = early.tokens.size(2)
    assert torch.equal(full.tokens[:, :, :T], early.tokens)
    torch.testing.assert_close(full.scores, early.scores, atol=0, rtol=0)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_scores_equal_recomputed_log_prob(alpha):
    """score = sequence_log_prob(tokens) / lp(|Y|), atol 1e-5, for every n-best entry."""
    dec, memory, mask = gru_batch()
    B, N = len(LENGTHS), 3
    r = run_beam(dec, memory, mask, n_best=N, alpha=alpha, max_len=5)
    state = repeat_rows(dec.init_state(memory, mask), B, N, memory.device)
    tokens, lengths = r.tokens.flatten(0, 1), r.lengths.flatten()  # (B·N, T), (B·N,)
    log_p = sequence_log_prob(dec, state, tokens, EOS, bos_id=BOS, lengths=lengths)
    torch.testing.assert_close(log_p.view(B, N), r.log_probs, atol=1e-5, rtol=0)
    lp = gnmt_length_penalty(r.lengths, alpha)  # (B, N)
    torch.testing.assert_close(log_p.view(B, N) / lp, r.scores, atol=1e-5, rtol=0)
    ended = (r.tokens == EOS).any(dim=2)  # (B, N)
    assert ended.any() and not ended.all()  # both EOS-ended and max_len-finalised ones


def test_max_and_min_len_on_a_neural_decoder():
    dec, memory, mask = gru_batch(eos_bias=-20.0, eos_ramp=0.0)  # EOS never wins
    r = run_beam(dec, memory, mask, max_len=4, n_best=2)
    assert r.tokens.shape[2] == 4 and (r.lengths == 4).all() and (r.tokens != EOS).all()

    dec, memory, mask = gru_batch(eos_bias=20.0, eos_ramp=0.0)  # EOS always wins at once …
    assert (run_beam(dec, memory, mask).lengths[:, 0] == 1).all()
    r = run_beam(dec, memory, mask, min_len=3, n_best=2)  # … unless forbidden
    assert (r.lengths == 4).all()
    assert (r.tokens[:, :, :3] != EOS).all() and (r.tokens[:, :, 3] == EOS).all()


def test_meta_records_settings_and_formula():
    dec, memory, mask = gru_batch()
    r = run_beam(dec, memory, mask, n_best=2, alpha=0.6)
    assert r.meta["beam_size"] == 3 and r.meta["n_best"] == 2 and r.meta["alpha"] == 0.6
    assert "((5 + |Y|) / 6) ** alpha" in r.meta["score"] and "max_len" in r.meta["stop_rule"]


def test_invalid_arguments_raise():
    dec, state = scripted(TREE_1)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(dec, state, 1, BOS, EOS, max_len=3, beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="min_len"):
        beam_search(dec, state, 1, BOS, EOS, max_len=3, min_len=4)
