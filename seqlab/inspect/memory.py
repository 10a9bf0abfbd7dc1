"""Memory traces of a Neural Turing Machine: where each head reads and writes, step by step.

    trace = memory_trace(model, batch)        # one example: inputs, targets, outputs, w_t
    save_trace(trace, "runs/x/copy-20")        # copy-20.npz + copy-20.json (a trace record)
    plot_memory(trace, "docs/figures/ntm-copy.png", title="copy, length 20")

The figure follows Graves et al. 2014 Figure 6: inputs and targets/outputs over time, then
one heatmap per head of the weighting w_t(i) (rows: memory locations i, columns: time t).
A head that walks through memory shows a diagonal line; the copy task's ideal is a write
diagonal during the input phase and the same diagonal again for the read head during the
output phase. Models without memory (the LSTM baseline) get the first panels only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from seqlab.data.algorithmic_bits import BitsBatch
from seqlab.inspect.figures import save_png
from seqlab.inspect.trace_format import Trace, write_trace
from seqlab.models.ntm import NTM

__all__ = ["memory_trace", "ntm_record", "plot_memory", "save_trace"]

# name → (axes, meaning) of every array memory_trace can return
ARRAYS = {
    "x": (("time", "channel"), "inputs x_t (input phase, then delimiter / queries)"),
    "y": (("time", "bit"), "targets y_t (scored only where mask)"),
    "mask": (("time",), "True on the output phase (the steps the loss scores)"),
    "outputs": (("time", "bit"), "σ(logits_t): the model's bit probabilities"),
    "read_weights": (("time", "head", "location"), "w_t(i) of each read head; Σ_i = 1"),
    "write_weights": (("time", "head", "location"), "w_t(i) of each write head; Σ_i = 1"),
    "memory": (("time", "location", "width"), "M_t after step t's write (eq. 3–4)"),
}


@torch.no_grad()
def memory_trace(
    model: nn.Module, batch: BitsBatch, index: int = 0, memory: bool = False
) -> dict[str, np.ndarray]:
    """Run ``model`` on ``batch`` and keep example ``index``.

    Returns arrays (T steps of the example, padding removed):
        x (T, D_in), y (T, D_out), mask (T,), outputs σ(logits) (T, D_out),
        and for the NTM read_weights (T, H_r, N), write_weights (T, H_w, N) and, with
        ``memory``, the memory M_t after every step (T, N, W).
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    x = batch.x.to(device)  # (B, T, D_in)
    out = model(x, trace_memory=True) if memory and isinstance(model, NTM) else model(x)
    model.train(was_training)
    mask = batch.mask[index]  # (T,)
    T = int(mask.nonzero().max()) + 1 if mask.any() else mask.shape[0]  # drop end padding
    trace = {
        "x": batch.x[index, :T].numpy(),
        "y": batch.y[index, :T].numpy(),
        "mask": mask[:T].numpy(),
        "outputs": torch.sigmoid(out.logits[index, :T].float()).cpu().numpy(),
    }
    for name in ("read_weights", "write_weights", "memory"):
        w = getattr(out, name, None)
        if w is not None:
            trace[name] = w[index, :T].float().cpu().numpy()  # (T, H, N) | (T, N, W)
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


def ntm_record(trace: dict[str, np.ndarray], **fields: Any) -> Trace:
    """The arrays of :func:`memory_trace` as a trace record (``kind="ntm"``) with
    :func:`summary` as ``info["summary"]``; ``fields``: model, task, checkpoint, step, info."""
    info = {**fields.pop("info", {}), "summary": summary(trace)}
    record = Trace("ntm", info=info, **fields)
    for name, value in trace.items():
        axes, meaning = ARRAYS[name]
        record.add(name, value, axes, meaning)
    return record


def save_trace(trace: dict[str, np.ndarray], stem: str | Path, **fields: Any) -> tuple[Path, Path]:
    """Write the trace record of :func:`ntm_record` to ``<stem>.npz`` and ``<stem>.json``
    (``seqlab.inspect.trace_format``); returns (npz, json)."""
    js, npz = write_trace(ntm_record(trace, **fields), stem)
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
    return save_png(fig, path)
