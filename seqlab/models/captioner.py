"""Show, Attend and Tell: Xu et al. 2015, "Neural Image Caption Generation with Visual
Attention" (§3.1, §4.2, §4.2.1), with soft ("deterministic") attention.

A CNN turns the image into L annotation vectors a_i ∈ ℝ^D (one per cell of its last
feature map); an LSTM writes the caption and, at every word, attends over the regions:

    a = {a_1 … a_L} = CNN(x)                                                  §3.1.1
    h_0 = tanh(f_init,h(ā)),  c_0 = tanh(f_init,c(ā)),  ā = (1/L) Σ_i a_i    §3.1.2
    e_ti = f_att(a_i, h_{t−1}) = vₐᵀ tanh(Wₐ h_{t−1} + Uₐ a_i)               eq. 4
    α_ti = exp(e_ti) / Σ_k exp(e_tk)                                          eq. 5
    β_t = σ(f_β(h_{t−1}))                                                     §4.2.1
    ẑ_t = β_t Σ_i α_ti a_i                                                    eq. 8, 13
    (h_t, c_t) = LSTM([E y_{t−1}; ẑ_t], (h_{t−1}, c_{t−1}))                  eq. 1–3
    p(y_t | a, y_<t) ∝ exp(L_o(E y_{t−1} + L_h h_t + L_z ẑ_t))               eq. 7

Training adds the doubly stochastic regulariser (eq. 14) to −log p(y):
λ Σ_i (1 − Σ_t α_ti)² (:func:`doubly_stochastic_penalty`; λ is the caption task's).

The model follows the seq2seq decoder contract (DESIGN §6), with images in place of
source tokens: ``encode(images, None) -> a``, ``init_state(a, None) -> CaptionState``,
``step(y_prev, state) -> (logits, state)``; the state carries α_t and β_t of the last step
for inspection, so ``seqlab.decode`` greedy / beam search drive it unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.decode.state import static_field
from seqlab.nn.attention import Attention
from seqlab.nn.cells import LSTMCell
from seqlab.nn.embedding import Embedding
from seqlab.registry import MODELS


@dataclass(frozen=True)
class ShowAttendTellConfig:
    """The paper: VGG-19 conv5_4 features (L = 14×14 = 196, D = 512), one LSTM layer.
    The defaults are sized for 64×64 scenes on a 2-core CPU (docs/captioning.md).

    ``channels`` / ``kernels``: width and (odd) kernel size of each conv layer, a 2×2
    max-pool between consecutive ones; the first has stride ``stem_stride`` (a cheap stem:
    at 64×64 a stride-1 first layer tripled the encoder's time). The grid side is
    image_size / (stem_stride · 2^(len(channels) − 1)) and D = channels[−1]. The default
    (5, 3, 1) keeps each region's receptive field at 19 px, about one object (20–24 px):
    with a 3×3 last layer (35 px, half the canvas) every region also sees its neighbours'
    objects, and short runs captioned as well while fewer attention peaks fell on the
    objects (docs/captioning.md §5).
    ``positions``: add a learned embedding p_i to each a_i. ``selector``: the gate β.
    """

    channels: tuple[int, ...] = (32, 64, 64)
    kernels: tuple[int, ...] = (5, 3, 1)
    stem_stride: int = 2
    emb_dim: int = 32
    hidden_size: int = 128
    attn_dim: int = 64
    positions: bool = True
    selector: bool = True
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if not self.channels or any(c < 1 for c in self.channels):
            raise ValueError(f"channels must be positive widths, got {self.channels}")
        if len(self.kernels) != len(self.channels) or any(
            k < 1 or k % 2 == 0 for k in self.kernels
        ):
            raise ValueError(
                f"kernels must be odd sizes, one per conv layer ({len(self.channels)}), "
                f"got {self.kernels}"
            )
        if self.stem_stride < 1:
            raise ValueError(f"stem_stride must be >= 1, got {self.stem_stride}")
        for name in ("emb_dim", "hidden_size", "attn_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def doubly_stochastic_penalty(alpha: Tensor, tgt_mask: Tensor) -> Tensor:
    """Xu et al. 2015, eq. 14: Σ_i (1 − Σ_t α_ti)² per image, over the real steps t.

    Σ_i α_ti = 1 at every step (softmax); the penalty also pushes Σ_t α_ti → 1 for every
    region i, i.e. over the whole caption each region gets about equal attention.

    Shapes:
        alpha:    (B, T, L) attention weights of the teacher-forced pass
        tgt_mask: (B, T) bool, True = real target step
        returns:  (B,)
    """
    attention_per_region = (alpha * tgt_mask[:, :, None]).sum(dim=1)  # (B, L)  Σ_t α_ti
    return ((1.0 - attention_per_region) ** 2).sum(dim=1)  # (B,)


def region_centres(grid: tuple[int, int], size: tuple[int, int]) -> Tensor:
    """Pixel (x, y) of the centre of every annotation region: region i is cell
    (r, c) = (i // w, i % w) of the h×w grid over an H×W image, centre
    ((c + ½)·W/w, (r + ½)·H/h) in continuous pixel coordinates (pixel x covers [x, x + 1)).

    Shapes: grid (h, w), size (H, W) -> (L, 2) float64, L = h·w
    """
    (h, w), (H, W) = grid, size
    rows = (torch.arange(h, dtype=torch.float64) + 0.5) * H / h  # (h,)
    cols = (torch.arange(w, dtype=torch.float64) + 0.5) * W / w  # (w,)
    y = rows[:, None].expand(h, w).reshape(-1)  # (L,)
    x = cols[None, :].expand(h, w).reshape(-1)  # (L,)
    return torch.stack([x, y], dim=1)  # (L, 2)


class RegionEncoder(nn.Module):
    """The annotation vectors: conv + ReLU layers with a 2×2 max-pool between consecutive
    layers; conv k has kernel ``kernels[k]`` ('same' padding), the first stride
    ``stem_stride``, the others 1; cell (r, c) of the last map is a_{r·w + c}.

    Shapes:
        x: (B, C, H, W) float -> a (B, L, D), L = h·w, h = H / (s · 2^(n−1)), D = channels[−1]

    Deviations: a small CNN trained with the captioner, where the paper takes VGG-19
    pretrained on ImageNet (no such net or data here; the scenes are not photos). Not
    ``seqlab.models.cnn.ConvEncoder`` (stride-1 convs, pool after each): at 64×64 the
    strided stem and pooling before (not after) the wider layers make this one about 10×
    cheaper for the same widths and 8×8 grid (widths 32, 64, 128: 0.07 s vs 0.85 s
    forward + backward, batch 64, one thread).
    """

    def __init__(
        self,
        in_channels: int,
        channels: tuple[int, ...],
        kernels: tuple[int, ...],
        stem_stride: int,
    ) -> None:
        super().__init__()
        if len(kernels) != len(channels):
            raise ValueError(f"one kernel size per layer: {len(channels)} != {len(kernels)}")
        widths = (in_channels, *channels)
        strides = (stem_stride,) + (1,) * (len(channels) - 1)
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, kernel_size=k, stride=s, padding=k // 2)
            for c_in, c_out, k, s in zip(widths[:-1], widths[1:], kernels, strides)
        )
        self.downsample = stem_stride * 2 ** (len(channels) - 1)

    def forward(self, x: Tensor) -> Tensor:
        for k, conv in enumerate(self.convs):
            if k > 0:
                x = F.max_pool2d(x, 2)  # (B, C_{k−1}, H_{k−1} / 2, W_{k−1} / 2)
            x = F.relu(conv(x))  # (B, C_k, H_k, W_k)
        return x.flatten(2).transpose(1, 2)  # (B, L, D)


@dataclass
class CaptionState:
    """Decoder state, batch first; a and U_a_a are static (``static_field``).

    Shapes: h, c (B, n) = h_{t−1}, c_{t−1}; a (B, L, D) annotations; U_a_a (B, L, A) = Uₐ a_i
    (precomputed once per image); alpha (B, L) = α_t and beta (B, 1) = β_t of the last step
    (zeros before the first).
    """

    h: Tensor
    c: Tensor
    a: Tensor = static_field()
    U_a_a: Tensor = static_field()
    alpha: Tensor
    beta: Tensor


@MODELS.register("show_attend_tell", ShowAttendTellConfig)
class ShowAttendTell(nn.Module):
    """CNN annotations, soft attention, LSTM decoder, deep output (Xu et al. 2015).

    Shapes:
        images (B, C, H, W) float, y_in (B, T) long, tgt_mask (B, T) bool
        forward -> logits (B, T, V);  encode -> a (B, L, D);  step -> (B, V), CaptionState
        forward_with_attention -> logits (B, T, V), α (B, T, L), β (B, T)
        E (V, m) ``embed``; Wₐ (A, n), Uₐ (A, D), vₐ (A,) in ``attention.score``;
        f_β ``f_beta`` (n → 1); f_init,h, f_init,c (D → n); LSTM ``cell`` input m + D,
        state n; L_h (m, n), L_z (m, D), L_o (V, m) with bias; p_i ``P`` (L, D)

    Deviations: the small CNN of :class:`RegionEncoder` instead of pretrained VGG-19; a
    learned position embedding p_i added to each a_i (``positions``; VGG features carry
    position only implicitly, and these captions name left/above/below); f_init and f_β are
    one affine layer each (the paper: "MLPs"); dropout (Xu et al. use it, the equations do
    not show it) on E y_{t−1} + L_h h_t + L_z ẑ_t before L_o; the LSTM has one bias per
    gate; ``selector=False`` drops β (β_t = 1). No fused fast path: torch's fused LSTM cell
    (``_VF.lstm_cell``) was not faster than the readable cell at these sizes on the 2-core
    CPU (decoder pass B = 64, T = 12: 107 ms vs 85 ms), so the readable cell is the only path.
    """

    def __init__(
        self,
        cfg: ShowAttendTellConfig,
        tgt_vocab: int,
        pad_id: int = 0,
        in_channels: int = 3,
        image_size: int = 64,
    ) -> None:
        super().__init__()
        self.cfg, self.pad_id = cfg, pad_id
        self.dropout = cfg.dropout  # a float attribute, so train.dropout_from_step can set it
        m, n, A, D = cfg.emb_dim, cfg.hidden_size, cfg.attn_dim, cfg.channels[-1]
        self.encoder = RegionEncoder(in_channels, cfg.channels, cfg.kernels, cfg.stem_stride)
        side = image_size // self.encoder.downsample
        if side < 1 or side * self.encoder.downsample != image_size:
            raise ValueError(
                f"image_size {image_size} must be a multiple of {self.encoder.downsample} "
                f"(stem_stride · 2^(len(channels) − 1))"
            )
        self.grid = (side, side)  # (h, w)
        self.image_size = image_size
        L = side * side
        self.P = nn.Parameter(0.02 * torch.randn(L, D)) if cfg.positions else None  # (L, D)
        self.embed = Embedding(tgt_vocab, m, padding_idx=pad_id, init_std=0.1)  # E
        self.f_init_h = nn.Linear(D, n)
        self.f_init_c = nn.Linear(D, n)
        self.attention = Attention(query_dim=n, key_dim=D, score="additive", attn_dim=A)
        self.f_beta = nn.Linear(n, 1) if cfg.selector else None
        self.cell = LSTMCell(m + D, n)
        self.L_h = nn.Linear(n, m, bias=False)
        self.L_z = nn.Linear(D, m, bias=False)
        self.L_o = nn.Linear(m, tgt_vocab)

    # --- the pieces of the equations -------------------------------------------------------

    def encode(self, images: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """a_i = CNN(x)_i (+ p_i).  images (B, C, H, W) -> a (B, L, D); ``src_mask`` unused
        (every region is real)."""
        a = self.encoder(images)  # (B, L, D)
        return a + self.P if self.P is not None else a  # (B, L, D)

    def init_state(self, memory: Tensor, src_mask: Tensor | None = None) -> CaptionState:
        a = memory  # (B, L, D)
        a_bar = a.mean(dim=1)  # (B, D)  ā = (1/L) Σ_i a_i
        h0 = torch.tanh(self.f_init_h(a_bar))  # (B, n)
        c0 = torch.tanh(self.f_init_c(a_bar))  # (B, n)
        U_a_a = self.attention.precompute_keys(a)  # (B, L, A)  once per image
        alpha = a.new_zeros(a.shape[:2])  # (B, L)
        beta = a.new_zeros(a.shape[0], 1)  # (B, 1)
        return CaptionState(h0, c0, a, U_a_a, alpha, beta)

    def attend(self, h_prev: Tensor, a: Tensor, U_a_a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """ẑ_t = β_t Σ_i α_ti a_i with α_t = softmax_i(vₐᵀ tanh(Wₐ h_{t−1} + Uₐ a_i)).

        Shapes: h_prev (B, n), a (B, L, D), U_a_a (B, L, A) -> ẑ (B, D), α (B, L), β (B, 1)
        """
        context, alpha = self.attention(h_prev, a, precomputed_keys=U_a_a)  # (B, D), (B, L)
        if self.f_beta is None:
            beta = h_prev.new_ones(h_prev.shape[0], 1)  # (B, 1)
        else:
            beta = torch.sigmoid(self.f_beta(h_prev))  # (B, 1)
        return beta * context, alpha, beta  # (B, D), (B, L), (B, 1)

    def readout(self, e: Tensor, h: Tensor, z: Tensor) -> Tensor:
        """Deep output, eq. 7: logits = L_o(dropout(E y_{t−1} + L_h h_t + L_z ẑ_t)).

        Shapes: e (B, [T,] m), h (B, [T,] n), z (B, [T,] D) -> (B, [T,] V)
        """
        out = e + self.L_h(h) + self.L_z(z)  # (B, [T,] m)
        return self.L_o(F.dropout(out, self.dropout, self.training))  # (B, [T,] V)

    # --- the contract ---------------------------------------------------------------------

    def step(self, y_prev: Tensor, state: CaptionState) -> tuple[Tensor, CaptionState]:
        """One word: attend with h_{t−1}, update the LSTM, read out.  y_prev (B,) -> (B, V)."""
        e = self.embed(y_prev)  # (B, m)  E y_{t−1}
        z, alpha, beta = self.attend(state.h, state.a, state.U_a_a)  # (B, D), (B, L), (B, 1)
        (h, c), _ = self.cell.step(torch.cat([e, z], dim=-1), (state.h, state.c))  # (B, n)
        new = dataclasses.replace(state, h=h, c=c, alpha=alpha, beta=beta)
        return self.readout(e, h, z), new  # (B, V)

    def forward_with_attention(
        self, images: Tensor, y_in: Tensor, tgt_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Teacher forcing over y_in; also α and β of every step (for eq. 14 and plots).

        Shapes: images (B, C, H, W), y_in (B, T) -> logits (B, T, V), α (B, T, L), β (B, T)
        """
        state = self.init_state(self.encode(images))
        e = self.embed(y_in)  # (B, T, m)
        h, c = state.h, state.c  # (B, n), (B, n)
        hs, zs, alphas, betas = [], [], [], []
        for t in range(y_in.shape[1]):
            z, alpha, beta = self.attend(h, state.a, state.U_a_a)  # (B, D), (B, L), (B, 1)
            (h, c), _ = self.cell.step(torch.cat([e[:, t], z], dim=-1), (h, c))  # (B, n)
            hs.append(h)
            zs.append(z)
            alphas.append(alpha)
            betas.append(beta)
        H = torch.stack(hs, dim=1)  # (B, T, n)
        Z = torch.stack(zs, dim=1)  # (B, T, D)
        logits = self.readout(e, H, Z)  # (B, T, V)
        return logits, torch.stack(alphas, dim=1), torch.cat(betas, dim=1)  # (B,T,L), (B,T)

    def forward(
        self,
        images: Tensor,
        src_mask: Tensor | None,
        y_in: Tensor,
        tgt_mask: Tensor | None,
        return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        """Teacher-forced logits (B, T, V); with ``return_attention`` also α (B, T, L) and
        β (B, T) (what the caption task's loss needs; through ``forward`` so DDP sees it)."""
        out = self.forward_with_attention(images, y_in, tgt_mask)
        return out if return_attention else out[0]

    @torch.no_grad()
    def attention_maps(
        self, images: Tensor, src_mask: Tensor | None, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, Tensor]:
        """α (B, T, L) and β (B, T) of the teacher-forced pass: row t = weights used to emit
        y_t; region i is cell (i // w, i % w) of the ``grid`` (h, w)."""
        _, alpha, beta = self.forward_with_attention(images, y_in, tgt_mask)
        return {"alpha": alpha, "beta": beta}
