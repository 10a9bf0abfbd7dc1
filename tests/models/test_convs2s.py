"""The registered ConvS2S model (Gehring et al. 2017): shapes, gradients, rebuild from
config, cached step == teacher forcing, no future leak, source padding, attention rows,
√0.5 and √m scalings, encoder gradient scaling, beam K=1 == greedy, learns to reverse."""

import math

import pytest
import torch

import seqlab.models.convs2s  # noqa: F401  (registers "convs2s")
from seqlab.config import from_dict, to_dict
from seqlab.data.collate import collate_seq2seq
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, greedy, reorder_state
from seqlab.models.convs2s_attention import MultiStepAttention, scale_gradient
from seqlab.registry import MODELS
from seqlab.tasks.algorithmic import AlgorithmicConfig, make_examples
from seqlab.tasks.base import token_cross_entropy

V = 14


def build(**kw):
    entry = MODELS.get("convs2s")
    args = dict(emb_dim=16, channels=24, encoder_layers=2, decoder_layers=2, dropout=0.0)
    cfg = entry.config_cls(**{**args, **kw})
    torch.manual_seed(0)
    return entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=PAD_ID), cfg


def batch(n=6, seed=0):
    pairs = make_examples(AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=7), n, seed)
    return collate_seq2seq(pairs)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"tie_output": False},
        {"share_embeddings": True},
        {"scale_encoder_gradient": False, "decoder_kernel": 2, "dropout": 0.2},
    ],
)
def test_shapes_gradients_and_rebuild(kw):
    model, cfg = build(**kw)
    b = batch()
    logits = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
    assert logits.shape == (*b.y_in.shape, V)
    assert torch.isfinite(logits).all()
    token_cross_entropy(logits, b.y_out, PAD_ID).loss_sum.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    rebuilt_cfg = from_dict(type(cfg), to_dict(cfg))
    assert rebuilt_cfg == cfg
    clone = MODELS.get("convs2s").target(rebuilt_cfg, src_vocab=V, tgt_vocab=V)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(
        clone(b.src, b.src_mask, b.y_in, b.tgt_mask),
        model(b.src, b.src_mask, b.y_in, b.tgt_mask),
        atol=0,
        rtol=0,
    )


def test_cached_step_equals_teacher_forcing():
    model, _ = build(decoder_layers=3, decoder_kernel=4)
    model.eval()
    b = batch()
    with torch.no_grad():
        full = model(b.src, b.src_mask, b.y_in, b.tgt_mask)  # (B, T, V)
        state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
        steps = []
        for t in range(b.y_in.size(1)):
            logits, state = model.step(b.y_in[:, t], state)
            steps.append(logits)
    assert state.position == b.y_in.size(1)
    assert all(buf.shape == (b.src.size(0), 3, 24) for buf in state.buffers)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_state_reorders_with_the_generic_rule():
    model, _ = build()
    model.eval()
    b = batch()
    with torch.no_grad():
        state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
        _, state = model.step(b.y_in[:, 0], state)
        index = torch.tensor([2, 0, 0, 5])
        moved = reorder_state(state, index)
        logits, _ = model.step(b.y_in[index, 1], moved)
        ref, _ = model.step(b.y_in[:, 1], state)
    assert moved.position == 1
    torch.testing.assert_close(logits, ref[index], atol=1e-6, rtol=0)


def test_changing_future_targets_leaves_earlier_logits_unchanged():
    model, _ = build(decoder_kernel=3)
    model.eval()
    b = batch()
    t0 = 3
    y2 = b.y_in.clone()
    y2[:, t0:] = torch.randint(4, V, y2[:, t0:].shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
        c = model(b.src, b.src_mask, y2, b.tgt_mask)
    torch.testing.assert_close(a[:, :t0], c[:, :t0], atol=1e-6, rtol=0)
    assert (a[:, t0:] - c[:, t0:]).abs().max() > 1e-3  # the change does reach later positions


def test_padding_the_source_changes_nothing():
    model, _ = build(encoder_kernel=5)
    model.eval()
    b = batch()
    pad = torch.full((b.src.size(0), 3), PAD_ID, dtype=torch.long)
    src2 = torch.cat([b.src, pad], 1)
    mask2 = torch.cat([b.src_mask, torch.zeros_like(pad, dtype=torch.bool)], 1)
    with torch.no_grad():
        a = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
        c = model(src2, mask2, b.y_in, b.tgt_mask)
        # Garbage (non-pad ids) under the mask changes nothing either.
        src3 = src2.masked_fill(~mask2, 7)
        d = model(src3, mask2, b.y_in, b.tgt_mask)
    torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a, d, atol=1e-5, rtol=1e-5)


def test_attention_rows_sum_to_one_and_are_zero_on_padding():
    model, cfg = build(decoder_layers=3)
    model.eval()
    b = batch()
    maps = model.attention_maps(b.src, b.src_mask, b.y_in, b.tgt_mask)["cross"]
    assert len(maps) == cfg.decoder_layers
    for alpha in maps:
        assert alpha.shape == (b.src.size(0), b.y_in.size(1), b.src.size(1))
        torch.testing.assert_close(alpha.sum(-1), torch.ones(alpha.shape[:2]), atol=1e-6, rtol=0)
        assert (alpha.masked_select(~b.src_mask[:, None, :]) == 0).all()


def test_attention_layer_matches_the_equations_written_out():
    """Gehring §3.3–3.4 by hand, one (b, i) at a time: d, a_ij, c = √m Σ_j a_ij (z_j + e_j),
    h ← (h + W_c c + b_c)·√0.5, float64, atol 1e-12."""
    torch.manual_seed(0)
    B, T, S, C, E = 2, 3, 5, 6, 4
    att = MultiStepAttention(C, E).double()
    h, g = torch.randn(B, T, C).double(), torch.randn(B, T, E).double()
    z, e = torch.randn(B, S, E).double(), torch.randn(B, S, E).double()
    src_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out, alpha = att(h, g, z, z + e, src_mask)
    for b in range(B):
        m = int(src_mask[b].sum())
        for i in range(T):
            d = att.W_d.weight @ h[b, i] + att.W_d.bias + g[b, i]
            scores = torch.stack([d @ z[b, j] for j in range(m)])
            a = torch.exp(scores) / torch.exp(scores).sum()
            c = sum(a[j] * (z[b, j] + e[b, j]) for j in range(m)) * (m * math.sqrt(1 / m))
            ref = (h[b, i] + att.W_c.weight @ c + att.W_c.bias) * math.sqrt(0.5)
            torch.testing.assert_close(out[b, i], ref, atol=1e-12, rtol=0)
            torch.testing.assert_close(alpha[b, i, :m], a, atol=1e-12, rtol=0)
            assert (alpha[b, i, m:] == 0).all()


def test_uniform_attention_gives_the_sum_over_root_m():
    """§3.4: with uniform weights, m·√(1/m)·mean = Σ_j (z_j + e_j)/√m (atol 1e-6)."""
    torch.manual_seed(0)
    att = MultiStepAttention(6, 4)
    with torch.no_grad():
        att.W_c.weight.copy_(torch.eye(6, 4)), att.W_c.bias.zero_()
    z = torch.zeros(1, 4, 4)  # d · z = 0 for every j: uniform attention over the m = 3 real
    e = torch.randn(1, 4, 4)
    mask = torch.tensor([[True, True, True, False]])
    h = torch.zeros(1, 1, 6)
    out, _ = att(h, torch.randn(1, 1, 4), z, z + e, mask)
    c = e[0, :3].sum(0) / math.sqrt(3)  # (E,)
    torch.testing.assert_close(out[0, 0, :4], c * math.sqrt(0.5), atol=1e-6, rtol=0)


def test_root_half_residual_scaling():
    """Zero every GLU convolution and every W_c: each decoder layer is then two √0.5
    residual scalings, so h^L = h^0 · 0.5^L (atol 1e-6); without the scaling it is h^0."""
    model, cfg = build(decoder_layers=3)
    model.eval()
    b = batch()
    with torch.no_grad():
        for block in model.decoder_blocks:
            block.conv.weight.zero_(), block.conv.bias.zero_()
        for att in model.attention:
            att.W_c.weight.zero_(), att.W_c.bias.zero_()
        memory = model.encode(b.src, b.src_mask)
        h, _ = model.decode(b.y_in, memory, b.src_mask)
        h0 = model.decoder_in(model.embed_target(b.y_in))
    torch.testing.assert_close(h, h0 * 0.5**cfg.decoder_layers, atol=1e-6, rtol=0)
    assert h0.abs().max() > 0.1


def test_encoder_gradient_is_scaled_by_one_over_twice_the_attention_layers():
    """Same values; the encoder blocks' gradients are 1/(2·L_dec) of the unscaled ones;
    scale_gradient itself is the identity forward and scales backward. In float64: the
    scaled and unscaled backward passes sum in different orders, and in float32 an entry
    near 0 (cancellation) once missed rtol 1e-5 by its rounding alone (AVX2 kernels)."""
    x = torch.randn(3, 4, requires_grad=True)
    y = scale_gradient(x, 0.25)
    assert torch.equal(y, x)
    (y * 2.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3, 4), 0.5), atol=0, rtol=0)

    b = batch()
    grads, outs = [], []
    for scale in (True, False):
        model, cfg = build(decoder_layers=3, scale_encoder_gradient=scale)
        model = model.double()
        logits = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
        assert logits.dtype == torch.float64
        token_cross_entropy(logits, b.y_out, PAD_ID).loss_sum.backward()
        outs.append(logits.detach())
        grads.append(model.encoder_blocks[0].conv.weight.grad.clone())
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    scaled = grads[1] / (2 * cfg.decoder_layers)
    torch.testing.assert_close(grads[0], scaled, atol=1e-15, rtol=1e-10)


def test_beam_of_one_equals_greedy():
    model, _ = build()
    model.eval()
    b = batch()
    memory = model.encode(b.src, b.src_mask)
    B = b.src.size(0)
    g = greedy(model, model.init_state(memory, b.src_mask), B, BOS_ID, EOS_ID, max_len=9)
    r = beam_search(model, model.init_state(memory, b.src_mask), B, BOS_ID, EOS_ID, 9, beam_size=1)
    assert torch.equal(r.tokens[:, 0], g.tokens)
    torch.testing.assert_close(r.scores[:, 0], g.scores, atol=1e-5, rtol=0)


def test_bad_config_is_rejected():
    cls = MODELS.get("convs2s").config_cls
    with pytest.raises(ValueError, match="odd"):
        cls(encoder_kernel=4)
    with pytest.raises(ValueError, match="dropout"):
        cls(dropout=1.0)
    with pytest.raises(ValueError, match="decoder_layers"):
        cls(decoder_layers=0)
    with pytest.raises(ValueError, match="one vocabulary"):
        MODELS.get("convs2s").target(cls(share_embeddings=True), src_vocab=10, tgt_vocab=11)


def test_learns_to_reverse():
    model, _ = build(emb_dim=32, channels=32)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    pairs = make_examples(AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=5), 2000, 1)
    first = last = None
    for step in range(60):
        b = collate_seq2seq(pairs[(step * 32) % 2000 : (step * 32) % 2000 + 32])
        out = token_cross_entropy(model(b.src, b.src_mask, b.y_in, b.tgt_mask), b.y_out, 0)
        loss = out.loss_sum / out.n_tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    assert last < 0.3 * first, (first, last)
