"""A shared K/V cache (``KVCache.group``): beam search's K hypotheses of one input read
their cross-attention keys/values once instead of from K copies.

Proven here: ``grouped``/``expanded``/``reorder``/``cat`` keep the meaning "query row r
reads row r // G"; attention over a shared cache equals attention over its expanded copy
on every path (a decoder step reads it as it is, through the matmul path or SDPA; several
query positions and the readable path expand it), with padding and a fully masked group,
in float64 and float32;
``repeat_rows`` shares static fields that can be shared and copies everything else, and
``full_reorder()`` / ``unshared()`` turn the sharing off; a Transformer decoded by beam
search keeps one cross-attention row per input, never copied, from the first step to the
last.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import seqlab.models.transformer  # noqa: F401  (registers the model)
from seqlab.decode import beam_search
from seqlab.decode.state import full_reorder, repeat_rows, static_field, unshared
from seqlab.nn.masks import attention_mask, padding_mask
from seqlab.nn.multihead import KVCache, MultiHeadAttention, always_sdpa
from seqlab.registry import MODELS
from seqlab.run_config import resolve_run

pytestmark = pytest.mark.usefixtures("one_thread")
B, G, H, S, DH = 3, 4, 2, 5, 4  # inputs, hypotheses per input, heads, keys, head width


def shared_case(dtype=torch.float64):
    """A shared cache (B rows, group G), B·G queries, a key-padding mask per input in
    which input 2 keeps no key; the mask repeated per hypothesis as a static field is."""
    g = torch.Generator().manual_seed(0)
    k = torch.randn(B, H, S, DH, generator=g, dtype=dtype)
    v = torch.randn(B, H, S, DH, generator=g, dtype=dtype)
    lengths = torch.tensor([5, 3, 0])
    mask = attention_mask(padding_mask(lengths, S)).repeat_interleave(G, dim=0)  # (B·G,1,1,S)
    return KVCache(k, v).grouped(G), mask


def test_grouped_expanded_reorder_and_cat_mean_row_r_reads_row_r_div_g():
    shared, _ = shared_case()
    assert shared.group == G and shared.k.size(0) == B
    assert shared.grouped(2).group == 2 * G and shared.grouped(2).k is shared.k  # no copy
    full = shared.expanded()
    assert full.group == 1 and full.k.size(0) == B * G
    for r in range(B * G):
        assert torch.equal(full.k[r], shared.k[r // G]) and torch.equal(full.v[r], shared.v[r // G])
    index = torch.tensor([7, 0, 11, 4, 4, 1])  # across inputs, any batch size
    a, b = shared.reorder(index), full.reorder(index)
    assert a.group == 1 and torch.equal(a.k, b.k) and torch.equal(a.v, b.v)
    extra = KVCache(
        torch.ones(B * G, H, 1, DH, dtype=torch.float64), torch.zeros_like(full.v[:, :, :1])
    )
    c, d = shared.cat(extra), full.cat(extra)
    assert c.group == 1 and torch.equal(c.k, d.k) and torch.equal(c.v, d.v)
    assert shared.expanded().length == shared.length == S


@pytest.mark.parametrize("kernel", ["matmul", "sdpa"])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_a_decoder_step_over_a_shared_cache_equals_the_expanded_copy(kernel, dtype, tol):
    shared, mask = shared_case(dtype)
    q = torch.randn(B * G, H, 1, DH, generator=torch.Generator().manual_seed(1), dtype=dtype)
    with always_sdpa() if kernel == "sdpa" else torch.no_grad():
        for m in (mask, None, mask[:1].clone()):
            z = MultiHeadAttention._fused(q, shared, m, 0.0)  # (B·G, H, 1, Dh), not expanded
            ref = MultiHeadAttention._fused(q, shared.expanded(), m, 0.0)
            assert z.shape == (B * G, H, 1, DH)
            torch.testing.assert_close(z, ref, atol=tol, rtol=0)
        z = MultiHeadAttention._fused(q, shared, mask, 0.0)
    assert torch.equal(z[2 * G :], torch.zeros_like(z[2 * G :]))  # input 2 keeps no key


@pytest.mark.parametrize("path", ["single_query", "sdpa", "readable", "two_queries"])
def test_attend_reads_a_shared_cache_like_its_expanded_copy(path):
    shared, mask = shared_case()
    torch.manual_seed(0)
    mha = MultiHeadAttention(H * DH, H).double().eval()
    T = 2 if path == "two_queries" else 1
    query = torch.randn(B * G, T, H * DH, dtype=torch.float64)
    need_weights = path == "readable"
    with always_sdpa() if path == "sdpa" else torch.no_grad():
        out, w = mha.attend(query, shared, mask, need_weights)
        ref, w_ref = mha.attend(query, shared.expanded(), mask, need_weights)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, w_ref, atol=1e-12, rtol=0)


@dataclass
class ToyState:
    h: torch.Tensor  # (B, 2) per hypothesis
    cross: KVCache = static_field()  # per input, can be shared
    memory: torch.Tensor = static_field()  # per input, a plain tensor: copied


def toy_state():
    kv, _ = shared_case()
    kv = KVCache(kv.k, kv.v)  # unshared, B rows
    return ToyState(torch.arange(2 * B, dtype=torch.float64).view(B, 2), kv, torch.ones(B, 3))


def test_repeat_rows_shares_what_can_be_shared_and_copies_the_rest():
    state = toy_state()
    out = repeat_rows(state, B, G)
    assert out.cross.k is state.cross.k and out.cross.group == G  # shared, not copied
    assert out.h.shape == (B * G, 2) and torch.equal(out.h[G], state.h[1])
    assert out.memory.shape == (B * G, 3)
    nested = repeat_rows(out, B * G, 2)  # twice: rows b·2G … read row b
    assert nested.cross.group == 2 * G and nested.cross.k is state.cross.k
    for context in (full_reorder, unshared):
        with context():
            copied = repeat_rows(state, B, G)
        assert copied.cross.group == 1 and copied.cross.k.size(0) == B * G
        assert torch.equal(copied.cross.k, out.cross.expanded().k)
    assert repeat_rows(state, B, G).cross.group == G  # the contexts reset


def tiny_transformer():
    """The Multi30k Transformer preset at d 16, vocabulary 40, seed 0, in eval mode."""
    cfg = resolve_run(
        Path(__file__).resolve().parents[2] / "configs" / "multi30k-transformer.yaml",
        ["task.vocab_size=40", "model.d_model=16", "model.d_ff=32", "model.n_heads=2"],
    )
    torch.manual_seed(0)
    model = MODELS.get(cfg.model).target(cfg.model_cfg, src_vocab=40, tgt_vocab=40, pad_id=0)
    return model.eval()


def test_beam_search_keeps_one_cross_attention_row_per_input():
    model = tiny_transformer().double()
    src = torch.randint(4, 40, (2, 6))
    src_mask = torch.ones(2, 6, dtype=torch.bool)
    src_mask[1, 4:] = False
    seen = []

    class Spy:
        def step(self, y_prev, state):
            seen.append([(lay.cross_kv.k.data_ptr(), lay.cross_kv.group) for lay in state.layers])
            return model.step(y_prev, state)

    with torch.no_grad():
        memory = model.encode(src, src_mask)
        res = beam_search(Spy(), model.init_state(memory, src_mask), 2, 1, 2, 7, beam_size=3,
                          min_len=4, pad_id=0)  # fmt: skip
        with unshared():
            ref = beam_search(model, model.init_state(memory, src_mask), 2, 1, 2, 7,
                              beam_size=3, min_len=4, pad_id=0)  # fmt: skip
    # Step 1 runs on the 2 inputs (group 1), then the same rows serve 3 hypotheses each:
    # the memory's K/V are projected once and never copied.
    assert len(seen) >= 5 and all(s == seen[1] for s in seen[2:])
    assert [ptr for ptr, _ in seen[0]] == [ptr for ptr, _ in seen[1]]
    assert all(group == 1 for _, group in seen[0]) and all(group == 3 for _, group in seen[1])
    assert torch.equal(res.tokens, ref.tokens)
    torch.testing.assert_close(res.scores, ref.scores, atol=1e-12, rtol=0)
