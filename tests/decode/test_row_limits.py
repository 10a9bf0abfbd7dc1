"""Per-row length limits: ``max_len`` as a (B,) tensor in greedy, beam search and sampling.

The property: a batch decoded with per-row limits L_b gives, for every row b, exactly what
decoding row b alone with the int max_len = L_b gives (tokens exact, scores to 1e-9 in
float64), while every decoder call keeps the fixed B (greedy) or B·K (beam) shape. Checked
by hand on the scripted trees of test_beam.py, then on the random GRU decoder and on a
seqlab.nn Transformer decoder with its K/V cache.
"""

import math

import pytest
import torch

from seqlab.decode import beam_search, gnmt_length_penalty, greedy, sample, sequence_log_prob
from seqlab.decode.state import repeat_rows
from tests.decode import BOS, EOS, PAD, A, ScriptedDecoder, padded_memory, random_memories
from tests.decode.test_beam import DEFAULT_2, LENGTHS, TREE_2, gru_batch
from tests.decode.test_transformer_integration import TinyTransformerDecoder

TOL = 1e-9  # atol on float64 scores: batched vs alone
HAND = 1e-12  # atol on the hand-computed scores of the scripted decoder

NEVER_ENDS = [0.05, 0.55, 0.30, 0.10]  # EOS always loses: every hypothesis runs to its limit


def limits(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


# ---------------------------------------------------------------- scripted, by hand


def test_greedy_stops_each_row_at_its_own_limit():
    # Every row sees the same never-ending distribution: row b is a^(L_b), P = .55^(L_b).
    dec = ScriptedDecoder({}, NEVER_ENDS)
    r = greedy(dec, dec.init_state(3), 3, BOS, EOS, max_len=limits(1, 4, 2), pad_id=PAD)
    assert r.tokens.tolist() == [[A, PAD, PAD, PAD], [A, A, A, A], [A, A, PAD, PAD]]
    assert r.lengths.tolist() == [1, 4, 2]
    expected = torch.tensor([1, 4, 2], dtype=torch.float64) * math.log(0.55)
    torch.testing.assert_close(r.scores, expected, atol=HAND, rtol=0)
    assert r.meta["steps"] == 4 and r.meta["max_len"] == [1, 4, 2]
    assert dec.batch_sizes == [3, 2, 1, 1]  # a finished row leaves the decoder's batch
    dec_all = ScriptedDecoder({}, NEVER_ENDS)
    kept = greedy(dec_all, dec_all.init_state(3), 3, BOS, EOS, max_len=limits(1, 4, 2),
                  pad_id=PAD, compact_done=False)  # fmt: skip
    assert set(dec_all.batch_sizes) == {3}  # finished rows keep their place in the batch
    assert torch.equal(kept.tokens, r.tokens) and torch.equal(kept.scores, r.scores)


def test_beam_finalises_each_input_at_its_own_limit():
    # K = 2, never-ending default: the best of each input is a^(L_b) (test_beam.py shows
    # a a a for max_len = 3), finalised without EOS at t = L_b.
    dec = ScriptedDecoder({}, NEVER_ENDS)
    r = beam_search(
        dec, dec.init_state(3), 3, BOS, EOS, max_len=limits(2, 5, 1), beam_size=2, pad_id=PAD
    )
    assert r.tokens[:, 0].tolist() == [[A, A, PAD, PAD, PAD], [A] * 5, [A, PAD, PAD, PAD, PAD]]
    assert r.lengths.tolist() == [[2], [5], [1]]
    expected = torch.tensor([[2], [5], [1]], dtype=torch.float64) * math.log(0.55)
    torch.testing.assert_close(r.scores, expected, atol=HAND, rtol=0)
    assert r.meta["steps"] == 5
    # Step 1 on the B inputs; then B·K rows less the K rows of each input that is done
    # (input 2 after step 1, input 0 after step 2).
    assert dec.batch_sizes == [3, 4, 2, 2, 2]
    dec_all = ScriptedDecoder({}, NEVER_ENDS)
    kept = beam_search(dec_all, dec_all.init_state(3), 3, BOS, EOS, max_len=limits(2, 5, 1),
                       beam_size=2, pad_id=PAD, compact_done=False)  # fmt: skip
    assert dec_all.batch_sizes == [3] + [6] * 4  # every input keeps its K rows to the end
    assert torch.equal(kept.tokens, r.tokens) and torch.equal(kept.scores, r.scores)


def test_each_input_bound_uses_its_own_limit():
    """Tree 2 (test_beam.py), α = 1: "EOS" (P .5, |Y| = 1) against "a a a a EOS" (P .4,
    |Y| = 5), with a different limit per input, in one batch:

    - L = 1: live "a" (log .4) finalised at t = 1 scores −0.916291 < −0.693147: "EOS";
    - L = 2: "a a" finalised: −0.916291 / (7/6) = −0.785393 < −0.693147: "EOS";
    - L = 3: "a a a" finalised: −0.916291 / (8/6) = −0.687218 > −0.693147: "a a a";
    - L = 4: "a a a a" finalised: −0.916291 / (9/6) = −0.610861: "a a a a";
    - L = 6: the bound log .4 / lp(6) = −0.499795 keeps the input open after "EOS" at
      t = 1; "a a a a EOS" finishes at t = 5: −0.916291 / (10/6) = −0.549774.

    An input that stopped on its own limit must not stop the others (L = 6 goes on past
    t = 4), and the L = 6 input's bound must use lp(6), not the smaller limits' lp."""
    L = limits(3, 1, 6, 4, 2)
    dec = ScriptedDecoder(TREE_2, DEFAULT_2)
    r = beam_search(
        dec, dec.init_state(5), 5, BOS, EOS, max_len=L, beam_size=2, n_best=2, alpha=1.0,
        pad_id=PAD,
    )  # fmt: skip
    best = [row[: int(n)] for row, n in zip(r.tokens[:, 0].tolist(), r.lengths[:, 0])]
    assert best == [[A, A, A], [EOS], [A, A, A, A, EOS], [A, A, A, A], [EOS]]
    lp = [1.0, 7 / 6, 8 / 6, 9 / 6, 10 / 6]  # lp(1 … 5), α = 1
    s_eos, s_a = math.log(0.5), math.log(0.4)
    expected = [
        [s_a / lp[2], s_eos],
        [s_eos, s_a / lp[0]],
        [s_a / lp[4], s_eos],
        [s_a / lp[3], s_eos],
        [s_eos, s_a / lp[1]],
    ]
    torch.testing.assert_close(
        r.scores, torch.tensor(expected, dtype=torch.float64), atol=HAND, rtol=0
    )
    assert r.meta["steps"] == 5  # the L = 6 input stopped on the bound after a a a a EOS
    for b, L_b in enumerate(L.tolist()):
        alone = ScriptedDecoder(TREE_2, DEFAULT_2)
        one = beam_search(
            alone, alone.init_state(1), 1, BOS, EOS, max_len=L_b, beam_size=2, n_best=2,
            alpha=1.0, pad_id=PAD,
        )  # fmt: skip
        T = one.tokens.size(2)
        assert torch.equal(one.tokens[0], r.tokens[b, :, :T]), b
        torch.testing.assert_close(one.scores[0], r.scores[b], atol=HAND, rtol=0)


# ---------------------------------------------------------------- neural decoders

ROW_LIMITS = [1, 9, 3, 14]  # per source of LENGTHS = [5, 2, 7, 3]: a limit of 1, gaps of 11


def gru_alone(i: int):
    """Source i of the GRU batch alone, padded differently (other length, other garbage)."""
    m = random_memories(LENGTHS)[i]
    return padded_memory([m], S=m.size(0) + 2, seed=30 + i)


def assert_rows_equal_alone(batched, alone_of, beam: bool):
    """Row b of ``batched`` == ``alone_of(b)`` (a batch of one): tokens, lengths exact,
    scores and log P to TOL; tokens after the row's own T are padding."""
    for b in range(batched.lengths.size(0)):
        one = alone_of(b)
        T = one.tokens.size(-1)
        got = batched.tokens[b, :, :T] if beam else batched.tokens[b, :T]
        rest = batched.tokens[b, :, T:] if beam else batched.tokens[b, T:]
        assert torch.equal(one.tokens[0], got), b
        assert (rest == PAD).all(), b
        assert torch.equal(one.lengths[0], batched.lengths[b]), b
        torch.testing.assert_close(one.scores[0], batched.scores[b], atol=TOL, rtol=0)
        torch.testing.assert_close(one.log_probs[0], batched.log_probs[b], atol=TOL, rtol=0)


@pytest.mark.parametrize("eos_bias", [-2.0, -20.0])
def test_greedy_per_row_limits_equal_each_row_alone(eos_bias):
    dec, memory, mask = gru_batch(eos_bias=eos_bias)
    L = limits(*ROW_LIMITS)
    r = greedy(dec, dec.init_state(memory, mask), 4, BOS, EOS, max_len=L, pad_id=PAD)
    assert (r.lengths <= L).all()

    def alone(b):
        mem, msk = gru_alone(b)
        return greedy(dec, dec.init_state(mem, msk), 1, BOS, EOS, ROW_LIMITS[b], pad_id=PAD)

    assert_rows_equal_alone(r, alone, beam=False)
    if eos_bias < -10:  # EOS never wins: every row is cut exactly at its own limit
        assert r.lengths.tolist() == ROW_LIMITS and (r.tokens != EOS).all()
        assert r.meta["steps"] == max(ROW_LIMITS)


@pytest.mark.parametrize("eos_bias", [-2.0, -20.0])
@pytest.mark.parametrize("alpha", [-0.5, 0.0, 0.6])
@pytest.mark.parametrize("K", [1, 3])
def test_beam_per_row_limits_equal_each_input_alone(K, alpha, eos_bias):
    dec, memory, mask = gru_batch(eos_bias=eos_bias)
    L = limits(*ROW_LIMITS)
    kw = {"beam_size": K, "n_best": K, "alpha": alpha, "pad_id": PAD}
    r = beam_search(dec, dec.init_state(memory, mask), 4, BOS, EOS, max_len=L, **kw)
    assert (r.lengths <= L[:, None]).all()

    def alone(b):
        mem, msk = gru_alone(b)
        return beam_search(dec, dec.init_state(mem, msk), 1, BOS, EOS, ROW_LIMITS[b], **kw)

    assert_rows_equal_alone(r, alone, beam=True)
    if eos_bias < -10:  # no hypothesis ends: each input's n-best all have |Y| = L_b
        assert (r.lengths == L[:, None]).all() and (r.tokens != EOS).all()
    else:  # both ways of ending occur: EOS before the limit, and cut at the limit
        ended = (r.tokens == EOS).any(dim=2)  # (B, N)
        assert ended.any() and not ended.all()


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_one_equals_greedy_with_per_row_limits(alpha):
    dec, memory, mask = gru_batch()
    L = limits(*ROW_LIMITS)
    g = greedy(dec, dec.init_state(memory, mask), 4, BOS, EOS, max_len=L, pad_id=PAD)
    r = beam_search(
        dec, dec.init_state(memory, mask), 4, BOS, EOS, max_len=L, beam_size=1, pad_id=PAD
    )
    assert torch.equal(r.tokens[:, 0], g.tokens)
    assert torch.equal(r.lengths[:, 0], g.lengths)
    torch.testing.assert_close(r.log_probs[:, 0], g.scores, atol=TOL, rtol=0)


@pytest.mark.parametrize("alpha", [-0.5, 0.0, 0.6, 2.0])
def test_stop_rule_is_exact_with_per_row_limits(alpha):
    """Stopping early == running every input to its own limit."""
    dec, memory, mask = gru_batch()
    L = limits(*ROW_LIMITS)
    kw = {"max_len": L, "beam_size": 3, "n_best": 2, "alpha": alpha, "pad_id": PAD}
    early = beam_search(dec, dec.init_state(memory, mask), 4, BOS, EOS, **kw)
    full = beam_search(dec, dec.init_state(memory, mask), 4, BOS, EOS, stop_early=False, **kw)
    assert full.meta["steps"] == max(ROW_LIMITS) >= early.meta["steps"]
    T = early.tokens.size(2)
    assert torch.equal(full.tokens[:, :, :T], early.tokens)
    torch.testing.assert_close(full.scores, early.scores, atol=0, rtol=0)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_n_best_is_consistent_with_per_row_limits(alpha):
    """n_best never changes the 1-best; the lists are sorted; every entry's score is its
    recomputed log P / lp(|Y|) with |Y| ≤ the input's limit."""
    dec, memory, mask = gru_batch()
    L = limits(*ROW_LIMITS)
    kw = {"max_len": L, "beam_size": 4, "alpha": alpha, "pad_id": PAD}
    init = dec.init_state(memory, mask)
    runs = {n: beam_search(dec, init, 4, BOS, EOS, n_best=n, **kw) for n in (1, 2, 4)}
    one = runs[1]
    for n in (2, 4):
        r = runs[n]
        T = one.tokens.size(2)
        assert torch.equal(r.tokens[:, 0, :T], one.tokens[:, 0])
        torch.testing.assert_close(r.scores[:, 0], one.scores[:, 0], atol=0, rtol=0)
        assert (r.scores[:, :-1] >= r.scores[:, 1:]).all()
        assert (r.lengths <= L[:, None]).all()
    r, N = runs[4], 4
    assert (r.lengths[0] == 1).all()  # the input with limit 1: N one-token hypotheses
    state = repeat_rows(dec.init_state(memory, mask), 4, N)
    tokens, lengths = r.tokens.flatten(0, 1), r.lengths.flatten()  # (B·N, T), (B·N,)
    log_p = sequence_log_prob(dec, state, tokens, EOS, bos_id=BOS, lengths=lengths)  # (B·N,)
    torch.testing.assert_close(log_p.view(4, N), r.log_probs, atol=1e-9, rtol=0)
    lp = gnmt_length_penalty(r.lengths, alpha)  # (B, N)
    torch.testing.assert_close(log_p.view(4, N) / lp, r.scores, atol=1e-9, rtol=0)


@pytest.mark.parametrize("K", [1, 3])
def test_transformer_decoder_per_row_limits_equal_each_input_alone(K):
    """A seqlab.nn Transformer decoder (K/V cache reordered by its own ``reorder``)."""
    torch.manual_seed(3)
    model = TinyTransformerDecoder()
    with torch.no_grad():
        model.out.bias[EOS] += 0.5  # some hypotheses end, others reach their limit
    lengths = [4, 2, 6, 3]
    memory = torch.randn(4, 6, 16, dtype=torch.float64) * 2  # (B, S, D) garbage in padding
    mask = torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    row_limits = [7, 1, 12, 4]
    kw = {"beam_size": K, "n_best": K, "alpha": 0.6, "pad_id": PAD}
    L = limits(*row_limits)
    r = beam_search(model, model.init_state(memory, mask), 4, BOS, EOS, max_len=L, **kw)
    g = greedy(model, model.init_state(memory, mask), 4, BOS, EOS, max_len=L, pad_id=PAD)

    def alone(b, search=beam_search, **kw):
        n = lengths[b]
        state = model.init_state(memory[b : b + 1, :n], mask[b : b + 1, :n])
        return search(model, state, 1, BOS, EOS, row_limits[b], **kw)

    assert_rows_equal_alone(r, lambda b: alone(b, **kw), beam=True)
    assert_rows_equal_alone(g, lambda b: alone(b, greedy, pad_id=PAD), beam=False)
    for lengths_found in (r.lengths, g.lengths[:, None]):  # both ways of ending occur
        assert (lengths_found == L[:, None]).any() and (lengths_found < L[:, None]).any()


# ---------------------------------------------------------------- sampling and arguments


def test_sampling_takes_per_row_limits():
    dec, memory, mask = gru_batch(eos_bias=-20.0)
    L = limits(*ROW_LIMITS)
    g = greedy(dec, dec.init_state(memory, mask), 4, BOS, EOS, max_len=L, pad_id=PAD)
    s0 = sample(dec, dec.init_state(memory, mask), 4, BOS, EOS, L, temperature=0.0, pad_id=PAD)
    assert torch.equal(s0.tokens, g.tokens)
    gen = torch.Generator().manual_seed(0)
    s = sample(dec, dec.init_state(memory, mask), 4, BOS, EOS, L, generator=gen, pad_id=PAD)
    assert s.lengths.tolist() == ROW_LIMITS  # EOS never drawn: each row cut at its limit
    assert s.meta["max_len"] == ROW_LIMITS


@pytest.mark.parametrize("search", [greedy, beam_search, sample])
def test_invalid_per_row_limits_raise(search):
    dec = ScriptedDecoder({}, NEVER_ENDS)
    state = dec.init_state(2)
    with pytest.raises(ValueError, match=r"\(2,\) integer tensor"):
        search(dec, state, 2, BOS, EOS, limits(3, 3, 3))
    with pytest.raises(ValueError, match=r"\(2,\) integer tensor"):
        search(dec, state, 2, BOS, EOS, torch.tensor([3.0, 2.0]))
    with pytest.raises(ValueError, match="max_len"):
        search(dec, state, 2, BOS, EOS, limits(3, 0))
    with pytest.raises(ValueError, match="min_len"):
        search(dec, state, 2, BOS, EOS, limits(5, 2), min_len=3)
