"""Recurrent: readable path == fused path == torch.nn.RNN/GRU/LSTM (packed), values and
gradients; padding invariance; batched == unbatched; dropout placement; hooks; gradcheck."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.autograd import gradcheck
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqlab.nn.recurrent import Recurrent

from .test_cells import torch_layout_grads

B, T, D, H = 4, 6, 3, 5
LENGTHS = [6, 2, 5, 1]  # one full-length sequence, one of length 1
ATOL64 = 1e-10  # float64: readable vs fused vs torch, values and gradients
ATOL32 = 1e-5  # float32: readable vs fused vs torch, values and gradients
KINDS = ["rnn_tanh", "rnn_relu", "gru", "lstm"]
# (num_layers, bidirectional, variable lengths, given initial state)
SCENARIOS = [(2, True, True, True), (1, False, False, False), (2, False, True, False)]


def make(kind: str, **kw) -> Recurrent:
    if kind.startswith("rnn"):
        return Recurrent("rnn", D, H, nonlinearity=kind[4:], **kw)
    return Recurrent(kind, D, H, **kw)


def states(s) -> list[Tensor]:
    return list(s) if isinstance(s, tuple) else [s]


def inputs(m: Recurrent, lengths: bool, init: bool, dtype=torch.float64):
    x = torch.randn(B, T, D, dtype=dtype, requires_grad=True)
    n = m.num_layers * m.num_directions
    s0 = None
    if init:
        parts = [torch.randn(n, B, H, dtype=dtype, requires_grad=True) for _ in range(2)]
        s0 = tuple(parts) if m.kind == "lstm" else parts[0]
    return x, (torch.tensor(LENGTHS) if lengths else None), s0


def leaves_of(x: Tensor, s0) -> list[Tensor]:
    return [x, *([] if s0 is None else states(s0))]


def run(fn, leaves: list[Tensor]):
    """Forward + backward of a fixed random loss; returns values and the leaves' gradients
    (the gradients also stay in ``.grad``)."""
    for t in leaves:
        t.grad = None
    out, final = fn()
    values = [out, *states(final)]
    g = torch.Generator().manual_seed(1)
    loss = sum((v * torch.randn(v.shape, generator=g, dtype=v.dtype)).sum() for v in values)
    loss.backward()
    return [v.detach() for v in values], [t.grad.clone() for t in leaves]


def assert_all_close(a: list[Tensor], b: list[Tensor], atol: float) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, atol=atol, rtol=0)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kind", KINDS)
def test_readable_equals_fused_values_and_gradients(kind, scenario):
    layers, bidir, lengths, init = scenario
    m = make(kind, num_layers=layers, bidirectional=bidir).double()
    x, lens, s0 = inputs(m, lengths, init)
    leaves = leaves_of(x, s0) + list(m.parameters())
    readable = run(lambda: m(x, lens, s0, fused=False), leaves)
    fast = run(lambda: m(x, lens, s0, fused=True), leaves)
    assert_all_close(readable[0], fast[0], ATOL64)
    assert_all_close(readable[1], fast[1], ATOL64)


@pytest.mark.parametrize("dtype,atol", [(torch.float64, ATOL64), (torch.float32, ATOL32)])
@pytest.mark.parametrize("scenario", SCENARIOS[:2])
@pytest.mark.parametrize("kind", KINDS)
def test_equals_torch_module_packed(kind, scenario, dtype, atol):
    layers, bidir, lengths, init = scenario
    kw = {"nonlinearity": kind[4:]} if kind.startswith("rnn") else {}
    ref_cls = {"gru": nn.GRU, "lstm": nn.LSTM}.get(kind, nn.RNN)
    ref = ref_cls(D, H, layers, batch_first=True, bidirectional=bidir, dtype=dtype, **kw)
    m = make(kind, num_layers=layers, bidirectional=bidir).to(dtype)
    m.load_from_torch(ref)
    x, lens, s0 = inputs(m, lengths, init, dtype)

    def torch_forward():
        xin = x if lens is None else pack_padded_sequence(x, lens, True, enforce_sorted=False)
        out, final = ref(xin, s0)
        if lens is not None:
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
        return out, final

    n_in = len(leaves_of(x, s0))
    expected, ref_grads = run(torch_forward, leaves_of(x, s0) + list(ref.parameters()))
    for fused in (False, True):
        leaves = leaves_of(x, s0) + list(m.parameters())
        values, grads = run(lambda: m(x, lens, s0, fused=fused), leaves)  # noqa: B023
        assert_all_close(values, expected, atol)
        assert_all_close(grads[:n_in], ref_grads[:n_in], atol)  # w.r.t. x, h0 (, c0)
        ours = []  # w.r.t. the parameters, in torch's layout (ref.parameters() order)
        for layer in range(layers):
            for d in range(m.num_directions):
                ours.extend(torch_layout_grads(m.cell_at(layer, d)))
        assert_all_close(ours, ref_grads[n_in:], atol)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_padding_is_invisible(kind, fused):
    m = make(kind, num_layers=2, bidirectional=True).double()
    x, lens, s0 = inputs(m, True, True)
    out, final = m(x, lens, s0, fused=fused)
    pad = torch.full((B, 3, D), 7.0, dtype=torch.float64)  # junk, not zeros
    junk = x.detach().clone()
    keep = torch.arange(T)[None, :, None] < lens[:, None, None]  # (B, T, 1)
    junk = torch.where(keep, junk, -9.0)  # (B, T, D) padding content changed too
    out2, final2 = m(torch.cat([junk, pad], dim=1), lens, s0, fused=fused)  # (B, T + 3, ·)
    torch.testing.assert_close(out2[:, :T], out, atol=1e-12, rtol=0)
    assert torch.equal(out2[:, T:], torch.zeros_like(out2[:, T:]))
    assert_all_close(states(final2), states(final), 1e-12)
    assert torch.equal(out.masked_fill(keep, 0.0), torch.zeros_like(out))  # zero at padding


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_batched_equals_each_sequence_alone(kind, fused):
    m = make(kind, num_layers=2, bidirectional=True).double()
    x, lens, s0 = inputs(m, True, True)
    out, final = m(x, lens, s0, fused=fused)
    for b, n in enumerate(LENGTHS):
        s0_b = tuple(s[:, b : b + 1] for s in s0) if kind == "lstm" else s0[:, b : b + 1]
        out_b, final_b = m(x[b : b + 1, :n], None, s0_b, fused=fused)  # (1, n, 2H)
        torch.testing.assert_close(out_b[0], out[b, :n], atol=1e-12, rtol=0)
        for s_b, s in zip(states(final_b), states(final)):
            torch.testing.assert_close(s_b[:, 0], s[:, b], atol=1e-12, rtol=0)


def test_backward_direction_starts_at_last_real_token():
    m = make("gru", bidirectional=True).double()
    x, lens, s0 = inputs(m, True, True)
    out, final = m(x, lens, s0, fused=False)
    back = m.cell_at(0, 1)
    for b, n in enumerate(LENGTHS):
        first = back(x[b : b + 1, n - 1], s0[1, b : b + 1])  # (1, H)
        torch.testing.assert_close(out[b, n - 1, H:], first[0], atol=1e-12, rtol=0)
        torch.testing.assert_close(final[1, b], out[b, 0, H:], atol=0, rtol=0)  # ends at t=0
        torch.testing.assert_close(final[0, b], out[b, n - 1, :H], atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_dropout_between_layers_not_after_last(kind):
    m = make(kind, num_layers=2, dropout=1.0).double().train()  # p=1: deterministic zeros
    x, lens, _ = inputs(m, True, False)
    out_r, _ = m(x, lens, fused=False)
    out_f, _ = m(x, lens, fused=True)
    torch.testing.assert_close(out_r, out_f, atol=1e-12, rtol=0)
    top = Recurrent(kind, H, H).double()  # layer 2 alone, fed the dropped layer 1 (zeros)
    top.cells[0].load_state_dict(m.cell_at(1, 0).state_dict())
    expected, _ = top(torch.zeros(B, T, H, dtype=torch.float64), lens)
    torch.testing.assert_close(out_r, expected, atol=1e-12, rtol=0)
    assert out_r[0].abs().sum() > 0  # the last layer's output is not dropped
    m.eval()  # no dropout in eval mode: same as the model without dropout
    plain = make(kind, num_layers=2).double()
    plain.load_state_dict(m.state_dict())
    assert torch.equal(m(x, lens, fused=False)[0], plain(x, lens, fused=False)[0])


def test_step_hook_sees_every_step_gates_and_states_and_forces_readable_path():
    m = make("lstm", num_layers=2, bidirectional=True).double()
    x, lens, _ = inputs(m, True, False)
    seen: dict[tuple[int, int, int], tuple] = {}

    def hook(layer, direction, t, state, gates):
        assert set(gates) == {"gamma_u", "gamma_f", "gamma_o", "c_tilde"}
        assert ((gates["gamma_f"] > 0) & (gates["gamma_f"] < 1)).all()
        state[1].retain_grad()  # gradient-flow inspection: keep ∂loss/∂c⟨t⟩
        seen[layer, direction, t] = state

    out, _ = m(x, lens, step_hook=hook)  # fused=None → readable because of the hook
    assert len(seen) == 2 * 2 * T
    out[:, :, :H].sum().backward()
    keep = torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]  # (B, T)
    for t in range(T):
        h_t = seen[1, 0, t][0]
        torch.testing.assert_close(h_t[keep[:, t]], out[keep[:, t], t, :H], atol=0, rtol=0)
    assert seen[0, 0, 0][1].grad.abs().sum() > 0  # gradient reached the first cell state
    with pytest.raises(ValueError, match="step_hook"):
        m(x, lens, fused=True, step_hook=hook)


def test_gru_reset_before_runs_readable_only():
    m = make("gru", reset_after=False).double()
    assert not m.has_fused
    x, lens, _ = inputs(m, True, False)
    out, _ = m(x, lens)  # fused=None → readable
    assert out.shape == (B, T, H)
    with pytest.raises(ValueError, match="reset_after"):
        m(x, lens, fused=True)
    with pytest.raises(ValueError, match="reset_after"):
        m.to_torch()


def test_to_torch_module_computes_the_same_function():
    m = make("lstm", num_layers=2, bidirectional=True).double()
    x, lens, s0 = inputs(m, True, True)
    ref = m.to_torch()
    out_ref, final_ref = ref(pack_padded_sequence(x, lens, True, enforce_sorted=False), s0)
    out_ref, _ = pad_packed_sequence(out_ref, batch_first=True, total_length=T)
    out, final = m(x, lens, s0)
    torch.testing.assert_close(out, out_ref, atol=ATOL64, rtol=0)
    assert_all_close(states(final), states(final_ref), ATOL64)


def test_argument_checks():
    m = make("rnn_tanh")
    x = torch.randn(B, T, D)
    for bad in ([0, 1, 2, 3], [7, 1, 2, 3]):
        with pytest.raises(ValueError, match="lengths"):
            m(x, torch.tensor(bad))
    with pytest.raises(ValueError, match="shape"):
        m(x, initial_state=torch.zeros(2, B, H))


@pytest.mark.parametrize("kind", ["rnn", "gru", "lstm"])
def test_recurrent_readable_gradcheck(kind):
    d_in, h = 2, 2
    m = Recurrent(kind, d_in, h, num_layers=2, bidirectional=True).double()
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    x = torch.randn(2, 3, d_in, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, 2, h, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(4, 2, h, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([3, 2])

    def f(x, h0, c0, *ps):
        s0 = (h0, c0) if kind == "lstm" else h0
        kwargs = {"lengths": lens, "initial_state": s0, "fused": False}
        out, final = functional_call(m, dict(zip(names, ps)), (x,), kwargs)
        return out, *states(final)

    assert gradcheck(f, (x, h0, c0, *params), eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_autocast_weights_cast_once(kind):
    """Under bf16 autocast the fused path casts the assembled weight matrices once itself
    (``_kernel_weights``), as autocast's cache does for nn.GRU's leaf weights: outputs and
    states are bit-identical to letting autocast cast them at every time step inside the
    kernel; the gradients agree to bf16 precision (with one cast, the weight gradient is
    summed over the time steps in bf16, as nn.GRU's is; docs/perf-notes-decoding.md §14)."""
    torch.manual_seed(0)
    m = make(kind, num_layers=2, bidirectional=True)
    x = torch.randn(B, T, D)
    lengths = torch.tensor(LENGTHS)
    results = []
    for precast in (True, False):
        m.zero_grad()
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            weights = m._kernel_weights(xi)
            assert [w.dtype for w in weights] == [
                torch.bfloat16 if w.dim() == 2 else torch.float32 for w in weights
            ]
            if not precast:
                m._kernel_weights = lambda _x: m.flat_weights()  # autocast casts inside
            out, s = m(xi, lengths)
            if not precast:
                del m._kernel_weights
        (out.float().square().sum() + sum(t.float().sum() for t in states(s))).backward()
        results.append(([out, *states(s)], [xi.grad, *[p.grad.clone() for p in m.parameters()]]))
    for a, b in zip(results[0][0], results[1][0]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, atol=2e-2 * b.abs().max().item(), rtol=0)
    with torch.no_grad():  # outside autocast: the fp32 weights, uncast
        assert all(w.dtype == torch.float32 for w in m._kernel_weights(x))
