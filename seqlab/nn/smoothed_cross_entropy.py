"""Label-smoothed cross-entropy and the NLL of the same tokens, from one softmax.

Szegedy et al. 2016 §7; Vaswani et al. 2017 §5.4. For logits x ∈ ℝ^V of a token with
target y and smoothing ε, with lse = log Σ_v exp(x_v):

    nll  = lse − x_y                                   (−log p(y))
    loss = (1 − ε)·nll + ε·(lse − (1/V) Σ_v x_v)       (target (1 − ε)·onehot(y) + ε/V)
    ∂loss/∂x_v = p_v − ε/V − (1 − ε)·[v = y],   p = softmax(x)

Why a function of its own: under autocast, ``F.cross_entropy`` is on the float32 list, so a
bf16 training step copies the (N, V) logits to float32, runs log-softmax over them, and in
the backward fills a zero (N, V) tensor for the NLL term, adds the smoothing term's (N, V)
gradient to it, runs the log-softmax backward and casts the result back to bf16 — five
passes over N·V floats, plus a second forward for the NLL that perplexity needs. At the
Multi30k Transformer's shapes (N ≈ 1,300 tokens, V = 8,000) that took 25 ms of a ~300 ms
bf16 CPU training step, this function 10 ms (the step: 1.03–1.05×; docs/perf-notes-training.md
§32). Here the forward makes one softmax in the
logits' dtype (its kernel accumulates in float32) and two row maxima and a row sum; the
backward one pass, (p − ε/V)·g, and a write at the targets. Below
``SOFTMAX_ONCE_MIN_LOGITS`` logits a step is bound by operator overheads instead, and
``smoothed_cross_entropy`` takes ``F.cross_entropy`` (``path="auto"``); it does so on a GPU
too, where torch's fused CUDA kernels ran the loss in 0.67 ms against this function's 1.08
(H100, bf16, the same shapes; docs/perf-notes-gpu.md §35).

Precision: in float32 / float64 everything is exact to the dtype. In bf16, p is rounded to
bf16 (8 bits), so lse = max_v x_v − log max_v p_v is exact to 2⁻⁹ (absolute, in nats),
Σ_v x_v is rounded to bf16 before the division, and the gradient (p − ε/V)·g takes two
more bf16 roundings, with the upstream per-token gradient g rounded to bf16 first (a per-row
scale, relative 2⁻⁹: 1/N for the Trainer's mean); the target entries are computed in
float32 and rounded once.
tests/nn/test_smoothed_cross_entropy.py bounds each against a float64 reference.

Shapes:
    x: (N, V) float (any float dtype), target: (N,) long, ignore_index: rows with that
    target get loss 0, nll 0 and a zero gradient
    -> loss (N,) float32 (float64 for float64 logits), nll (N,) same, not differentiable
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


class SmoothedCrossEntropy(torch.autograd.Function):
    """loss_i, nll_i as in the module doc; saves only p = softmax(x) (N, V) in x's dtype."""

    @staticmethod
    def forward(ctx, x: Tensor, target: Tensor, ignore_index: int, eps: float):  # type: ignore[override]
        with torch.autocast(x.device.type, enabled=False):
            acc = torch.float64 if x.dtype == torch.float64 else torch.float32
            keep = target != ignore_index  # (N,)
            y = torch.where(keep, target, 0)  # (N,) valid ids everywhere
            p = torch.softmax(x, dim=-1)  # (N, V) x.dtype, float32 accumulation
            x_y = x.gather(1, y.unsqueeze(1)).squeeze(1).to(acc)  # (N,)
            # lse = x_max − log p_max: the largest p is the best-rounded one and never underflows
            lse = x.amax(dim=-1).to(acc) - torch.log(p.amax(dim=-1).to(acc))  # (N,)
            nll = lse - x_y  # (N,)
            if eps:
                mean_x = x.sum(dim=-1).to(acc) / x.size(-1)  # (N,)
                loss = (1.0 - eps) * nll + eps * (lse - mean_x)
            else:
                loss = nll.clone()
            loss = loss.masked_fill(~keep, 0.0)
            nll = nll.masked_fill(~keep, 0.0)
        ctx.save_for_backward(p, y, keep)
        ctx.eps = eps
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_nll: Tensor | None):  # type: ignore[override]
        p, y, keep = ctx.saved_tensors
        eps = ctx.eps
        with torch.autocast(p.device.type, enabled=False):
            g = (g_loss * keep).unsqueeze(1)  # (N, 1) float, 0 on ignored rows
            c = eps / p.size(-1)
            # (p − ε/V)·g in p's dtype: mixed-dtype operands would make TensorIterator copy
            # the (N, V) tensor through float32, so g goes to p's dtype (a per-row scale)
            grad = torch.mul(p, g.to(p.dtype))  # (N, V)
            if eps:
                grad.sub_((g * c).to(p.dtype))
            # the target entries in float32 from the rounded p_y, one rounding at the end;
            # index_put_, not scatter_: scatter_ copies the whole (N, V) tensor on CPU
            rows = torch.arange(p.size(0), device=p.device)  # (N,)
            g_y = (p[rows, y].to(g.dtype) - c - (1.0 - eps)) * g.squeeze(1)  # (N,)
            grad.index_put_((rows, y), g_y.to(p.dtype))
        return grad, None, None, None


# Below this many logits the step is bound by operator overheads, not memory passes, and
# F.cross_entropy's fewer operators win: on the avx512_bf16 EPYC (forward + backward + NLL),
# (1,024 × 65) 0.52–0.73×, (4,096 × 65) 0.74–0.96×, (512 × 1,000) 0.97–1.86×, (1,024 × 512)
# 0.97–1.96×, (16,384 × 65) 1.19–1.41×, (1,344 × 8,000) 2.5× (docs/perf-notes-training.md §32).
SOFTMAX_ONCE_MIN_LOGITS = 1 << 19

PATHS = ("auto", "softmax_once", "torch")


def torch_cross_entropy(
    x: Tensor, target: Tensor, ignore_index: int = -100, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """The same two per-token quantities from ``F.cross_entropy``: the label-smoothed loss,
    and a second, no-grad call for the NLL.  x (N, V), target (N,) -> loss (N,), nll (N,)
    in x's dtype (float32 under autocast)."""
    loss = F.cross_entropy(
        x, target, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="none"
    )
    if not label_smoothing:
        return loss, loss.detach()
    with torch.no_grad():
        nll = F.cross_entropy(x, target, ignore_index=ignore_index, reduction="none")
    return loss, nll


def smoothed_cross_entropy(
    x: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    path: str = "auto",
) -> tuple[Tensor, Tensor]:
    """Per-token label-smoothed loss and NLL (module doc).

    ``path``: "softmax_once" (:class:`SmoothedCrossEntropy`), "torch"
    (:func:`torch_cross_entropy`), or "auto" (default): the first on a CPU from
    ``SOFTMAX_ONCE_MIN_LOGITS`` logits on, the second below and on every other device (on an
    H100 the softmax-once path ran 0.62× torch's fused CUDA kernels; perf-notes-gpu.md §35).

    Shapes: x (N, V) float, target (N,) long -> loss (N,), nll (N,) (float32, or float64
    for float64 x, on the first path); 0 where target == ignore_index.
    """
    if x.dim() != 2 or target.shape != x.shape[:1]:
        raise ValueError(
            f"smoothed_cross_entropy: expected x (N, V) and target (N,), got "
            f"{tuple(x.shape)} and {tuple(target.shape)}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    small = x.numel() < SOFTMAX_ONCE_MIN_LOGITS
    if path == "torch" or (path == "auto" and (small or x.device.type != "cpu")):
        return torch_cross_entropy(x, target, ignore_index, label_smoothing)
    return SmoothedCrossEntropy.apply(x, target, ignore_index, float(label_smoothing))
