"""Looking inside image classifiers (notes 004): first-layer filters, the feature maps of
one image, the notes' hand-made kernels applied to an image, and a measurement of
max-pooling's tolerance to small shifts.

The notes' kernels ("What does this convolution kernel do?", 004) are used exactly as
printed there (not normalised; each panel of a figure is scaled to its own range):

    blur      [[0, 1, 0], [1, 4, 1], [0, 1, 0]]
    sharpen   [[0, −1, 0], [−1, 8, −1], [0, −1, 0]]
    edge      [[0, −1, 0], [−1, 4, −1], [0, −1, 0]]      (a Laplacian: sums to 0)
    sobel_x   [[1, 0, −1], [2, 0, −2], [1, 0, −1]]       (responds to vertical edges)
    sobel_y   sobel_xᵀ                                    (not in the notes: its transpose)

They are applied with the notes' convolution A ∗ K (flipped kernel,
``seqlab.nn.conv.convolve2d``) cropped to the image size (zero padding of 1), so
(image ∗ K)_ij = Σ_{s,t} image_{i−s, j−t} K_{s+1, t+1} over s, t ∈ {−1, 0, 1}.

    python -m seqlab.inspect.vision RUN [--split test] [--index 0] [--out DIR]

writes ``filters.png``, ``feature-maps.png`` and ``kernels.png`` for a trained
``image_classify`` run.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.nn.conv import PoolKind, convolve2d, pool2d

__all__ = [
    "apply_kernels",
    "first_conv",
    "main",
    "named_kernels",
    "plot_feature_maps",
    "plot_filters",
    "plot_kernels",
    "pooling_shift_tolerance",
]


def named_kernels() -> dict[str, Tensor]:
    """The notes' 3×3 kernels (004) by name, plus sobel_y = sobel_xᵀ.  Each (3, 3)."""
    blur = torch.tensor([[0.0, 1, 0], [1, 4, 1], [0, 1, 0]])
    sharpen = torch.tensor([[0.0, -1, 0], [-1, 8, -1], [0, -1, 0]])
    edge = torch.tensor([[0.0, -1, 0], [-1, 4, -1], [0, -1, 0]])
    sobel_x = torch.tensor([[1.0, 0, -1], [2, 0, -2], [1, 0, -1]])
    return {
        "blur": blur,
        "sharpen": sharpen,
        "edge": edge,
        "sobel_x": sobel_x,
        "sobel_y": sobel_x.T,
    }


def apply_kernels(image: Tensor, kernels: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """image ∗ K for each kernel (maths convolution, zero padding, same size).

    Shapes:
        image: (H, W); kernels: name → (K, K), K odd; returns name → (H, W)
    """
    kernels = named_kernels() if kernels is None else kernels
    out = {}
    for name, k in kernels.items():
        r = k.shape[0] // 2
        full = convolve2d(image.to(k.dtype), k)  # (H + K − 1, W + K − 1)
        out[name] = full[r : r + image.shape[0], r : r + image.shape[1]]  # (H, W)
    return out


def pooling_shift_tolerance(
    z: Tensor, kind: PoolKind = "max", size: int = 2, shift: int = 1, dim: int = -1
) -> dict[str, float]:
    """How many outputs are unchanged when the input map is shifted by ``shift`` pixels.

    Compares f(z) with f(shift(z)) position by position, with f = identity ("unpooled")
    and f = pool(·, size) ("pooled"), over the positions whose inputs stay inside the
    map (no wrap-around or border is counted). Equal means |a − b| ≤ 1e-6·max|z|.
    Notes 004: "Pooling layers provide invariance to small translations" — for i.i.d.
    continuous maps a 1-pixel shift leaves 1/3 of 2×2 max-pooled outputs unchanged
    (the union of the old and new window has 6 cells, 2 shared; the output is unchanged
    iff the largest of the 6 is shared) and almost no unpooled ones.

    Shapes:
        z: (B, C, H, W) -> {"unpooled": fraction, "pooled": fraction}
    """
    zs = torch.roll(z, shifts=shift, dims=dim)  # (B, C, H, W), z shifted by `shift`
    n = z.shape[dim]
    tol = 1e-6 * float(z.abs().max().clamp_min(1e-12))
    keep = torch.arange(shift, n)  # positions whose shifted input came from inside
    same = (z - zs).abs().index_select(dim, keep) <= tol  # (…, n − shift, …)
    p, ps = pool2d(z, kind, size), pool2d(zs, kind, size)  # (B, C, H/size, W/size)
    first = -(-shift // size)  # pooled windows that contain no wrapped-around column
    keep_p = torch.arange(first, p.shape[dim])
    same_p = (p - ps).abs().index_select(dim, keep_p) <= tol  # (…, ·, …)
    return {"unpooled": float(same.float().mean()), "pooled": float(same_p.float().mean())}


def first_conv(model: nn.Module) -> nn.Conv2d:
    """The first nn.Conv2d of ``model`` (in registration order: conv1 / encoder.convs.0)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            return m
    raise ValueError(f"{type(model).__name__} has no Conv2d layer")


def _figure(n_panels: int, cols: int, cell: float) -> tuple[Any, int, int]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    cols = max(1, min(cols, n_panels))
    rows = math.ceil(n_panels / cols)
    return Figure(figsize=(cell * cols + 0.4, cell * rows + 0.6), dpi=100), rows, cols


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    tmp.replace(path)  # atomic: a reader never sees half a PNG
    return path


def _panels(
    images: Sequence[Tensor],
    titles: Sequence[str],
    path: str | Path,
    title: str,
    cols: int,
    vlim: float | None = None,
) -> Path:
    """One grey panel per image; ``vlim``: one shared scale −vlim … vlim (grey = 0),
    else each panel scaled to its own range."""
    fig, rows, cols = _figure(len(images), cols, 1.3)
    for k, (img, name) in enumerate(zip(images, titles)):
        ax = fig.add_subplot(rows, cols, k + 1)
        a = img.detach().float().cpu()  # (H, W) or (3, H, W)
        if a.dim() == 3:  # (3, H, W) colour filters: rescale to [0, 1] and show as RGB
            a = ((a - a.min()) / (a.max() - a.min()).clamp_min(1e-12)).permute(1, 2, 0)
        lim = {} if vlim is None or a.dim() == 3 else {"vmin": -vlim, "vmax": vlim}
        ax.imshow(a.numpy(), cmap="gray", interpolation="nearest", **lim)
        ax.set_title(name, fontsize=6)
        ax.axis("off")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_filters(model: nn.Module, path: str | Path, max_filters: int = 64) -> Path:
    """PNG of the first convolution layer's filters, one panel each, on one shared scale
    (grey = 0, white = most positive weight, black = most negative); one input channel
    as is, 3 as RGB, otherwise the mean over input channels."""
    w = first_conv(model).weight.detach()  # (C_out, C_in, K, K)
    if w.shape[1] == 3:
        filters = list(w[:max_filters])  # (3, K, K) each
    else:
        filters = list(w[:max_filters].mean(1))  # (K, K) each
    k1, k2 = w.shape[2:]
    return _panels(
        filters,
        [str(i) for i in range(len(filters))],
        path,
        f"first-layer filters ({w.shape[0]} of {k1}×{k2}; grey = 0, white > 0, black < 0)",
        cols=8,
        vlim=float(torch.stack(filters).abs().max()),
    )


@torch.no_grad()
def plot_feature_maps(
    model: nn.Module, image: Tensor, path: str | Path, max_maps: int = 8, label: str = ""
) -> Path:
    """PNG: the input image, then up to ``max_maps`` maps of every stage the model lists
    in ``feature_maps`` (one row per stage).

    Shapes:
        image: (C, H, W), normalised as the model's task feeds it
    """
    was_training = model.training
    model.eval()
    try:
        stages = model.feature_maps(image[None])  # [(name, (1, C_ℓ, H_ℓ, W_ℓ))]
    finally:
        model.train(was_training)
    cols = max_maps + 1
    fig, _, _ = _figure(cols * (len(stages) + 1), cols, 1.1)
    rows = len(stages) + 1
    ax = fig.add_subplot(rows, cols, 1)
    ax.imshow(image.detach().float().cpu().mean(0).numpy(), cmap="gray")
    ax.set_title(f"input {label}".strip(), fontsize=6)
    ax.axis("off")
    for r, (name, maps) in enumerate(stages, start=1):
        for c in range(min(max_maps, maps.shape[1])):
            ax = fig.add_subplot(rows, cols, r * cols + c + 1)
            ax.imshow(maps[0, c].float().cpu().numpy(), cmap="viridis", interpolation="nearest")
            ax.set_title(f"{name} [{c}]" if c == 0 else f"[{c}]", fontsize=6)
            ax.axis("off")
    fig.suptitle("feature maps of one image (each panel scaled to its own range)", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_kernels(image: Tensor, path: str | Path, label: str = "") -> Path:
    """PNG: the image and image ∗ K for each of the notes' kernels (``apply_kernels``).

    Shapes:
        image: (H, W)
    """
    out = apply_kernels(image.detach().float().cpu())
    images = [image.detach().float().cpu(), *out.values()]  # [(H, W)]
    titles = [f"input {label}".strip(), *out]
    return _panels(images, titles, path, "the notes' kernels (004) applied by convolution", 6)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m seqlab.inspect.vision RUN``: the three PNGs for a trained run."""
    from seqlab import api

    p = argparse.ArgumentParser(prog="python -m seqlab.inspect.vision", description=__doc__)
    p.add_argument("run", help="run directory or checkpoint of an image_classify run")
    p.add_argument("--split", default="test")
    p.add_argument("--index", type=int, default=0, help="which image of the split")
    p.add_argument("--out", default=None, help="folder for the PNGs (default: RUN/figures)")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    loaded = api.load(args.run, data_dir=args.data_dir)
    out = Path(args.out) if args.out else Path(args.run) / "figures"
    image, label = loaded.task.image(args.split, args.index)  # (C, H, W), normalised
    raw = loaded.task.splits[args.split][0][args.index, 0]  # (H, W) in [0, 1]
    paths = [
        plot_filters(loaded.model, out / "filters.png"),
        plot_feature_maps(loaded.model, image, out / "feature-maps.png", label=f"({label})"),
        plot_kernels(raw, out / "kernels.png", label=f"({label})"),
    ]
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
