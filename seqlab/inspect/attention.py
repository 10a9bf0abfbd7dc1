"""Attention heatmaps: target rows × source columns, per layer and head.

Attention weights α (each row sums to 1 over the source) say where a model looked. They
are not word alignments (Jain & Wallace 2019; Serrano & Smith 2019), and the caption of
every figure says so.

    plot_attention(weights (T, S) | (H, T, S) | (L, H, T, S), src_labels, tgt_labels, path)
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from seqlab.inspect.figures import figure, save_png

CAPTION = "attention weights (rows sum to 1); not a word alignment"


def as_grid(weights: Tensor) -> Tensor:
    """Any of (T, S), (H, T, S), (L, H, T, S) → (L, H, T, S)."""
    if weights.dim() == 2:
        return weights[None, None]  # (1, 1, T, S)
    if weights.dim() == 3:
        return weights[None]  # (1, H, T, S)
    if weights.dim() == 4:
        return weights
    raise ValueError(f"attention must be (T, S), (H, T, S) or (L, H, T, S), got {weights.shape}")


def plot_attention(
    weights: Tensor,
    src_labels: Sequence[str],
    tgt_labels: Sequence[str],
    path: str | Path,
    title: str = "",
    max_panels: int = 32,
    caption: str = CAPTION,
    vmax: float | None = 1.0,
) -> Path:
    """Write a PNG with one heatmap per (layer, head): rows = target, columns = source.
    ``caption`` says what the cells are; ``vmax`` None scales the colours to the maximum
    (for sums such as coverage, which exceed 1).

    Shapes:
        weights: (T, S), (H, T, S) or (L, H, T, S) with T = len(tgt_labels),
                 S = len(src_labels)
    """
    grid = as_grid(weights.detach().float().cpu())  # (L, H, T, S)
    L, H, T, S = grid.shape
    if (len(tgt_labels), len(src_labels)) != (T, S):
        raise ValueError(
            f"attention is {T}×{S} (target × source) but got {len(tgt_labels)} target and "
            f"{len(src_labels)} source labels"
        )
    panels = [(layer, head) for layer in range(L) for head in range(H)][:max_panels]
    cols = min(H, 4) if L * H > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    cell = 0.28
    w = max(3.0, cell * S + 1.5) * cols
    h = max(2.5, cell * T + 1.2) * rows + 0.4
    fig = figure(w, h)
    top = max(float(grid.max()), 1e-12) if vmax is None else vmax
    for k, (layer, head) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.imshow(grid[layer, head].numpy(), cmap="viridis", vmin=0.0, vmax=top, aspect="auto")
        ax.set_xticks(range(S), list(src_labels), rotation=90, fontsize=7)
        ax.set_yticks(range(T), list(tgt_labels), fontsize=7)
        if L * H > 1:
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    text = f"{title} — {caption}" if title else caption
    fig.suptitle(textwrap.fill(text, max(30, int(w * 14))), fontsize=9)  # fits the width
    return save_png(fig, path)  # atomic: a reader never sees half a PNG


def head_average(weights: Tensor) -> Tensor:
    """Mean over heads (and layers) → (T, S); rows still sum to 1."""
    grid = as_grid(weights)  # (L, H, T, S)
    return grid.mean(dim=(0, 1))  # (T, S)


def sharpness(weights: Tensor) -> Tensor:
    """Mean over rows of max_j α_ij per (layer, head): 1/S for uniform, 1 for one-hot.
    Shapes: any accepted by as_grid → (L, H)."""
    return torch.amax(as_grid(weights), dim=-1).mean(dim=-1)  # (L, H)
