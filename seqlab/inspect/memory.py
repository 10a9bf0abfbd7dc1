"""Memory traces of a Neural Turing Machine: where each head reads and writes, step by step.

    trace = memory_trace(model, batch)        # one example: inputs, targets, outputs, w_t
    save_trace(trace, "runs/x/copy-20")        # copy-20.npz (arrays) + copy-20.json (summary)
    plot_memory(trace, "docs/figures/ntm-copy.png", title="copy, length 20")

The figure follows Graves et al. 2014 Figure 6: inputs and targets/outputs over time, then
one heatmap per head of the weighting w_t(i) (rows: memory locations i, columns: time t).
A head that walks through memory shows a diagonal line; the copy task's ideal is a write
diagonal during the input phase and the same diagonal again for the read head during the
output phase. Models without memory (the LSTM baseline) get the first panels only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from seqlab.data.algorithmic_bits import BitsBatch

__all__ = ["memory_trace", "plot_memory", "save_trace"]


@torch.no_grad()
def memory_trace(model: nn.Module, batch: BitsBatch, index: int = 0) -> dict[str, np.ndarray]:
    """Run ``model`` on ``batch`` and keep example ``index``.

    Returns arrays (T steps of the example, padding removed):
        x (T, D_in), y (T, D_out), mask (T,), outputs σ(logits) (T, D_out),
        and for the NTM read_weights (T, H_r, N), write_weights (T, H_w, N).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = model(batch.x.to(device))
    model.train(was_training)
    mask = batch.mask[index]  # (T,)
    T = int(mask.nonzero().max()) + 1 if mask.any() else mask.shape[0]  # drop end padding
    trace = {
        "x": batch.x[index, :T].numpy(),
        "y": batch.y[index, :T].numpy(),
        "mask": mask[:T].numpy(),
        "outputs": torch.sigmoid(out.logits[index, :T].float()).cpu().numpy(),
    }
    for name in ("read_weights", "write_weights"):
        w = getattr(out, name, None)
        if w is not None:
            trace[name] = w[index, :T].float().cpu().numpy()  # (T, H, N)
    return trace


def summary(trace: dict[str, np.ndarray]) -> dict[str, Any]:
    """JSON-ready facts: shapes, bit errors, and per head the most-weighted location and
    its weight at every step (a sharp head has weight ≈ 1)."""
    mask = trace["mask"].astype(bool)
    wrong = ((trace["outputs"] > 0.5) != (trace["y"] > 0.5)).sum(-1)  # (T,)
    info: dict[str, Any] = {
        "steps": int(trace["x"].shape[0]),
        "output_steps": int(mask.sum()),
        "bit_errors": int(wrong[mask].sum()),
        "shapes": {k: list(v.shape) for k, v in trace.items()},
    }
    for name in ("read_weights", "write_weights"):
        if name in trace:
            w = trace[name]  # (T, H, N)
            info[name] = [
                {
                    "argmax": w[:, h].argmax(-1).tolist(),
                    "max": np.round(w[:, h].max(-1), 4).tolist(),
                }
                for h in range(w.shape[1])
            ]
    return info


def save_trace(trace: dict[str, np.ndarray], stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.npz`` (every array) and ``<stem>.json`` (:func:`summary`)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    npz, js = stem.with_suffix(".npz"), stem.with_suffix(".json")
    np.savez_compressed(npz, **trace)
    js.write_text(json.dumps(summary(trace), indent=1) + "\n", encoding="utf-8")
    return npz, js


def plot_memory(trace: dict[str, np.ndarray], path: str | Path, title: str = "") -> Path:
    """PNG: inputs, targets, outputs (rows: channels, columns: time), then one heatmap per
    read and write head of w_t(i) (rows: locations, columns: time; black is the head's
    largest weight; only the locations any head visited with weight > 0.01, ± 2, are
    shown)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    panels: list[tuple[str, np.ndarray, str]] = [
        ("inputs", trace["x"].T, "channel"),
        ("targets (output phase)", (trace["y"] * trace["mask"][:, None]).T, "bit"),
        ("outputs σ(logits)", (trace["outputs"] * trace["mask"][:, None]).T, "bit"),
    ]
    heads = [(n, trace[n]) for n in ("write_weights", "read_weights") if n in trace]
    lo, hi = 0, 0
    if heads:
        visited = np.concatenate([w.max(axis=(0, 1))[None] for _, w in heads]).max(0)  # (N,)
        used = np.nonzero(visited > 0.01)[0]
        N = visited.shape[0]
        lo, hi = (max(0, used.min() - 2), min(N, used.max() + 3)) if used.size else (0, N)
    for name, w in heads:
        kind = name.split("_")[0]
        for h in range(w.shape[1]):
            top = float(w[:, h].max())
            label = f"{kind} head {h}: w_t(i) (black = {top:.2g}, the largest weight)"
            panels.append((label, w[:, h, lo:hi].T, "location i"))
    fig = Figure(figsize=(max(6.0, trace["x"].shape[0] * 0.12), 1.6 * len(panels) + 0.8))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (label, image, ylabel) in zip(axes, panels):
        extent, vmax = None, 1.0
        if ylabel == "location i":  # scaled to its maximum so diffuse weightings show too
            extent = (-0.5, image.shape[1] - 0.5, hi - 0.5, lo - 0.5)
            vmax = max(float(image.max()), 1e-12)
        ax.imshow(image, aspect="auto", cmap="gray_r", vmin=0.0, vmax=vmax, extent=extent)
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("time step t")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
