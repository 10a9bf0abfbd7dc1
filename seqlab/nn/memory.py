"""Neural Turing Machine memory: addressing, reading and writing (Graves, Wayne & Danihelka
2014, "Neural Turing Machines", §3).

A memory M_t ∈ R^{N×W} (the paper's N × M: N locations of width M; here the width is
called W so that ``M`` can spell the matrix) is read and written through weightings
w_t ∈ Δ^{N−1} (non-negative, Σ_i w_t(i) = 1). One head's weighting is computed from the
controller's emissions in four stages, each a function below (paper Figure 2):

    w^c = softmax_i(β K[k, M_i])                        content addressing    (eq. 5–6)
    w^g = g w^c + (1 − g) w_{t−1}                       interpolation         (eq. 7)
    w̃(i) = Σ_j w^g(j) s(i − j mod N)                    convolutional shift   (eq. 8)
    w(i) = w̃(i)^γ / Σ_j w̃(j)^γ                          sharpening            (eq. 9)

then read  r = Σ_i w(i) M_i (eq. 2)  and write  M_t = M_{t−1} ∘ (1 − w eᵀ) + w aᵀ (eq. 3–4).
:func:`squash_head` maps a controller's unconstrained outputs to the heads' parameter
ranges (β ≥ 0, g ∈ (0, 1), s a softmax over the shifts −R … R, γ ≥ 1, e ∈ (0, 1)).

Every function is batched over B examples and H heads at once: one call addresses all
heads of a step. Letters: B batch, H heads, N locations, W width, R shift range (the
shifts are −R … R, 2R + 1 of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "HeadParams",
    "address",
    "circular_shift",
    "content_addressing",
    "cosine_similarity",
    "erase_add_write",
    "head_param_size",
    "interpolate",
    "read",
    "sharpen",
    "squash_head",
    "squash_write",
]


def cosine_similarity(k: Tensor, M: Tensor, eps: float = 1e-8) -> Tensor:
    """K[k, M_i] = k · M_i / (‖k‖ ‖M_i‖ + ε), Graves et al. 2014 eq. 6, for every location i.

    Shapes:
        k: (B, H, W) keys      M: (B, N, W) memory      returns K: (B, H, N)

    Deviations: ε (1e-8) in the denominator, so that an all-zero key or row gives 0 rather
    than 0/0 (Collier & Beel 2018 do the same).
    """
    dot = torch.bmm(k, M.transpose(1, 2))  # (B, H, N)
    norm_k = torch.linalg.vector_norm(k, dim=-1)  # (B, H)
    norm_M = torch.linalg.vector_norm(M, dim=-1)  # (B, N)
    return dot / (norm_k[:, :, None] * norm_M[:, None, :] + eps)  # (B, H, N)


def content_addressing(k: Tensor, beta: Tensor, M: Tensor, eps: float = 1e-8) -> Tensor:
    """w^c_t(i) = exp(β K[k, M_i]) / Σ_j exp(β K[k, M_j]), Graves et al. 2014 eq. 5.

    β ≥ 0 is the key strength: β = 0 gives the uniform weighting, large β focuses on the
    most similar row.

    Shapes:
        k: (B, H, W)   beta: (B, H)   M: (B, N, W)   returns w_c: (B, H, N), rows sum to 1
    """
    K = cosine_similarity(k, M, eps)  # (B, H, N)
    return torch.softmax(beta[..., None] * K, dim=-1)  # (B, H, N)


def interpolate(w_c: Tensor, w_prev: Tensor, g: Tensor) -> Tensor:
    """w^g_t = g_t w^c_t + (1 − g_t) w_{t−1}, Graves et al. 2014 eq. 7 (g ∈ (0, 1)).

    g = 1 takes the content weighting, g = 0 keeps the previous one (then shifts it:
    location-based iteration).

    Shapes:
        w_c, w_prev: (B, H, N)   g: (B, H)   returns w_g: (B, H, N)
    """
    # torch.lerp(start, end, weight) = start + weight (end − start) = g w^c + (1 − g) w_{t−1}
    return torch.lerp(w_prev, w_c, g[..., None])  # (B, H, N)


def circular_shift(w_g: Tensor, s: Tensor) -> Tensor:
    """w̃_t(i) = Σ_{j=0}^{N−1} w^g_t(j) s_t(i − j), indices mod N, Graves et al. 2014 eq. 8.

    ``s[..., R + δ]`` is the weight of the shift by δ ∈ {−R, …, R} (s is zero elsewhere),
    so w̃(i) = Σ_δ s_δ w^g(i − δ): a shift of +1 moves the focus from location i to i + 1,
    and location N − 1 wraps round to 0. A circular convolution of w^g with s.

    Shapes:
        w_g: (B, H, N)   s: (B, H, 2R+1), rows sum to 1   returns w_tilde: (B, H, N)

    Deviations: none; computed on windows of the circularly padded w^g (no N × N
    circulant matrix).
    """
    R = (s.shape[-1] - 1) // 2
    if s.shape[-1] % 2 == 0 or w_g.shape[-1] <= R:
        raise ValueError(f"s must hold 2R+1 shift weights with R < N, got {tuple(s.shape)}")
    if R == 0:
        return w_g * s  # (B, H, N)  the only shift is 0 and s = 1
    padded = torch.cat([w_g[..., -R:], w_g, w_g[..., :R]], dim=-1)  # (B, H, N + 2R) wrapped
    windows = padded.unfold(-1, 2 * R + 1, 1)  # (B, H, N, 2R+1)  [i, j] = w^g(i − R + j)
    # w̃(i) = Σ_δ s_δ w^g(i − δ) = Σ_j windows[i, j] s_{R−j}: s reversed along the shifts
    return (windows @ s.flip(-1)[..., None]).squeeze(-1)  # (B, H, N)


def sharpen(w_tilde: Tensor, gamma: Tensor) -> Tensor:
    """w_t(i) = w̃_t(i)^γ / Σ_j w̃_t(j)^γ, Graves et al. 2014 eq. 9 (γ ≥ 1).

    Counteracts the blur of the shift: γ = 1 leaves w̃ unchanged, γ → ∞ tends to the
    one-hot of argmax w̃.

    Shapes:
        w_tilde: (B, H, N) non-negative, not all zero   gamma: (B, H)   returns w: (B, H, N)

    Deviations: w̃ is first divided by its maximum over i (a constant that cancels in the
    ratio, so the function is the same) so that w̃^γ cannot underflow to 0/0 for large γ;
    the maximum is detached since the value does not depend on it.
    """
    scale = w_tilde.amax(-1, keepdim=True).detach()  # (B, H, 1)
    powered = (w_tilde / scale).pow(gamma[..., None])  # (B, H, N), its maximum is 1
    return powered / powered.sum(-1, keepdim=True)  # (B, H, N)


def address(
    k: Tensor,
    beta: Tensor,
    g: Tensor,
    s: Tensor,
    gamma: Tensor,
    w_prev: Tensor,
    M: Tensor,
    eps: float = 1e-8,
) -> Tensor:
    """The addressing chain of Graves et al. 2014 Figure 2: eq. 5–6 → 7 → 8 → 9.

    Shapes:
        k: (B, H, W)   beta, g, gamma: (B, H)   s: (B, H, 2R+1)   w_prev: (B, H, N)
        M: (B, N, W)   returns w: (B, H, N), rows sum to 1
    """
    w_c = content_addressing(k, beta, M, eps)  # (B, H, N)
    w_g = interpolate(w_c, w_prev, g)  # (B, H, N)
    w_tilde = circular_shift(w_g, s)  # (B, H, N)
    return sharpen(w_tilde, gamma)  # (B, H, N)


def read(M: Tensor, w: Tensor) -> Tensor:
    """r_t = Σ_i w_t(i) M_t(i), Graves et al. 2014 eq. 2, for every read head.

    Shapes:
        M: (B, N, W)   w: (B, H, N)   returns r: (B, H, W)
    """
    return torch.bmm(w, M)  # (B, H, W)


def erase_add_write(M_prev: Tensor, w: Tensor, e: Tensor, a: Tensor) -> Tensor:
    """Erase then add, Graves et al. 2014 eq. 3–4, for H write heads:

        M̃_t(i) = M_{t−1}(i) ∏_h [1 − w_t^h(i) e_t^h]       (erase, e ∈ (0, 1)^W)
        M_t(i) = M̃_t(i) + Σ_h w_t^h(i) a_t^h              (add)

    i.e. M_t = M_{t−1} ∘ (1 − w eᵀ) + w aᵀ for one head. With e = 1 and a one-hot w the
    focused row is cleared and replaced by a. The paper notes that the erasures of several
    heads commute (a product) and so do the additions (a sum).

    Shapes:
        M_prev: (B, N, W)   w: (B, H, N)   e, a: (B, H, W)   returns M: (B, N, W)
    """
    M_tilde = M_prev
    for h in range(w.shape[1]):  # H_w is 1 or 2: a loop is cheaper than a (B, H, N, W) product
        w_h = w[:, h, :, None]  # (B, N, 1)
        # M̃ ∘ (1 − w eᵀ) = M̃ − (M̃ ∘ w) ∘ eᵀ, one fused multiply-add
        M_tilde = torch.addcmul(M_tilde, M_tilde * w_h, e[:, h, None, :], value=-1.0)  # (B, N, W)
    M = M_tilde
    for h in range(w.shape[1]):
        M = torch.addcmul(M, w[:, h, :, None], a[:, h, None, :])  # (B, N, W)  + w aᵀ
    return M


@dataclass
class HeadParams:
    """The squashed addressing emissions of H heads for one step (Graves et al. 2014 §3.3).

    Shapes:
        k: (B, H, W)  beta: (B, H)  g: (B, H)  s: (B, H, 2R+1)  gamma: (B, H)
    """

    k: Tensor
    beta: Tensor
    g: Tensor
    s: Tensor
    gamma: Tensor


def head_param_size(W: int, R: int) -> int:
    """Raw outputs one head needs to address: k (W), β, g, s (2R + 1) and γ."""
    return W + 1 + 1 + (2 * R + 1) + 1


def squash_head(raw: Tensor, W: int, R: int) -> HeadParams:
    """Map unconstrained controller outputs to each addressing parameter's range:

        k = tanh(k̂)      β = softplus(β̂) ≥ 0      g = σ(ĝ) ∈ (0, 1)
        s = softmax(ŝ) over the 2R + 1 shifts      γ = 1 + softplus(γ̂) ≥ 1

    The raw outputs are ordered k̂, β̂, ĝ, ŝ, γ̂ (sizes W, 1, 1, 2R + 1, 1).

    Shapes:
        raw: (B, H, head_param_size(W, R))   returns HeadParams (see its shapes)

    Deviations: the paper states the ranges but not the squashing of k; tanh follows
    Collier & Beel 2018 (cosine similarity ignores ‖k‖, so this only bounds the key).
    """
    sizes = [W, 1, 1, 2 * R + 1, 1]
    if raw.shape[-1] != sum(sizes):
        raise ValueError(f"raw head outputs must have {sum(sizes)} features, got {raw.shape[-1]}")
    k_hat, beta_hat, g_hat, s_hat, gamma_hat = torch.split(raw, sizes, dim=-1)
    k = torch.tanh(k_hat)  # (B, H, W)
    beta = F.softplus(beta_hat.squeeze(-1))  # (B, H)
    g = torch.sigmoid(g_hat.squeeze(-1))  # (B, H)
    s = torch.softmax(s_hat, dim=-1)  # (B, H, 2R+1)
    gamma = 1.0 + F.softplus(gamma_hat.squeeze(-1))  # (B, H)
    return HeadParams(k, beta, g, s, gamma)


def squash_write(raw: Tensor) -> tuple[Tensor, Tensor]:
    """Erase and add vectors of the write heads from raw outputs [ê, â]:

        e = σ(ê) ∈ (0, 1)^W        a = tanh(â) ∈ (−1, 1)^W

    Shapes:
        raw: (B, H, 2W)   returns e, a: (B, H, W) each

    Deviations: the paper bounds e to (0, 1) and leaves a unconstrained; tanh on a follows
    Collier & Beel 2018.
    """
    e_hat, a_hat = raw.chunk(2, dim=-1)  # (B, H, W) each
    return torch.sigmoid(e_hat), torch.tanh(a_hat)
