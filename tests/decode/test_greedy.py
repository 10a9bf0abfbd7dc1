"""Greedy search: hand-checked on the scripted tree, invariants on the random decoder."""

import math

import pytest
import torch

from seqlab.decode import greedy, sequence_log_prob
from tests.decode import (
    B_,
    BOS,
    EOS,
    PAD,
    A,
    AttnGRUDecoder,
    ScriptedDecoder,
    ScriptState,
    padded_memory,
    random_memories,
)
from tests.decode.test_beam import DEFAULT_1, LENGTHS, TREE_1, gru_batch

TOL = 1e-12  # atol on float64 scores of the scripted decoder


def test_rows_finish_independently_and_stop_changing():
    # Two rows whose prefixes start with a different "source" token (a resp. b):
    #   row 0: (a,) -> a (.6), (a, a) -> EOS (.7): "a EOS", P = .42, |Y| = 2
    #   row 1: (b,) -> EOS (.8) at once: "EOS", P = .8, then PAD while row 0 goes on.
    #                  EOS   a     b     c
    table = {
        (A,): [0.10, 0.60, 0.20, 0.10],
        (A, A): [0.70, 0.10, 0.10, 0.10],
        (B_,): [0.80, 0.10, 0.05, 0.05],
    }
    dec = ScriptedDecoder(table, [0.25] * 4)
    state = ScriptState(torch.tensor([[A], [B_]]))  # (2, 1)
    r = greedy(dec, state, 2, BOS, EOS, max_len=5, pad_id=PAD)
    assert r.tokens.tolist() == [[A, EOS], [EOS, PAD]]
    assert r.lengths.tolist() == [2, 1]
    assert r.scores.tolist() == pytest.approx([math.log(0.42), math.log(0.8)], abs=TOL)
    assert r.meta["steps"] == 2  # stopped as soon as every row had EOS
    torch.testing.assert_close(r.log_probs, r.scores, atol=0, rtol=0)


def test_greedy_takes_the_locally_best_token():
    dec = ScriptedDecoder(TREE_1, DEFAULT_1)
    r = greedy(dec, dec.init_state(1), 1, BOS, EOS, max_len=5, pad_id=PAD)
    assert r.tokens.tolist() == [[A, EOS]]  # a (.5) then EOS (.4): P = .2 (beam finds .36)
    assert r.scores.item() == pytest.approx(math.log(0.2), abs=TOL)


def test_padding_after_eos_and_scores_of_finished_rows():
    dec, memory, mask = gru_batch()
    r = greedy(dec, dec.init_state(memory, mask), len(LENGTHS), BOS, EOS, 10, pad_id=PAD)
    T = r.tokens.size(1)
    position = torch.arange(T)[None, :]  # (1, T)
    assert (r.tokens[position >= r.lengths[:, None]] == PAD).all()
    assert (r.tokens.gather(1, r.lengths[:, None] - 1) == EOS).all()  # every row ended
    assert (r.tokens[position < r.lengths[:, None] - 1] != EOS).all()
    assert int(r.lengths.max()) == T  # stopped when the last row finished
    recomputed = sequence_log_prob(dec, dec.init_state(memory, mask), r.tokens, EOS, bos_id=BOS)
    torch.testing.assert_close(recomputed, r.scores, atol=1e-5, rtol=0)
    assert len(set(r.lengths.tolist())) > 1  # rows of different lengths in one batch


def test_greedy_batched_equals_unbatched():
    dec, memory, mask = gru_batch()
    batched = greedy(dec, dec.init_state(memory, mask), len(LENGTHS), BOS, EOS, 8, pad_id=PAD)
    for i, m in enumerate(random_memories(LENGTHS)):
        mem_i, mask_i = padded_memory([m], S=m.size(0) + 2, seed=20 + i)
        alone = greedy(dec, dec.init_state(mem_i, mask_i), 1, BOS, EOS, 8, pad_id=PAD)
        T = alone.tokens.size(1)
        assert torch.equal(alone.tokens[0], batched.tokens[i, :T])
        torch.testing.assert_close(alone.scores[0], batched.scores[i], atol=1e-9, rtol=0)


def test_max_len_and_min_len():
    torch.manual_seed(0)
    never = AttnGRUDecoder(eos_bias=-20.0)
    memory, mask = torch.randn(2, 3, 8, dtype=torch.float64), torch.ones(2, 3, dtype=torch.bool)
    r = greedy(never, never.init_state(memory, mask), 2, BOS, EOS, max_len=4)
    assert r.tokens.shape == (2, 4) and (r.lengths == 4).all() and (r.tokens != EOS).all()

    always = AttnGRUDecoder(eos_bias=20.0)
    r = greedy(always, always.init_state(memory, mask), 2, BOS, EOS, max_len=6, min_len=3)
    assert (r.lengths == 4).all() and (r.tokens[:, :3] != EOS).all()
    assert (r.tokens[:, 3] == EOS).all()
    r = greedy(always, always.init_state(memory, mask), 2, BOS, EOS, max_len=3, min_len=3)
    assert (r.lengths == 3).all() and (r.tokens != EOS).all()  # min_len = max_len: no EOS
    with pytest.raises(ValueError, match="min_len"):
        greedy(always, always.init_state(memory, mask), 2, BOS, EOS, max_len=3, min_len=4)
    with pytest.raises(ValueError, match="max_len"):
        greedy(always, always.init_state(memory, mask), 2, BOS, EOS, max_len=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_argmax_token_is_the_first_maximum(dtype):
    # The chooser of greedy search (and of sampling at temperature 0): ties go to the lowest
    # id, a NaN counts as the maximum (as Tensor.argmax does; docs/perf-notes-amx.md §48),
    # on rows of the vocabulary sizes the presets decode with.
    from seqlab.decode.greedy import argmax_token

    g = torch.Generator().manual_seed(0)
    for V in (4, 2000, 8000):
        x = torch.randn(7, V, generator=g).to(dtype)  # (7, V)
        x[1, 3] = x[1, V - 1] = x[1].max() + 1  # a tie: the lower id wins
        x[2] = 0.0  # all equal: id 0
        x[3, V // 2] = float("nan")  # NaN wins
        x[4, 0] = float("inf")
        x[5, -1] = float("inf")
        got = argmax_token(x)
        assert got.dtype == torch.long and got.shape == (7,)
        assert torch.equal(got, x.argmax(dim=-1))
        assert got[1:6].tolist() == [3, 0, V // 2, 0, V - 1]


def test_searches_take_a_decoders_own_log_prob_step():
    # A decoder with ``log_prob_step`` (the compiled step: log_softmax in its graph) gives
    # the searches their log p itself; without one they normalise ``step``'s logits.
    from seqlab.decode import beam_search
    from seqlab.decode.scoring import next_log_probs

    class Flipped(ScriptedDecoder):
        calls = 0

        def log_prob_step(self, y_prev, state):  # the reverse preference of ``step``
            Flipped.calls += 1
            log_p, state = self.step(y_prev, state)  # (B, 4)
            return log_p.flip(-1), state

    table = {(): [0.1, 0.6, 0.2, 0.1]}
    plain, flipped = ScriptedDecoder(table, [0.7, 0.1, 0.1, 0.1]), Flipped(table, [0.1] * 3 + [0.7])
    y = torch.full((1,), BOS)
    log_p, _ = next_log_probs(plain, y, plain.init_state(1))
    assert torch.allclose(log_p.exp(), torch.tensor([[0.1, 0.6, 0.2, 0.1]], dtype=torch.float64))
    log_p, _ = next_log_probs(flipped, y, flipped.init_state(1))
    assert torch.allclose(log_p.exp(), torch.tensor([[0.1, 0.2, 0.6, 0.1]], dtype=torch.float64))
    r = greedy(flipped, flipped.init_state(1), 1, BOS, EOS, max_len=2, pad_id=PAD)
    assert r.tokens[0, 0].item() == 2  # the flipped table's best
    calls = Flipped.calls
    b = beam_search(flipped, flipped.init_state(1), 1, BOS, EOS, max_len=2, beam_size=2, pad_id=PAD)
    assert b.tokens[0, 0, 0].item() == 2 and Flipped.calls > calls
