"""``TreeKVCache``: the decoder's self-attention cache that beam search reorders without
copying (seqlab/nn/tree_kv_cache.py).

Proven here, against the concatenating ``KVCache`` as the reference: after any sequence
of the searches' operations (append one or several positions, beam expansion by
``repeat_rows``, reorders within inputs, dropping whole inputs, any other reorder, a
second step from an old state, growth past the buffer's capacity) the attention of every
row equals the reference's, on the fast path and the readable one (weights too), in
float64; a Transformer decodes the same tokens and scores with either cache (greedy, beam
search with n-best, padding, dropped inputs); and beam search's usual chain writes one
buffer in place from the first step after the expansion to the last.
"""

from __future__ import annotations

import pytest
import torch

import seqlab.models.transformer  # noqa: F401  (registers the model)
from seqlab.decode import beam_search, greedy
from seqlab.decode.state import reorder_state, repeat_rows
from seqlab.nn.masks import causal_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention
from seqlab.nn.tree_kv_cache import TreeKVCache
from tests.nn.test_shared_kv import tiny_transformer

pytestmark = pytest.mark.usefixtures("one_thread")
D, H = 8, 2  # d_model, heads
DH = D // H


class Pair:
    """The same cache held twice: as a TreeKVCache and as the reference KVCache."""

    def __init__(self, tree: TreeKVCache, ref: KVCache) -> None:
        self.tree, self.ref = tree, ref

    @classmethod
    def empty(cls, B: int) -> Pair:
        empty = torch.zeros(B, H, 0, DH, dtype=torch.float64)
        return cls(TreeKVCache.empty(empty), KVCache(empty, empty))

    def append(self, g: torch.Generator, T: int = 1) -> Pair:
        B = self.ref.k.shape[0]
        new = KVCache(*(torch.randn(B, H, T, DH, generator=g, dtype=torch.float64) for _ in "kv"))
        return Pair(self.tree.append(new), self.ref.cat(new))

    def reorder(self, index: torch.Tensor, within_inputs: bool = False) -> Pair:
        return Pair(self.tree.reorder(index, within_inputs), self.ref.reorder(index))

    def check(self, mha: MultiHeadAttention, g: torch.Generator, T: int = 1) -> None:
        """Both caches give the same attention to random queries (fast and readable)."""
        B, t = self.ref.k.shape[0], self.ref.length
        assert self.tree.length == t and self.tree.slot.shape == (B, t)
        q = torch.randn(B, T, D, generator=g, dtype=torch.float64)
        mask = causal_mask(T, t) if T > 1 else None  # the new positions' band, as step does
        for need_weights in (False, True):
            out, w = mha.attend(q, self.tree, mask, need_weights)
            ref, w_ref = mha.attend(q, self.ref, mask, need_weights)
            torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
            if need_weights:
                torch.testing.assert_close(w, w_ref, atol=1e-12, rtol=0)


def within_inputs(g: torch.Generator, n: int, K: int) -> torch.Tensor:
    """A beam search reorder: row b·K + k takes a random row b·K + k' of its own input."""
    return (torch.arange(n)[:, None] * K + torch.randint(0, K, (n, K), generator=g)).view(-1)


@pytest.fixture
def mha():
    torch.manual_seed(0)
    return MultiHeadAttention(D, H).double().eval()


def test_a_beam_search_sequence_attends_as_the_concatenating_cache(mha):
    g = torch.Generator().manual_seed(1)
    B, K = 3, 4
    pair = Pair.empty(B).append(g)
    pair.check(mha, g)
    expand = torch.arange(B).repeat_interleave(K)  # repeat_rows: B -> B·K
    pair = pair.reorder(expand)
    assert pair.tree.group == K and pair.tree.store.k.shape[0] == B  # one buffer row per input
    pair.check(mha, g)
    for _ in range(20):  # past the buffer's first capacity (16 steps)
        pair = pair.append(g)
        pair.check(mha, g)
        store = pair.tree.store
        pair = pair.reorder(within_inputs(g, B, K), within_inputs=True)
        assert pair.tree.store is store  # the table is reordered, the buffer is not copied
        pair.check(mha, g)
    assert pair.tree.store.capacity >= 21
    # Drop input 1 (whole groups, as drop_done_inputs does): still grouped, K slots.
    pair = pair.reorder(torch.tensor([0, 1, 2, 3, 8, 9, 10, 11]))
    assert pair.tree.group == K and pair.tree.store.k.shape[0] == 2
    pair = pair.append(g)
    pair.check(mha, g)
    # Rows across inputs (e.g. scoring an n-best list): a plain gather, G = 1.
    pair = pair.reorder(torch.tensor([5, 0, 7, 7, 2]))
    assert pair.tree.group == 1
    pair.check(mha, g)
    pair = pair.append(g)
    pair.check(mha, g)


def test_several_positions_at_once_and_on_a_grouped_cache(mha):
    g = torch.Generator().manual_seed(2)
    pair = Pair.empty(2).append(g, T=3)
    pair.check(mha, g, T=3)
    pair = pair.reorder(torch.arange(2).repeat_interleave(3))  # G = 3
    pair = pair.append(g).reorder(within_inputs(g, 2, 3), within_inputs=True)
    pair = pair.append(g, T=2)  # two known positions fed at once on a grouped cache
    pair.check(mha, g, T=2)


def test_a_second_step_from_an_old_state_copies_and_corrupts_nothing(mha):
    g = torch.Generator().manual_seed(3)
    old = Pair.empty(2).append(g).reorder(torch.arange(2).repeat_interleave(2)).append(g)
    new = old.append(g)  # writes step 2 in place
    assert new.tree.store is old.tree.store and old.tree.store.filled == 3
    branch = old.append(g)  # step 2 again, from the old state: its own buffer
    assert branch.tree.store is not old.tree.store
    for pair in (old, new, branch, new.append(g), branch.append(g)):
        pair.check(mha, g)


def test_from_cache_and_flat_are_inverse():
    g = torch.Generator().manual_seed(4)
    ref = KVCache(*(torch.randn(3, H, 5, DH, generator=g, dtype=torch.float64) for _ in "kv"))
    flat = TreeKVCache.from_cache(ref).flat()
    assert torch.equal(flat.k, ref.k) and torch.equal(flat.v, ref.v)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_transformer_decodes_the_same_with_either_cache(beam):
    model = tiny_transformer()
    g = torch.Generator().manual_seed(5)
    B, S = 5, 7
    src = torch.randint(4, 40, (B, S), generator=g)
    src_mask = torch.ones(B, S, dtype=torch.bool)
    src_mask[1, 3:] = False
    src_mask[3, 5:] = False
    limits = torch.tensor([3, 12, 6, 20, 9])  # inputs finish at different steps: some drop
    out = {}
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        for cache in ("tree", "concat", "auto"):
            state = model.init_state(memory, src_mask, cache=cache)
            if beam == 1:
                out[cache] = greedy(model, state, B, 1, 2, max_len=limits, pad_id=0)
            else:
                out[cache] = beam_search(
                    model, state, B, 1, 2, max_len=limits, beam_size=beam, n_best=3,
                    alpha=0.6, pad_id=0,
                )  # fmt: skip
    for cache in ("tree", "auto"):
        assert torch.equal(out[cache].tokens, out["concat"].tokens)
        assert torch.equal(out[cache].lengths, out["concat"].lengths)
        torch.testing.assert_close(out[cache].scores, out["concat"].scores, atol=1e-5, rtol=0)


class FirstLayerCacheSpy:
    """A decoder that records the first layer's self-attention cache it is stepped with
    into ``caches``, then steps ``model``."""

    def __init__(self, model, caches: list) -> None:
        self.model, self.caches = model, caches

    def step(self, y_prev, state):
        self.caches.append(state.layers[0].self_kv)
        return self.model.step(y_prev, state)


@pytest.mark.parametrize("cache", ["tree", "auto"])
def test_beam_search_writes_one_buffer_in_place(cache):
    model = tiny_transformer().double()
    B, K = 2, 3
    src = torch.randint(4, 40, (B, 6))
    src_mask = torch.ones(B, 6, dtype=torch.bool)
    caches: list = []
    spy = FirstLayerCacheSpy(model, caches)
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask, cache=cache)
        beam_search(spy, state, B, 1, 2, 10, beam_size=K, min_len=10, pad_id=0)
        greedy(spy, model.init_state(model.encode(src, src_mask), src_mask, cache=cache),
               B, 1, 2, 4, pad_id=0)  # fmt: skip
    # step 1 on the B inputs alone (auto: still the KVCache), then one grouped buffer for
    # the other 9 steps; greedy search: a TreeKVCache only if asked for
    assert len(caches) == 14 and isinstance(caches[0], KVCache if cache == "auto" else TreeKVCache)
    stores = [c.store for c in caches[1:10]]
    assert stores[0].group == K and all(s is stores[0] for s in stores)
    plain = all(isinstance(c, KVCache) for c in caches[10:])
    assert plain == (cache == "auto")


def test_repeat_rows_and_reorder_state_reach_the_tree_cache():
    model = tiny_transformer().double()
    src = torch.randint(4, 40, (2, 4))
    src_mask = torch.ones(2, 4, dtype=torch.bool)
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
        _, state = model.step(torch.ones(2, dtype=torch.long), state)
        grouped = repeat_rows(state, 2, 3)
        assert grouped.layers[0].self_kv.group == 3 and grouped.length == 1
        moved = reorder_state(grouped, torch.tensor([2, 2, 0, 3, 5, 4]), within_inputs=True)
        assert moved.layers[0].self_kv.store is grouped.layers[0].self_kv.store
