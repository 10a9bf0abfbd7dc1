"""NTM and its LSTM baseline: shapes, weightings on the simplex, the fused controller ==
readable LSTMCell steps (values and gradients), every parameter learns, config round trip,
batched == unbatched, and the NTM learning to copy short sequences."""

import numpy as np
import pytest
import torch

import seqlab.models.ntm  # noqa: F401  (registers "ntm" and "lstm_seq_baseline")
from seqlab.config import from_dict, to_dict
from seqlab.data.algorithmic_bits import BitsSpec, generate, io_sizes
from seqlab.registry import MODELS
from seqlab.tasks.ntm_tasks import bit_errors, masked_bce

torch.set_num_threads(1)
D_IN, D_OUT = 5, 4
SMALL = {"controller_size": 16, "memory_n": 8, "memory_w": 6}


def build(name="ntm", **kw):
    entry = MODELS.get(name)
    base = SMALL if name == "ntm" else {"hidden": 16, "layers": 2}
    cfg = entry.config_cls(**{**base, **kw})
    return entry.target(cfg, input_size=D_IN, output_size=D_OUT), cfg


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"n_read_heads": 2, "n_write_heads": 2, "controller_layers": 2},
        {"memory_init": "learned", "shift_range": 2},
    ],
)
def test_forward_shapes_simplex_and_every_parameter_gets_a_gradient(kw):
    torch.manual_seed(0)
    model, cfg = build(**kw)
    x = torch.rand(3, 7, D_IN)
    out = model(x, trace_memory=True)
    H_r, H_w = cfg.n_read_heads, cfg.n_write_heads
    assert out.logits.shape == (3, 7, D_OUT) and torch.isfinite(out.logits).all()
    assert out.read_weights.shape == (3, 7, H_r, cfg.memory_n)
    assert out.write_weights.shape == (3, 7, H_w, cfg.memory_n)
    assert out.memory.shape == (3, 7, cfg.memory_n, cfg.memory_w)
    for w in (out.read_weights, out.write_weights):
        assert (w >= 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)
    out.logits.square().sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_constant_memory_starts_at_1e_6_and_is_trained():
    """Collier & Beel's constant M_0 is a trainable variable: its rows get different
    gradients, so one Adam step already tells the locations apart. (A frozen constant left
    content addressing uniform, and the copy task learned far more slowly.)"""
    torch.manual_seed(0)
    model, _ = build()
    M0 = dict(model.named_parameters())["M0_const"]
    state = model.init_state(2)
    assert torch.equal(state.M, torch.full((2, 8, 6), 1e-6))
    torch.testing.assert_close(state.w.sum(-1), torch.ones(2, 2), atol=1e-6, rtol=0)
    model(torch.rand(3, 7, D_IN)).logits.square().sum().backward()
    assert M0.grad is not None and (M0.grad - M0.grad.mean(0)).abs().max() > 0
    torch.optim.Adam([M0], lr=1e-3).step()
    assert M0.std(0).max() > 1e-4  # the rows now differ: content addressing can use them


@pytest.mark.parametrize("kw", [{}, {"n_read_heads": 2, "controller_layers": 2}])
def test_fused_controller_equals_readable_lstm_cell_steps(kw):
    """forward with the stacked-gate controller == a loop of step() through LSTMCell.step,
    float64, values (atol 1e-10) and gradients of every parameter (atol 1e-10)."""
    torch.manual_seed(1)
    fused, _ = build(**kw)
    fused = fused.double()
    x = torch.rand(2, 6, D_IN, dtype=torch.float64)
    out = fused(x)
    out.logits.sum().backward()
    grads = {n: p.grad.clone() for n, p in fused.named_parameters()}
    fused.zero_grad()
    state = fused.init_state(2)
    steps = []
    for t in range(6):
        y, state = fused.step(x[:, t], state)
        steps.append(y)
    readable = torch.stack(steps, 1)
    torch.testing.assert_close(out.logits, readable, atol=1e-10, rtol=0)
    readable.sum().backward()
    for n, p in fused.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-10, rtol=0, msg=n)


def test_rebuilds_from_saved_config_with_identical_outputs():
    torch.manual_seed(2)
    for name in ("ntm", "lstm_seq_baseline"):
        model, cfg = build(name)
        entry = MODELS.get(name)
        again = entry.target(from_dict(entry.config_cls, to_dict(cfg)), D_IN, D_OUT)
        again.load_state_dict(model.state_dict())
        x = torch.rand(2, 5, D_IN)
        assert torch.equal(model(x).logits, again(x).logits)


def test_batched_equals_unbatched():
    torch.manual_seed(3)
    for name in ("ntm", "lstm_seq_baseline"):
        model, _ = build(name)
        x = torch.rand(4, 6, D_IN)
        out = model(x)
        for b in range(4):
            one = model(x[b : b + 1])
            torch.testing.assert_close(one.logits, out.logits[b : b + 1], atol=1e-6, rtol=0)
            if name == "ntm":
                torch.testing.assert_close(
                    one.write_weights, out.write_weights[b : b + 1], atol=1e-6, rtol=0
                )


def test_baseline_shapes_gradients_and_causality():
    torch.manual_seed(4)
    model, _ = build("lstm_seq_baseline")
    x = torch.rand(2, 6, D_IN)
    out = model(x)
    assert out.logits.shape == (2, 6, D_OUT) and out.read_weights is None
    out.logits.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    x2 = x.clone()
    x2[:, 4:] = torch.rand(2, 2, D_IN)  # the future does not change earlier outputs
    torch.testing.assert_close(model(x2).logits[:, :4], out.logits[:, :4], atol=1e-6, rtol=0)


def test_ntm_learns_to_copy_short_sequences():
    """Copy of 4-bit vectors, lengths 1–3: from ~1.4 wrong bits per sequence to < 0.15
    in 700 Adam updates of 32 sequences (about 15 s on one thread)."""
    torch.manual_seed(0)
    spec = BitsSpec("copy", width=4)
    entry = MODELS.get("ntm")
    cfg = entry.config_cls(controller_size=32, memory_n=8, memory_w=6)
    model = entry.target(cfg, *io_sizes(spec))
    held_out = [generate(spec, np.random.default_rng(100 + L), 64, L) for L in (1, 2, 3)]

    def errors() -> float:
        with torch.no_grad():
            return float(
                np.mean([bit_errors(model(b.x).logits, b.y, b.mask).mean() for b in held_out])
            )

    before = errors()
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    rng = np.random.default_rng(0)
    for _ in range(700):
        batch = generate(spec, rng, 32, int(rng.integers(1, 4)))
        loss = masked_bce(model(batch.x).logits, batch.y, batch.mask).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
    after = errors()
    assert before > 1.0, before
    assert after < 0.15, (before, after)
