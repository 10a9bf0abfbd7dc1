"""Gradient flow through time (RNN, GRU, LSTM) and through depth (plain vs residual nets).

**Through time** (notes 002, "Vanishing / exploding gradients"; notes 000, "The cat,
which already ate ..., was full"). For a loss L at the last step T of a recurrent net,

    ∂L/∂a⟨k⟩ = ∂L/∂a⟨T⟩ · Π_{t=k+1}^{T} ∂a⟨t⟩/∂a⟨t−1⟩                        (BPTT)

and for a vanilla RNN ∂a⟨t⟩/∂a⟨t−1⟩ = diag(g′(z⟨t⟩)) W_aa, so the norm shrinks (or grows)
geometrically in the distance T − k. The LSTM's cell path has ∂c⟨t⟩/∂c⟨t−1⟩ = diag(Γf)
(+ terms through a⟨t−1⟩): a positive forget-gate bias b_f starts Γf = σ(b_f + …) near 1.
:func:`state_gradients` records ∂L/∂a⟨k⟩ (and ∂L/∂c⟨k⟩ for the LSTM) as live autograd
nodes through ``Recurrent``'s readable-path ``step_hook``; with L = Σ_b L_b, row b of
∂L/∂a⟨k⟩ is ∂L_b/∂a⟨k⟩_b, so :func:`norms_by_distance` averages per-example norms.

The probe is the registered many-to-one ``rnn_classifier`` (pool = last, no dropout) on
the agreement task of :mod:`seqlab.data.agreement` (subject at position 0, verb at T − 1).

**Through depth** (notes 001, "Deep Residual Networks": x̄⁽ℓ⁾ = x̄⁽ℓ⁺¹⁾ (I + ∂F/∂x)).
:func:`block_input_gradients` records ‖∂L/∂x_ℓ‖ at the input x_ℓ of every block ℓ.
A residual block whose branch F is zero passes the gradient unchanged.

Shapes: state_gradients → h, c: (B, T, H); norms_by_distance → (T,) indexed by T − 1 − k.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.data.agreement import AgreementTask
from seqlab.models.classifiers import RNNClassifier, RNNClassifierConfig
from seqlab.models.resnet import ResNet, ResNetConfig
from seqlab.nn.recurrent import Recurrent

# name → (cell, forget-gate bias b_f or None for cells without one)
VARIANTS: dict[str, tuple[str, float | None]] = {
    "rnn": ("rnn", None),
    "gru": ("gru", None),
    "lstm": ("lstm", 1.0),
    "lstm-fb0": ("lstm", 0.0),
}


@dataclass
class StateGradients:
    """∂L/∂a⟨k⟩ for every step k of the top layer (and ∂L/∂c⟨k⟩ for an LSTM).

    Shapes: h (B, T, H); c (B, T, H) or None.
    """

    h: Tensor
    c: Tensor | None
    loss: float


def state_gradients(
    rnn: Recurrent, x: Tensor, loss_of_outputs: Callable[[Tensor], Tensor]
) -> StateGradients:
    """Run ``rnn`` on ``x`` (readable path) and differentiate ``loss_of_outputs(outputs)``
    with respect to every state of its top layer.

    Shapes: x (B, T, D_in); outputs (B, T, H) → loss (scalar).
    """
    if rnn.bidirectional:
        raise ValueError("gradient flow through time needs a unidirectional Recurrent")
    top = rnn.num_layers - 1
    states: dict[int, Any] = {}

    def keep(layer: int, direction: int, t: int, state: Any, gates: dict[str, Tensor]) -> None:
        if layer == top:
            states[t] = state

    outputs, _ = rnn(x, fused=False, step_hook=keep)  # (B, T, H)
    loss = loss_of_outputs(outputs)
    T = x.shape[1]
    lstm = rnn.kind == "lstm"
    hs = [states[t][0] if lstm else states[t] for t in range(T)]  # T × (B, H)
    cs = [states[t][1] for t in range(T)] if lstm else []  # T × (B, H)
    grads = torch.autograd.grad(loss, hs + cs, allow_unused=True)
    # c⟨T⟩ does not reach a loss read from a⟨T⟩ alone: its gradient is exactly zero.
    grads = [torch.zeros_like(s) if g is None else g for s, g in zip(hs + cs, grads)]
    h = torch.stack(grads[:T], dim=1)  # (B, T, H)
    c = torch.stack(grads[T:], dim=1) if lstm else None  # (B, T, H)
    return StateGradients(h, c, float(loss.detach()))


def norms_by_distance(grad: Tensor) -> Tensor:
    """Mean over the batch of ‖∂L_b/∂a⟨k⟩_b‖₂, re-indexed by distance d = T − 1 − k.

    Shapes: grad (B, T, H) → (T,), entry d is the step d before the last.
    """
    return grad.norm(dim=-1).mean(dim=0).flip(0)  # (T,)


def agreement_probe(
    cell: str, vocab_size: int, hidden: int = 64, d_embed: int = 32
) -> RNNClassifier:
    """The registered ``rnn_classifier``: E[x] → Recurrent → W a⟨T⟩ (2 classes), no dropout."""
    cfg = RNNClassifierConfig(
        cell=cell, d_embed=d_embed, hidden=hidden, pool="last", dropout=0.0, embed_std=1.0
    )
    return RNNClassifier(cfg, vocab_size, 2)


@torch.no_grad()
def set_forget_bias(model: nn.Module, b_f: float) -> None:
    """b_f ← ``b_f`` in every LSTM cell of ``model`` (the only change between variants)."""
    for m in model.modules():
        if getattr(m, "b_f", None) is not None:
            m.b_f.fill_(b_f)


def probe_gradients(model: RNNClassifier, x: Tensor, y: Tensor) -> StateGradients:
    """State gradients of L = Σ_b CE(W a⟨T⟩_b, y_b) for the probe on tokens x (B, T)."""

    def loss(outputs: Tensor) -> Tensor:
        return F.cross_entropy(model.W(outputs[:, -1]), y, reduction="sum")  # a⟨T⟩: (B, H)

    return state_gradients(model.rnn, model.embed(x), loss)


def _full_mask(x: Tensor) -> Tensor:
    return torch.ones_like(x, dtype=torch.bool)  # (B, T)


@torch.no_grad()
def accuracy(model: RNNClassifier, x: Tensor, y: Tensor) -> float:
    """Fraction of agreement examples whose verb number is predicted right."""
    return float((model(x, _full_mask(x)).argmax(-1) == y).float().mean())


def train_probe(
    model: RNNClassifier,
    task: AgreementTask,
    steps: int,
    distances: tuple[int, int],
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Adam on fresh batches; each batch has a distance n ∈ [lo, hi] drawn uniformly
    (fused kernels: the readable path is only needed for measuring). Returns the losses."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        n = int(torch.randint(distances[0], distances[1] + 1, (1,), generator=gen))
        x, y = task.sample(batch_size, n, gen)  # (B, n + 2), (B,)
        loss = F.cross_entropy(model(x, _full_mask(x)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def _curve(grads: StateGradients) -> dict[str, list[float]]:
    out = {"h": norms_by_distance(grads.h).tolist()}
    if grads.c is not None:
        out["c"] = norms_by_distance(grads.c).tolist()
    return out


def time_experiment(
    task: AgreementTask,
    distance: int = 30,
    hidden: int = 64,
    steps: int = 300,
    train_distances: tuple[int, int] | None = None,
    batch_size: int = 64,
    seed: int = 0,
    variants: Sequence[str] = tuple(VARIANTS),
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """‖∂L/∂a⟨k⟩‖ against distance for each variant, at initialisation and after
    ``steps`` updates; every variant starts from the same seed (rnn/gru/lstm differ in
    cell; lstm and lstm-fb0 have the same weights and differ only in b_f).

    ``train_distances`` (lo, hi) defaults to (distance, distance): training sees only the
    long dependency, so a net whose gradient vanishes over that distance stays at chance.

    Returns a JSON-able record: per variant "init" and "trained" curves (index = distance
    0 … distance + 1), accuracy at ``distance`` before/after, the training losses.
    """
    train_distances = train_distances or (distance, distance)
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    gen = torch.Generator().manual_seed(seed + 1)
    x, y = task.sample(256, distance, gen)  # the one measurement batch: (256, distance + 2)
    record: dict[str, Any] = {
        "distance": distance,
        "hidden": hidden,
        "steps": steps,
        "train_distances": list(train_distances),
        "batch_measured": int(x.shape[0]),
        "distractors": task.source,
        "vocab_size": task.vocab_size,
        "seed": seed,
        "variants": {},
    }
    for name in variants:
        cell, b_f = VARIANTS[name]
        torch.manual_seed(seed)
        model = agreement_probe(cell, task.vocab_size, hidden).eval()
        if b_f is not None:
            set_forget_bias(model, b_f)
        init = probe_gradients(model, x, y)
        acc0 = accuracy(model, x, y)
        losses = train_probe(model, task, steps, train_distances, batch_size, seed=seed)
        trained = probe_gradients(model, x, y)
        entry = {
            "cell": cell,
            "forget_bias": b_f,
            "init": _curve(init),
            "trained": _curve(trained),
            "accuracy_init": acc0,
            "accuracy_trained": accuracy(model, x, y),
            "loss_first": losses[0] if losses else None,
            "loss_last_20": sum(losses[-20:]) / max(1, len(losses[-20:])),
        }
        record["variants"][name] = entry
        if log is not None:
            log(f"{name:<9} acc {entry['accuracy_init']:.2f} → {entry['accuracy_trained']:.2f}")
    return record


def block_input_gradients(
    model: nn.Module, blocks: Sequence[nn.Module], x: Tensor, loss_fn: Callable[[Tensor], Tensor]
) -> list[float]:
    """‖∂L/∂x_ℓ‖₂ (over the whole batch) at the input x_ℓ of each block ℓ, in order.

    Shapes: x is ``model``'s input; loss_fn maps the output to a scalar.
    """
    inputs: list[Tensor] = []
    # A first block fed the input itself needs the input in the graph.
    x = x.detach().requires_grad_(x.is_floating_point())
    handles = [b.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for b in blocks]
    try:
        loss = loss_fn(model(x))
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(loss, inputs)
    return [float(g.norm()) for g in grads]


def depth_experiment(
    depths: Sequence[int] = (20, 56), batch_size: int = 32, seed: int = 0
) -> dict[str, Any]:
    """‖∂L/∂x_ℓ‖ per block of the CIFAR-style ResNet-(6n+2) and its plain twin (same
    parameters, no shortcuts; seqlab.models.resnet) at initialisation, on one batch of
    N(0, 1) 1×28×28 images with random labels, BN in training mode, L = mean CE.
    Returns per net: the norms from the first block to the last."""
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch_size, 1, 28, 28, generator=gen)  # (B, 1, 28, 28)
    y = torch.randint(0, 10, (batch_size,), generator=gen)  # (B,)
    nets: dict[str, Any] = {}
    for depth in depths:
        for plain in (True, False):
            torch.manual_seed(seed)
            net = ResNet(ResNetConfig(depth=depth, plain=plain), 1, 10).train()
            norms = block_input_gradients(net, net.blocks(), x, lambda o: F.cross_entropy(o, y))
            nets[f"{'plain' if plain else 'resnet'}-{depth}"] = {
                "depth": depth,
                "plain": plain,
                "block_input_grad_norm": norms,
            }
    return {"batch_size": batch_size, "seed": seed, "input": "N(0,1) 1x28x28", "nets": nets}


def plot_time(record: dict[str, Any], path: Any) -> Any:
    """Two panels (initialisation, after training): ‖∂L/∂a⟨k⟩‖ / ‖∂L/∂a⟨T⟩‖ against T − k,
    log scale (relative to the last step, because a trained net's loss, and so its whole
    gradient, can be near 0; the absolute norms are in the JSON record)."""
    from seqlab.inspect.figures import figure, line_panel, save_png

    fig = figure(10, 4)
    for i, phase in enumerate(("init", "trained")):
        curves = {}
        for name, v in record["variants"].items():
            ys = v[phase]["h"]
            curves[name] = (range(len(ys)), [y / ys[0] for y in ys])
        title = "at initialisation" if phase == "init" else f"after {record['steps']} updates"
        line_panel(
            fig.add_subplot(1, 2, i + 1),
            curves,
            "distance T − k (steps before the verb)",
            "mean ‖∂L/∂a⟨k⟩‖ / mean ‖∂L/∂a⟨T⟩‖",
            f"agreement task, {record['distractors']} distractors: {title}",
        )
    return save_png(fig, path)


def plot_depth(record: dict[str, Any], path: Any) -> Any:
    """‖∂L/∂x_ℓ‖ against block index ℓ (input side on the left), plain vs residual."""
    from seqlab.inspect.figures import figure, line_panel, save_png

    fig = figure(6, 4)
    curves = {
        name: (range(1, len(v["block_input_grad_norm"]) + 1), v["block_input_grad_norm"])
        for name, v in record["nets"].items()
    }
    title = "gradient norm at each block's input, at initialisation"
    line_panel(
        fig.add_subplot(1, 1, 1), curves, "block ℓ (1 = next to the input)", "‖∂L/∂x_ℓ‖", title
    )
    return save_png(fig, path)


def decay_per_step(curve: Sequence[float]) -> float:
    """r in ‖∂L/∂a⟨T−d⟩‖ ≈ C · r^d: exp of the least-squares slope of ln‖·‖ against d
    over d = 1 … len − 1 (zeros, i.e. underflow, are left out)."""
    pts = [(d, v) for d, v in enumerate(curve) if d >= 1 and v > 0]
    if len(pts) < 2:
        return float("nan")
    d = torch.tensor([p[0] for p in pts], dtype=torch.float64)  # (N,)
    ln = torch.tensor([p[1] for p in pts], dtype=torch.float64).log()  # (N,)
    dc = d - d.mean()
    return float(torch.exp((dc * (ln - ln.mean())).sum() / (dc * dc).sum()))


def time_table(record: dict[str, Any]) -> str:
    """Markdown table of :func:`time_experiment`: accuracy, relative gradient at the
    longest distance and the fitted decay factor per step, before and after training."""
    from seqlab.inspect.figures import markdown_table

    T = record["distance"] + 1
    header = [
        "variant",
        "b_f",
        "acc init",
        "acc trained",
        "‖∂L/∂a⟨1⟩‖/‖∂L/∂a⟨T⟩‖ init",
        "… trained",
        "decay/step init",
        "decay/step trained",
    ]
    rows = []
    for name, v in record["variants"].items():
        curves = [v[p]["h"] for p in ("init", "trained")]
        rel = [c[T] / c[0] if c[0] else float("nan") for c in curves]
        r = [decay_per_step(c) for c in curves]
        b_f = "—" if v["forget_bias"] is None else f"{v['forget_bias']:g}"
        rows.append(
            [
                name,
                b_f,
                f"{v['accuracy_init']:.2f}",
                f"{v['accuracy_trained']:.2f}",
                f"{rel[0]:.1e}",
                f"{rel[1]:.1e}",
                f"{r[0]:.3f}",
                f"{r[1]:.3f}",
            ]
        )
    return markdown_table(header, rows)


def depth_table(record: dict[str, Any]) -> str:
    """Markdown table of :func:`depth_experiment`: first/last block norms and their ratio."""
    from seqlab.inspect.figures import markdown_table

    header = ["net", "blocks", "‖∂L/∂x‖ first block", "‖∂L/∂x‖ last block", "first / last"]
    rows = []
    for name, v in record["nets"].items():
        g = v["block_input_grad_norm"]
        rows.append([name, len(g), f"{g[0]:.3g}", f"{g[-1]:.3g}", f"{g[0] / g[-1]:.3g}"])
    return markdown_table(header, rows)


def run(
    out_dir: Any,
    task: AgreementTask,
    distance: int = 30,
    steps: int = 300,
    hidden: int = 64,
    depths: Sequence[int] = (20, 56),
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Both experiments; writes ``gradflow.json``, ``gradflow-time.png`` and
    ``gradflow-depth.png`` into ``out_dir`` and returns the record."""
    from pathlib import Path

    from seqlab.inspect.figures import write_json

    out = Path(out_dir)
    record = {
        "time": time_experiment(task, distance, hidden, steps, seed=seed, log=log),
        "depth": depth_experiment(depths, seed=seed),
    }
    record["files"] = {
        "json": str(write_json(out / "gradflow.json", record)),
        "time_png": str(plot_time(record["time"], out / "gradflow-time.png")),
        "depth_png": str(plot_depth(record["depth"], out / "gradflow-depth.png")),
    }
    write_json(out / "gradflow.json", record)
    return record
