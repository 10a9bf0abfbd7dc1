"""NTM addressing, reading and writing (Graves et al. 2014 eq. 2–9): hand-computed worked
examples for every stage, PyTorch / explicit-formula references, weightings that sum to 1,
the erase/add identities, batched == unbatched, and float64 gradcheck of every function
and of the whole chain."""

import math

import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

from seqlab.nn.memory import (
    address,
    circular_shift,
    content_addressing,
    cosine_similarity,
    erase_add_write,
    head_param_size,
    interpolate,
    read,
    sharpen,
    squash_head,
    squash_write,
)

torch.set_num_threads(1)
f64 = torch.float64


def rand_w(*shape, dtype=f64):
    return torch.softmax(torch.randn(*shape, dtype=dtype), dim=-1)


# ----------------------------------------------------------------- worked examples (by hand)


def test_content_addressing_worked_example():
    """k = (1, 0); rows (1, 0), (0, 1), (−1, 0), (1, 1): K = [1, 0, −1, 1/√2] (eq. 6).
    β = 2: w^c ∝ [e², 1, e⁻², e^√2] = [7.389056, 1, 0.135335, 4.113250] / 12.637642."""
    k = torch.tensor([[[1.0, 0.0]]], dtype=f64)  # (1, 1, 2)
    M = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [1.0, 1.0]]], dtype=f64)  # (1, 4, 2)
    K = cosine_similarity(k, M)
    torch.testing.assert_close(
        K, torch.tensor([[[1.0, 0.0, -1.0, 1 / math.sqrt(2)]]], dtype=f64), atol=1e-7, rtol=0
    )
    w_c = content_addressing(k, torch.tensor([[2.0]], dtype=f64), M)
    expected = torch.tensor([[[0.584686, 0.079129, 0.010709, 0.325476]]], dtype=f64)
    torch.testing.assert_close(w_c, expected, atol=1e-6, rtol=0)
    # β = 0: uniform whatever the similarities
    w0 = content_addressing(k, torch.tensor([[0.0]], dtype=f64), M)
    torch.testing.assert_close(w0, torch.full((1, 1, 4), 0.25, dtype=f64), atol=1e-12, rtol=0)


def test_cosine_matches_torch_reference():
    torch.manual_seed(1)
    k = torch.randn(3, 2, 5, dtype=f64)
    M = torch.randn(3, 7, 5, dtype=f64)
    ref = F.cosine_similarity(k[:, :, None, :], M[:, None, :, :], dim=-1)  # (3, 2, 7)
    torch.testing.assert_close(cosine_similarity(k, M), ref, atol=1e-7, rtol=0)


def test_interpolation_worked_example():
    """g = 0.25: 0.25·[0.5, 0.5, 0, 0] + 0.75·[0, 0, 0, 1] = [0.125, 0.125, 0, 0.75]."""
    w_c = torch.tensor([[[0.5, 0.5, 0.0, 0.0]]], dtype=f64)
    w_prev = torch.tensor([[[0.0, 0.0, 0.0, 1.0]]], dtype=f64)
    out = interpolate(w_c, w_prev, torch.tensor([[0.25]], dtype=f64))
    expected = torch.tensor([[[0.125, 0.125, 0.0, 0.75]]], dtype=f64)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    # g = 1 takes the content weighting, g = 0 keeps the previous one
    torch.testing.assert_close(interpolate(w_c, w_prev, torch.ones(1, 1, dtype=f64)), w_c)
    torch.testing.assert_close(interpolate(w_c, w_prev, torch.zeros(1, 1, dtype=f64)), w_prev)


def test_interpolation_lerp_equals_eq7_values_and_gradients():
    """torch.lerp (used) == g w^c + (1 − g) w_{t−1} written out, float64, atol 1e-12."""
    torch.manual_seed(10)
    args = [rand_w(3, 2, 7), rand_w(3, 2, 7), torch.rand(3, 2, dtype=f64)]
    a = [t.clone().requires_grad_() for t in args]
    b = [t.clone().requires_grad_() for t in args]
    out_a = interpolate(*a)
    out_b = b[2][..., None] * b[0] + (1 - b[2][..., None]) * b[1]
    torch.testing.assert_close(out_a, out_b, atol=1e-12, rtol=0)
    grad = torch.randn(3, 2, 7, dtype=f64)
    out_a.backward(grad)
    out_b.backward(grad)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad, atol=1e-12, rtol=0)


def test_circular_shift_worked_examples_with_wrap_around():
    """w^g = [0.1, 0.2, 0.3, 0.4]; s over shifts (−1, 0, +1).
    +1: w̃(i) = w(i − 1) → [0.4, 0.1, 0.2, 0.3] (location 3 wraps to 0);
    −1: [0.2, 0.3, 0.4, 0.1] (location 0 wraps to 3);
    (¼, ½, ¼): w̃(0) = ¼·0.2 + ½·0.1 + ¼·0.4 = 0.2, w̃(1) = ¼·0.3 + ½·0.2 + ¼·0.1 = 0.2,
    w̃(2) = ¼·0.4 + ½·0.3 + ¼·0.2 = 0.3, w̃(3) = ¼·0.1 + ½·0.4 + ¼·0.3 = 0.3."""
    w = torch.tensor([[[0.1, 0.2, 0.3, 0.4]]], dtype=f64)
    cases = {
        (0.0, 0.0, 1.0): [0.4, 0.1, 0.2, 0.3],
        (1.0, 0.0, 0.0): [0.2, 0.3, 0.4, 0.1],
        (0.0, 1.0, 0.0): [0.1, 0.2, 0.3, 0.4],
        (0.25, 0.5, 0.25): [0.2, 0.2, 0.3, 0.3],
    }
    for s, expected in cases.items():
        out = circular_shift(w, torch.tensor([[s]], dtype=f64))
        torch.testing.assert_close(out, torch.tensor([[expected]], dtype=f64), atol=1e-12, rtol=0)


def test_circular_shift_equals_eq8_sum_over_j():
    """w̃(i) = Σ_j w(j) s(i − j mod N) written literally, R = 2, N = 6."""
    torch.manual_seed(2)
    B, H, N, R = 2, 3, 6, 2
    w = rand_w(B, H, N)
    s = rand_w(B, H, 2 * R + 1)
    ref = torch.zeros(B, H, N, dtype=f64)
    for i in range(N):
        for j in range(N):
            delta = (i - j) % N  # shift that moves j to i, as an offset in −R … R
            delta = delta - N if delta > N // 2 else delta
            if -R <= delta <= R:
                ref[..., i] += w[..., j] * s[..., R + delta]
    torch.testing.assert_close(circular_shift(w, s), ref, atol=1e-12, rtol=0)
    # R = 0: the only shift keeps the weighting
    torch.testing.assert_close(circular_shift(w, torch.ones(B, H, 1, dtype=f64)), w)


def test_sharpening_worked_example_and_no_underflow():
    """γ = 2: [0.5, 0.25, 0.25, 0]² = [0.25, 0.0625, 0.0625, 0] / 0.375 = [2/3, 1/6, 1/6, 0]."""
    w = torch.tensor([[[0.5, 0.25, 0.25, 0.0]]], dtype=f64)
    out = sharpen(w, torch.tensor([[2.0]], dtype=f64))
    expected = torch.tensor([[[2 / 3, 1 / 6, 1 / 6, 0.0]]], dtype=f64)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(sharpen(w, torch.ones(1, 1, dtype=f64)), w, atol=1e-12, rtol=0)
    # float32, N = 128, γ = 200: the naive w̃^γ underflows to 0/0; the result must be the
    # one-hot of the argmax, not NaN
    wide = torch.full((1, 1, 128), 1.0)
    wide[0, 0, 5] = 1.5
    wide = wide / wide.sum()
    assert torch.isnan((wide**200) / (wide**200).sum()).any()  # what eq. 9 does naively
    sharp = sharpen(wide, torch.tensor([[200.0]]))
    assert torch.isfinite(sharp).all()
    torch.testing.assert_close(
        sharp, F.one_hot(torch.tensor([[5]]), 128).float(), atol=1e-6, rtol=0
    )


def test_weightings_sum_to_one_after_every_stage():
    torch.manual_seed(3)
    B, H, N, W = 4, 2, 10, 5
    M = torch.randn(B, N, W)
    raw = torch.randn(B, H, head_param_size(W, 1)) * 3
    p = squash_head(raw, W, 1)
    w_prev = torch.softmax(torch.randn(B, H, N), -1)
    w_c = content_addressing(p.k, p.beta, M)
    w_g = interpolate(w_c, w_prev, p.g)
    w_tilde = circular_shift(w_g, p.s)
    w = sharpen(w_tilde, p.gamma)
    for stage in (w_c, w_g, w_tilde, w):
        assert (stage >= 0).all()
        torch.testing.assert_close(stage.sum(-1), torch.ones(B, H), atol=1e-6, rtol=0)
    torch.testing.assert_close(address(p.k, p.beta, p.g, p.s, p.gamma, w_prev, M), w)


def test_squashing_ranges_at_extreme_inputs():
    W, R = 4, 1
    for value in (-50.0, 0.0, 50.0):
        raw = torch.full((2, 3, head_param_size(W, R)), value)
        p = squash_head(raw, W, R)
        assert (p.beta >= 0).all() and ((p.g >= 0) & (p.g <= 1)).all()
        assert (p.gamma >= 1).all() and (p.k.abs() <= 1).all()
        torch.testing.assert_close(p.s.sum(-1), torch.ones(2, 3), atol=1e-6, rtol=0)
        e, a = squash_write(torch.full((2, 1, 2 * W), value))
        assert ((e >= 0) & (e <= 1)).all() and (a.abs() <= 1).all()
    p0 = squash_head(torch.zeros(1, 1, head_param_size(W, R)), W, R)
    torch.testing.assert_close(p0.gamma, torch.full((1, 1), 1 + math.log(2.0)))  # 1 + softplus(0)


# ----------------------------------------------------------------------- read and write


def test_erase_with_e_one_clears_exactly_the_focused_row():
    torch.manual_seed(4)
    M = torch.randn(2, 6, 3)
    w = F.one_hot(torch.tensor([[2], [5]]), 6).float()  # (2, 1, 6)
    out = erase_add_write(M, w, torch.ones(2, 1, 3), torch.zeros(2, 1, 3))
    expected = M.clone()
    expected[0, 2] = 0.0
    expected[1, 5] = 0.0
    assert torch.equal(out, expected)


def test_write_then_read_returns_the_written_vector():
    torch.manual_seed(5)
    M = torch.randn(3, 8, 4)
    w = F.one_hot(torch.tensor([[1], [4], [7]]), 8).float()  # (3, 1, 8)
    v = torch.tanh(torch.randn(3, 1, 4))
    M_new = erase_add_write(M, w, torch.ones(3, 1, 4), v)
    torch.testing.assert_close(read(M_new, w), v, atol=1e-7, rtol=0)
    # and reading a soft weighting is the weighted sum of rows (eq. 2)
    w_soft = rand_w(3, 2, 8, dtype=torch.float32)
    ref = (w_soft[..., None] * M[:, None]).sum(2)  # (3, 2, 4)
    torch.testing.assert_close(read(M, w_soft), ref, atol=1e-6, rtol=0)


def test_two_write_heads_match_eq3_eq4_product_and_sum():
    """M̃ = M ∘ ∏_h (1 − w^h e^hᵀ), M = M̃ + Σ_h w^h a^hᵀ, written with outer products."""
    torch.manual_seed(6)
    M = torch.randn(2, 5, 3, dtype=f64)
    w = rand_w(2, 2, 5)
    e = torch.rand(2, 2, 3, dtype=f64)
    a = torch.randn(2, 2, 3, dtype=f64)
    erase = (1 - torch.einsum("bn,bw->bnw", w[:, 0], e[:, 0])) * (
        1 - torch.einsum("bn,bw->bnw", w[:, 1], e[:, 1])
    )
    add = torch.einsum("bn,bw->bnw", w[:, 0], a[:, 0]) + torch.einsum(
        "bn,bw->bnw", w[:, 1], a[:, 1]
    )
    torch.testing.assert_close(erase_add_write(M, w, e, a), M * erase + add, atol=1e-12, rtol=0)


def test_batched_equals_unbatched():
    torch.manual_seed(7)
    B, H, N, W = 4, 2, 9, 3
    M = torch.randn(B, N, W, dtype=f64)
    p = squash_head(torch.randn(B, H, head_param_size(W, 1), dtype=f64), W, 1)
    w_prev = rand_w(B, H, N)
    e, a = squash_write(torch.randn(B, H, 2 * W, dtype=f64))
    w = address(p.k, p.beta, p.g, p.s, p.gamma, w_prev, M)
    M_new = erase_add_write(M, w, e, a)
    r = read(M_new, w)
    for b in range(B):
        one = slice(b, b + 1)
        w_b = address(p.k[one], p.beta[one], p.g[one], p.s[one], p.gamma[one], w_prev[one], M[one])
        torch.testing.assert_close(w_b, w[one], atol=1e-12, rtol=0)
        M_b = erase_add_write(M[one], w_b, e[one], a[one])
        torch.testing.assert_close(M_b, M_new[one], atol=1e-12, rtol=0)
        torch.testing.assert_close(read(M_b, w_b), r[one], atol=1e-12, rtol=0)


# ---------------------------------------------------------------------------- gradcheck


def test_gradcheck_each_stage_float64():
    torch.manual_seed(8)
    B, H, N, W = 2, 2, 5, 3

    def leaf(t):
        return t.to(f64).requires_grad_()

    k, M = leaf(torch.randn(B, H, W)), leaf(torch.randn(B, N, W))
    beta, g = leaf(torch.rand(B, H) * 3), leaf(torch.rand(B, H))
    w1, w2 = leaf(rand_w(B, H, N)), leaf(rand_w(B, H, N))
    s, gamma = leaf(rand_w(B, H, 3)), leaf(1 + torch.rand(B, H) * 3)
    e, a = leaf(torch.rand(B, H, W)), leaf(torch.randn(B, H, W))
    checks = [
        (cosine_similarity, (k, M)),
        (content_addressing, (k, beta, M)),
        (interpolate, (w1, w2, g)),
        (circular_shift, (w1, s)),
        (sharpen, (w1, gamma)),
        (read, (M, w1)),
        (erase_add_write, (M, w1, e, a)),
        (lambda raw: tuple(vars(squash_head(raw, W, 1)).values()), (leaf(torch.randn(B, H, 9)),)),
        (squash_write, (leaf(torch.randn(B, H, 2 * W)),)),
    ]
    for fn, args in checks:
        assert gradcheck(fn, args, eps=1e-6, atol=1e-7), fn


def test_gradcheck_whole_addressing_chain_from_raw_emissions():
    """raw controller outputs → squash → eq. 5–9 → read and erase/add write."""
    torch.manual_seed(9)
    B, H, N, W = 2, 2, 6, 3
    raw = torch.randn(B, H, head_param_size(W, 1), dtype=f64, requires_grad=True)
    raw_w = torch.randn(B, H, 2 * W, dtype=f64, requires_grad=True)
    w_prev = rand_w(B, H, N).requires_grad_()
    M = torch.randn(B, N, W, dtype=f64, requires_grad=True)

    def chain(raw, raw_w, w_prev, M):
        p = squash_head(raw, W, 1)
        w = address(p.k, p.beta, p.g, p.s, p.gamma, w_prev, M)
        e, a = squash_write(raw_w)
        return read(M, w), erase_add_write(M, w, e, a)

    assert gradcheck(chain, (raw, raw_w, w_prev, M), eps=1e-6, atol=1e-7)
