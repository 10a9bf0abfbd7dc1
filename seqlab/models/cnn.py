"""The notes' convolutional network (004, "Convolutional networks"): detection layers
(convolution + ReLU) and pooling layers, then a fully connected classifier.

    z⁽ℓ⁾ = W⁽ℓ⁾ ⋆ h⁽ℓ⁻¹⁾ + b⁽ℓ⁾          convolution layer: one feature map per filter
    a⁽ℓ⁾ = max(z⁽ℓ⁾, 0)                   "linear rectification", y_i = max(z_i, 0)
    h⁽ℓ⁾ = pool(a⁽ℓ⁾)                     y_i = max_{j ∈ group i} z_j  (or the mean)
    logits = W_out · φ(W_fc · vec(h⁽ᴸ⁾) + b_fc) + b_out

⋆ is the deep-learning convolution (cross-correlation, ``nn.Conv2d``; see seqlab.nn.conv
for the notes' two conventions). Padding k // 2 keeps the size through each convolution,
pooling (size p, stride p, the notes' "no overlap" setting) divides it by p.

Deviations: the notes name the layer types but fix no architecture; the sizes are the
presets' choices. Dropout before the FC layers and optional BatchNorm after each
convolution are additions (off with ``dropout: 0``, ``batch_norm: false``).

Image-classifier contract (``convnet`` and ``resnet``; the ``image_classify`` task)::

    Model(cfg, in_channels: int, n_classes: int, image_size: tuple[int, int])
    forward(x (B, C, H, W) float) -> logits (B, n_classes)
    feature_maps(x) -> list[(name, (B, C_ℓ, H_ℓ, W_ℓ))]   (for seqlab.inspect.vision)

:class:`ConvEncoder` is the reusable part (the captioner uses it as its region encoder):
the conv-ReLU-pool stack returning a feature grid, or the grid flattened to L = H'·W'
region vectors of width D = the last channel count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.conv import Conv2d, PoolKind, conv_output_size, pool2d
from seqlab.nn.dropout import Dropout
from seqlab.registry import MODELS

__all__ = ["ConvEncoder", "ConvNet", "ConvNetConfig", "grid_to_regions"]


def grid_to_regions(grid: Tensor) -> Tensor:
    """A feature grid as L = H·W region vectors, row-major (region l = (l // W, l % W)),
    the a = {a_1 … a_L}, a_i ∈ R^D of Xu et al. 2015 (§3.1.1).

    Shapes:
        grid: (B, D, H, W) -> (B, L, D)
    """
    return grid.flatten(2).transpose(1, 2)  # (B, H·W, D)


class ConvEncoder(nn.Module):
    """A stack of ``len(channels)`` detection + pooling stages (notes 004):

        h⁽ℓ⁾ = pool(ReLU(BN?(W⁽ℓ⁾ ⋆ h⁽ℓ⁻¹⁾ + b⁽ℓ⁾)))

    Convolutions are k×k with padding k // 2 ("same" size, k odd), pooling is ``pool``
    ("max" or "avg") over p×p groups with stride p; ``pool_size=1`` skips pooling.
    ``batch_norm=True`` inserts BatchNorm after each convolution (not in the notes).

    Parameters: ``convs[ℓ]`` (W⁽ℓ⁾, b⁽ℓ⁾), ``norms[ℓ]`` (BatchNorm or Identity).

    API for other models (e.g. an attention captioner):
        ``forward(x) -> grid (B, D, H', W')``, ``regions(x) -> (B, L, D)``,
        ``grid_size(H, W) -> (H', W')``, ``out_channels`` = D.

    Shapes:
        x: (B, in_channels, H, W) -> (B, channels[-1], H', W'),
        H' = H // p^n (each stage: ⌊H_ℓ / p⌋)
    """

    def __init__(
        self,
        in_channels: int,
        channels: Sequence[int],
        kernel_size: int = 3,
        pool: PoolKind = "max",
        pool_size: int = 2,
        batch_norm: bool = False,
    ) -> None:
        super().__init__()
        if not channels or any(c < 1 for c in channels):
            raise ValueError(f"channels must be a non-empty list of positive ints, got {channels}")
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd (same-size padding), got {kernel_size}")
        if pool not in ("max", "avg"):
            raise ValueError(f"pool must be 'max' or 'avg', got {pool!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.pool, self.pool_size, self.kernel_size = pool, pool_size, kernel_size
        widths = [in_channels, *channels]
        self.convs = nn.ModuleList(
            Conv2d(c_in, c_out, kernel_size, padding=kernel_size // 2, bias=not batch_norm)
            for c_in, c_out in zip(widths[:-1], widths[1:])
        )
        self.norms = nn.ModuleList(
            nn.BatchNorm2d(c) if batch_norm else nn.Identity() for c in channels
        )
        self.out_channels = int(channels[-1])

    def grid_size(self, H: int, W: int) -> tuple[int, int]:
        """(H', W') of the output grid for an H×W input."""
        for conv in self.convs:
            H, W = conv.output_size(H, W)
            if self.pool_size > 1:
                H = conv_output_size(H, self.pool_size, self.pool_size)
                W = conv_output_size(W, self.pool_size, self.pool_size)
        return H, W

    def stages(self, x: Tensor) -> list[Tensor]:
        """The rectified feature maps a⁽ℓ⁾ of every stage (before pooling), then the
        pooled output h⁽ᴸ⁾ last.  -> [(B, C_1, H, W), …, (B, C_L, H', W')]."""
        out = []
        h = x  # (B, C_in, H, W)
        for conv, norm in zip(self.convs, self.norms):
            a = F.relu(norm(conv(h)))  # (B, C_ℓ, H_ℓ, W_ℓ)  a = max(z, 0)
            out.append(a)
            h = pool2d(a, self.pool, self.pool_size) if self.pool_size > 1 else a  # (B, C_ℓ, ·, ·)
        out.append(h)
        return out

    def forward(self, x: Tensor) -> Tensor:
        return self.stages(x)[-1]  # (B, D, H', W')

    def regions(self, x: Tensor) -> Tensor:
        """The output grid as L = H'·W' region vectors (row-major).  -> (B, L, D)."""
        return grid_to_regions(self(x))  # (B, L, D)


@dataclass(frozen=True)
class ConvNetConfig:
    """conv-ReLU-pool × len(channels), then FC.

    ``channels``: feature maps per convolution layer; ``kernel_size`` k (odd);
    ``pool``: "max" (the notes' most common choice) or "avg"; ``pool_size`` p (stride p);
    ``hidden``: width of the fully connected hidden layer (null: the grid goes straight
    to the output layer); ``dropout`` before each FC layer; ``batch_norm`` after each conv.
    """

    channels: tuple[int, ...] = (32, 64)
    kernel_size: int = 5
    pool: Literal["max", "avg"] = "max"
    pool_size: int = 2
    hidden: int | None = 128
    dropout: float = 0.5
    batch_norm: bool = False

    def __post_init__(self) -> None:
        if not self.channels or any(c < 1 for c in self.channels):
            raise ValueError(f"model.channels must be positive ints, got {self.channels}")
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(f"model.kernel_size must be odd, got {self.kernel_size}")
        if self.pool_size < 1:
            raise ValueError(f"model.pool_size must be >= 1, got {self.pool_size}")
        if self.hidden is not None and self.hidden < 1:
            raise ValueError(f"model.hidden must be >= 1 or null, got {self.hidden}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


@MODELS.register("convnet", ConvNetConfig)
class ConvNet(nn.Module):
    """The notes' ConvNet: ``encoder`` (conv-ReLU-pool stages), then FC layers.

    Parameters: ``encoder.convs[ℓ]``, ``fc`` (W_fc, b_fc; absent when hidden is null),
    ``out`` (W_out, b_out).

    Shapes:
        x: (B, C, H, W) -> logits (B, n_classes)
    """

    def __init__(
        self,
        cfg: ConvNetConfig,
        in_channels: int,
        n_classes: int,
        image_size: tuple[int, int] = (28, 28),
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ConvEncoder(
            in_channels, cfg.channels, cfg.kernel_size, cfg.pool, cfg.pool_size, cfg.batch_norm
        )
        H, W = self.encoder.grid_size(int(image_size[0]), int(image_size[1]))
        flat = self.encoder.out_channels * H * W
        self.dropout = Dropout(cfg.dropout)
        self.fc = nn.Linear(flat, cfg.hidden) if cfg.hidden is not None else None
        self.out = nn.Linear(cfg.hidden if cfg.hidden is not None else flat, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        h = self.encoder(x).flatten(1)  # (B, D·H'·W')  vec(h⁽ᴸ⁾)
        if self.fc is not None:
            h = F.relu(self.fc(self.dropout(h)))  # (B, hidden)
        return self.out(self.dropout(h))  # (B, n_classes)

    @torch.no_grad()
    def feature_maps(self, x: Tensor) -> list[tuple[str, Tensor]]:
        """Rectified maps of each conv layer and the pooled grid, for inspection."""
        maps = self.encoder.stages(x)
        names = [f"conv{i + 1} + ReLU" for i in range(len(maps) - 1)] + ["pooled output"]
        return list(zip(names, maps))
