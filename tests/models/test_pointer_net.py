"""Pointer network (Vinyals et al. 2015): the pointer distribution written out by hand,
masking, step == teacher forcing (which is also fused == readable: ``forward`` runs the
decoder LSTM as one fused kernel, ``step`` through the cells), padding and batching
invariances, beam K=1 == greedy, the shared model pattern, and learning to sort.

Tolerances: float64 comparisons atol 1e-10 (rtol 0); float32 step vs teacher forcing
atol 1e-5 (rtol 0), as the brief asks; batched vs unbatched float32 atol 1e-5.
"""

import numpy as np
import pytest
import torch

from seqlab.config import ConfigError, from_dict, to_dict
from seqlab.data.geometry import make_examples
from seqlab.decode import beam_search, greedy, sequence_log_prob
from seqlab.models.pointer_net import END, PointerNet, PointerNetConfig, chosen_before
from seqlab.nn.masks import masked_softmax
from seqlab.registry import MODELS
from seqlab.tasks.base import token_cross_entropy
from seqlab.tasks.pointer_tasks import POS_PAD, collate_pointer

TOL64 = 1e-10


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def build(dtype=torch.float64, input_dim=2, **kw):
    cfg = PointerNetConfig(**{"hidden_size": 12, "attn_dim": 10, **kw})
    return PointerNet(cfg, input_dim).to(dtype).eval(), cfg


def batch(problem="hull", n_min=3, n_max=7, count=5, seed=0, dtype=torch.float64):
    b = collate_pointer(make_examples(problem, count, n_min, n_max, seed))
    return b, b.src.to(dtype)


def stepped(model, src, src_mask, y_in):
    state = model.init_state(model.encode(src, src_mask), src_mask)
    out = []
    for t in range(y_in.shape[1]):
        logits, state = model.step(y_in[:, t], state)
        out.append(logits)
    return torch.stack(out, dim=1)  # (B, T, S+1)


def test_pointer_distribution_by_hand():
    """p(C_i = j) = softmax_j(vᵀ tanh(W_1 e_j + W_2 d_i)) over the available positions,
    computed from the weights with explicit sums (atol 1e-10); chosen and padded positions
    get probability exactly 0; END (0) always stays available."""
    model, _ = build()
    b, src = batch()
    memory = model.encode(src, b.src_mask)
    state = model.init_state(memory, b.src_mask)
    e = memory.e  # (B, S+1, H)
    W_1, W_2, v = model.W_1, model.W_2, model.v
    for t in range(3):
        logits, state = model.step(b.y_in[:, t], state)
        d = state.h[:, -1]  # (B, H)
        u = torch.einsum(
            "a,bja->bj", v, torch.tanh(torch.einsum("ah,bjh->bja", W_1, e) + (d @ W_2.T)[:, None])
        )  # (B, S+1)
        torch.testing.assert_close(state.u, u, atol=TOL64, rtol=0)
        p = torch.softmax(logits, dim=-1)
        torch.testing.assert_close(p, masked_softmax(u, state.available), atol=TOL64, rtol=0)
        chosen = torch.zeros_like(state.available)
        for s in range(1, t + 1):
            chosen[torch.arange(len(chosen)), b.y_in[:, s]] = True
        chosen[:, END] = False
        padded = ~model.positions_mask(b.src_mask)
        assert (p[chosen | padded] == 0).all()
        assert (p[~(chosen | padded)] > 0).all()
        assert state.available[:, END].all()


def test_without_mask_chosen_positions_stay_available():
    model, _ = build(mask_chosen=False)
    b, src = batch()
    logits = model(src, b.src_mask, b.y_in, b.tgt_mask)
    real = model.positions_mask(b.src_mask)[:, None, :].expand_as(logits)
    assert torch.isfinite(logits[real]).all() and torch.isinf(logits[~real]).all()


def test_chosen_before_by_hand():
    y_in = torch.tensor([[0, 2, 1, 0]])
    want = torch.tensor([[[0, 0, 0], [0, 0, 1], [0, 1, 1], [0, 1, 1]]], dtype=torch.bool)
    assert torch.equal(chosen_before(y_in, 3), want)


@pytest.mark.parametrize("mask_chosen", [True, False])
def test_step_equals_teacher_forcing_float64_values_and_gradients(mask_chosen):
    """step (cells) == forward (fused LSTM, all steps scored at once): logits and the
    gradient of every parameter, atol 1e-10 in float64, with variable n and padding."""
    model, _ = build(mask_chosen=mask_chosen, layers=2)
    b, src = batch()
    results = []
    for run in (
        lambda: model(src, b.src_mask, b.y_in, b.tgt_mask),
        lambda: stepped(model, src, b.src_mask, b.y_in),
    ):
        model.zero_grad()
        logits = run()
        token_cross_entropy(logits, b.y_out, POS_PAD, fused=False).loss_sum.backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (full, g_full), (steps, g_steps) = results
    assert torch.equal(torch.isinf(full), torch.isinf(steps))
    fin = torch.isfinite(full)
    torch.testing.assert_close(steps[fin], full[fin], atol=TOL64, rtol=0)
    for a, c in zip(g_steps, g_full):
        torch.testing.assert_close(a, c, atol=TOL64, rtol=0)


def test_step_equals_teacher_forcing_float32():
    """The same in float32, atol 1e-5."""
    model, _ = build(dtype=torch.float32, hidden_size=32, attn_dim=32)
    b, src = batch(dtype=torch.float32, n_max=9)
    with torch.no_grad():
        full = model(src, b.src_mask, b.y_in, b.tgt_mask)
        steps = stepped(model, src, b.src_mask, b.y_in)
    fin = torch.isfinite(full)
    assert torch.equal(fin, torch.isfinite(steps))
    torch.testing.assert_close(steps[fin], full[fin], atol=1e-5, rtol=0)


def test_padding_the_inputs_changes_nothing():
    """Three extra padded positions holding random vectors: the same logits on the real
    positions (atol 1e-10), −∞ on the new ones."""
    model, _ = build()
    b, src = batch()
    B, S, D = src.shape
    src2 = torch.cat([src.masked_fill(~b.src_mask[..., None], 0.7), torch.rand(B, 3, D)], 1)
    mask2 = torch.cat([b.src_mask, torch.zeros(B, 3, dtype=torch.bool)], 1)
    with torch.no_grad():
        a = model(src, b.src_mask, b.y_in, b.tgt_mask)
        c = model(src2.double(), mask2, b.y_in, b.tgt_mask)
    assert torch.isinf(c[..., S + 1 :]).all()
    c = c[..., : S + 1]
    assert torch.equal(torch.isinf(a), torch.isinf(c))
    fin = torch.isfinite(a)
    torch.testing.assert_close(c[fin], a[fin], atol=TOL64, rtol=0)


def test_batched_equals_unbatched_with_variable_n():
    """Each example alone (no padding) == its row of the padded batch: teacher-forced
    logits (float32, atol 1e-5) and greedy outputs (identical positions)."""
    model, _ = build(dtype=torch.float32, hidden_size=24, attn_dim=16)
    examples = make_examples("hull", 6, 3, 9, seed=3)
    b = collate_pointer(examples)
    with torch.no_grad():
        full = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
        state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
        together = greedy(model, state, len(examples), END, END, 10, pad_id=POS_PAD)
        for i, ex in enumerate(examples):
            one = collate_pointer([ex])
            logit = model(one.src, one.src_mask, one.y_in, one.tgt_mask)[0]  # (T_i, n_i+1)
            T, P = logit.shape
            row = full[i, :T, :P]
            assert torch.isinf(full[i, :T, P:]).all()
            assert torch.equal(torch.isinf(row), torch.isinf(logit))
            fin = torch.isfinite(row)
            torch.testing.assert_close(logit[fin], row[fin], atol=1e-5, rtol=0)
            st = model.init_state(model.encode(one.src, one.src_mask), one.src_mask)
            alone = greedy(model, st, 1, END, END, 10, pad_id=POS_PAD)
            L = int(alone.lengths[0])
            assert alone.tokens[0, :L].tolist() == together.tokens[i, :L].tolist()
            assert int(together.lengths[i]) == L


def test_beam_one_equals_greedy_and_beam_scores_are_the_models():
    """Beam K=1 == greedy (same positions, log P atol 1e-10); K=3: the best hypothesis'
    log P equals sequence_log_prob re-scored through step (atol 1e-10), and no
    hypothesis repeats a position (mask_chosen)."""
    model, _ = build()
    b, src = batch(count=4)
    B = src.shape[0]

    def state():
        return model.init_state(model.encode(src, b.src_mask), b.src_mask)

    g = greedy(model, state(), B, END, END, 9, pad_id=POS_PAD)
    k1 = beam_search(model, state(), B, END, END, 9, beam_size=1, pad_id=POS_PAD)
    assert torch.equal(k1.tokens[:, 0, : g.tokens.shape[1]], g.tokens)
    torch.testing.assert_close(k1.log_probs[:, 0], g.log_probs, atol=TOL64, rtol=0)
    k3 = beam_search(model, state(), B, END, END, 9, beam_size=3, pad_id=POS_PAD)
    best = k3.tokens[:, 0]  # (B, T)
    rescored = sequence_log_prob(model, state(), best, END, bos_id=END, lengths=k3.lengths[:, 0])
    torch.testing.assert_close(rescored, k3.log_probs[:, 0], atol=TOL64, rtol=0)
    assert (k3.log_probs[:, 0] >= g.log_probs - 1e-12).all()
    for row, n in zip(best.tolist(), k3.lengths[:, 0].tolist()):
        chosen = [p for p in row[:n] if p != END]
        assert len(chosen) == len(set(chosen))


def test_shapes_gradients_rebuild_and_attention_maps():
    """Forward shape, no NaN, every parameter gets a gradient, a model rebuilt from its
    saved config gives identical outputs (atol 0), attention rows sum to 1 (atol 1e-12)."""
    model, cfg = build(input_dim=1)
    b, src = batch("sort", 2, 6)
    logits = model(src, b.src_mask, b.y_in, b.tgt_mask)
    assert logits.shape == (*b.y_in.shape, src.shape[1] + 1)
    assert not torch.isnan(logits).any()
    token_cross_entropy(logits, b.y_out, POS_PAD).loss_sum.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} gets no gradient"
    again = from_dict(PointerNetConfig, to_dict(cfg))
    assert again == cfg
    clone = MODELS.get("pointer_net").target(again, input_dim=1).double().eval()
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            clone(src, b.src_mask, b.y_in, b.tgt_mask), logits.detach(), atol=0, rtol=0
        )
    p = model.attention_maps(src, b.src_mask, b.y_in, b.tgt_mask)["pointer"]
    torch.testing.assert_close(p.sum(-1), torch.ones_like(p[..., 0]), atol=1e-12, rtol=0)
    torch.testing.assert_close(p, torch.softmax(logits.detach(), -1), atol=TOL64, rtol=0)


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="hidden_size"):
        PointerNetConfig(hidden_size=0)
    with pytest.raises(ConfigError, match="dropout"):
        PointerNetConfig(dropout=1.0)


def test_learns_to_sort_five_numbers():
    """Adam, 450 updates of 64 fresh lists of 5 numbers: greedy exact-sequence accuracy
    on 300 held-out lists ≥ 0.9 (an untrained model is at ~1/120)."""
    torch.manual_seed(0)
    model = PointerNet(PointerNetConfig(hidden_size=48, attn_dim=48), input_dim=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    train = make_examples("sort", 450 * 64, 5, 5, seed=11)
    model.train()
    for i in range(450):
        b = collate_pointer(train[i * 64 : (i + 1) * 64])
        out = token_cross_entropy(model(b.src, b.src_mask, b.y_in, b.tgt_mask), b.y_out, POS_PAD)
        opt.zero_grad()
        (out.loss_sum / out.n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
    model.eval()
    test = make_examples("sort", 300, 5, 5, seed=12)
    b = collate_pointer(test)
    with torch.no_grad():
        state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
        got = greedy(model, state, len(test), END, END, 6, pad_id=POS_PAD).tokens  # (B, 6)
    want = np.stack([np.append(c + 1, END) for _, c in test])
    exact = (got.numpy() == want).all(axis=1).mean()
    assert exact >= 0.9, exact
