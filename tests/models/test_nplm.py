"""Bengio et al. 2003 NPLM: a hand-computed 2-word example, the window carried across
batches, step == forward, gradients, rebuild from config, and it learns a tiny stream."""

import math

import pytest
import torch

import seqlab.models.nplm  # noqa: F401  (registers "nplm")
from seqlab.config import from_dict, to_dict
from seqlab.registry import MODELS


def build(vocab=11, **kw):
    entry = MODELS.get("nplm")
    cfg = entry.config_cls(**{"n": 4, "m": 6, "h": 8, **kw})
    return entry.target(cfg, vocab=vocab, pad_id=0), cfg


def test_hand_computed_two_word_example():
    """V = 2, n = 3, m = h = 1: y = b + W x + U tanh(d + H x), x = (C(w_{t−1}), C(w_{t−2}))."""
    model, _ = build(vocab=2, n=3, m=1, h=1, direct=True)
    with torch.no_grad():
        model.C.weight.copy_(torch.tensor([[1.0], [-1.0]]))  # C(0) = 1, C(1) = −1
        model.H.weight.copy_(torch.tensor([[1.0, 2.0]]))  # H (h, (n−1)m)
        model.d.copy_(torch.tensor([0.5]))
        model.U.weight.copy_(torch.tensor([[1.0], [-1.0]]))  # U (V, h)
        model.b.copy_(torch.tensor([0.0, 0.25]))
        model.W.weight.copy_(torch.tensor([[0.5, 0.0], [0.0, -0.5]]))  # W (V, (n−1)m)
    model.eval()
    out = model(torch.tensor([[1, 0]]))  # window starts as (pad, pad) = (0, 0)
    p = out.logits.softmax(-1)[0]  # (T, V)
    # t = 0: context (w_{t−1}, w_{t−2}) = (1, pad=0) → x = (−1, 1); d + Hx = 0.5 + 1 = 1.5
    a0 = math.tanh(1.5)
    y = (0.5 * -1 + a0, 0.25 + -0.5 * 1 - a0)
    p0 = math.exp(y[0]) / (math.exp(y[0]) + math.exp(y[1]))
    # t = 1: context (0, 1) → x = (1, −1); d + Hx = 0.5 + 1 − 2 = −0.5
    a1 = math.tanh(-0.5)
    y = (0.5 * 1 + a1, 0.25 + -0.5 * -1 - a1)
    p1 = math.exp(y[0]) / (math.exp(y[0]) + math.exp(y[1]))
    expected = torch.tensor([[p0, 1 - p0], [p1, 1 - p1]])
    torch.testing.assert_close(p, expected, atol=1e-6, rtol=0)
    assert out.state.window.tolist() == [[1, 0]]  # the last n−1 tokens, oldest first


def test_window_carried_across_two_half_streams_equals_one_stream():
    torch.manual_seed(0)
    model, _ = build()
    model.eval()
    x = torch.randint(0, 11, (3, 10))
    with torch.no_grad():
        full = model(x).logits  # (B, T, V)
        first = model(x[:, :4])
        second = model(x[:, 4:], first.state)
        state = model.init_state(3)
        steps = []
        for t in range(10):
            logits, state = model.step(x[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(
        torch.cat([first.logits, second.logits], 1), full, atol=1e-6, rtol=1e-6
    )
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-6, rtol=1e-6)
    assert torch.equal(second.state.window, x[:, -3:])


@pytest.mark.parametrize("direct", [True, False])
def test_gradients_and_rebuild(direct):
    torch.manual_seed(0)
    model, cfg = build(direct=direct, dropout=0.1)
    x = torch.randint(1, 11, (2, 7))
    out = model(x)
    assert out.logits.shape == (2, 7, 11) and torch.isfinite(out.logits).all()
    out.logits.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert (model.W is None) == (not direct)
    rebuilt = from_dict(type(cfg), to_dict(cfg))
    assert rebuilt == cfg
    clone = MODELS.get("nplm").target(rebuilt, vocab=11, pad_id=0)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(x).logits, model(x).logits, atol=0, rtol=0)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="n must be >= 2"):
        MODELS.get("nplm").config_cls(n=1)
    with pytest.raises(ValueError, match="dropout"):
        MODELS.get("nplm").config_cls(dropout=1.0)


def test_learns_a_repetitive_stream():
    torch.manual_seed(0)
    model, _ = build(vocab=8, n=3, m=8, h=16)
    stream = torch.tensor([3, 5, 2, 7, 4, 6] * 40).view(4, 60)  # (B, T) contiguous rows
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        state = None
        for start in range(0, 59, 20):  # truncated windows, state carried
            x, y = stream[:, start : start + 20], stream[:, start + 1 : start + 21]
            out = model(x[:, : y.shape[1]], state)
            loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            state = out.state.detach()
            losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0], (losses[0], losses[-1])
