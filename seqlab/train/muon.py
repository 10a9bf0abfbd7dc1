"""Muon on the hidden weight matrices, AdamW on everything else, as one optimizer.

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"):
momentum, then the update matrix replaced by its nearest semi-orthogonal matrix,
computed with five Newton–Schulz iterations; Liu et al. 2025 ("Muon is Scalable for LLM
Training", §2.2) scale it so that its RMS matches AdamW's, so that AdamW's η and λ carry
over. For a weight W of shape A × B with gradient g:

    M ← μM + (1 − μ)g;   M̃ = (1 − μ)g + μM           (Nesterov, PyTorch's EMA form)
    X₀ = M̃ / ‖M̃‖_F;   X ← aX + (bXXᵀ + c(XXᵀ)²)X, 5 times   (a, b, c) = (3.4445, −4.775, 2.0315)
    O = X₅ ≈ U S′ Vᵀ   where M̃ = U Σ Vᵀ, S′ ∈ ~[0.7, 1.2]  (A, B), computed in bf16
    W ← W − ηλW − η · 0.2·√max(A, B) · O               (decoupled weight decay)

AdamW (``seqlab.train.optim``'s table) updates the parameters Muon is not meant for:
embeddings, the output projection (``VocabProjection``; Jordan et al. keep the first and
last layer on Adam), norms and biases. Which parameters Muon gets: the ``weight`` of every
``nn.Linear`` with both dimensions > 1, which is all the projections, feed-forward and gate
matrices of seqlab's layers (a classifier head built as an ``nn.Linear`` is one of them;
an additive attention's vᵀ, 1 × A, is not). The update rules are PyTorch's
(``torch.optim.Muon`` with ``adjust_lr_fn="match_rms_adamw"``, ``torch.optim.AdamW``),
except that :class:`BatchedMuon` runs the Newton–Schulz iteration once per group of
same-shaped matrices (batched matmuls) instead of once per matrix — the same arithmetic,
fewer and larger calls (tests compare it with ``torch.optim.Muon``). The module splits
the parameters and presents the two optimizers as one ``torch.optim.Optimizer``: one
``param_groups`` list (Muon's groups first) that schedules set, one ``state``, one
``state_dict``, so checkpoints and exact resume work as for any other optimizer.

Deviations: Muon's decoupled weight decay is applied to every matrix it owns (Liu et al.);
AdamW's parameters follow ``decay_exclude_norm_bias`` as for ``adamw``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["BatchedMuon", "MuonAdamW", "muon_parameters", "newton_schulz"]


def newton_schulz(
    G: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> Tensor:
    """O = NS(G): X₀ = G/‖G‖_F, X ← aX + (bXXᵀ + c(XXᵀ)²)X ``steps`` times, in bf16, on
    the wide orientation (A ≤ B; a tall matrix is transposed and back), per matrix of a batch.
    The arithmetic of ``torch.optim._muon._zeropower_via_newtonschulz``, batched.

    Shapes: G (N, A, B) -> (N, A, B) bf16
    """
    a, b, c = coefficients
    X = G.bfloat16()  # (N, A, B)
    tall = X.size(-2) > X.size(-1)
    if tall:
        X = X.mT  # (N, B, A)
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = X @ X.mT  # (N, A, A)  XXᵀ
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # bXXᵀ + c(XXᵀ)²
        X = torch.baddbmm(X, poly, X, beta=a)  # aX + (…)X
    return X.mT if tall else X


class BatchedMuon(torch.optim.Muon):
    """``torch.optim.Muon``'s update with the Newton–Schulz iteration run once per group of
    same-shaped gradients (:func:`newton_schulz`); same state (``momentum_buffer``), same
    options, same ``state_dict``. For 16 matrices of 128 × 128 that is 15 matmul calls
    instead of 240."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = _closure_loss(closure)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            mu, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
            updates: list[Tensor] = []
            for p in params:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)  # M ← μM + (1 − μ)g
                updates.append(p.grad.lerp(buf, mu) if group["nesterov"] else buf)
            by_shape: dict[tuple[torch.Size, torch.dtype], list[int]] = {}
            for k, u in enumerate(updates):
                by_shape.setdefault((u.shape, u.dtype), []).append(k)
            for ks in by_shape.values():
                O = newton_schulz(
                    torch.stack([updates[k] for k in ks]),  # (N, A, B)
                    group["ns_coefficients"],
                    group["ns_steps"],
                    group["eps"],
                )
                for k, o in zip(ks, O):
                    p = params[k]
                    scale = _adjusted_lr(lr, group["adjust_lr_fn"], p.shape)
                    p.mul_(1 - lr * wd)
                    p.add_(o, alpha=-scale)
        return loss


def _closure_loss(closure: Callable[[], float] | None) -> float | None:
    """The loss of ``closure`` evaluated with gradients on (``Optimizer.step``'s contract)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """η scaled per matrix as ``torch.optim.Muon`` does: ``match_rms_adamw`` 0.2·√max(A, B)
    (Liu et al. 2025), ``original`` / None √max(1, A/B) (Jordan et al.)."""
    A, B = shape[0], shape[1]
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(A, B))
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1.0, A / B))
    return lr


def muon_parameters(model: nn.Module) -> list[Tensor]:
    """The weights Muon updates: each trainable ``nn.Linear.weight`` with both dimensions
    > 1, once, in ``modules()`` order."""
    seen: set[int] = set()
    out: list[Tensor] = []
    for module in model.modules():
        if (
            isinstance(module, nn.Linear)
            and module.weight.requires_grad
            and min(module.weight.shape) > 1
        ):
            w = module.weight
            if id(w) not in seen:
                seen.add(id(w))
                out.append(w)
    return out


class MuonAdamW(torch.optim.Optimizer):
    """:class:`BatchedMuon` over ``muon_groups`` and ``torch.optim.AdamW`` over
    ``adamw_groups`` (lists of param-group dicts), stepped together (module docstring).

    ``lr`` and ``weight_decay`` are shared (the RMS matching makes them comparable);
    ``momentum`` is Muon's μ, ``betas``/``eps`` AdamW's. A group dict may override
    ``weight_decay`` (AdamW's no-decay group does).
    """

    def __init__(
        self,
        muon_groups: list[dict[str, Any]],
        adamw_groups: list[dict[str, Any]],
        *,
        lr: float,
        weight_decay: float,
        momentum: float = 0.95,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        fused: bool | None = None,
    ) -> None:
        if not any(g["params"] for g in muon_groups):
            raise ValueError("MuonAdamW: no parameter for Muon (muon_groups is empty)")
        self.muon = BatchedMuon(
            muon_groups,
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            nesterov=True,
            adjust_lr_fn="match_rms_adamw",
        )
        inner: list[torch.optim.Optimizer] = [self.muon]
        self.adamw: torch.optim.Optimizer | None = None
        if adamw_groups:
            self.adamw = torch.optim.AdamW(
                adamw_groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused
            )
            inner.append(self.adamw)
        # The inner optimizers' own group dicts become this optimizer's groups (the same
        # objects), so a scheduler that sets group["lr"] here sets it for them.
        super().__init__([g for o in inner for g in o.param_groups], {})
        self._link()

    def _link(self) -> None:
        """Point the inner optimizers at this optimizer's groups and state (after
        construction and after ``load_state_dict``, which replaces both)."""
        n = len(self.muon.param_groups)
        self.muon.param_groups = self.param_groups[:n]
        self.muon.state = self.state
        if self.adamw is not None:
            self.adamw.param_groups = self.param_groups[n:]
            self.adamw.state = self.state

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = _closure_loss(closure)
        self.muon.step()
        if self.adamw is not None:
            self.adamw.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._link()
