"""The convolutional encoder–decoder ConvS2S (Gehring et al. 2017), from ``seqlab.nn``.

Gehring et al. 2017, "Convolutional Sequence to Sequence Learning":

    e_j   = w_j + p_j                   source word + learned position embedding (§3.1)
    z^u   = W_out · Blocks_enc(W_in · dropout(e))          encoder output, u layers (§3.2)
    g_i   = w_i + p_i                   embedding of the previous target element
    h^0   = W_in · dropout(g)
    h^l   = (v(W^l [h^{l−1}_{i−k+1}, …, h^{l−1}_i] + b^l) + h^{l−1}_i) · √0.5    causal
    h^l  ← (h^l + W_c^l c^l) · √0.5     multi-step attention, every layer (§3.3)
    p(y_{i+1} | y_1..i, x) = softmax(W_o · dropout(W_out h^L_i) + b_o)

v is the GLU, A ⊗ σ(B) (``ConvGLUBlock``, √0.5 residual scaling of §3.4); the attention
with its m·√(1/m) conditional-input scaling is ``MultiStepAttention``. The teacher-forced
forward is parallel over every position (no recurrence: the point of ConvS2S); decoding
one token at a time keeps, per decoder layer, the block's last k − 1 inputs.

Padding: sequences are right-padded. The encoder sets padded positions to zero before
every block, so a real position's window sees zeros past the end exactly as without
padding; attention ignores padded keys. The decoder is causal, so right padding of the
target never reaches earlier positions and ``tgt_mask`` is not needed.

Init (§3.5): embeddings N(0, 0.1²) (pad row 0); layers that do not feed a GLU
N(0, p/n_in), p = 1 − dropout the retention probability of their input's dropout (p = 1
without one); GLU convolutions as ``ConvGLUBlock``; biases 0.

Deviations: no weight normalisation (§3.5 uses it); every layer has the same width C (the
paper's deep models change widths with projected residuals); the encoder gradient is
scaled by 1/(2·L_dec) as in the authors' code (the paper: "by the number of attention
mechanisms"), ``scale_encoder_gradient=False`` turns it off; ``tie_output`` shares W_o
with the target embedding (not in the paper); positions count from 0 at the first token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.decode.state import static_field
from seqlab.models.convs2s_attention import MultiStepAttention, scale_gradient
from seqlab.nn.dropout import Dropout
from seqlab.nn.embedding import Embedding, tied_logits
from seqlab.nn.glu import ConvGLUBlock
from seqlab.nn.positional import LearnedPositionalEmbedding
from seqlab.registry import MODELS

EMBED_STD = 0.1  # §3.5: "All embeddings are initialized from N(0, 0.1)"


@dataclass(frozen=True)
class ConvS2SConfig:
    """Hyper-parameters; the defaults are a small model meant for Multi30k on a CPU.

    The paper's WMT'14 En-De model has 512-wide embeddings and channels, 15 + 15 layers,
    kernel 3 (§5.1); fairseq's IWSLT'14 preset has E = C = 256, 4 + 3 layers, kernel 3.
    """

    emb_dim: int = 256  # E: embeddings, encoder output z, attention query d
    channels: int = 256  # C: convolution width
    encoder_layers: int = 6
    encoder_kernel: int = 3  # odd: the encoder pads (k − 1)/2 on both sides
    decoder_layers: int = 4
    decoder_kernel: int = 3
    dropout: float = 0.2
    max_positions: int = 1024  # size of the learned position tables
    tie_output: bool = True  # W_o = E_tgt (the paper does not tie)
    share_embeddings: bool = False  # E_src = E_tgt (needs one vocabulary)
    scale_encoder_gradient: bool = True  # §3.4: encoder gradient · 1/(2·decoder_layers)

    def __post_init__(self) -> None:
        for name in ("emb_dim", "channels", "encoder_layers", "decoder_layers", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.encoder_kernel < 1 or self.encoder_kernel % 2 == 0:
            raise ValueError(f"encoder_kernel must be odd and >= 1, got {self.encoder_kernel}")
        if self.decoder_kernel < 1:
            raise ValueError(f"decoder_kernel must be >= 1, got {self.decoder_kernel}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


@dataclass
class ConvS2SMemory:
    """What the decoder attends to: keys z^u and values z^u + e (§3.3).

    Shapes: z (B, S, E), z_plus_e (B, S, E)
    """

    z: Tensor
    z_plus_e: Tensor


@dataclass
class ConvS2SState:
    """Incremental decoding state; ``seqlab.decode.reorder_state`` reorders every field
    (beam search skips the static z, z_plus_e and src_mask, see ``static_field``).

    ``buffers[l]`` holds the last k − 1 inputs of decoder block l (None before the first
    step, i.e. the causal zero padding); ``position`` is the position of the next token
    (for its learned position embedding).

    Shapes: z, z_plus_e (B, S, E), src_mask (B, S) bool, buffers[l] (B, k − 1, C) | None
    """

    z: Tensor = static_field()
    z_plus_e: Tensor = static_field()
    src_mask: Tensor = static_field()
    buffers: list[Tensor | None]
    position: int = 0


def _init_linear(layer: nn.Linear, p: float = 1.0) -> nn.Linear:
    """§3.5: W ~ N(0, p/n_in) (p = input retention probability), b = 0."""
    nn.init.normal_(layer.weight, mean=0.0, std=(p / layer.in_features) ** 0.5)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


@MODELS.register("convs2s", ConvS2SConfig)
class ConvS2S(nn.Module):
    """Convolutional sequence-to-sequence model, ConvS2S (Gehring et al. 2017).

    The equations are in the module docstring.

    Shapes:
        src (B, S) long, src_mask (B, S) bool, y_in (B, T) long, tgt_mask (B, T) bool
        forward -> logits (B, T, V_tgt)
        encode -> ConvS2SMemory (z, z_plus_e (B, S, E))
        step(y_prev (B,), state) -> logits (B, V_tgt), state
    """

    def __init__(self, cfg: ConvS2SConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        self.cfg = cfg
        E, C, p = cfg.emb_dim, cfg.channels, 1.0 - cfg.dropout
        self.src_embed = Embedding(src_vocab, E, padding_idx=pad_id, init_std=EMBED_STD)
        if cfg.share_embeddings:
            if src_vocab != tgt_vocab:
                raise ValueError(
                    f"share_embeddings needs one vocabulary, got {src_vocab} and {tgt_vocab}"
                )
            self.tgt_embed = self.src_embed
        else:
            self.tgt_embed = Embedding(tgt_vocab, E, padding_idx=pad_id, init_std=EMBED_STD)
        # e = dropout(w + p), g = dropout(w + p): the layer adds the positions, then drops.
        self.src_pos = LearnedPositionalEmbedding(cfg.max_positions, E, cfg.dropout)
        self.tgt_pos = LearnedPositionalEmbedding(cfg.max_positions, E, cfg.dropout)
        for pos in (self.src_pos, self.tgt_pos):
            nn.init.normal_(pos.P, mean=0.0, std=EMBED_STD)

        self.encoder_in = _init_linear(nn.Linear(E, C), p)  # E -> C
        self.encoder_blocks = nn.ModuleList(
            ConvGLUBlock(C, cfg.encoder_kernel, cfg.dropout, causal=False)
            for _ in range(cfg.encoder_layers)
        )
        self.encoder_out = _init_linear(nn.Linear(C, E))  # C -> E, gives z^u

        self.decoder_in = _init_linear(nn.Linear(E, C), p)  # E -> C, gives h^0
        self.decoder_blocks = nn.ModuleList(
            ConvGLUBlock(C, cfg.decoder_kernel, cfg.dropout, causal=True)
            for _ in range(cfg.decoder_layers)
        )
        self.attention = nn.ModuleList(MultiStepAttention(C, E) for _ in range(cfg.decoder_layers))
        self.decoder_out = _init_linear(nn.Linear(C, E))  # C -> E
        self.output_dropout = Dropout(cfg.dropout)
        if cfg.tie_output:
            self.W_o = None
            self.b_o = nn.Parameter(torch.zeros(tgt_vocab))  # (V,)
        else:
            self.W_o = _init_linear(nn.Linear(E, tgt_vocab), p)  # E -> V, with b_o
            self.b_o = None

    # ----------------------------------------------------------------------------- encoder
    def encode(self, src: Tensor, src_mask: Tensor) -> ConvS2SMemory:
        """z^u and z^u + e for every source position (zero at padded positions of z)."""
        e = self.src_pos(self.src_embed(src))  # (B, S, E) dropout(w + p)
        pad = ~src_mask[:, :, None]  # (B, S, 1) True at padding
        x = self.encoder_in(e)  # (B, S, C)
        for block in self.encoder_blocks:
            # Zero the padding so a real position's window sees what it sees unpadded.
            x = block(x.masked_fill(pad, 0.0))  # (B, S, C)
        z = self.encoder_out(x).masked_fill(pad, 0.0)  # (B, S, E)
        if self.cfg.scale_encoder_gradient:
            z = scale_gradient(z, 1.0 / (2.0 * self.cfg.decoder_layers))  # (B, S, E)
        return ConvS2SMemory(z=z, z_plus_e=z + e)  # (B, S, E) ×2; §3.3: values add e_j

    # ----------------------------------------------------------------------------- decoder
    def embed_target(self, y: Tensor, offset: int = 0) -> Tensor:
        """g = dropout(w + p) for target tokens at positions offset …  (B, T) -> (B, T, E)."""
        return self.tgt_pos(self.tgt_embed(y), offset=offset)  # (B, T, E)

    def decode(
        self, y_in: Tensor, memory: ConvS2SMemory, src_mask: Tensor
    ) -> tuple[Tensor, list[Tensor]]:
        """Teacher-forced decoder stack: h^L and every layer's attention α^l.

        Shapes: y_in (B, T) -> h^L (B, T, C), [α^l (B, T, S)] × L
        """
        g = self.embed_target(y_in)  # (B, T, E)
        h = self.decoder_in(g)  # (B, T, C) h^0
        alphas = []
        for block, attention in zip(self.decoder_blocks, self.attention, strict=True):
            h = block(h)  # (B, T, C) causal GLU convolution + √0.5 residual
            h, alpha = attention(h, g, memory.z, memory.z_plus_e, src_mask)  # (B, T, C)
            alphas.append(alpha)
        return h, alphas

    def output(self, h: Tensor) -> Tensor:
        """logits = W_o · dropout(W_out h^L) + b_o (W_o = E_tgt when tied).

        Shapes: (..., C) -> (..., V)
        """
        y = self.output_dropout(self.decoder_out(h))  # (..., E)
        if self.W_o is None:
            return tied_logits(y, self.tgt_embed.weight, self.b_o)  # (..., V)
        return self.W_o(y)  # (..., V)

    def forward(self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher forcing, parallel over all T positions. ``tgt_mask`` is unused (causal
        decoder, right padding)."""
        memory = self.encode(src, src_mask)
        h, _ = self.decode(y_in, memory, src_mask)  # (B, T, C)
        return self.output(h)  # (B, T, V)

    # ------------------------------------------------------------------- step-by-step decoding
    def init_state(self, memory: ConvS2SMemory, src_mask: Tensor) -> ConvS2SState:
        return ConvS2SState(
            z=memory.z,
            z_plus_e=memory.z_plus_e,
            src_mask=src_mask,
            buffers=[None] * len(self.decoder_blocks),
            position=0,
        )

    def step(self, y_prev: Tensor, state: ConvS2SState) -> tuple[Tensor, ConvS2SState]:
        """One target position from the cached block inputs (eval mode: equals ``forward``).

        Shapes: y_prev (B,) long -> logits (B, V)
        """
        g = self.embed_target(y_prev[:, None], offset=state.position)  # (B, 1, E)
        h = self.decoder_in(g)[:, 0]  # (B, C)
        buffers: list[Tensor | None] = []
        for block, attention, buffer in zip(
            self.decoder_blocks, self.attention, state.buffers, strict=True
        ):
            h, buffer = block.step(h, buffer)  # (B, C), (B, k − 1, C)
            buffers.append(buffer)
            h, _ = attention(h[:, None], g, state.z, state.z_plus_e, state.src_mask)  # (B, 1, C)
            h = h[:, 0]  # (B, C)
        state = dataclasses.replace(state, buffers=buffers, position=state.position + 1)
        return self.output(h), state  # (B, V)

    @torch.no_grad()
    def attention_maps(
        self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, list[Tensor]]:
        """Every decoder layer's attention α^l (B, T, S) (single head), for inspection."""
        _, alphas = self.decode(y_in, self.encode(src, src_mask), src_mask)
        return {"cross": alphas}
