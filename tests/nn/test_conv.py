"""Convolution: the notes' worked examples (004), output sizes, matmul forms, backprop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.nn.conv import (
    Conv1d,
    Conv2d,
    conv1d_as_matmul,
    conv1d_input_grad,
    conv1d_toeplitz,
    conv1d_weight_grad,
    conv2d_as_matmul,
    conv_output_size,
    convolution_matrix,
    convolve1d,
    convolve2d,
    pool1d,
    pool2d,
)

D64 = torch.float64


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=D64)


# --- notes 004 worked examples (exact: small integers, atol = 0) -------------------------


def test_notes_1d_example_is_full_maths_convolution():
    a, b = t([2, -1, 1]), t([1, 1, 2])
    expected = t([2, 1, 4, -1, 2])  # (2, −1, 1) ∗ (1, 1, 2), translate-and-scale
    torch.testing.assert_close(convolve1d(a, b), expected, atol=0, rtol=0)
    # the notes' banded matrix, column τ = b shifted down by τ
    M = t([[1, 0, 0], [1, 1, 0], [2, 1, 1], [0, 2, 1], [0, 0, 2]])
    torch.testing.assert_close(convolution_matrix(b, 3), M, atol=0, rtol=0)
    torch.testing.assert_close(M @ a, expected, atol=0, rtol=0)
    # commutativity a ∗ b = b ∗ a (notes' property), which cross-correlation lacks
    torch.testing.assert_close(convolve1d(b, a), expected, atol=0, rtol=0)
    xcorr = F.conv1d(F.pad(a[None, None], (2, 2)), b[None, None])[0, 0]
    assert not torch.equal(xcorr, expected)  # the unflipped convention gives other numbers
    torch.testing.assert_close(xcorr, convolve1d(a, b.flip(0)), atol=0, rtol=0)


def test_notes_1d_linearity():
    a, b, c = torch.randn(5, dtype=D64), torch.randn(3, dtype=D64), torch.randn(3, dtype=D64)
    lhs = convolve1d(a, 2.0 * b - 3.0 * c)
    rhs = 2.0 * convolve1d(a, b) - 3.0 * convolve1d(a, c)
    torch.testing.assert_close(lhs, rhs, atol=1e-12, rtol=0)


def test_notes_2d_example_is_full_maths_convolution():
    A = t([[1, 3, 1], [0, -1, 1], [2, 2, -1]])
    B = t([[1, 2], [0, -1]])
    expected = t([[1, 5, 7, 2], [0, -2, -4, 1], [2, 6, 4, -3], [0, -2, -2, 1]])
    torch.testing.assert_close(convolve2d(A, B), expected, atol=0, rtol=0)
    torch.testing.assert_close(convolve2d(B, A), expected, atol=0, rtol=0)  # commutative
    # translate-and-scale: 1×A + 2×(A shifted right) − 1×(A shifted down-right)
    tas = torch.zeros(4, 4, dtype=D64)
    tas[:3, :3] += 1 * A
    tas[:3, 1:] += 2 * A
    tas[1:, 1:] += -1 * A
    torch.testing.assert_close(tas, expected, atol=0, rtol=0)


IMAGE = [
    [1, 1, 1, 0, 0],
    [0, 1, 1, 1, 0],
    [0, 0, 1, 1, 1],
    [0, 0, 1, 1, 0],
    [0, 1, 1, 0, 0],
]
FILTER = [[1, 0, 1], [0, 1, 0], [1, 0, 1]]
RESULT = [[4, 3, 4], [2, 4, 3], [2, 3, 4]]


def test_notes_5x5_image_is_cross_correlation():
    x, w = t(IMAGE)[None, None], t(FILTER)[None, None]  # (1, 1, 5, 5), (1, 1, 3, 3)
    expected = t(RESULT)
    torch.testing.assert_close(F.conv2d(x, w)[0, 0], expected, atol=0, rtol=0)
    torch.testing.assert_close(conv2d_as_matmul(x, w)[0, 0], expected, atol=0, rtol=0)
    # "the value 4 is the inner product of the patch and the filter"; "3" the next patch
    assert (t(IMAGE)[:3, :3] * t(FILTER)).sum() == 4
    assert (t(IMAGE)[:3, 1:4] * t(FILTER)).sum() == 3
    assert conv_output_size(5, 3) ** 2 == 9  # "how many 3×3 patches does a 5×5 image have?"
    # the filter is flip-symmetric, so here both conventions agree
    torch.testing.assert_close(F.conv2d(x, w.flip(-1, -2))[0, 0], expected, atol=0, rtol=0)


# --- output sizes ----------------------------------------------------------------------


def test_output_size_notes_examples():
    assert conv_output_size(5, 3) == 3  # d − k + 1
    assert conv_output_size(7, 3, stride=2) == 3  # ⌊(7 − 3)/2⌋ + 1
    assert conv_output_size(8, 3, stride=2) == 3  # floor: ⌊5/2⌋ + 1
    assert conv_output_size(6, 2, stride=2) == 3  # the notes' 2×2 / stride 2 pooling
    assert conv_output_size(32, 3, padding=1) == 32  # zero border of 1 keeps a 3×3 conv "same"
    assert conv_output_size(224, 7, stride=2, padding=3) == 112  # ResNet stem
    assert conv_output_size(10, 3, dilation=2) == 6  # span 5


@pytest.mark.parametrize("d", [5, 7, 8])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("s", [1, 2, 3])
@pytest.mark.parametrize("p", [0, 1])
@pytest.mark.parametrize("dil", [1, 2])
def test_output_size_matches_pytorch(d, k, s, p, dil):
    conv = nn.Conv1d(1, 1, k, stride=s, padding=p, dilation=dil)
    assert conv(torch.zeros(1, 1, d)).shape[-1] == conv_output_size(d, k, s, p, dil)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d=3, k=4), "larger than the padded input"),
        (dict(d=5, k=3, dilation=3), "larger than the padded input"),
        (dict(d=5, k=3, stride=0), "stride"),
        (dict(d=5, k=3, padding=-1), "padding"),
        (dict(d=5, k=3, dilation=0), "dilation"),
        (dict(d=0, k=1), "must be >= 1"),
    ],
)
def test_output_size_rejects_invalid(kwargs, match):
    with pytest.raises(ValueError, match=match):
        conv_output_size(**kwargs)
    assert conv_output_size(3, 4, padding=1) == 2  # padding makes room again


# --- matrix forms == F.conv1d / F.conv2d ------------------------------------------------


def test_toeplitz_equals_conv1d():
    w, x = torch.randn(4, dtype=D64), torch.randn(3, 11, dtype=D64)  # (K,), (B, n)
    T = conv1d_toeplitz(w, 11)
    assert T.shape == (8, 11)
    ref = F.conv1d(x[:, None, :], w[None, None])[:, 0]  # (B, n − K + 1)
    torch.testing.assert_close(x @ T.T, ref, atol=1e-12, rtol=0)
    # the notes' matrix is the Toeplitz matrix of flip(b) on the zero-padded input
    a, b = torch.randn(5, dtype=D64), torch.randn(3, dtype=D64)
    lhs = conv1d_toeplitz(b.flip(0), 5 + 4) @ F.pad(a, (2, 2))
    torch.testing.assert_close(lhs, convolution_matrix(b, 5) @ a, atol=1e-12, rtol=0)


def test_toeplitz_gradcheck():
    w = torch.randn(3, dtype=D64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda w: conv1d_toeplitz(w, 6), (w,))
    assert torch.autograd.gradcheck(lambda w: convolution_matrix(w, 4), (w,))


@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 1, 1), (1, 2, 2), (3, 0, 2)])
def test_conv1d_as_matmul_equals_conv1d(stride, padding, dilation):
    x = torch.randn(2, 3, 11, dtype=D64, requires_grad=True)  # (B, C_in, T)
    w = torch.randn(4, 3, 3, dtype=D64, requires_grad=True)  # (C_out, C_in, K)
    b = torch.randn(4, dtype=D64, requires_grad=True)
    y = conv1d_as_matmul(x, w, b, stride, padding, dilation)
    y_ref = F.conv1d(x, w, b, stride, padding, dilation)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, b), g)
    grads_ref = torch.autograd.grad(y_ref, (x, w, b), g)
    for got, ref in zip(grads, grads_ref):
        torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("stride, padding", [(1, 0), (2, 1), ((1, 2), (2, 0))])
def test_conv2d_as_matmul_equals_conv2d(stride, padding):
    x = torch.randn(2, 3, 7, 6, dtype=D64, requires_grad=True)  # (B, C_in, H, W)
    w = torch.randn(4, 3, 3, 2, dtype=D64, requires_grad=True)  # (C_out, C_in, K1, K2)
    b = torch.randn(4, dtype=D64, requires_grad=True)
    y = conv2d_as_matmul(x, w, b, stride, padding)
    y_ref = F.conv2d(x, w, b, stride, padding)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, w, b), g)
    grads_ref = torch.autograd.grad(y_ref, (x, w, b), g)
    for got, ref in zip(grads, grads_ref):
        torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)


# --- backprop formulas (notes 004) vs autograd -----------------------------------------


def test_conv_backprop_formulas_match_autograd():
    x = torch.randn(2, 3, 9, dtype=D64, requires_grad=True)  # (B, J, T)
    w = torch.randn(4, 3, 3, dtype=D64, requires_grad=True)  # (I, J, K)
    y = F.conv1d(x, w)  # y_{i,t} = Σ_j Σ_τ w_{i,j,τ} x_{j,t+τ}
    y_bar = torch.randn_like(y)
    x_bar, w_bar = torch.autograd.grad(y, (x, w), y_bar)
    torch.testing.assert_close(conv1d_input_grad(y_bar, w), x_bar, atol=1e-12, rtol=0)
    torch.testing.assert_close(conv1d_weight_grad(y_bar, x.detach()), w_bar, atol=1e-12, rtol=0)


def test_conv_backprop_single_channel_is_full_maths_convolution_with_unflipped_w():
    x = torch.randn(8, dtype=D64, requires_grad=True)
    w = torch.randn(3, dtype=D64)
    y = F.conv1d(x[None, None], w[None, None])[0, 0]  # valid cross-correlation, (6,)
    y_bar = torch.randn_like(y)
    (x_bar,) = torch.autograd.grad(y, x, y_bar)
    # x̄ = ȳ ∗ w: full maths convolution of ȳ with w itself (= cross-correlation with flip(w))
    torch.testing.assert_close(convolve1d(y_bar, w), x_bar, atol=1e-12, rtol=0)
    # w̄_τ = Σ_t ȳ_t x_{t+τ}, written out
    w_bar_loop = torch.stack([(y_bar * x.detach()[tau : tau + 6]).sum() for tau in range(3)])
    w_bar = conv1d_weight_grad(y_bar[None, None], x.detach()[None, None])[0, 0]
    torch.testing.assert_close(w_bar, w_bar_loop, atol=1e-12, rtol=0)


# --- pooling -----------------------------------------------------------------------------


def test_pooling_hand_example():
    z = t([[1, 2, 5, 6], [3, 4, 7, 8], [-1, 0, 2, 2], [-3, -4, 2, 6]])[None, None]
    # 2×2 groups, stride 2 (no overlap), the notes' setting
    torch.testing.assert_close(
        pool2d(z, "avg", 2)[0, 0], t([[2.5, 6.5], [-2.0, 3.0]]), atol=0, rtol=0
    )
    torch.testing.assert_close(pool2d(z, "max", 2)[0, 0], t([[4, 8], [0, 6]]), atol=0, rtol=0)
    out = pool2d(torch.randn(2, 3, 7, 6), "max", 3, stride=2, padding=1)
    assert out.shape == (2, 3, conv_output_size(7, 3, 2, 1), conv_output_size(6, 3, 2, 1))
    with pytest.raises(ValueError, match="unknown pooling"):
        pool2d(z, "min", 2)  # type: ignore[arg-type]


def test_pool1d_batch_first():
    x = torch.randn(2, 7, 3)  # (B, T, C)
    y = pool1d(x, "max", 2)
    assert y.shape == (2, conv_output_size(7, 2, 2), 3)
    torch.testing.assert_close(y[:, 1], torch.maximum(x[:, 2], x[:, 3]), atol=0, rtol=0)
    y = pool1d(x, "avg", 3, stride=1)
    torch.testing.assert_close(y[:, 0], x[:, :3].mean(1), atol=1e-6, rtol=0)


# --- thin layers ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("k", [2, 3, 4])
def test_conv1d_same_matches_pytorch_same(k):
    layer = Conv1d(3, 5, k, padding="same")
    ref = nn.Conv1d(3, 5, k, padding="same")
    ref.load_state_dict(layer.conv.state_dict())
    x = torch.randn(2, 9, 3)  # (B, T, C)
    y = layer(x)
    assert y.shape == (2, 9, 5) and layer.output_size(9) == 9
    torch.testing.assert_close(y, ref(x.transpose(1, 2)).transpose(1, 2), atol=1e-6, rtol=0)


def test_conv1d_causal_sees_no_future():
    layer = Conv1d(3, 4, 3, padding="causal", dilation=2)
    x = torch.randn(2, 10, 3)
    y = layer(x)
    assert y.shape == (2, 10, 4)
    x2 = x.clone()
    x2[:, 6:] += torch.randn(2, 4, 3)
    y2 = layer(x2)
    torch.testing.assert_close(y2[:, :6], y[:, :6], atol=0, rtol=0)
    assert not torch.allclose(y2[:, 6:], y[:, 6:])


def test_conv1d_int_padding_and_stride_output_size():
    layer = Conv1d(2, 2, 3, stride=2, padding=1)
    assert layer(torch.randn(1, 9, 2)).shape[1] == layer.output_size(9) == 5
    with pytest.raises(ValueError, match="stride=1"):
        Conv1d(2, 2, 3, stride=2, padding="same")


def test_conv2d_output_size():
    layer = Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0))
    assert layer(torch.randn(1, 3, 7, 6)).shape[-2:] == layer.output_size(7, 6) == (4, 5)
