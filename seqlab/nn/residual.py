"""Residual blocks (He et al. 2016, "Deep Residual Learning for Image Recognition").

    y = F(x, {W_i}) + W_s x        (He 2016, eqs. 1–2; W_s = I when shapes match)

The notes (001, "Deep Residual Networks") write the two-layer MLP block as

    z = W⁽¹⁾x + b⁽¹⁾,   h = φ(z),   y = x + W⁽²⁾h

and point out that F(x) = 0 makes the block the identity, and that backprop gives
x̄⁽ℓ⁾ = x̄⁽ℓ⁺¹⁾ (I + ∂F/∂x), stable while ∂F/∂x is small. He 2016 (Fig. 2) applies the
nonlinearity once more after the addition: a[l+2] = g(z[l+2] + a[l]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ResidualMLPBlock(nn.Module):
    """Two-layer fully connected residual block with an identity shortcut.

        z⁽¹⁾ = W⁽¹⁾x + b⁽¹⁾,  h = φ(z⁽¹⁾),  z⁽²⁾ = W⁽²⁾h + b⁽²⁾
        y = x + z⁽²⁾             (notes 001; ``post_activation=False``, the default)
        y = φ(x + z⁽²⁾)          (He 2016 Fig. 2, a[l+2] = g(z[l+2] + a[l]); ``True``)

    φ = ReLU. Attribute names: ``W_1``, ``W_2`` (nn.Linear, holding W⁽¹⁾, b⁽¹⁾, W⁽²⁾, b⁽²⁾).

    Deviations: the notes' y = x + W⁽²⁾h has no b⁽²⁾; here W_2 has a bias (zero it to get
    the notes' block exactly).

    Shapes:
        x: (..., D) -> y: (..., D); hidden h: (..., hidden)
    """

    def __init__(self, dim: int, hidden: int, post_activation: bool = False) -> None:
        super().__init__()
        self.W_1 = nn.Linear(dim, hidden)
        self.W_2 = nn.Linear(hidden, dim)
        self.post_activation = post_activation

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.W_1(x))  # (..., hidden)
        residual = self.W_2(h)  # (..., D) = F(x)
        y = x + residual  # (..., D)
        return torch.relu(y) if self.post_activation else y  # (..., D)


class BasicBlock(nn.Module):
    """ResNet basic block (He 2016, Fig. 2 left / Table 1, "option B" shortcuts):

        residual = BN(conv3×3(ReLU(BN(conv3×3_s(x)))))
        shortcut = x                         if stride = 1 and in_ch = out_ch
                 = BN(conv1×1_s(x))          otherwise (projection, eq. 2)
        y = ReLU(residual + shortcut)

    Attribute names match ``torchvision.models.resnet.BasicBlock`` (``conv1 bn1 conv2 bn2``
    and ``downsample`` = Sequential(0: conv 1×1, 1: BN)), so state dicts interchange.
    Convolutions have no bias (BN follows). Init as torchvision's ResNet: He-normal
    (fan_out, ReLU) convolutions, BN γ = 1, β = 0; ``zero_init_residual=True`` sets bn2's
    γ = 0 so the block starts as ReLU(shortcut) (Goyal et al. 2017).

    Deviations: the stride sits on the first 3×3 conv as in torchvision (and the paper's
    basic block); the paper's CIFAR nets use option A (zero-padding shortcuts), not built.

    Shapes:
        x: (B, in_ch, H, W) -> (B, out_ch, H_out, W_out), H_out = ⌊(H − 1)/stride⌋ + 1
    """

    expansion = 1

    def __init__(
        self, in_ch: int, out_ch: int, stride: int = 1, zero_init_residual: bool = False
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.downsample: nn.Sequential | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_ch),
            )
        self.stride = stride
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            nn.init.zeros_(self.bn2.weight)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))  # (B, out_ch, H_out, W_out)
        residual = self.bn2(self.conv2(out))  # (B, out_ch, H_out, W_out) = F(x)
        shortcut = x if self.downsample is None else self.downsample(x)  # (B, out_ch, H_out, W_out)
        return F.relu(residual + shortcut)  # (B, out_ch, H_out, W_out)
