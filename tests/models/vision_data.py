"""A tiny synthetic image set for the vision tests: which quadrant holds a bright square.

Class c ∈ {0, 1, 2, 3} puts a 3×3 square of value 1 at a random place inside quadrant c
of a 12×12 canvas, plus N(0, 0.1²) noise. Seeded, so train / test draws are fixed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from seqlab.data.images import MNIST_FILES, write_idx


def quadrant_images(n: int, seed: int = 0, size: int = 12) -> tuple[Tensor, Tensor]:
    """-> images (n, 1, size, size) float32, labels (n,) long in 0..3."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 4  # (n,)
    half = size // 2
    r0 = (y // 2) * half + torch.randint(0, half - 2, (n,), generator=g)  # (n,) top row
    c0 = (y % 2) * half + torch.randint(0, half - 2, (n,), generator=g)  # (n,) left column
    rows = torch.arange(size)[None, :, None]  # (1, size, 1)
    cols = torch.arange(size)[None, None, :]  # (1, 1, size)
    inside = (
        (rows >= r0[:, None, None])
        & (rows < r0[:, None, None] + 3)
        & (cols >= c0[:, None, None])
        & (cols < c0[:, None, None] + 3)
    )  # (n, size, size)
    x = inside.float() + 0.1 * torch.randn(n, size, size, generator=g)  # (n, size, size)
    return x[:, None], y


def train_briefly(model: torch.nn.Module, steps: int = 60, lr: float = 3e-3) -> float:
    """Adam on 128 training images, batches of 32; returns held-out accuracy on 128 more."""
    x, y = quadrant_images(128, seed=0)
    xt, yt = quadrant_images(128, seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        i = torch.arange(step * 32, step * 32 + 32) % 128
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return float((model(xt).argmax(-1) == yt).float().mean())


def write_quadrant_mnist(root: Path, n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The quadrant images (tests/models/vision_data.py) as MNIST IDX files, uint8."""
    x, y = quadrant_images(n, seed)
    pixels = (x[:, 0].clamp(0, 1) * 255).round().to(torch.uint8).numpy()  # (n, 12, 12)
    (root / "mnist").mkdir(parents=True, exist_ok=True)
    write_idx(root / "mnist" / f"{MNIST_FILES[0]}.gz", pixels, compress=True)
    write_idx(root / "mnist" / f"{MNIST_FILES[1]}.gz", y.numpy().astype(np.uint8), compress=True)
    return pixels, y.numpy()
