"""Beam search drops the rows of inputs that are done from the decoder's batch
(``compact_done``, ``drop_done_inputs``), greedy search its finished rows, and nothing
else changes.

For every seq2seq family, the captioner and the pointer models (float64, random weights,
the cases of tests/decode/test_static_state.py), with a different length limit per input
so that inputs finish at different steps: the decoder's batch shrinks, and tokens,
lengths (exact), scores and log P (atol 1e-12) equal those of the search that keeps every
input's K rows to the end. The Transformer's shared cross-attention K/V stay shared (one
row per remaining input) when inputs are dropped. ``KVCache.reorder`` keeps whole groups
shared and expands any other selection.
"""

from __future__ import annotations

import pytest
import torch

from seqlab.decode import beam_search, greedy
from seqlab.nn.multihead import KVCache
from tests.decode.test_static_state import CASES, MAX_LEN, K

pytestmark = pytest.mark.usefixtures("one_thread")
N_BEST = 2


class SizeSpy:
    """Wraps a decoder; records the rows of every step and its cross-attention caches."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.rows, self.cross = model, [], []

    def step(self, y_prev, state):
        self.rows.append(y_prev.size(0))
        layers = getattr(state, "layers", None)
        if layers and hasattr(layers[0], "cross_kv"):
            kv = layers[0].cross_kv
            self.cross.append((kv.k.size(0), kv.group))
        return self.model.step(y_prev, state)


def limits(B: int) -> torch.Tensor:
    return torch.tensor([2, MAX_LEN, 4, 6][:B])  # (B,) inputs end at different steps


def with_and_without(case, search):
    """(result, SizeSpy) of ``search(decoder, compact_done)`` with dropping and without."""
    runs = {}
    for compact in (True, False):
        spy = SizeSpy(case.model)
        runs[compact] = (search(spy, compact), spy)
    return runs[True], runs[False]


def assert_same_result(fast, full):
    assert torch.equal(fast.tokens, full.tokens)
    assert torch.equal(fast.lengths, full.lengths)
    torch.testing.assert_close(fast.scores, full.scores, atol=1e-12, rtol=0)
    torch.testing.assert_close(fast.log_probs, full.log_probs, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", list(CASES))
def test_dropping_done_inputs_changes_nothing(name):
    case = CASES[name]()
    (fast, spy), (full, spy_full) = with_and_without(
        case,
        lambda dec, compact: beam_search(
            dec, case.state(), case.B, case.bos, case.eos, limits(case.B), K, N_BEST,
            alpha=0.6, pad_id=case.pad, compact_done=compact,
        ),
    )  # fmt: skip
    assert spy_full.rows[1:] == [case.B * K] * (len(spy_full.rows) - 1)
    assert min(spy.rows[1:]) < case.B * K  # some input was dropped
    assert spy.rows == sorted(spy.rows[:1]) + sorted(spy.rows[1:], reverse=True)
    assert_same_result(fast, full)
    if name.startswith("transformer"):  # one shared K/V row per remaining input
        for rows, (kv_rows, group) in zip(spy.rows[1:], spy.cross[1:], strict=True):
            assert group == K and kv_rows * K == rows


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_dropping_finished_rows_changes_nothing(name):
    case = CASES[name]()
    # min_len 2: no row ends before the one whose limit is 2, so rows end apart
    (fast, spy), (full, spy_full) = with_and_without(
        case,
        lambda dec, compact: greedy(
            dec, case.state(), case.B, case.bos, case.eos, limits(case.B), min_len=2,
            pad_id=case.pad, compact_done=compact,
        ),
    )  # fmt: skip
    assert set(spy_full.rows) == {case.B}
    assert min(spy.rows) < case.B and spy.rows == sorted(spy.rows, reverse=True)
    assert_same_result(fast, full)


def test_kv_reorder_keeps_whole_groups_shared():
    g = torch.Generator().manual_seed(0)
    kv = KVCache(torch.randn(4, 2, 3, 5, generator=g), torch.randn(4, 2, 3, 5, generator=g))
    shared = kv.grouped(3)  # 12 query rows
    blocks = torch.tensor([3, 4, 5, 9, 10, 11])  # groups 1 and 3, whole and in order
    kept = shared.reorder(blocks)
    assert (
        kept.group == 3 and torch.equal(kept.k, kv.k[[1, 3]]) and torch.equal(kept.v, kv.v[[1, 3]])
    )
    for index in ([3, 4, 5, 9, 11, 10], [4, 5, 6], [0, 1], [9, 10, 11, 0, 1, 2]):
        index = torch.tensor(index)
        out = shared.reorder(index)
        ref = shared.expanded().reorder(index)
        assert torch.equal(out.expanded().k, ref.k) and torch.equal(out.expanded().v, ref.v)
