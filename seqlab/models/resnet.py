"""CIFAR-style residual networks and their plain twins (He et al. 2016, "Deep Residual
Learning for Image Recognition", §4.2, Fig. 3, Fig. 6).

He 2016 §4.2: a 3×3 convolution, then 3 stages of n basic blocks (2 layers of 3×3
convolutions each) on maps of 16, 32, 64 channels, stride 2 at the first block of stages
2 and 3, global average pooling and a fully connected layer: 6n + 2 weighted layers
(ResNet-20/32/56: n = 3/5/9). Batch normalisation follows every convolution (§3.4).

    residual block   y = ReLU(F(x) + shortcut(x)),  F(x) = BN(W₂ ⋆ ReLU(BN(W₁ ⋆ x)))   (eq. 1)
    plain twin       y = ReLU(F(x))                 (Fig. 3 middle: the same layers)

Shortcuts are **option A** (§3.3, and "we use identity shortcuts in all cases" on CIFAR):
parameter-free. Where a block keeps its shape, shortcut(x) = x; where it halves the map
and widens C_in → C_out, shortcut(x) = [x[:, :, ::2, ::2] ; 0] — every second pixel, the
C_out − C_in new channels zero. So the plain twin has exactly the same parameters as the
ResNet (same names, same shapes), and "plain vs residual" differs only in the additions.

Parameter names follow torchvision's ResNet (``conv1 bn1 layer1.0.conv1 layer1.0.bn1 …
layer3.2.bn2 fc``), so state dicts interchange key by key; there is no ``downsample``
(option A has no projection) and no ``layer4`` (CIFAR nets have 3 stages).

Deviations: MNIST images are 1×28×28, so the stage maps are 28/14/7, not 32/16/8.
Initialisation is torchvision's (He-normal, fan_out, for convolutions; BN γ = 1, β = 0;
nn.Linear's default for fc) where the paper cites He et al. 2015 (fan_in). Where option A
puts the zero channels is not specified in the paper; here they are the last ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.residual import BasicBlock
from seqlab.registry import MODELS

__all__ = ["CifarBasicBlock", "ResNet", "ResNetConfig", "option_a_shortcut"]


def option_a_shortcut(x: Tensor, out_ch: int, stride: int) -> Tensor:
    """He 2016 option A: identity, with stride-s subsampling and zero channels appended
    when the block changes shape (no parameters).

        shortcut(x) = [x[:, :, ::s, ::s] ; 0_{C_out − C_in}]

    Shapes:
        x: (B, C_in, H, W) -> (B, C_out, ⌈H/s⌉, ⌈W/s⌉)
    """
    in_ch = x.shape[1]
    if out_ch < in_ch:
        raise ValueError(f"option A cannot narrow {in_ch} channels to {out_ch}")
    if stride != 1:
        x = x[:, :, ::stride, ::stride]  # (B, C_in, ⌈H/s⌉, ⌈W/s⌉)
    if out_ch != in_ch:
        x = F.pad(x, (0, 0, 0, 0, 0, out_ch - in_ch))  # (B, C_out, ⌈H/s⌉, ⌈W/s⌉)
    return x


class CifarBasicBlock(BasicBlock):
    """seqlab.nn.residual.BasicBlock with He 2016's CIFAR shortcut (option A) or none.

        residual(x) = F(x) = bn2(conv2(ReLU(bn1(conv1(x)))))     conv1 has the stride
        y = ReLU(residual(x) + option_a_shortcut(x))              ``plain=False``
        y = ReLU(residual(x))                                     ``plain=True``

    Names and initialisation are BasicBlock's (torchvision's); its projection
    ``downsample`` (option B) is removed, so the block has only conv1 bn1 conv2 bn2.

    Shapes:
        x: (B, in_ch, H, W) -> (B, out_ch, ⌈H/stride⌉, ⌈W/stride⌉)
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        stride: int = 1,
        plain: bool = False,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__(in_ch, out_ch, stride, zero_init_residual)
        self.downsample = None  # option A: the shortcut has no parameters
        self.out_ch = out_ch
        self.plain = plain

    def residual(self, x: Tensor) -> Tensor:
        """F(x), the residual branch.  (B, in_ch, H, W) -> (B, out_ch, H', W')."""
        out = self.relu(self.bn1(self.conv1(x)))  # (B, out_ch, H', W')
        return self.bn2(self.conv2(out))  # (B, out_ch, H', W')

    def shortcut(self, x: Tensor) -> Tensor:
        """Option A shortcut.  (B, in_ch, H, W) -> (B, out_ch, H', W')."""
        return option_a_shortcut(x, self.out_ch, self.stride)

    def forward(self, x: Tensor) -> Tensor:
        r = self.residual(x)  # (B, out_ch, H', W')
        if self.plain:
            return F.relu(r)  # (B, out_ch, H', W')
        return F.relu(r + self.shortcut(x))  # (B, out_ch, H', W')


@dataclass(frozen=True)
class ResNetConfig:
    """``depth`` = 6n + 2 (20, 32, 44, 56, 110, …); ``widths``: channels of the three
    stages (16, 32, 64 in the paper); ``plain``: drop every shortcut (the plain twin);
    ``zero_init_residual``: γ = 0 in each block's bn2, so every block starts as
    ReLU(shortcut(x)) (Goyal et al. 2017; not in He 2016)."""

    depth: int = 20
    widths: tuple[int, int, int] = (16, 32, 64)
    plain: bool = False
    zero_init_residual: bool = False

    def __post_init__(self) -> None:
        if self.depth < 8 or (self.depth - 2) % 6 != 0:
            raise ValueError(
                f"model.depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, 56, …), got {self.depth}"
            )
        if len(self.widths) != 3 or any(w < 1 for w in self.widths):
            raise ValueError(f"model.widths must be 3 positive ints, got {self.widths}")
        if list(self.widths) != sorted(self.widths):
            raise ValueError(f"model.widths must not decrease (option A), got {self.widths}")

    @property
    def n(self) -> int:
        """Blocks per stage: (depth − 2) / 6."""
        return (self.depth - 2) // 6


@MODELS.register("resnet", ResNetConfig)
class ResNet(nn.Module):
    """CIFAR ResNet-(6n+2) of He 2016 §4.2 (``plain=True``: its plain twin).

    Parameters (torchvision names): ``conv1`` (3×3, C → widths[0]), ``bn1``,
    ``layer1`` … ``layer3`` (n CifarBasicBlocks each; stride 2 at ``layer2.0`` and
    ``layer3.0``), ``fc`` (widths[2] → n_classes).

    Shapes:
        x: (B, C, H, W) -> logits (B, n_classes); stage maps H, ⌈H/2⌉, ⌈H/4⌉
    """

    def __init__(
        self,
        cfg: ResNetConfig,
        in_channels: int,
        n_classes: int,
        image_size: tuple[int, int] = (28, 28),
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.image_size = (int(image_size[0]), int(image_size[1]))
        w1, w2, w3 = cfg.widths
        self.conv1 = nn.Conv2d(in_channels, w1, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w1)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._stage(w1, w1, 1)
        self.layer2 = self._stage(w1, w2, 2)
        self.layer3 = self._stage(w2, w3, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(w3, n_classes)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        nn.init.ones_(self.bn1.weight)
        nn.init.zeros_(self.bn1.bias)

    def _stage(self, in_ch: int, out_ch: int, stride: int) -> nn.Sequential:
        cfg = self.cfg
        blocks = [CifarBasicBlock(in_ch, out_ch, stride, cfg.plain, cfg.zero_init_residual)]
        blocks += [
            CifarBasicBlock(out_ch, out_ch, 1, cfg.plain, cfg.zero_init_residual)
            for _ in range(cfg.n - 1)
        ]
        return nn.Sequential(*blocks)

    def blocks(self) -> list[CifarBasicBlock]:
        """The 3n blocks in order (layer1.0 … layer3.{n−1})."""
        return [b for stage in (self.layer1, self.layer2, self.layer3) for b in stage]

    def stem(self, x: Tensor) -> Tensor:
        """ReLU(bn1(conv1(x))).  (B, C, H, W) -> (B, widths[0], H, W)."""
        return self.relu(self.bn1(self.conv1(x)))  # (B, w1, H, W)

    def forward(self, x: Tensor) -> Tensor:
        h = self.stem(x)  # (B, w1, H, W)
        h = self.layer3(self.layer2(self.layer1(h)))  # (B, w3, ⌈H/4⌉, ⌈W/4⌉)
        return self.fc(self.avgpool(h).flatten(1))  # (B, n_classes)

    @torch.no_grad()
    def feature_maps(self, x: Tensor) -> list[tuple[str, Tensor]]:
        """Output maps of the stem and of each stage, for inspection."""
        out = [("conv1 + bn1 + ReLU", self.stem(x))]  # (B, w1, H, W)
        for name in ("layer1", "layer2", "layer3"):
            out.append((name, getattr(self, name)(out[-1][1])))  # (B, C_ℓ, H_ℓ, W_ℓ)
        return out
