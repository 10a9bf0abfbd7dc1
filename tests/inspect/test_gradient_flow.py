"""Gradient flow: ∂L/∂a⟨k⟩ equals W^(T−1−k) in a linear RNN and the notes' BPTT recursion
in a tanh RNN; a positive forget bias keeps more gradient; a residual stack with zero
branches passes the gradient unchanged; the agreement generator's invariants."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.data.agreement import FIRST_WORD, PLURAL, SINGULAR, VERB, ptb_task, random_task
from seqlab.inspect import gradient_flow as gf
from seqlab.models.resnet import ResNet, ResNetConfig
from seqlab.nn.recurrent import Recurrent
from seqlab.nn.residual import ResidualMLPBlock


def _linear_regime_rnn(H=4, D=3):
    """ReLU RNN whose pre-activations are all positive, so a⟨t⟩ = W_aa a⟨t−1⟩ + W_ax x + b."""
    rnn = Recurrent("rnn", D, H, nonlinearity="relu").double()
    cell = rnn.cell_at(0, 0)
    with torch.no_grad():
        cell.W_aa.copy_(0.4 * torch.eye(H) + 0.05 * torch.rand(H, H))
        cell.W_ax.uniform_(0.1, 1.0)
        cell.b_a.uniform_(0.1, 1.0)
    return rnn, cell


def test_linear_rnn_state_gradient_is_matrix_power():
    rnn, cell = _linear_regime_rnn()
    B, T = 2, 7
    x = torch.rand(B, T, 3, dtype=torch.float64)  # positive inputs: z > 0 at every step
    v = torch.randn(4, dtype=torch.float64)
    grads = gf.state_gradients(rnn, x, lambda out: (out[:, -1] @ v).sum())
    W = cell.W_aa.detach()
    for k in range(T):
        # ∂L/∂a⟨k⟩ = vᵀ W_aa^(T−1−k), the same row for every example
        expected = v @ torch.linalg.matrix_power(W, T - 1 - k)  # (H,)
        torch.testing.assert_close(grads.h[:, k], expected.expand(B, -1), rtol=1e-12, atol=1e-12)
    assert grads.c is None


def test_tanh_rnn_follows_the_notes_bptt_recursion():
    # notes 002: ∂L/∂a⟨k−1⟩ = (∂L/∂a⟨k⟩ ⊙ (1 − a⟨k⟩²)) W_aa  (tanh′(z) = 1 − tanh(z)²)
    rnn = Recurrent("rnn", 3, 5).double()
    W = rnn.cell_at(0, 0).W_aa.detach()
    x = torch.randn(3, 6, 3, dtype=torch.float64)
    y = torch.tensor([0, 1, 1])
    readout = nn.Linear(5, 2).double()
    grads = gf.state_gradients(
        rnn, x, lambda o: F.cross_entropy(readout(o[:, -1]), y, reduction="sum")
    )
    a, _ = rnn(x)
    a = a.detach()  # (B, T, H)
    for k in range(5, 0, -1):
        expected = (grads.h[:, k] * (1 - a[:, k] ** 2)) @ W  # (B, H)
        torch.testing.assert_close(grads.h[:, k - 1], expected, rtol=1e-10, atol=1e-12)
    # the last step's gradient is the readout's: W_yᵀ (softmax − onehot)
    p = torch.softmax(readout(a[:, -1]), -1) - F.one_hot(y, 2)
    torch.testing.assert_close(grads.h[:, -1], p @ readout.weight.detach())


def test_norms_by_distance_indexes_from_the_last_step():
    g = torch.zeros(2, 3, 2)
    g[:, 0] = torch.tensor([[3.0, 4.0], [0.0, 1.0]])  # norms 5 and 1 → mean 3 at k = 0
    g[:, 2, 0] = 2.0  # k = T − 1 → distance 0
    torch.testing.assert_close(gf.norms_by_distance(g), torch.tensor([2.0, 0.0, 3.0]))


def test_positive_forget_bias_keeps_more_gradient_over_distance():
    task = random_task(20)
    x, y = task.sample(64, 20, torch.Generator().manual_seed(0))
    curves = {}
    for b_f in (0.0, 1.0):
        torch.manual_seed(0)
        model = gf.agreement_probe("lstm", task.vocab_size, hidden=16).eval()
        gf.set_forget_bias(model, b_f)
        grads = gf.probe_gradients(model, x, y)
        curves[b_f] = (gf.norms_by_distance(grads.h), gf.norms_by_distance(grads.c))
    for which in (0, 1):  # a⟨k⟩ and c⟨k⟩
        far_1, far_0 = curves[1.0][which][15:], curves[0.0][which][15:]
        assert bool((far_1 > 10 * far_0).all())
    # Same weights apart from b_f: only the LSTM cells' b_f differ.
    assert gf.decay_per_step(curves[1.0][0].tolist()) > gf.decay_per_step(curves[0.0][0].tolist())


def test_probe_gradient_readout_is_the_models_forward():
    task = random_task(10)
    x, y = task.sample(4, 3)
    model = gf.agreement_probe("gru", task.vocab_size, hidden=8).eval()
    grads = gf.probe_gradients(model, x, y)
    expected = F.cross_entropy(
        model(x, torch.ones_like(x, dtype=torch.bool)), y, reduction="sum"
    ).detach()
    assert grads.loss == pytest.approx(float(expected), rel=1e-6)


def test_zeroed_residual_branches_pass_the_gradient_unchanged():
    blocks = [ResidualMLPBlock(6, 10) for _ in range(5)]
    for b in blocks:
        nn.init.zeros_(b.W_2.weight)
        nn.init.zeros_(b.W_2.bias)
    net = nn.Sequential(*blocks, nn.Linear(6, 3))
    x = torch.randn(8, 6)
    y = torch.randint(0, 3, (8,))
    norms = gf.block_input_gradients(net, blocks, x, lambda o: F.cross_entropy(o, y))
    assert norms == [norms[-1]] * 5 and norms[0] > 0
    # With live branches the gradient changes from block to block.
    live = [ResidualMLPBlock(6, 10) for _ in range(5)]
    norms = gf.block_input_gradients(nn.Sequential(*live), live, x, lambda o: o.pow(2).sum())
    assert len(set(norms)) == 5


def test_resnet_zero_init_residual_stage_passes_gradient_unchanged():
    # bn2's γ = 0: each block of stage 1 is ReLU(x) = x on the non-negative stem output.
    torch.manual_seed(0)
    net = ResNet(ResNetConfig(depth=14, zero_init_residual=True), 1, 10).train()
    x = torch.randn(4, 1, 12, 12)
    norms = gf.block_input_gradients(net, net.blocks(), x, lambda o: o.sum())
    assert norms[0] == norms[1] > 0  # layer1.0 and layer1.1


def test_decay_per_step_recovers_a_geometric_rate():
    curve = [3.0 * 0.7**d for d in range(12)]
    assert gf.decay_per_step(curve) == pytest.approx(0.7, rel=1e-9)
    assert math.isnan(gf.decay_per_step([1.0, 0.0, 0.0]))


def test_time_and_depth_experiments_write_records_and_figures(tmp_path):
    task = random_task(10)
    rec = gf.run(tmp_path, task, distance=4, steps=2, hidden=8, depths=(8,))
    t = rec["time"]["variants"]
    assert set(t) == {"rnn", "gru", "lstm", "lstm-fb0"}
    assert len(t["rnn"]["init"]["h"]) == 6 and "c" in t["lstm"]["init"]
    assert t["lstm"]["forget_bias"] == 1.0 and t["lstm-fb0"]["forget_bias"] == 0.0
    nets = rec["depth"]["nets"]
    assert set(nets) == {"plain-8", "resnet-8"}
    assert len(nets["plain-8"]["block_input_grad_norm"]) == 3
    for name in ("gradflow-time.png", "gradflow-depth.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| lstm | 1 |" in gf.time_table(rec["time"])
    assert "| plain-8 | 3 |" in gf.depth_table(rec["depth"])
    with pytest.raises(ValueError, match="unknown variant"):
        gf.time_experiment(task, 3, variants=("elman",))


def test_agreement_examples_put_the_number_at_position_0_and_the_verb_last():
    task = random_task(7)
    x, y = task.sample(50, 5, torch.Generator().manual_seed(3))
    assert x.shape == (50, 7)
    assert torch.equal(x[:, 0], SINGULAR + y) and bool((x[:, -1] == VERB).all())
    assert bool((x[:, 1:-1] >= FIRST_WORD).all()) and bool((x[:, 1:-1] < task.vocab_size).all())
    assert task.decode(x[0])[0] in ("cat", "cats")


def test_ptb_distractors_are_text_windows_without_a_second_subject(tmp_path):
    ptb = tmp_path / "ptb"
    ptb.mkdir()
    text = "the cats which the dog saw were hungry\nthe cat sat on the mat\n"
    for split in ("train", "valid", "test"):
        (ptb / f"ptb.{split}.txt").write_text(text * 3)
    task = ptb_task(tmp_path, n_words=50)
    assert task.source == "ptb"
    x, _ = task.sample(20, 6, torch.Generator().manual_seed(0))
    middle = [w for row in x[:, 1:-1] for w in task.decode(row)]
    assert "cat" not in middle and "cats" not in middle
    assert set(middle) <= set(task.words)
    windows = task.stream.unfold(0, 6, 1)  # (N − 5, 6): every contiguous window of the text
    for row in x[:, 1:-1]:
        assert bool((windows == row).all(dim=1).any())
    assert int(x[0, 0]) in (SINGULAR, PLURAL)
