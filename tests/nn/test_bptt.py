"""The hand-derived BPTT gradients of notes 002 against autograd, the LSTM's cell-state
"gradient super-highway", and vanishing gradients in a tanh RNN, in the notes' letters:

    h_t = tanh(U x_t + W h_{t−1}) = tanh(z_t),   ŷ_t = softmax(V h_t),
    C = Σ_t C_t = −Σ_t Σ_i y_{t,i} log ŷ_{t,i}

with W = RNNCell.W_aa and U = RNNCell.W_ax (bias off, as in the notes)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.functional import jacobian

from seqlab.nn.cells import LSTMCell, RNNCell
from seqlab.nn.recurrent import Recurrent

T, D, H, K = 6, 3, 4, 5  # K = |S|, the size of the output space
F64 = torch.float64


def unrolled_rnn(seed: int = 0):
    """One sequence through an RNNCell; returns cell, V, h_0…h_T, ŷ_1…ŷ_T, y, C."""
    torch.manual_seed(seed)
    cell = RNNCell(D, H, bias=False).double()
    V = torch.randn(K, H, dtype=F64, requires_grad=True)
    xs = torch.randn(T, D, dtype=F64)
    y = torch.nn.functional.one_hot(torch.randint(K, (T,)), K).to(F64)  # (T, K)
    hs = [torch.randn(H, dtype=F64)]  # h_0 given, not a function of W
    for t in range(T):
        hs.append(cell(xs[t : t + 1], hs[-1][None])[0])  # (H,)
    y_hat = [torch.softmax(V @ h, dim=0) for h in hs[1:]]  # ŷ_1…ŷ_T, (K,) each
    C = -sum((y[t] * torch.log(y_hat[t])).sum() for t in range(T))
    return cell, V, hs, y_hat, y, C


def test_dC_dV_is_sum_of_outer_products():
    # ∂C/∂V = Σ_t (ŷ_t − y_t) h_tᵀ
    cell, V, hs, y_hat, y, C = unrolled_rnn()
    C.backward()
    expected = sum(torch.outer(y_hat[t] - y[t], hs[t + 1]) for t in range(T))  # (K, H)
    torch.testing.assert_close(V.grad, expected.detach(), atol=1e-12, rtol=0)


def test_step_jacobian_matches_the_notes():
    # tanh form: ∂h_j/∂h_{j−1} = diag(1 − h_j²) W. The notes' alternative form
    # h_j = U x_j + W f(h_{j−1}) gives ∂h_j/∂h_{j−1} = W diag(f'(h_{j−1})).
    cell, _, hs, *_ = unrolled_rnn()
    W, U = cell.W_aa.detach(), cell.W_ax.detach()
    x = torch.randn(1, D, dtype=F64)
    h_prev = hs[3].detach()
    J = jacobian(lambda h: cell(x, h[None])[0], h_prev)  # (H, H)
    h = cell(x, h_prev[None])[0].detach()
    torch.testing.assert_close(J, torch.diag(1 - h**2) @ W, atol=1e-12, rtol=0)
    J_alt = jacobian(lambda h: U @ x[0] + W @ torch.tanh(h), h_prev)  # (H, H)
    torch.testing.assert_close(
        J_alt, W @ torch.diag(1 - torch.tanh(h_prev) ** 2), atol=1e-12, rtol=0
    )


def test_dC_dW_from_explicit_jacobian_products_equals_autograd():
    # ∂C/∂W = Σ_t Σ_{k=1..t} (∂C_t/∂ŷ_t ∂ŷ_t/∂h_t) (Π_{j=k+1..t} ∂h_j/∂h_{j−1}) ∂⁺h_k/∂W,
    # ∂C_t/∂ŷ_t ∂ŷ_t/∂h_t = (ŷ_t − y_t)ᵀ V, ∂h_j/∂h_{j−1} = diag(1 − h_j²) W and the
    # immediate term ∂⁺h_k/∂W_bc = δ_ab (1 − h_{k,a}²) h_{k−1,c} (the k = 0 term is 0: h_0 is
    # given). Notes 002, "Back propagation for ∂C_t/∂W".
    cell, V, hs, y_hat, y, C = unrolled_rnn(seed=3)
    C.backward()
    W = cell.W_aa.detach()
    h = [v.detach() for v in hs]
    J = {j: torch.diag(1 - h[j] ** 2) @ W for j in range(1, T + 1)}  # (H, H)
    eye = torch.eye(H, dtype=F64)
    grad = torch.zeros(H, H, dtype=F64)
    for t in range(1, T + 1):
        dC_dh = (y_hat[t - 1] - y[t - 1]).detach() @ V.detach()  # (H,) row vector
        for k in range(1, t + 1):
            P = eye
            for j in range(t, k, -1):  # Π_{j=k+1..t}, latest Jacobian on the left
                P = P @ J[j]
            dplus = torch.einsum("ab,a,c->abc", eye, 1 - h[k] ** 2, h[k - 1])  # (H, H, H)
            grad += torch.einsum("a,abc->bc", dC_dh @ P, dplus)
    torch.testing.assert_close(cell.W_aa.grad, grad, atol=1e-12, rtol=0)


def test_lstm_direct_cell_path_jacobian_is_diag_forget_gate():
    # c_t = Γu ∗ c̃_t + Γf ∗ c_{t−1}; with h_{t−1} held (so the gates are fixed) the only path
    # from c_{t−1} is the "gradient super-highway": ∂c_t/∂c_{t−1} = diag(Γf_t).
    cell = LSTMCell(D, H).double()
    x, h_prev, c_prev = (torch.randn(1, n, dtype=F64) for n in (D, H, H))
    (_, _), gates = cell.step(x, (h_prev, c_prev))
    J = jacobian(lambda c: cell(x, (h_prev, c[None]))[1][0], c_prev[0])  # (H, H)
    torch.testing.assert_close(J, torch.diag(gates["gamma_f"][0]), atol=1e-12, rtol=0)


def _lstm_c_T(cell: LSTMCell, xs: Tensor, h0: Tensor, c0: Tensor, highway: bool):
    """c_T and the Γf_t along the way; highway=True holds every h_{t−1} (detached)."""
    h, c, gamma_fs = h0, c0, []
    for t in range(xs.shape[0]):
        (h, c), gates = cell.step(xs[t : t + 1], (h.detach() if highway else h, c))
        gamma_fs.append(gates["gamma_f"][0].detach())
    return c[0], torch.stack(gamma_fs)  # (H,), (T, H)


def test_lstm_long_range_gradient_is_the_product_of_forget_gates():
    steps = 30
    xs = torch.randn(steps, D, dtype=F64)
    h0, c0 = torch.randn(1, H, dtype=F64), torch.randn(1, H, dtype=F64)
    for forget_bias, lo, hi in ((8.0, 0.98, 1.0), (-3.0, 0.0, 1e-30)):
        cell = LSTMCell(D, H, forget_bias=forget_bias).double()
        with torch.no_grad():
            cell.W_f.mul_(0.1)
        J = jacobian(lambda c: _lstm_c_T(cell, xs, h0, c[None], True)[0], c0[0])  # noqa: B023
        _, gamma_fs = _lstm_c_T(cell, xs, h0, c0, True)
        expected = torch.diag(gamma_fs.prod(dim=0))  # ∂c_T/∂c_0 = diag(Π_t Γf_t)
        torch.testing.assert_close(J, expected, atol=1e-12, rtol=1e-10)
        norm = torch.linalg.matrix_norm(J, ord=2)
        assert lo <= norm <= hi  # Γf ≈ 1 keeps the gradient; Γf ≈ σ(−3) kills it
    # With Γu ≈ 0 and Γf independent of the state, the highway is (almost) the whole gradient.
    cell = LSTMCell(D, H, forget_bias=8.0).double()
    with torch.no_grad():
        cell.W_f.zero_(), cell.W_u.zero_(), cell.b_u.fill_(-12.0)
    full = jacobian(lambda c: _lstm_c_T(cell, xs, h0, c[None], False)[0], c0[0])
    highway = jacobian(lambda c: _lstm_c_T(cell, xs, h0, c[None], True)[0], c0[0])
    torch.testing.assert_close(full, highway, atol=1e-3, rtol=0)


def _dh_T_dh_0(m: Recurrent, x: Tensor, h0: Tensor) -> Tensor:
    return jacobian(lambda h: m(x, initial_state=h.view(1, 1, H), fused=False)[1][0, 0], h0)


def test_tanh_rnn_gradient_vanishes_within_the_notes_bound():
    # ‖∂h_t/∂h_k‖ ≤ (β_W β_s)^{t−k} with β_W = ‖W‖₂ = 0.5 and β_s = max|tanh'| = 1.
    m = Recurrent("rnn", D, H, nonlinearity="tanh").double()
    with torch.no_grad():
        W = m.cell_at(0, 0).W_aa
        W.mul_(0.5 / torch.linalg.matrix_norm(W, ord=2))
    h0, xs = torch.randn(H, dtype=F64), torch.randn(1, 20, D, dtype=F64)
    norms = [
        torch.linalg.matrix_norm(_dh_T_dh_0(m, xs[:, :t], h0), ord=2).item() for t in range(1, 21)
    ]
    for t, n in enumerate(norms, start=1):
        assert n <= 0.5**t * (1 + 1e-12)
    assert all(b < a for a, b in zip(norms, norms[1:]))  # decays monotonically
    assert norms[-1] < 1e-6


def test_irnn_does_not_vanish():
    # Notes 002's fix: ReLU and W initialised to the identity: with zero input and a positive
    # state, ∂h_T/∂h_0 = I for every T.
    m = Recurrent("rnn", D, H, nonlinearity="relu", init="identity").double()
    h0 = torch.rand(H, dtype=F64) + 0.1
    J = _dh_T_dh_0(m, torch.zeros(1, 25, D, dtype=F64), h0)
    torch.testing.assert_close(J, torch.eye(H, dtype=F64), atol=0, rtol=0)
