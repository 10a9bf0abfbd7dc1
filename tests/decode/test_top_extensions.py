"""Candidate selection through chunk maxima (seqlab.decode.top_extensions) against the flat
top-k over all K·V extensions: the same values always, the same extensions where no two
totals are equal, and the same beam search."""

import pytest
import torch

import seqlab.decode.top_extensions as top_ext
from seqlab.decode import beam_search
from seqlab.decode.top_extensions import chunk_maxima, flat_top_extensions, top_extensions
from tests.decode import BOS, EOS, PAD, AttnGRUDecoder, padded_memory, random_memories


def _case(B: int, K: int, V: int, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    live = -torch.rand(B, K, generator=g, dtype=dtype) * 3  # (B, K)
    log_p = torch.log_softmax(torch.randn(B, K, V, generator=g, dtype=dtype) * 2, -1)
    return live, log_p


@pytest.mark.parametrize(
    "B,K,V,n,C",
    [(3, 5, 800, 10, 16), (2, 4, 1000, 8, 7), (4, 1, 513, 2, 32), (1, 3, 97, 6, 4)],
)
def test_same_extensions_as_the_flat_top_k(B, K, V, n, C):
    live, log_p = _case(B, K, V, seed=V)
    assert 4 * n * C <= K * V and V >= 2 * C  # chunk=C prunes here: the chunked path
    want = flat_top_extensions(live, log_p, n)
    got = top_extensions(live, log_p, n, chunk=C)
    assert torch.equal(got[0], want[0])  # bit-identical values
    assert torch.equal(got[1], want[1])  # no equal totals in float64 noise: same extensions


def test_chunk_maxima_cover_a_shorter_last_chunk():
    log_p = torch.arange(10.0).view(1, 1, 10)
    assert chunk_maxima(log_p, 4).tolist() == [[[3.0, 7.0, 9.0]]]
    assert chunk_maxima(log_p, 5).tolist() == [[[4.0, 9.0]]]


def test_minus_infinity_dead_slots_banned_eos_and_an_expanded_first_step():
    """Beam search's first step: one distribution expanded over K slots, only slot 0 live;
    with min_len, EOS at −∞. The best n come from slot 0 and never hold EOS."""
    B, K, V, n = 2, 4, 600, 8
    _, log_p = _case(B, 1, V, seed=1)
    log_p[..., EOS] = float("-inf")
    log_p = log_p.expand(B, K, V)  # (B, K, V), stride 0 along K
    live = torch.full((B, K), float("-inf"), dtype=torch.float64)
    live[:, 0] = 0.0
    want = flat_top_extensions(live, log_p, n)
    got = top_extensions(live, log_p, n, chunk=16)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert (got[1] < V).all() and (got[1] % V != EOS).all()


def test_equal_totals_give_the_same_values_and_extensions_that_hold_them():
    """bf16-like logits: many exactly equal totals. The values are the flat top-k's; the
    extensions may differ among equal totals but each is distinct and holds its value."""
    g = torch.Generator().manual_seed(3)
    B, K, V, n, C = 4, 5, 960, 10, 16
    log_p = torch.randint(-12, 0, (B, K, V), generator=g).double()  # few distinct values
    live = torch.randint(-3, 1, (B, K), generator=g).double()
    want = flat_top_extensions(live, log_p, n)
    values, index = top_extensions(live, log_p, n, chunk=C)
    assert torch.equal(values, want[0])
    total = (live[:, :, None] + log_p).reshape(B, K * V)
    assert torch.equal(total.gather(1, index), values)
    assert all(len(set(row)) == n for row in index.tolist())


def test_fallback_where_chunks_would_not_prune(monkeypatch):
    calls = []
    real = top_ext.chunk_maxima
    monkeypatch.setattr(top_ext, "chunk_maxima", lambda *a: calls.append(1) or real(*a))
    live, log_p = _case(2, 3, 40, seed=5)
    for C in (0, 16):  # 0 = off; 16: 4·n·C > K·V
        got = top_extensions(live, log_p, 6, chunk=C)
        want = flat_top_extensions(live, log_p, 6)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert not calls


def test_the_path_depends_on_one_input_not_the_batch():
    """Equal totals (bf16-like) are broken the same way for an input alone and in a batch
    (8 inputs: past where a batch-size threshold for chunking would have been, §25)."""
    g = torch.Generator().manual_seed(11)
    B, K, V, n = 8, 5, 8000, 10
    log_p = torch.randint(-12, 0, (B, K, V), generator=g).double()
    live = torch.randint(-3, 1, (B, K), generator=g).double()
    batched = top_extensions(live, log_p, n)
    for b in range(B):
        alone = top_extensions(live[b : b + 1], log_p[b : b + 1], n)
        assert torch.equal(alone[0], batched[0][b : b + 1])
        assert torch.equal(alone[1], batched[1][b : b + 1])


def test_beam_search_is_the_same_with_chunked_selection(monkeypatch):
    """A 300-token vocabulary, beam 4, n-best 3, per-input limits, min_len: chunked
    selection (C = 8) returns what the flat top-k returns, and is the path taken."""
    V, K = 300, 4
    torch.manual_seed(0)
    decoder = AttnGRUDecoder(V=V, eos_bias=-1.0, eos_ramp=0.4)
    memory, mask = padded_memory(random_memories([5, 3, 7, 4]), S=8)
    limit = torch.tensor([6, 9, 4, 8])

    def run(chunk: int):
        monkeypatch.setattr(top_ext, "CHUNK", chunk)
        state = decoder.init_state(memory, mask)
        return beam_search(
            decoder, state, 4, BOS, EOS, limit, beam_size=K, n_best=3, alpha=0.6,
            min_len=2, pad_id=PAD,
        )  # fmt: skip

    calls = []
    real = top_ext.chunk_maxima
    monkeypatch.setattr(top_ext, "chunk_maxima", lambda *a: calls.append(1) or real(*a))
    chunked = run(8)
    assert calls, "the chunked path was not taken"
    flat = run(0)
    assert torch.equal(chunked.tokens, flat.tokens)
    assert torch.equal(chunked.lengths, flat.lengths)
    assert torch.equal(chunked.scores, flat.scores)
    assert torch.equal(chunked.log_probs, flat.log_probs)


def test_a_shorter_last_chunk_holding_the_best_tokens():
    """V = 100, C = 8: the last chunk has 4 tokens, and they are each slot's best. Its
    missing positions must not count as copies of the last token."""
    B, K, V, n, C = 2, 3, 100, 6, 8
    live, log_p = _case(B, K, V, seed=7)
    log_p[..., -4:] += 20.0
    want = flat_top_extensions(live, log_p, n)
    got = top_extensions(live, log_p, n, chunk=C)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
