"""Cells: equality with torch.nn.*Cell (values and gradients), weight conversions, the notes'
stacked form, IRNN init, GRU/LSTM conventions, hand-computed golden steps, gradcheck."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck
from torch.func import functional_call

from seqlab.nn.cells import GRUCell, LSTMCell, RNNCell

B, D, H = 3, 4, 5
ATOL64 = 1e-12  # float64 value / gradient comparisons (ours vs torch)
ATOL32 = 1e-5  # float32 value / gradient comparisons (ours vs torch)
KINDS = ["rnn_tanh", "rnn_relu", "gru", "lstm"]


def make_torch_cell(kind: str, bias: bool, dtype: torch.dtype) -> nn.Module:
    if kind.startswith("rnn"):
        return nn.RNNCell(D, H, bias, nonlinearity=kind[4:], dtype=dtype)
    return {"gru": nn.GRUCell, "lstm": nn.LSTMCell}[kind](D, H, bias, dtype=dtype)


def make_cell(kind: str, bias: bool = True, d_in: int = D, h: int = H) -> nn.Module:
    if kind.startswith("rnn"):
        return RNNCell(d_in, h, nonlinearity=kind[4:], bias=bias)
    if kind == "gru":
        return GRUCell(d_in, h, bias=bias, reset_after=True)
    return LSTMCell(d_in, h, bias=bias)


def _sigmoid(s: float) -> float:
    return 1 / (1 + math.exp(-s))


def _scalar(v: float) -> Tensor:
    return torch.tensor([[v]], dtype=torch.float64)  # (1, 1)


def torch_params(m: nn.Module) -> list[Tensor | None]:
    return [m.weight_ih, m.weight_hh, m.bias_ih, m.bias_hh]


def torch_layout_grads(cell: nn.Module) -> list[Tensor | None]:
    """The cell's parameter gradients expressed as gradients of torch's parameters.

    The conversion ours → torch is linear, so mapping the gradients through to_torch_params
    gives torch's weight_ih / weight_hh / bias_ih gradients. Where the notes have one bias per
    gate, torch's bias_ih and bias_hh enter the same sum and both get its gradient.
    """
    g = copy.deepcopy(cell)
    with torch.no_grad():
        for p, q in zip(g.parameters(), cell.parameters()):
            p.copy_(q.grad)
        w_ih, w_hh, b_ih, b_hh = g.to_torch_params()
        if b_ih is not None:
            shared = 2 * cell.hidden_size if isinstance(cell, GRUCell) else b_ih.numel()
            b_hh = b_hh.clone()
            b_hh[:shared] = b_ih[:shared]
    return [w_ih, w_hh, b_ih, b_hh]


def run_both(kind: str, ours: nn.Module, ref: nn.Module, dtype: torch.dtype):
    """Same input, state and loss through both cells; returns (ours_out, ref_out, grads)."""
    x = torch.randn(B, D, dtype=dtype, requires_grad=True)
    h0 = torch.randn(B, H, dtype=dtype, requires_grad=True)
    c0 = torch.randn(B, H, dtype=dtype, requires_grad=True)
    w = torch.randn(2, B, H, dtype=dtype)  # fixed random loss weights
    outs = []
    for cell in (ours, ref):
        state = (h0, c0) if kind == "lstm" else h0
        out = cell(x, state)
        out = torch.stack(out) if kind == "lstm" else out.unsqueeze(0)  # (1 or 2, B, H)
        (out * w[: out.shape[0]]).sum().backward()
        outs.append((out.detach(), [t.grad.clone() for t in (x, h0, c0) if t.grad is not None]))
        for t in (x, h0, c0):
            t.grad = None
    return outs


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype,atol", [(torch.float64, ATOL64), (torch.float32, ATOL32)])
def test_cell_equals_torch_cell_values_and_gradients(kind, bias, dtype, atol):
    ref = make_torch_cell(kind, bias, dtype)
    ours = make_cell(kind, bias).to(dtype)
    ours.load_from_torch(*torch_params(ref))
    (out, grads), (out_ref, grads_ref) = run_both(kind, ours, ref, dtype)
    torch.testing.assert_close(out, out_ref, atol=atol, rtol=0)
    assert len(grads) == len(grads_ref) == (3 if kind == "lstm" else 2)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, atol=atol, rtol=0)
    for g, p_ref in zip(torch_layout_grads(ours), torch_params(ref)):
        assert (g is None) == (p_ref is None)
        if g is not None:
            torch.testing.assert_close(g, p_ref.grad, atol=atol, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_to_torch_params_gives_the_same_function_and_round_trips_exactly(kind):
    ours = make_cell(kind).double()
    ref = make_torch_cell(kind, True, torch.float64)
    with torch.no_grad():
        for p_ref, p in zip(torch_params(ref), ours.to_torch_params()):
            p_ref.copy_(p)
    (out, _), (out_ref, _) = run_both(kind, ours, ref, torch.float64)
    torch.testing.assert_close(out, out_ref, atol=ATOL64, rtol=0)
    back = make_cell(kind).double()
    back.load_from_torch(*torch_params(ref))
    for (name, p), q in zip(ours.named_parameters(), back.parameters()):
        assert torch.equal(p, q), name  # ours → torch → ours is bit-exact


def test_rnn_stacked_form_equals_separate_form():
    cell = RNNCell(D, H).double()
    x, a_prev = torch.randn(B, D, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    assert cell.W_a.shape == (H, H + D)
    assert torch.equal(cell.W_a[:, :H], cell.W_aa) and torch.equal(cell.W_a[:, H:], cell.W_ax)
    torch.testing.assert_close(
        cell.preactivation_stacked(x, a_prev), cell.preactivation(x, a_prev), atol=1e-12, rtol=0
    )


def test_rnn_golden_step_by_hand():
    cell = RNNCell(1, 1).double()
    with torch.no_grad():
        cell.W_aa.fill_(0.5), cell.W_ax.fill_(-2.0), cell.b_a.fill_(0.1)
    a = cell(torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[0.8]], dtype=torch.float64))
    assert a.item() == pytest.approx(math.tanh(0.5 * 0.8 - 2.0 * 0.3 + 0.1), abs=1e-15)


def test_irnn_identity_init_copies_state_and_has_identity_jacobian():
    cell = RNNCell(D, H, nonlinearity="relu", init="identity").double()
    assert torch.equal(cell.W_aa, torch.eye(H, dtype=torch.float64))
    assert torch.equal(cell.b_a, torch.zeros(H, dtype=torch.float64))
    assert cell.W_ax.abs().sum() > 0  # input weights keep their random init
    a0 = torch.rand(B, H, dtype=torch.float64)  # a ≥ 0, as after a ReLU
    a, x0 = a0, torch.zeros(B, D, dtype=torch.float64)
    for _ in range(20):
        a = cell(x0, a)
    assert torch.equal(a, a0)  # relu(I·a + 0) = a exactly: the state is remembered
    J = torch.autograd.functional.jacobian(lambda s: cell(x0[:1], s), a0[:1] + 0.5)
    torch.testing.assert_close(J.reshape(H, H), torch.eye(H, dtype=torch.float64), atol=0, rtol=0)


def test_gru_torch_z_gate_is_one_minus_gamma_u():
    ref = nn.GRUCell(D, H, dtype=torch.float64)
    ours = GRUCell(D, H, reset_after=True).double()
    ours.load_from_torch(*torch_params(ref))
    x, h = torch.randn(B, D, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    z = torch.sigmoid(  # torch's update gate, from its own rows (r, z, n)
        x @ ref.weight_ih[H : 2 * H].T
        + ref.bias_ih[H : 2 * H]
        + h @ ref.weight_hh[H : 2 * H].T
        + ref.bias_hh[H : 2 * H]
    )  # (B, H)
    _, gates = ours.step(x, h)
    torch.testing.assert_close(gates["gamma_u"], 1 - z, atol=1e-12, rtol=0)


def _set_gate(cell: GRUCell, name: str, b: float) -> None:
    with torch.no_grad():
        getattr(cell, f"W_{name}").zero_()
        getattr(cell, f"b_{name}").fill_(b)


def test_gru_golden_step_by_hand_reset_before_cho2014():
    cell = GRUCell(1, 1, reset_after=False).double()
    with torch.no_grad():
        cell.W_r.copy_(torch.tensor([[0.2, -0.4]], dtype=torch.float64)), cell.b_r.fill_(0.1)
        cell.W_u.copy_(torch.tensor([[-0.3, 0.5]], dtype=torch.float64)), cell.b_u.fill_(0.2)
        cell.W_c.copy_(torch.tensor([[0.7, 0.6]], dtype=torch.float64)), cell.b_c.fill_(-0.1)
    c_prev, x = 0.9, -1.5
    gamma_r, gamma_u = (
        _sigmoid(0.2 * c_prev - 0.4 * x + 0.1),
        _sigmoid(-0.3 * c_prev + 0.5 * x + 0.2),
    )
    c_tilde = math.tanh(0.7 * gamma_r * c_prev + 0.6 * x - 0.1)
    expected = gamma_u * c_tilde + (1 - gamma_u) * c_prev
    c = cell(
        torch.tensor([[x]], dtype=torch.float64), torch.tensor([[c_prev]], dtype=torch.float64)
    )
    assert c.item() == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("reset_after", [False, True])
def test_gru_update_gate_extremes_keep_or_replace_memory(reset_after):
    cell = GRUCell(D, H, reset_after=reset_after).double()
    x, c_prev = torch.randn(B, D, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    _set_gate(cell, "u", -800.0)  # Γu = σ(−800) = 0 exactly: c⟨t⟩ = c⟨t−1⟩
    assert torch.equal(cell(x, c_prev), c_prev)
    _set_gate(cell, "u", 40.0)  # Γu = σ(40) = 1 in float64: c⟨t⟩ = c̃⟨t⟩
    c, gates = cell.step(x, c_prev)
    assert torch.equal(gates["gamma_u"], torch.ones_like(c)) and torch.equal(c, gates["c_tilde"])


def test_gru_reset_before_and_after_agree_at_reset_gate_extremes():
    before = GRUCell(D, H, reset_after=False).double()
    after = GRUCell(D, H, reset_after=True).double()
    with torch.no_grad():
        for name in ("W_r", "W_u", "W_c", "b_r", "b_u"):
            getattr(after, name).copy_(getattr(before, name))
        after.b_cx.copy_(before.b_c - after.b_cc)  # b_cx + b_cc = b_c
    x, c_prev = torch.randn(B, D, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    for cell in (before, after):
        _set_gate(cell, "r", 40.0)  # Γr = 1: both read the whole old state
    torch.testing.assert_close(before(x, c_prev), after(x, c_prev), atol=1e-12, rtol=0)
    with torch.no_grad():
        after.b_cx.copy_(before.b_c)  # Γr = 0: reset-after keeps only b_cx, drops W_cc c + b_cc
    for cell in (before, after):
        _set_gate(cell, "r", -800.0)
    torch.testing.assert_close(before(x, c_prev), after(x, c_prev), atol=1e-12, rtol=0)


def test_gru_reset_before_has_no_torch_conversion():
    cell = GRUCell(D, H, reset_after=False)
    with pytest.raises(ValueError, match="reset_after"):
        cell.to_torch_params()
    with pytest.raises(ValueError, match="reset_after"):
        cell.load_from_torch(*torch_params(nn.GRUCell(D, H)))


def test_lstm_golden_step_by_hand():
    cell = LSTMCell(1, 1).double()
    w = {"u": (0.3, -0.2, 0.1), "f": (0.5, 0.4, 1.0), "o": (-0.6, 0.3, 0.0), "c": (0.8, -0.7, 0.2)}
    with torch.no_grad():
        for g, (w_a, w_x, b) in w.items():
            getattr(cell, f"W_{g}").copy_(torch.tensor([[w_a, w_x]], dtype=torch.float64))
            getattr(cell, f"b_{g}").fill_(b)
    a_prev, c_prev, x = 0.4, -0.9, 1.2
    pre = {g: w_a * a_prev + w_x * x + b for g, (w_a, w_x, b) in w.items()}
    c = _sigmoid(pre["u"]) * math.tanh(pre["c"]) + _sigmoid(pre["f"]) * c_prev
    a = _sigmoid(pre["o"]) * math.tanh(c)
    h_out, c_out = cell(_scalar(x), (_scalar(a_prev), _scalar(c_prev)))
    assert c_out.item() == pytest.approx(c, abs=1e-15)
    assert h_out.item() == pytest.approx(a, abs=1e-15)


def test_lstm_forget_bias_init():
    cell = LSTMCell(D, H, forget_bias=1.0)
    k = 1 / math.sqrt(H)
    assert torch.equal(cell.b_f, torch.ones(H))
    for b in (cell.b_u, cell.b_o, cell.b_c):
        assert b.abs().max() <= k
    _, _, bias_ih, bias_hh = cell.to_torch_params()
    assert torch.equal(bias_ih[H : 2 * H], torch.ones(H))  # torch rows i, f, g, o
    assert torch.equal(bias_hh, torch.zeros(4 * H))
    assert torch.equal(LSTMCell(D, H, forget_bias=3.0).b_f, torch.full((H,), 3.0))


@pytest.mark.parametrize("kind", ["rnn_tanh", "rnn_relu", "gru_before", "gru_after", "lstm"])
def test_cell_gradcheck(kind):
    d_in, h = 3, 2
    if kind.startswith("rnn"):
        cell = RNNCell(d_in, h, nonlinearity=kind[4:])
    elif kind.startswith("gru"):
        cell = GRUCell(d_in, h, reset_after=kind == "gru_after")
    else:
        cell = LSTMCell(d_in, h)
    cell = cell.double()
    names = [n for n, _ in cell.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in cell.parameters()]
    x = torch.randn(2, d_in, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, h, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(2, h, dtype=torch.float64, requires_grad=True)

    def f(x, h0, c0, *ps):
        state = (h0, c0) if kind == "lstm" else h0
        out = functional_call(cell, dict(zip(names, ps)), (x, state))
        return torch.cat(out, dim=-1) if kind == "lstm" else out

    assert gradcheck(f, (x, h0, c0, *params), eps=1e-6, atol=1e-8, rtol=1e-6)


def test_cell_argument_checks():
    with pytest.raises(ValueError, match="nonlinearity"):
        RNNCell(D, H, nonlinearity="sigmoid")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bias"):
        RNNCell(D, H, bias=False).load_from_torch(*torch_params(nn.RNNCell(D, H)))
