"""The registered Transformer seq2seq model: shapes, gradients, rebuild from config,
cached step decoding == teacher forcing, and it learns a tiny reversal task."""

import pytest
import torch

import seqlab.models.transformer  # noqa: F401  (registers "transformer")
from seqlab.config import from_dict, to_dict
from seqlab.data.collate import collate_seq2seq
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.registry import MODELS
from seqlab.tasks.algorithmic import AlgorithmicConfig, make_examples
from seqlab.tasks.base import token_cross_entropy

V = 14


def build(**kw):
    entry = MODELS.get("transformer")
    cfg = entry.config_cls(
        d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0, **kw
    )
    return entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=0), cfg


def batch(n=6, seed=0):
    pairs = make_examples(AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=7), n, seed)
    return collate_seq2seq(pairs)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"norm_first": True},
        {"positions": "learned"},
        {"tie_output": False},
        {"share_embeddings": True},
    ],
)
def test_shapes_gradients_and_rebuild(kw):
    model, cfg = build(**kw)
    b = batch()
    logits = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
    assert logits.shape == (*b.y_in.shape, V)
    assert torch.isfinite(logits).all()
    token_cross_entropy(logits, b.y_out, 0).loss_sum.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    rebuilt_cfg = from_dict(type(cfg), to_dict(cfg))
    assert rebuilt_cfg == cfg
    clone = MODELS.get("transformer").target(rebuilt_cfg, src_vocab=V, tgt_vocab=V)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(
        clone(b.src, b.src_mask, b.y_in, b.tgt_mask),
        model(b.src, b.src_mask, b.y_in, b.tgt_mask),
        atol=0,
        rtol=0,
    )


def test_cached_step_equals_teacher_forcing():
    model, _ = build()
    model.eval()
    b = batch()
    with torch.no_grad():
        full = model(b.src, b.src_mask, b.y_in, torch.ones_like(b.tgt_mask))  # (B, T, V)
        state = model.init_state(model.encode(b.src, b.src_mask), b.src_mask)
        steps = []
        for t in range(b.y_in.size(1)):
            logits, state = model.step(b.y_in[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_padding_the_source_changes_nothing():
    model, _ = build()
    model.eval()
    b = batch()
    pad = torch.zeros(b.src.size(0), 3, dtype=torch.long)
    src2 = torch.cat([b.src, pad], 1)
    mask2 = torch.cat([b.src_mask, pad.bool()], 1)
    with torch.no_grad():
        a = model(b.src, b.src_mask, b.y_in, b.tgt_mask)
        c = model(src2, mask2, b.y_in, b.tgt_mask)
    torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="divisible"):
        MODELS.get("transformer").config_cls(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="one vocabulary"):
        cfg = MODELS.get("transformer").config_cls(share_embeddings=True)
        MODELS.get("transformer").target(cfg, src_vocab=10, tgt_vocab=11)


def test_learns_to_reverse():
    torch.manual_seed(0)
    model, _ = build()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    pairs = make_examples(AlgorithmicConfig(n_symbols=V - 4, min_len=2, max_len=5), 2000, 1)
    first = last = None
    for step in range(150):
        b = collate_seq2seq(pairs[(step * 32) % 2000 : (step * 32) % 2000 + 32])
        out = token_cross_entropy(model(b.src, b.src_mask, b.y_in, b.tgt_mask), b.y_out, 0)
        loss = out.loss_sum / out.n_tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    assert last < 0.3 * first, (first, last)


def test_initialisation_is_the_references():
    """Every attention of the model keeps the reference initialisation after the model's
    own Xavier pass (stacked-Q/K/V fan: variance (6 / 4d) / 3, not (6 / 2d) / 3; zero
    biases), like ``torch.nn.Transformer``; the feed-forward matrices stay Xavier (d × d_ff)."""
    torch.manual_seed(0)
    entry = MODELS.get("transformer")
    cfg = entry.config_cls(d_model=256, n_heads=4, d_ff=512, encoder_layers=1, decoder_layers=1)
    model = entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=0)
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 3  # encoder self, decoder self, decoder cross
    d = cfg.d_model
    for mha in attentions:
        qkv = torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight])  # (3d, d)
        assert qkv.var().item() == pytest.approx(6.0 / (4 * d) / 3, rel=0.05)
        assert all(torch.count_nonzero(W.bias) == 0 for W in (mha.W_q, mha.W_k, mha.W_v, mha.W_o))
