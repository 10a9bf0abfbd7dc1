"""seqlab.decode.compiled.PendingReorder: beam search's within-input reorders are recorded
and composed, then applied by the next compiled step inside its graph; any other reorder,
or a full_reorder() block, applies them at once. The composed rows equal the reorders
applied one after another, and the reorder-then-step function is one graph."""

import pytest
import torch

from seqlab.data.vocab import EOS_ID, PAD_ID
from seqlab.decode.compiled import CompiledStep, PendingReorder
from seqlab.decode.state import full_reorder, reorder_state, repeat_rows
from seqlab.models.transformer import TransformerConfig, TransformerSeq2Seq

B, K, V = 3, 4, 30


def _expanded_state():
    """A tiny Transformer's decoder state after two steps, expanded to B·K rows (concat
    cache, as compiled decoding uses)."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=2, dropout=0.0
    )
    model = TransformerSeq2Seq(cfg, src_vocab=V, tgt_vocab=V, pad_id=PAD_ID).eval()
    src = torch.randint(4, V, (B, 6))
    src[:, -1] = EOS_ID
    mask = torch.ones(B, 6, dtype=torch.bool)
    with torch.no_grad():
        state = model.init_state(model.encode(src, mask), mask, cache="concat")
        _, state = model.step(torch.full((B,), 1), state)
        state = repeat_rows(state, B, K)
        _, state = model.step(torch.randint(4, V, (B * K,)), state)
    return model, state


def _within(seed: int) -> torch.Tensor:
    """A reorder that keeps every row inside its input's block of K (beam search's)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.arange(B)[:, None] * K + torch.randint(0, K, (B, K), generator=g)).view(-1)


def _caches(state) -> list[torch.Tensor]:
    return [t for lay in state.layers for t in (lay.self_kv.k, lay.self_kv.v)]


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(_caches(a), _caches(b), strict=True))


def test_within_input_reorders_are_recorded_and_composed():
    _, state = _expanded_state()
    first, second = _within(1), _within(2)
    pending = reorder_state(PendingReorder(state), first, within_inputs=True)
    pending = reorder_state(pending, second, within_inputs=True)
    assert isinstance(pending, PendingReorder) and pending.state is state  # nothing copied
    once = reorder_state(state, first, within_inputs=True)
    one_by_one = reorder_state(once, second, within_inputs=True)
    assert _same(pending.resolved(), one_by_one)
    assert not _same(state, one_by_one)  # the reorders did move rows


def test_other_reorders_and_full_reorder_apply_at_once():
    _, state = _expanded_state()
    first = _within(3)
    pending = reorder_state(PendingReorder(state), first, within_inputs=True)
    rows = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])  # drop input 1 (drop_done_inputs)
    dropped = reorder_state(pending, rows)
    assert not isinstance(dropped, PendingReorder)
    want = reorder_state(reorder_state(state, first, within_inputs=True), rows)
    assert _same(dropped, want)
    with full_reorder():
        applied = reorder_state(pending, _within(4), within_inputs=True)
    assert not isinstance(applied, PendingReorder)
    assert _same(applied, reorder_state(pending.resolved(), _within(4)))


@pytest.mark.compiles  # builds a CompiledStep, which checks for a compiler
def test_reorder_then_step_is_one_graph():
    model, state = _expanded_state()
    compiled = CompiledStep(model)
    y = torch.randint(4, V, (B * K,))
    with torch.no_grad():
        explained = torch._dynamo.explain(compiled._reorder_then_step)(y, state, _within(5))
        logits, after = compiled._reorder_then_step(y, state, _within(5))
        want, want_after = model.step(y, reorder_state(state, _within(5), within_inputs=True))
    torch._dynamo.reset()
    assert explained.graph_count == 1
    assert explained.graph_break_count == 0, explained.break_reasons
    assert torch.equal(logits, want) and _same(after, want_after)
