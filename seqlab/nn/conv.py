"""Convolution: output sizes, the notes' worked-example forms, matmul forms, thin layers.

Two operations share the name "convolution" and the notes use both (004, "Note: indexing
conventions are inconsistent"):

* **Maths convolution** (flipped kernel), the notes' definition and their 1-D and 2-D
  translate-and-scale examples:

      (a ∗ b)_t = Σ_τ a_τ b_{t−τ}            (A ∗ B)_ij = Σ_s Σ_t A_st B_{i−s, j−t}

  It is commutative (a ∗ b = b ∗ a). The notes' examples are *full* convolutions: output
  length n + K − 1, e.g. (2, −1, 1) ∗ (1, 1, 2) = (2, 1, 4, −1, 2). See ``convolve1d``,
  ``convolve2d`` and ``convolution_matrix`` (the notes' banded matrix).

* **Cross-correlation** (no flip), what deep learning calls "convolution" and what
  ``F.conv1d`` / ``F.conv2d`` compute; the notes' convolution layer

      y_{i,t} = Σ_j Σ_τ w_{i,j,τ} x_{j,t+τ}   = Σ_j (x_j ∗ flip(w_{i,j}))_t

  and their 5×5-image example ("inner product of the patch and the filter" → 3×3 result
  [[4,3,4],[2,4,3],[2,3,4]]; that filter is symmetric under flipping, so both conventions
  agree there). Here τ runs over 0..K−1 (the notes centre it, −R..R; this only shifts t).
  See ``conv1d_toeplitz``, ``conv1d_as_matmul``, ``conv2d_as_matmul``, ``Conv1d``.

Output size (notes 004: ⌊(d − k)/s⌋ + 1; PyTorch's general form with padding/dilation in
``conv_output_size``). Backprop of the conv layer (notes 004, "Backprop Updates"):
``conv1d_input_grad`` and ``conv1d_weight_grad``.

Shapes: channels-first for the functional forms as in PyTorch, (B, C, T) and
(B, C, H, W); the sequence layer ``Conv1d`` is batch-first (B, T, C) like the rest of
seqlab.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Padding1d = int | Literal["valid", "same", "causal"]
PoolKind = Literal["max", "avg"]


def conv_output_size(d: int, k: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Number of output positions of a convolution (or pooling) along one axis.

        d_out = ⌊(d + 2p − dil·(k − 1) − 1) / s⌋ + 1

    With p = 0, dil = 1 this is the notes' ⌊(d − k)/s⌋ + 1 (004, "Convolution: Stride");
    with s = 1 it is d − k + 1 (5×5 image, 3×3 filter → 3×3), and a 3×3 filter with a one-
    pixel zero border keeps d (004, "Zero Padding"). Same formula as ``nn.Conv*d`` /
    ``nn.MaxPool*d`` (ceil_mode=False).

    Raises:
        ValueError: non-positive d, k, stride or dilation; negative padding; or a
            (dilated) kernel larger than the padded input.
    """
    if d < 1 or k < 1:
        raise ValueError(f"input size and kernel size must be >= 1, got d={d}, k={k}")
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if dilation < 1:
        raise ValueError(f"dilation must be >= 1, got {dilation}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    span = dilation * (k - 1) + 1  # receptive field of one output position
    if span > d + 2 * padding:
        raise ValueError(
            f"kernel (k={k}, dilation={dilation}, span {span}) is larger than the padded "
            f"input (d={d} + 2·padding={padding} = {d + 2 * padding})"
        )
    return (d + 2 * padding - span) // stride + 1


def same_padding(k: int, dilation: int = 1) -> tuple[int, int]:
    """(left, right) zero padding that keeps the length at stride 1 ("same").

    Total dil·(k − 1); for even k the extra zero goes on the right, as ``padding="same"``
    in ``nn.Conv1d``. For odd k both sides get (k − 1)/2 (the ConvS2S encoder).
    """
    total = dilation * (k - 1)
    return total // 2, total - total // 2


def causal_padding(k: int, dilation: int = 1) -> tuple[int, int]:
    """(left, right) = (dil·(k − 1), 0): output t sees inputs ≤ t only (ConvS2S decoder)."""
    return dilation * (k - 1), 0


# --- the notes' maths convolution (flipped kernel, full) ---------------------------------


def convolve1d(a: Tensor, b: Tensor) -> Tensor:
    """Full maths convolution (a ∗ b)_t = Σ_τ a_τ b_{t−τ}, t = 0..n+K−2 (notes 004).

    Computed as the cross-correlation of the zero-padded a with flip(b).
    Example (notes): (2, −1, 1) ∗ (1, 1, 2) = (2, 1, 4, −1, 2).

    Shapes:
        a: (n,)   b: (K,)   returns: (n + K − 1,)
    """
    K = b.shape[0]
    a_pad = F.pad(a[None, None], (K - 1, K - 1))  # (1, 1, n + 2K − 2)
    return F.conv1d(a_pad, b.flip(0)[None, None])[0, 0]  # (n + K − 1,)


def convolve2d(A: Tensor, B: Tensor) -> Tensor:
    """Full 2-D maths convolution (A ∗ B)_ij = Σ_s Σ_t A_st B_{i−s, j−t} (notes 004).

    Example (notes): [[1,3,1],[0,−1,1],[2,2,−1]] ∗ [[1,2],[0,−1]]
    = [[1,5,7,2],[0,−2,−4,1],[2,6,4,−3],[0,−2,−2,1]].

    Shapes:
        A: (n1, n2)   B: (K1, K2)   returns: (n1 + K1 − 1, n2 + K2 − 1)
    """
    K1, K2 = B.shape
    A_pad = F.pad(A[None, None], (K2 - 1, K2 - 1, K1 - 1, K1 - 1))  # (1, 1, n1+2K1−2, n2+2K2−2)
    return F.conv2d(A_pad, B.flip(0, 1)[None, None])[0, 0]  # (n1 + K1 − 1, n2 + K2 − 1)


def convolution_matrix(b: Tensor, n: int) -> Tensor:
    """The notes' banded matrix M with M a = a ∗ b (full maths convolution).

        M[t, τ] = b_{t−τ}  (0 where t − τ ∉ 0..K−1): column τ is b shifted down by τ.

    Notes 004: (2, −1, 1) ∗ (1, 1, 2) = [[1,·,·],[1,1,·],[2,1,1],[·,2,1],[·,·,2]] (2,−1,1)ᵀ.

    Shapes:
        b: (K,)   returns: (n + K − 1, n)
    """
    K = b.shape[0]
    t = torch.arange(n + K - 1, device=b.device)[:, None]  # (n + K − 1, 1)
    tau = torch.arange(n, device=b.device)[None, :]  # (1, n)
    lag = t - tau  # (n + K − 1, n)
    inside = (lag >= 0) & (lag < K)  # (n + K − 1, n)
    return torch.where(inside, b[lag.clamp(0, K - 1)], b.new_zeros(()))  # (n + K − 1, n)


# --- deep-learning convolution (cross-correlation) as a matrix product ------------------


def conv1d_toeplitz(w: Tensor, n: int) -> Tensor:
    """Toeplitz matrix T of the valid cross-correlation: (T x)_t = Σ_τ w_τ x_{t+τ}.

        T[t, t + τ] = w_τ,  t = 0..n−K,  τ = 0..K−1 (0 elsewhere)

    T @ x == F.conv1d(x, w) for one channel (deep-learning convention, no flip). The
    notes' ``convolution_matrix`` is the same construction for the flipped, full case.

    Shapes:
        w: (K,)   returns: (n − K + 1, n)
    """
    K = w.shape[0]
    n_out = conv_output_size(n, K)
    t = torch.arange(n_out, device=w.device)[:, None]  # (n − K + 1, 1)
    j = torch.arange(n, device=w.device)[None, :]  # (1, n)
    tau = j - t  # (n − K + 1, n)
    inside = (tau >= 0) & (tau < K)  # (n − K + 1, n)
    return torch.where(inside, w[tau.clamp(0, K - 1)], w.new_zeros(()))  # (n − K + 1, n)


def conv1d_as_matmul(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
) -> Tensor:
    """``F.conv1d`` as im2col + one matrix product (the notes' "convolution can also be
    viewed as matrix multiplication ... this is how convolution is typically implemented").

        y_{b,i,t} = bias_i + Σ_j Σ_τ w_{i,j,τ} x_{b, j, s·t + dil·τ − p}   (cross-correlation)

    Shapes:
        x: (B, C_in, T)   w: (C_out, C_in, K)   bias: (C_out,)
        returns: (B, C_out, T_out), T_out = conv_output_size(T, K, stride, padding, dilation)
    """
    B, C_in, T = x.shape
    C_out, _, K = w.shape
    conv_output_size(T, K, stride, padding, dilation)  # validates the combination
    x = F.pad(x, (padding, padding))  # (B, C_in, T + 2p)
    span = dilation * (K - 1) + 1
    patches = x.unfold(2, span, stride)[..., ::dilation]  # (B, C_in, T_out, K)
    T_out = patches.shape[2]
    cols = patches.permute(0, 2, 1, 3).reshape(B, T_out, C_in * K)  # (B, T_out, C_in·K)
    y = cols @ w.reshape(C_out, C_in * K).T  # (B, T_out, C_out)
    if bias is not None:
        y = y + bias  # (B, T_out, C_out)
    return y.transpose(1, 2)  # (B, C_out, T_out)


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv2d_as_matmul(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
) -> Tensor:
    """``F.conv2d`` as im2col (``F.unfold``) + one matrix product.

        y_{b,i,r,c} = bias_i + Σ_j Σ_{u,v} w_{i,j,u,v} x_{b, j, s₁r + u − p₁, s₂c + v − p₂}

    Every column of the unfolded input is one K₁×K₂ patch of every channel; the notes'
    5×5 example is one output channel where each entry is ⟨patch, filter⟩.

    Shapes:
        x: (B, C_in, H, W)   w: (C_out, C_in, K1, K2)   bias: (C_out,)
        returns: (B, C_out, H_out, W_out)
    """
    B, C_in, H, W = x.shape
    C_out, _, K1, K2 = w.shape
    s1, s2 = _pair(stride)
    p1, p2 = _pair(padding)
    H_out = conv_output_size(H, K1, s1, p1)
    W_out = conv_output_size(W, K2, s2, p2)
    cols = F.unfold(x, (K1, K2), padding=(p1, p2), stride=(s1, s2))  # (B, C_in·K1·K2, L)
    y = w.reshape(C_out, C_in * K1 * K2) @ cols  # (B, C_out, L), L = H_out·W_out
    if bias is not None:
        y = y + bias[:, None]  # (B, C_out, L)
    return y.reshape(B, C_out, H_out, W_out)  # (B, C_out, H_out, W_out)


# --- backprop through a conv layer (notes 004, "Backprop Updates") -----------------------


def conv1d_input_grad(y_bar: Tensor, w: Tensor) -> Tensor:
    """x̄ for y = F.conv1d(x, w) (valid, stride 1), notes 004:

        x̄_{j,t} = Σ_i Σ_τ ȳ_{i,t−τ} w_{i,j,τ}   i.e.  x̄_j = Σ_i ȳ_i ∗ w_{i,j}

    where ∗ is the *full maths* convolution (ȳ zero outside 0..T−K), equivalently the
    cross-correlation of ȳ zero-padded by K − 1 on both sides with flip(w).

    Shapes:
        y_bar: (B, C_out, T − K + 1)   w: (C_out, C_in, K)   returns: (B, C_in, T)
    """
    K = w.shape[-1]
    y_pad = F.pad(y_bar, (K - 1, K - 1))  # (B, C_out, T + K − 1)
    w_flip = w.flip(-1).transpose(0, 1)  # (C_in, C_out, K)
    return F.conv1d(y_pad, w_flip)  # (B, C_in, T)


def conv1d_weight_grad(y_bar: Tensor, x: Tensor) -> Tensor:
    """w̄ for y = F.conv1d(x, w) (valid, stride 1), notes 004:

        w̄_{i,j,τ} = Σ_b Σ_t ȳ_{b,i,t} x_{b,j,t+τ}

    a valid cross-correlation of x with ȳ (the batch axis is summed like t).

    Shapes:
        y_bar: (B, C_out, T − K + 1)   x: (B, C_in, T)   returns: (C_out, C_in, K)
    """
    # Treat C_in as the batch and B as the channels summed over: (C_in, B, T) ⋆ (C_out, B, ·).
    g = F.conv1d(x.transpose(0, 1), y_bar.transpose(0, 1))  # (C_in, C_out, K)
    return g.transpose(0, 1)  # (C_out, C_in, K)


# --- thin layers (fast path = PyTorch's fused convolution) -------------------------------


class Conv1d(nn.Module):
    """Batch-first 1-D convolution over time (cross-correlation, as ``nn.Conv1d``).

        y_{b,t,i} = b_i + Σ_j Σ_τ w_{i,j,τ} x_{b, s·t + dil·τ − p_left, j}

    ``padding``: an int (both sides), "valid" (0), "same" (``same_padding``) or "causal"
    (``causal_padding``: output t depends only on inputs ≤ t).

    Shapes:
        x: (B, T, C_in) -> (B, T_out, C_out)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: Padding1d = "valid",
        dilation: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if isinstance(padding, int):
            self.pad = (padding, padding)
        elif padding == "valid":
            self.pad = (0, 0)
        elif padding == "same":
            if stride != 1:
                raise ValueError("padding='same' needs stride=1")
            self.pad = same_padding(kernel_size, dilation)
        elif padding == "causal":
            self.pad = causal_padding(kernel_size, dilation)
        else:
            raise ValueError(f"unknown padding {padding!r}")
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size, stride=stride, dilation=dilation, bias=bias
        )

    def output_size(self, T: int) -> int:
        k, s, d = self.conv.kernel_size[0], self.conv.stride[0], self.conv.dilation[0]
        return conv_output_size(T + sum(self.pad), k, s, 0, d)

    def forward(self, x: Tensor) -> Tensor:
        x = F.pad(x.transpose(1, 2), self.pad)  # (B, C_in, T + p_left + p_right)
        return self.conv(x).transpose(1, 2)  # (B, T_out, C_out)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (channels-first images, cross-correlation) plus ``output_size``.

    Shapes:
        x: (B, C_in, H, W) -> (B, C_out, H_out, W_out)
    """

    def output_size(self, H: int, W: int) -> tuple[int, int]:
        if isinstance(self.padding, str):
            raise ValueError("output_size needs integer padding")
        return (
            conv_output_size(H, self.kernel_size[0], self.stride[0], self.padding[0]),
            conv_output_size(W, self.kernel_size[1], self.stride[1], self.padding[1]),
        )


def pool2d(
    x: Tensor,
    kind: PoolKind,
    size: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
) -> Tensor:
    """Max or average pooling over each K₁×K₂ pooling group (notes 004):

        max: y_i = max_{j ∈ group i} z_j        avg: y_i = (1/|group|) Σ_{j ∈ group i} z_j

    stride defaults to the pool size (no overlap, the notes' 2×2/stride-2 setting); output
    size per axis is ``conv_output_size``. Average pooling counts padded zeros
    (``count_include_pad=True``, PyTorch's default).

    Shapes:
        x: (B, C, H, W) -> (B, C, H_out, W_out)
    """
    stride = size if stride is None else stride
    if kind == "max":
        return F.max_pool2d(x, size, stride, padding)  # (B, C, H_out, W_out)
    if kind == "avg":
        return F.avg_pool2d(x, size, stride, padding)  # (B, C, H_out, W_out)
    raise ValueError(f"unknown pooling kind {kind!r}")


def pool1d(x: Tensor, kind: PoolKind, size: int, stride: int | None = None) -> Tensor:
    """Max or average pooling over time of a batch-first sequence (see ``pool2d``).

    Shapes:
        x: (B, T, C) -> (B, T_out, C), T_out = ⌊(T − size)/stride⌋ + 1
    """
    stride = size if stride is None else stride
    xc = x.transpose(1, 2)  # (B, C, T)
    if kind == "max":
        return F.max_pool1d(xc, size, stride).transpose(1, 2)  # (B, T_out, C)
    if kind == "avg":
        return F.avg_pool1d(xc, size, stride).transpose(1, 2)  # (B, T_out, C)
    raise ValueError(f"unknown pooling kind {kind!r}")
