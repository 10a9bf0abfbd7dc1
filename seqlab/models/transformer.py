"""The Transformer encoder–decoder (Vaswani et al. 2017), assembled from ``seqlab.nn``.

    memory = Encoder(PE(√d · E_src[x]))                       (§3.1, §3.4, §3.5)
    h      = Decoder(PE(√d · E_tgt[y_in]), memory)            causal self-attention
    logits = h W_outᵀ   (W_out = E_tgt when tied, §3.4)

It implements the decoder-step contract of DESIGN §6 (``init_state`` / ``step`` /
teacher-forced ``forward``), so every search in ``seqlab.decode`` drives it.

Deviations: none by default. ``norm_first=True`` is the pre-norm variant (final
LayerNorm after each stack); ``positions="learned"`` uses a trained table instead of the
sinusoids; ``share_embeddings`` ties source and target tables (needs one vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from seqlab.nn.embedding import Embedding, tied_logits
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from seqlab.nn.row_packing import PaddedRows
from seqlab.nn.transformer import TransformerEncoder
from seqlab.nn.transformer_decoder import SelfCache, TransformerDecoder, TransformerDecoderState
from seqlab.registry import MODELS


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters; the defaults are a small model that trains on a CPU in minutes.

    The paper's base model is d_model=512, n_heads=8, d_ff=2048, 6 + 6 layers,
    dropout=0.1.
    """

    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1
    activation: Literal["relu", "gelu"] = "relu"
    norm_first: bool = False
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 1024
    tie_output: bool = True
    share_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")


@MODELS.register("transformer", TransformerConfig)
class TransformerSeq2Seq(nn.Module):
    """Transformer encoder–decoder (Vaswani et al. 2017) for sequence-to-sequence tasks.

    Shapes:
        src (B, S) long, src_mask (B, S) bool, y_in (B, T) long, tgt_mask (B, T) bool
        forward -> logits (B, T, V_tgt); with ``rows`` (PaddedRows of the target), the
                   logits at its N positions alone (N, V_tgt)
        step(y_prev (B,), state) -> logits (B, V_tgt), state
    """

    def __init__(self, cfg: TransformerConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        std = d**-0.5  # with the √d scale, embeddings enter at unit variance
        self.src_embed = Embedding(src_vocab, d, padding_idx=pad_id, scale=True, init_std=std)
        if cfg.share_embeddings:
            if src_vocab != tgt_vocab:
                raise ValueError(
                    f"share_embeddings needs one vocabulary, got {src_vocab} and {tgt_vocab}"
                )
            self.tgt_embed = self.src_embed
        else:
            self.tgt_embed = Embedding(tgt_vocab, d, padding_idx=pad_id, scale=True, init_std=std)
        if cfg.positions == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(d, cfg.max_positions, cfg.dropout)
        else:
            self.pos = LearnedPositionalEmbedding(cfg.max_positions, d, cfg.dropout)
        layer_args = (d, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.activation, cfg.norm_first)
        self.encoder = TransformerEncoder(cfg.encoder_layers, *layer_args)
        self.decoder = TransformerDecoder(cfg.decoder_layers, *layer_args)
        self.W_out = None if cfg.tie_output else nn.Linear(d, tgt_vocab, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform for every projection matrix, then each attention's own reference
        initialisation (stacked-Q/K/V fan, zero biases; ``MultiHeadAttention``), as the
        reference tensor2tensor code and ``torch.nn.Transformer`` do."""
        for name, p in self.named_parameters():
            if p.dim() == 2 and "embed" not in name and name != "pos.P":
                nn.init.xavier_uniform_(p)
        MultiHeadAttention.reset_all(self)

    def output(self, h: Tensor) -> Tensor:
        """logits = h W_outᵀ (tied: W_out = E_tgt).  (B, T, D) -> (B, T, V)."""
        if self.W_out is None:
            return tied_logits(h, self.tgt_embed.weight)  # (B, T, V)
        return self.W_out(h)  # (B, T, V)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """The memory. Its padding positions are never read (cross-attention masks them),
        so in training the encoder skips them in all but attention's core (``skip_padding``,
        perf-notes-training.md §36; they are 0 then); without grad (decoding, evaluation,
        export) every position is computed, so the memory there is the padded one."""
        x = self.pos(self.src_embed(src))  # (B, S, D)
        skip = torch.is_grad_enabled()
        return self.encoder(x, src_mask, skip_padding=skip)[0]  # (B, S, D)

    # The training loss may ask ``forward`` for the logits of the real target positions
    # alone (``seqlab.tasks.base.seq2seq_token_loss``; docs/perf-notes-training.md §36).
    output_rows = True

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        y_in: Tensor,
        tgt_mask: Tensor,
        rows: PaddedRows | None = None,
    ) -> Tensor:
        memory = self.encode(src, src_mask)  # (B, S, D)
        y = self.pos(self.tgt_embed(y_in))  # (B, T, D)
        skip = torch.is_grad_enabled()  # as ``encode``: padding positions skipped in training
        h = self.decoder(y, memory, tgt_mask, src_mask, skip_padding=skip)[0]  # (B, T, D)
        if rows is not None:
            return self.output(rows.pack(h))  # (N, V): the output layer on real rows only
        return self.output(h)  # (B, T, V)

    def init_state(
        self, memory: Tensor, src_mask: Tensor, cache: SelfCache = "auto"
    ) -> TransformerDecoderState:
        """The decoder's state before the first step; ``cache`` picks the self-attention
        cache ("auto", the default, "tree" or "concat": ``TransformerDecoderLayer.init_state``)."""
        return self.decoder.init_state(memory, src_mask, cache)

    def step(
        self, y_prev: Tensor, state: TransformerDecoderState
    ) -> tuple[Tensor, TransformerDecoderState]:
        y = self.pos(self.tgt_embed(y_prev[:, None]), offset=state.length)  # (B, 1, D)
        h, state = self.decoder.step(y, state)  # (B, 1, D)
        return self.output(h[:, 0]), state  # (B, V)

    @torch.no_grad()
    def attention_maps(
        self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, list[Tensor]]:
        """Per-layer, per-head weights: encoder self (B, H, S, S), decoder self
        (B, H, T, T) and cross (B, H, T, S) attention, for inspection."""
        x = self.pos(self.src_embed(src))  # (B, S, D)
        memory, enc = self.encoder(x, src_mask, need_weights=True)  # (B, S, D)
        y = self.pos(self.tgt_embed(y_in))  # (B, T, D)
        _, dec = self.decoder(y, memory, tgt_mask, src_mask, need_weights=True)
        return {
            "encoder_self": enc or [],
            "decoder_self": [a for a, _ in dec or []],
            "cross": [c for _, c in dec or []],
        }
