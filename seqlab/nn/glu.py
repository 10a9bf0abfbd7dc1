"""Gated linear units and the ConvS2S convolutional block.

Dauphin et al. 2017 ("Language Modeling with Gated Convolutional Networks"), eq. 1:

    h(X) = (X W + b) ⊗ σ(X V + c)

Gehring et al. 2017 ("Convolutional Sequence to Sequence Learning"), §3.2–3.5: a block
convolves a window of k inputs to Y = [A B] ∈ R^{2d}, gates it with
v([A B]) = A ⊗ σ(B), and adds a residual connection scaled by √0.5 (§3.4):

    h_i^l = (v(W^l [h_{i−k/2}^{l−1}, …, h_{i+k/2}^{l−1}] + b_w^l) + h_i^{l−1}) · √0.5

The gradient of A ⊗ σ(B) has the path ∇A ⊗ σ(B) without a down-scaling factor, which is
why the notes (002, "Gated Convolutional Network") say gating reduces vanishing gradients.

Shapes (batch first): x (B, T, C); the convolution maps C channels to 2C = [A B].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.conv import causal_padding, same_padding
from seqlab.nn.dropout import Dropout

residual_scale = math.sqrt(0.5)
"""Gehring 2017 §3.4: (h + x)·√0.5 keeps the variance of a sum of two equal-variance terms."""


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """Readable GLU: split x = [A B] in two halves along ``dim``, return A ⊗ σ(B).

    Dauphin 2017, eq. 1; Gehring 2017, §3.2. A is the first half (as ``F.glu``).

    Shapes:
        x: (..., 2C, ...) -> (..., C, ...)
    """
    A, B = x.chunk(2, dim=dim)  # (..., C, ...) each
    return A * torch.sigmoid(B)  # (..., C, ...)


class GLU(nn.Module):
    """h = A ⊗ σ(B) with [A B] = x split along ``dim`` (Dauphin 2017, eq. 1).

    Fast path ``F.glu``; equal to the readable ``glu`` (tested: values and gradients).

    Shapes:
        x: (..., 2C) -> (..., C) for dim = −1
    """

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, dim=self.dim)  # (..., C)


class ConvGLUBlock(nn.Module):
    """One ConvS2S block: dropout → conv (C → 2C) → GLU → residual, scaled by √0.5.

        [A B] = W ⋆ dropout(x) + b_w          (k-wide window, cross-correlation)
        h     = (A ⊗ σ(B) + x) · √0.5

    Encoder (``causal=False``): zero padding (k − 1)/2 on both sides, k odd, output length
    T. Decoder (``causal=True``): k − 1 zeros on the left only, so output t depends only on
    inputs ≤ t (Gehring §3.2 pads k − 1 on both sides and drops the last k − 1 outputs;
    the result is the same). ``step`` decodes one position from a buffer of the last
    k − 1 inputs and equals the full causal forward.

    Init (Gehring §3.5): W ~ N(0, std = √(4p / (k·C))), p = 1 − dropout the retention
    probability of the dropout on the block's input, fan-in k·C; the factor 4 compensates
    the GLU output having about ¼ of the variance of its input (§3.5, appendix A). b_w = 0.

    Deviations: no weight normalisation (the paper uses it, §3.5); the init above is the
    paper's. The attention that Gehring adds to each decoder block lives in the model.

    Shapes:
        x: (B, T, C) -> h: (B, T, C)
        step: x_t (B, C), buffer (B, k − 1, C) | None -> (h_t (B, C), buffer (B, k − 1, C))
    """

    def __init__(
        self, channels: int, kernel_size: int, dropout: float = 0.0, causal: bool = False
    ) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"kernel_size must be >= 1, got {kernel_size}")
        if not causal and kernel_size % 2 == 0:
            raise ValueError(f"a non-causal (encoder) block needs an odd kernel, got {kernel_size}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.channels = channels
        self.kernel_size = kernel_size
        self.causal = causal
        self.pad = causal_padding(kernel_size) if causal else same_padding(kernel_size)
        self.dropout = Dropout(dropout)
        self.conv = nn.Conv1d(channels, 2 * channels, kernel_size)  # W^l, b_w^l
        self.glu = GLU(dim=1)  # channel axis of (B, 2C, T)
        p = 1.0 - dropout  # retention probability
        std = math.sqrt(4.0 * p / (kernel_size * channels))
        nn.init.normal_(self.conv.weight, mean=0.0, std=std)
        nn.init.zeros_(self.conv.bias)

    def forward(self, x: Tensor) -> Tensor:
        xc = self.dropout(x).transpose(1, 2)  # (B, C, T)
        xc = F.pad(xc, self.pad)  # (B, C, T + k − 1)
        Y = self.conv(xc)  # (B, 2C, T) = [A B]
        h = self.glu(Y).transpose(1, 2)  # (B, T, C)
        return (h + x) * residual_scale  # (B, T, C)

    def step(self, x_t: Tensor, buffer: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Incremental decoding of one position (``causal=True`` only).

        ``buffer`` holds the block's last k − 1 inputs (None = start of the sequence, i.e.
        the zero left padding of ``forward``). Returns h_t and the updated buffer. Meant
        for eval mode: in training mode the dropout masks would differ from ``forward``'s.

        Shapes:
            x_t: (B, C)   buffer: (B, k − 1, C) | None
            returns: h_t (B, C), buffer (B, k − 1, C)
        """
        if not self.causal:
            raise RuntimeError("step() needs a causal (decoder) block")
        B, C = x_t.shape
        if buffer is None:
            buffer = x_t.new_zeros(B, self.kernel_size - 1, C)  # (B, k − 1, C)
        window = torch.cat([buffer, x_t[:, None, :]], dim=1)  # (B, k, C)
        Y = self.conv(self.dropout(window).transpose(1, 2))  # (B, 2C, 1)
        h_t = self.glu(Y)[:, :, 0]  # (B, C)
        return (h_t + x_t) * residual_scale, window[:, 1:, :]  # (B, C), (B, k − 1, C)
