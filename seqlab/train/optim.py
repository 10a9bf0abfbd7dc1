"""Optimizers by name from a frozen config, and gradient-norm clipping.

``sgd`` (``SGD(momentum=0)``):
    θ ← θ − η (g + λθ)
``momentum`` (``SGD(momentum=μ)``, Polyak 1964 in the Sutskever 2013 form):
    v ← μ v + (g + λθ);  θ ← θ − η v
``adagrad`` (``Adagrad``, Duchi et al. 2011):
    G ← G + g²;  θ ← θ − η g / (√G + ε)
``rmsprop`` (``RMSprop``, Hinton 2012, lecture 6e):
    E[g²] ← α E[g²] + (1 − α) g²;  θ ← θ − η g / (√E[g²] + ε)
``adam`` (``Adam``, Kingma & Ba 2015, Algorithm 1):
    m ← β₁m + (1 − β₁)g;  v ← β₂v + (1 − β₂)g²;  θ ← θ − η m̂ / (√v̂ + ε)
``adamw`` (``AdamW``, Loshchilov & Hutter 2019, decoupled weight decay):
    Adam on g alone, then θ ← θ − ηλθ
``muon`` (Jordan et al. 2024; ``seqlab.train.muon``): every ``nn.Linear`` weight W (A × B)
    M ← μM + g;  W ← W − ηλW − η·0.2·√max(A, B)·NS₅(g + μM)   (NS₅ ≈ orthogonalisation;
    PyTorch keeps M as an EMA, (1 − μ)× this M: the same update, NS₅ normalises first)
    and ``adamw`` on the other parameters (embeddings, output projection, norms, biases)

with g = ∇θ L and λ = weight_decay.

The update rules are PyTorch's; this module only chooses and configures them. For every
name except ``adamw``, ``weight_decay`` is the coupled L2 term λθ added to the gradient.

Deviations: ``momentum`` follows PyTorch (v accumulates gradients, η applied when
stepping) rather than Sutskever's v ← μv − ηg; the two agree while η is constant and
differ by the ratio of successive η when a schedule changes it.

``decay_exclude_norm_bias=True`` (default) puts biases, every parameter of a
normalisation layer (LayerNorm, RMSNorm, BatchNorm, GroupNorm) and embedding tables in a
second parameter group with ``weight_decay=0``: decaying a gain or a bias towards 0 is not
a useful prior, and decaying embedding rows penalises rare words only when they appear.
With a model this is decided by module type; with a bare iterable of tensors, 1-d tensors
(biases, gains) are excluded. A parameter shared by several modules (an output
projection tied to the embedding) appears once, excluded if any owner excludes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.train.muon import MuonAdamW, muon_parameters

OptimName = Literal["sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw", "muon"]

_NO_DECAY_MODULES: tuple[type[nn.Module], ...] = (
    nn.Embedding,
    nn.EmbeddingBag,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._NormBase,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer choice and hyper-parameters (symbols as in the table above).

    ``lr`` η; ``momentum`` μ (``momentum`` only); ``alpha`` α (RMSprop's smoothing);
    ``betas`` (β₁, β₂) and ``eps`` ε (Adam/AdamW/Muon's AdamW part; ε also for
    Adagrad/RMSprop); ``weight_decay`` λ; ``muon_momentum`` Muon's μ.
    """

    name: OptimName = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    alpha: float = 0.99
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decay_exclude_norm_bias: bool = True
    muon_momentum: float = 0.95

    def __post_init__(self) -> None:
        if not self.lr >= 0.0:
            raise ConfigError(f"optim.lr must be >= 0, got {self.lr}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"optim.momentum must be in [0, 1), got {self.momentum}")
        if not 0.0 <= self.alpha < 1.0:
            raise ConfigError(f"optim.alpha must be in [0, 1), got {self.alpha}")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {self.betas}")
        if not self.eps > 0.0:
            raise ConfigError(f"optim.eps must be > 0, got {self.eps}")
        if not self.weight_decay >= 0.0:
            raise ConfigError(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.muon_momentum < 1.0:
            raise ConfigError(f"optim.muon_momentum must be in [0, 1), got {self.muon_momentum}")


def param_groups(
    params_or_model: nn.Module | Iterable[Tensor] | Iterable[dict[str, Any]],
    weight_decay: float,
    exclude_norm_bias: bool,
) -> list[dict[str, Any]]:
    """Parameter groups ``[{"name": "decay", ...}, {"name": "no_decay", weight_decay: 0}]``.

    Only parameters with ``requires_grad`` are included, in ``named_parameters()`` order
    (deterministic, so optimizer state indices match across runs). Pre-built groups
    (dicts) are passed through unchanged. Empty groups are dropped.
    """
    if isinstance(params_or_model, nn.Module):
        excluded: set[int] = set()
        if exclude_norm_bias:
            for module in params_or_model.modules():
                own = module.parameters(recurse=False)
                if isinstance(module, _NO_DECAY_MODULES):
                    excluded.update(id(p) for p in own)
                else:
                    excluded.update(
                        id(p)
                        for n, p in module.named_parameters(recurse=False)
                        if n == "bias" or n.endswith("_bias")
                    )
        params = [p for p in params_or_model.parameters() if p.requires_grad]
    else:
        items = list(params_or_model)
        if items and isinstance(items[0], dict):
            return [dict(g) for g in items]  # caller's own groups
        params = [p for p in items if p.requires_grad]
        excluded = {id(p) for p in params if p.dim() <= 1} if exclude_norm_bias else set()
    if not params:
        raise ConfigError("the optimizer got no trainable parameters (all requires_grad=False?)")
    if not exclude_norm_bias or weight_decay == 0.0:
        return [{"name": "all", "params": params}]
    decay = [p for p in params if id(p) not in excluded]
    no_decay = [p for p in params if id(p) in excluded]
    groups = [
        {"name": "decay", "params": decay},
        {"name": "no_decay", "params": no_decay, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(
    params_or_model: nn.Module | Iterable[Tensor] | Iterable[dict[str, Any]],
    cfg: OptimConfig,
) -> torch.optim.Optimizer:
    """The optimizer ``cfg.name`` over the model's trainable parameters (see module doc)."""
    if cfg.name == "muon":
        return _build_muon(params_or_model, cfg)
    groups = param_groups(params_or_model, cfg.weight_decay, cfg.decay_exclude_norm_bias)
    lr, wd = cfg.lr, cfg.weight_decay
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.0, weight_decay=wd)
    if cfg.name == "momentum":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, weight_decay=wd)
    if cfg.name == "adagrad":
        return torch.optim.Adagrad(groups, lr=lr, eps=cfg.eps, weight_decay=wd)
    if cfg.name == "rmsprop":
        return torch.optim.RMSprop(groups, lr=lr, alpha=cfg.alpha, eps=cfg.eps, weight_decay=wd)
    if cfg.name in ("adam", "adamw"):
        cls = torch.optim.Adam if cfg.name == "adam" else torch.optim.AdamW
        fused = _fused_adam_ok(groups)
        return cls(groups, lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=wd, fused=fused)
    raise ConfigError(f"unknown optimizer {cfg.name!r}; choose one of {get_args(OptimName)}")


def _build_muon(params_or_model: Any, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Muon over the model's ``nn.Linear`` weights, AdamW (with the usual decay groups)
    over the rest; needs the model, since which tensors are Linear weights is a module fact."""
    if not isinstance(params_or_model, nn.Module):
        raise ConfigError("optim.name=muon needs the model (it puts nn.Linear weights on Muon)")
    model = params_or_model
    muon = muon_parameters(model)
    if not muon:
        raise ConfigError(
            "optim.name=muon: the model has no nn.Linear weight (both dimensions > 1) for "
            "Muon; use optim.name=adamw"
        )
    on_muon = {id(p) for p in muon}
    rest = param_groups(model, cfg.weight_decay, cfg.decay_exclude_norm_bias)
    for g in rest:
        g["params"] = [p for p in g["params"] if id(p) not in on_muon]
    rest = [g for g in rest if g["params"]]
    return MuonAdamW(
        [{"name": "muon", "params": muon}],
        rest,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        momentum=cfg.muon_momentum,
        betas=cfg.betas,
        eps=cfg.eps,
        fused=_fused_adam_ok(rest) if rest else None,
    )


def _fused_adam_ok(groups: list[dict[str, Any]]) -> bool:
    """PyTorch's fused Adam kernel (one pass per parameter, no per-op dispatch) applies when
    every parameter is a floating tensor on CPU or CUDA; it is the same update as the loop
    implementation (tests/train/test_optim.py compares them) and ~3x faster on 2 CPU cores."""
    params = [p for g in groups for p in g["params"]]
    return bool(params) and all(
        p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params
    )


def clip_grad_norm(
    params_or_model: nn.Module | Iterable[Tensor],
    max_norm: float | None,
    norm_type: float = 2.0,
) -> Tensor:
    """Rescale gradients so that ‖g‖ ≤ max_norm (Pascanu et al. 2013); return the norm
    ‖g‖ measured *before* clipping, as a 0-d tensor (no host sync).

    ‖g‖ is the ``norm_type``-norm of all gradients concatenated. ``max_norm=None`` only
    measures. A non-finite norm is returned as is (the caller's NaN/Inf check sees it);
    clipping then leaves non-finite gradients, which the caller must skip.
    """
    if isinstance(params_or_model, nn.Module):
        params = list(params_or_model.parameters())
    else:
        params = list(params_or_model)
    if max_norm is not None:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    if total_norm is not None:  # on CUDA one multi-tensor kernel instead of one per tensor
        return total_norm(grads, norm_type)  # ()
    norms = torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads])  # (n,)
    return torch.linalg.vector_norm(norms, norm_type)  # ()
