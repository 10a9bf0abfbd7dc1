"""ConvS2S multi-step attention and the encoder gradient scaling (Gehring et al. 2017).

Gehring et al. 2017, "Convolutional Sequence to Sequence Learning", §3.3: every decoder
layer l has its own attention. With h_i^l the output of decoder block l (its GLU
convolution plus residual), g_i the embedding of the previous target element, z_j^u the
encoder output and e_j the source input embedding (word + position):

    d_i^l  = W_d^l h_i^l + b_d^l + g_i                         (query, emb space E)
    a_ij^l = exp(d_i^l · z_j^u) / Σ_t exp(d_i^l · z_t^u)       (over real source positions)
    c_i^l  = Σ_j a_ij^l (z_j^u + e_j)                          (conditional input)

"Once c_i^l has been computed, it is simply added to the output of the corresponding
decoder layer h_i^l" (§3.3), after a linear map W_c^l back to the C channels, and the sum
is scaled by √0.5 like every residual sum (§3.4):

    h_i^l ← (h_i^l + W_c^l · (m·√(1/m)) c_i^l + b_c^l) · √0.5

§3.4, conditional input scaling: c_i^l is a weighted sum of m vectors; with uniform
weights (a_ij = 1/m) it is their mean, whose variance is 1/m of theirs. Multiplying by
m·√(1/m) = √m turns that into Σ_j (z_j + e_j)/√m, a sum of m vectors with the variance of
one of them. m is the number of real (non-pad) source positions of each row.

§3.4, gradient scaling: the encoder receives the gradient of every decoder attention; its
gradient is scaled down by the number of attention mechanisms (``scale_gradient``).

Deviations: no weight normalisation on W_d, W_c (§3.5 uses it). The authors' fairseq code
also scales d_i^l and z_j + e_j by √0.5 and attends from the GLU output before the block's
residual; seqlab follows the paper's equations above (attention on the block output h^l).

Shapes: h (B, T, C), g (B, T, E), z and z + e (B, S, E), src_mask (B, S) bool.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from seqlab.nn.glu import residual_scale
from seqlab.nn.masks import masked_softmax


class _ScaleGradient(torch.autograd.Function):
    """Identity in the forward pass; multiplies the incoming gradient by ``scale``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.view_as(x)  # (...) unchanged

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.scale, None  # (...) scaled


def scale_gradient(x: Tensor, scale: float) -> Tensor:
    """y = x in the forward pass, ∂L/∂x = scale · ∂L/∂y in the backward pass.

    Gehring 2017 §3.4: "For convolutional decoders with multiple attention, we scale the
    gradients for the encoder layers by the number of attention mechanisms we use; we
    exclude source word embeddings." ConvS2S applies it to the encoder output z with
    scale = 1 / (2 · number of attention layers) (the authors' code; keys and values each
    carry one gradient per attention layer).

    Shapes: x (...) -> (...)
    """
    if not (torch.is_grad_enabled() and x.requires_grad):  # no backward: y = x is all there
        return x  # is (decoding, and an export, which cannot trace a Python autograd Function)
    return _ScaleGradient.apply(x, scale)


class MultiStepAttention(nn.Module):
    """One decoder layer's attention of ConvS2S (Gehring 2017 §3.3–3.4); see the module
    docstring for the equations.

        d = W_d h + b_d + g
        α = masked_softmax(d zᵀ)                        (zero on padded source positions)
        c = √m · α (z + e)                              (m·√(1/m) = √m, m = real length)
        h ← (h + W_c c + b_c) · √0.5

    Init (§3.5, layers not feeding a GLU): weights N(0, 1/n_in), biases 0.

    Deviations: no weight normalisation.

    Shapes:
        h: (B, T, C)   g: (B, T, E)   z, z_plus_e: (B, S, E)   src_mask: (B, S) bool
        returns: h (B, T, C), α (B, T, S)
    """

    def __init__(self, channels: int, emb_dim: int) -> None:
        super().__init__()
        self.W_d = nn.Linear(channels, emb_dim)  # W_d^l, b_d^l: C -> E
        self.W_c = nn.Linear(emb_dim, channels)  # c_i^l back to the decoder's C channels
        for layer in (self.W_d, self.W_c):
            nn.init.normal_(layer.weight, mean=0.0, std=layer.in_features**-0.5)
            nn.init.zeros_(layer.bias)

    def forward(
        self, h: Tensor, g: Tensor, z: Tensor, z_plus_e: Tensor, src_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        d = self.W_d(h) + g  # (B, T, E)
        scores = torch.bmm(d, z.transpose(1, 2))  # (B, T, S) d_i · z_j
        alpha = masked_softmax(scores, src_mask[:, None, :])  # (B, T, S)
        m = src_mask.sum(dim=1).to(alpha.dtype)  # (B,) real source positions
        sqrt_m = m.sqrt()[:, None, None]  # (B, 1, 1) = m·√(1/m); 0 for an all-padding row
        c = torch.bmm(alpha, z_plus_e) * sqrt_m  # (B, T, E)
        return (h + self.W_c(c)) * residual_scale, alpha  # (B, T, C), (B, T, S)
