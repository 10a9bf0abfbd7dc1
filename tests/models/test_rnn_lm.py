"""The recurrent language models (RNN, GRU, LSTM): step == forward, carried state, fused ==
readable (values and gradients), tied embeddings, rebuild from config, and they learn."""

import pytest
import torch

from seqlab.config import from_dict, to_dict
from seqlab.decode.state import reorder_state
from seqlab.models.lm_common import detach_state, fill_state, state_tensors
from seqlab.models.rnn_lm import RNNLM, RNNLMConfig
from seqlab.registry import MODELS
from seqlab.tasks.base import token_cross_entropy

V = 13
CELLS = ["rnn", "gru", "lstm"]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def build(cell="lstm", dropout=0.0, **kw):
    cfg = RNNLMConfig(cell=cell, emb_dim=12, hidden=12, layers=2, dropout=dropout, **kw)
    return RNNLM(cfg, V), cfg


def tokens(B=3, T=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, V, (B, T), generator=g)


@pytest.mark.parametrize("cell", CELLS)
def test_step_by_step_equals_forward(cell):
    model, _ = build(cell)
    model.eval()
    x = tokens()
    with torch.no_grad():
        full = model(x)
        state, steps = None, []
        for t in range(x.size(1)):
            logits, state = model.step(x[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), full.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(state.h, full.state.h, atol=1e-5, rtol=0)
    if cell == "lstm":
        torch.testing.assert_close(state.c, full.state.c, atol=1e-5, rtol=0)
    else:
        assert state.c is None and full.state.c is None


@pytest.mark.parametrize("cell", CELLS)
def test_state_carried_across_two_halves_equals_one_batch(cell):
    model, _ = build(cell)
    model.eval()
    x = tokens(T=10)
    with torch.no_grad():
        whole = model(x)
        first = model(x[:, :4])
        second = model(x[:, 4:], first.state)
        restarted = model(x[:, 4:])  # no carried state: a different result
    both = torch.cat([first.logits, second.logits], dim=1)
    torch.testing.assert_close(both, whole.logits, atol=1e-5, rtol=0)
    assert (restarted.logits - whole.logits[:, 4:]).abs().max() > 1e-3


@pytest.mark.parametrize("cell", CELLS)
def test_fused_path_equals_readable_path_values_and_gradients(cell):
    model, _ = build(cell)  # dropout 0: the two paths draw different masks otherwise
    x, y = tokens(T=8), tokens(T=8, seed=1)
    state = model.init_state(x.size(0))
    state.h.normal_()
    if state.c is not None:
        state.c.normal_()
    results = []
    for fused in (True, False):
        model.zero_grad()
        out = model(x, state, fused=fused)
        token_cross_entropy(out.logits, y, 0).loss_sum.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((out.logits.detach(), out.state.h.detach(), grads))
    (l1, h1, g1), (l2, h2, g2) = results
    torch.testing.assert_close(l1, l2, atol=1e-5, rtol=0)
    torch.testing.assert_close(h1, h2, atol=1e-5, rtol=0)
    for name in g1:
        torch.testing.assert_close(g1[name], g2[name], atol=1e-5, rtol=1e-4, msg=name)


def test_tied_embeddings_share_storage_and_gradients():
    model, _ = build(tie_weights=True)
    assert model.head.W_out is None
    names = [n for n, _ in model.named_parameters()]
    assert "embed.weight" in names and not any("W_out" in n for n in names)
    model.eval()
    x = tokens()
    out = model(x)
    h = model.rnn(model.embed(x))[0]  # (B, T, H) top layer
    expected = h @ model.embed.weight.T + model.head.b  # logits = h Eᵀ + b
    torch.testing.assert_close(out.logits, expected, atol=1e-6, rtol=0)
    # The output side reaches E: a token that is never read still gets a gradient row.
    unseen = 3  # ids 0–3 are never inputs here; 3 is not the padding row
    out.logits.sum().backward()
    assert model.embed.weight.grad[unseen].abs().sum() > 0
    with pytest.raises(ValueError, match="hidden == emb_dim"):
        RNNLMConfig(emb_dim=8, hidden=12, tie_weights=True)


@pytest.mark.parametrize("cell", CELLS)
def test_every_parameter_gets_a_gradient_and_the_config_rebuilds_it(cell):
    model, cfg = build(cell, dropout=0.3, tie_weights=cell == "gru")
    x, y = tokens(), tokens(seed=2)
    out = model(x)
    assert out.logits.shape == (3, 9, V) and torch.isfinite(out.logits).all()
    token_cross_entropy(out.logits, y, 0).loss_sum.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    rebuilt = from_dict(RNNLMConfig, to_dict(cfg))
    assert rebuilt == cfg
    clone = MODELS.get("rnn_lm").target(rebuilt, vocab=V)
    clone.load_state_dict(model.state_dict())
    model.eval(), clone.eval()
    torch.testing.assert_close(clone(x).logits, model(x).logits, atol=0, rtol=0)


def test_state_helpers_detach_reorder_and_round_trip():
    model, _ = build("lstm")
    x = tokens()
    state = model(x).state
    assert state.h.requires_grad
    cut = detach_state(state)
    assert not cut.h.requires_grad and not cut.c.requires_grad
    flat = state_tensors(cut)
    assert sorted(flat) == ["c", "h"]
    back = fill_state(model.init_state(3), flat)
    assert torch.equal(back.h, cut.h) and torch.equal(back.c, cut.c)
    index = torch.tensor([2, 0])
    picked = reorder_state(cut, index)
    assert torch.equal(picked.h, cut.h[index]) and torch.equal(picked.c, cut.c[index])


def test_it_learns_a_repeating_stream():
    # U(−1/√H, 1/√H) (init_range=None): with H = 12, Zaremba's U(−0.1, 0.1) learns slowly.
    torch.manual_seed(0)
    model, _ = build("gru", init_range=None)
    stream = torch.arange(4, 4 + 6).repeat(3, 6)  # (3, 36): 4 5 6 7 8 9 4 5 …
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        out = model(stream[:, :-1])
        loss = token_cross_entropy(out.logits, stream[:, 1:], 0)
        mean = loss.loss_sum / loss.n_tokens
        losses.append(float(mean.detach()))
        opt.zero_grad()
        mean.backward()
        opt.step()
    assert losses[-1] < 0.1 * losses[0]
