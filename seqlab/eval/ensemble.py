"""Combining M classifiers' class probabilities into one prediction.

Mean probability (the usual "soft vote"):

    P(c | x) = (1/M) Σ_m p_m(c | x)

Stacked log-linear pool: stacked generalisation (Wolpert 1992, "Stacked generalization")
with a logistic-regression combiner on the members' log-probabilities, i.e. a weighted
product of experts (Hinton 2002) — a geometric pool whose weights are learnt:

    s_c(x) = Σ_m w_m · log p_m(c | x) + b_c          P(c | x) = softmax_c s(x)

w (M,) and b (C,) minimise the held-out cross-entropy plus a pull towards the plain
geometric mean (w_m = 1/M, b = 0):

    L(w, b) = −(1/N) Σ_i log P(y_i | x_i) + (λ/2) (‖w − 1/M‖² + ‖b‖²)

L is convex in (w, b) (a log-sum-exp of linear functions plus a quadratic), so L-BFGS finds
its unique minimum. The held-out examples must not be the ones scored afterwards: in
benchmarks/classify.py they are each fold's validation split, never its test fold. A member
that is overconfident gets a small weight; one whose errors differ from the others' keeps a
large one — which the mean of probabilities cannot express.

Shapes: log_probs (M, N, C) float (each member's log p_m(c | x_i)), y (N,) long
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["LogLinearPool", "fit_log_linear_pool", "mean_probability"]


def mean_probability(log_probs: Tensor) -> Tensor:
    """(1/M) Σ_m p_m(c | x).  (M, N, C) log-probabilities -> (N, C) probabilities."""
    return log_probs.exp().mean(0)


@dataclass(frozen=True)
class LogLinearPool:
    """A fitted pool: ``weights`` w (M,), ``bias`` b (C,)."""

    weights: Tensor
    bias: Tensor

    def logits(self, log_probs: Tensor) -> Tensor:
        """s_c(x) = Σ_m w_m log p_m(c | x) + b_c.  (M, N, C) -> (N, C)."""
        w = self.weights.to(log_probs.dtype)
        return torch.einsum("m,mnc->nc", w, log_probs) + self.bias.to(log_probs.dtype)


def pool_loss(log_probs: Tensor, y: Tensor, w: Tensor, b: Tensor, l2: float) -> Tensor:
    """L(w, b) of the module docstring (a scalar)."""
    m = log_probs.shape[0]
    s = LogLinearPool(w, b).logits(log_probs)  # (N, C)
    nll = torch.nn.functional.cross_entropy(s, y)
    return nll + 0.5 * l2 * ((w - 1.0 / m).square().sum() + b.square().sum())


def fit_log_linear_pool(
    log_probs: Tensor, y: Tensor, l2: float = 1e-2, max_iter: int = 200
) -> LogLinearPool:
    """Minimise L(w, b) on held-out (log_probs (M, N, C), y (N,)) with L-BFGS in float64.

    ``l2`` λ > 0 keeps the problem strictly convex (a unique answer even when two members
    are identical) and, with few held-out examples, close to the geometric mean.
    """
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (members, examples, classes), got {log_probs.shape}")
    m, n, c = log_probs.shape
    if n == 0:
        raise ValueError("no held-out examples to fit the pool on (log_probs has N = 0)")
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match log_probs, got {tuple(y.shape)}")
    if not l2 > 0:
        raise ValueError(f"l2 must be > 0, got {l2}")
    if not torch.isfinite(log_probs).all():
        raise ValueError("log_probs has inf or nan: give log-softmax of finite logits")
    lp = log_probs.detach().double()
    w = torch.full((m,), 1.0 / m, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(c, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        opt.zero_grad()
        loss = pool_loss(lp, y, w, b, l2)
        loss.backward()
        return loss

    opt.step(closure)
    return LogLinearPool(w.detach().clone(), b.detach().clone())
