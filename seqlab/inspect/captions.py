"""Where the captioner looks: the attention map of every generated word over the image.

Xu et al. 2015 (Fig. 2–3) upsample each α_t (one weight per annotation region) to the
image and show it over the picture, one panel per word; the notes repeat those figures
("we can see where the network is looking"). Here the map is upsampled bilinearly, the
peak region's centre is marked (the point the localisation metric checks), and the
objects' boxes are drawn. Weights are what the model used, not a segmentation, and the
caption of the figure says so.

    plot_caption_attention([CaptionPanel(image, words, alpha, grid, boxes), …], path)
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch.nn.functional as F
from torch import Tensor

from seqlab.models.captioner import region_centres

CAPTION = (
    "α_t per word, upsampled, each map scaled to its maximum; + = peak region (the "
    "localisation check); boxes = objects"
)


@dataclass
class CaptionPanel:
    """One row of the figure: a picture, its generated words and their attention maps.

    Shapes: image (H, W, 3) uint8; alpha (T, L) with T ≥ len(words), L = h·w of ``grid``
    (row t = the map used to emit words[t]); boxes (x0, y0, x1, y1) pixel boxes; beta (T,)
    or None (the gate β_t, printed under each word).
    """

    image: np.ndarray
    words: list[str]
    alpha: Tensor
    grid: tuple[int, int]
    boxes: list[tuple[int, int, int, int]] = field(default_factory=list)
    beta: Tensor | None = None
    reference: str = ""


def upsample(alpha_t: Tensor, grid: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """One attention map (L,) → an (H, W) image by bilinear interpolation of the h×w grid.

    Shapes: alpha_t (L,) -> (H, W) float, same total order of magnitude per region
    """
    h, w = grid
    cells = alpha_t.detach().float().cpu().reshape(1, 1, h, w)  # (1, 1, h, w)
    up = F.interpolate(cells, size=size, mode="bilinear", align_corners=False)  # (1, 1, H, W)
    return up[0, 0].numpy()  # (H, W)


def peak_pixel(
    alpha_t: Tensor, grid: tuple[int, int], size: tuple[int, int]
) -> tuple[float, float]:
    """(x, y) pixel centre of the region argmax_i α_ti (``region_centres``)."""
    x, y = region_centres(grid, size)[int(alpha_t.argmax())].tolist()
    return x, y


def plot_caption_attention(
    panels: Sequence[CaptionPanel],
    path: str | Path,
    title: str = "",
    max_words: int = 14,
) -> Path:
    """Write a PNG: one row per caption — the picture, then one panel per generated word
    with its attention map over the picture (at most ``max_words`` words per row)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    if not panels:
        raise ValueError("plot_caption_attention needs at least one caption")
    for p in panels:
        if p.alpha.dim() != 2 or p.alpha.shape[0] < len(p.words):
            raise ValueError(
                f"alpha must be (T, L) with T >= {len(p.words)} words, got {tuple(p.alpha.shape)}"
            )
        if p.alpha.shape[1] != p.grid[0] * p.grid[1]:
            raise ValueError(f"alpha has {p.alpha.shape[1]} regions but the grid is {p.grid}")
    cols = 1 + min(max_words, max(len(p.words) for p in panels))
    fig = Figure(figsize=(1.25 * cols, 1.45 * len(panels) + 0.5), dpi=100)
    for r, p in enumerate(panels):
        H, W = p.image.shape[:2]
        ax = fig.add_subplot(len(panels), cols, r * cols + 1)
        ax.imshow(p.image)
        ax.set_title(textwrap.fill(p.reference or "image", 24), fontsize=5)
        ax.axis("off")
        for t, word in enumerate(p.words[: cols - 1]):
            ax = fig.add_subplot(len(panels), cols, r * cols + t + 2)
            ax.imshow((p.image * 0.55).astype(np.uint8))
            heat = upsample(p.alpha[t], p.grid, (H, W))  # (H, W)
            ax.imshow(heat / max(float(heat.max()), 1e-12), cmap="gray", alpha=0.6, vmin=0, vmax=1)
            for x0, y0, x1, y1 in p.boxes:
                ax.add_patch(
                    Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, lw=0.6, ec="c")
                )
            x, y = peak_pixel(p.alpha[t], p.grid, (H, W))
            ax.plot([x - 0.5], [y - 0.5], marker="+", color="r", markersize=6, mew=1.2)
            label = word if p.beta is None else f"{word}\nβ={float(p.beta[t]):.2f}"
            ax.set_title(label, fontsize=7)
            ax.axis("off")
    fig.suptitle(f"{title} — {CAPTION}" if title else CAPTION, fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    tmp.replace(path)  # atomic: a reader never sees half a PNG
    return path
