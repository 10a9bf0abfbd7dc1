"""The models and the workload of ``benchmarks/peers.py`` (issue 11), and their FLOP count.

Three implementations of one Transformer (Vaswani et al. 2017, post-LN, ReLU FFN, sinusoidal
positions, √d-scaled embeddings shared by source, target and the output projection,
dropout p on the embedding sums, attention weights, FFN hidden units and every residual
branch):

* ``seqlab``: the registered ``transformer`` model built from
  ``configs/multi30k-transformer.yaml`` (sizes overridden for the base config);
* ``nn``: :class:`ReferenceTransformer`, a plain ``torch.nn.Transformer`` with the same
  maths (its own encoder/decoder stacks without the final LayerNorms that
  ``nn.Transformer`` adds by default, which the post-LN paper model does not have);
* ``hf``: Hugging Face ``MarianMTModel`` configured to the same sizes (``transformers`` is
  an optional dependency: ``pip install -e '.[bench]'``). Its deviations: a final-logits
  bias buffer and Marian's sin|cos (not interleaved) position table.

Workload (../shared/docs/PEERS.md): batches of 64 pairs, each side U[14, 20] content tokens
of a vocabulary of 8,000 (+EOS on the source; BOS/EOS on the target from
``collate_seq2seq``), padded to the batch maximum.

FLOPs (:func:`train_flops`): matmul FLOPs only, counted analytically on the *padded*
shapes (the work the dense kernels do), backward = 2 × forward:

    F = 3 · 2 · [ P_src · B·S  +  P_tgt · B·T  +  V·d · B·T ]              projections
      + 3 · [ L_e · 4·B·S²·d + L_d · (4·B·T²·d + 4·B·T·S·d) ]             QKᵀ and A·V

    P_src = L_e · (4d² + 2·d·d_ff) + L_d · 2d²     (encoder layers; cross-attention K, V)
    P_tgt = L_d · (6d² + 2·d·d_ff)                 (decoder self-attn Q K V O, cross Q O, FFN)

with B the batch, S/T the padded source/target lengths. Embedding lookups, softmax,
LayerNorm, dropout and the loss are not counted (they are not matmuls); causal attention
is counted as the full T² that dense kernels compute. With S = T this is PEERS.md's count.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from seqlab.data.collate import Seq2SeqBatch, collate_seq2seq
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.registry import MODELS
from seqlab.run_config import RunConfig, resolve_run
from seqlab.tasks.translation import TranslationTask

PRESET = Path(__file__).resolve().parent.parent / "configs" / "multi30k-transformer.yaml"


@dataclass(frozen=True)
class Size:
    """Transformer sizes: width d, heads, FFN width, layers, vocabulary V, dropout p."""

    name: str
    d_model: int
    n_heads: int
    d_ff: int
    layers: int
    vocab: int = 8000
    dropout: float = 0.1


SMALL = Size("small", 256, 4, 1024, 3)
BASE = Size("base", 512, 8, 2048, 6)
TINY = Size("tiny", 32, 2, 64, 1, vocab=50)  # tests and smoke runs


# ------------------------------------------------------------------------------ workload


def make_pairs(n: int, size: Size, lo: int = 14, hi: int = 20, seed: int = 0) -> list:
    """n (source ids + EOS, target ids) pairs of U[lo, hi] content tokens each."""
    g = torch.Generator().manual_seed(seed)
    first = EOS_ID + 1  # content ids avoid PAD, UNK, BOS and EOS
    pairs = []
    for _ in range(n):
        ls, lt = torch.randint(lo, hi + 1, (2,), generator=g).tolist()
        src = torch.randint(first, size.vocab, (ls,), generator=g).tolist() + [EOS_ID]
        tgt = torch.randint(first, size.vocab, (lt,), generator=g).tolist()
        pairs.append((src, tgt))
    return pairs


def make_batches(
    n_batches: int, size: Size, batch_size: int = 64, lo: int = 14, hi: int = 20, seed: int = 0
) -> list[Seq2SeqBatch]:
    """``n_batches`` padded teacher-forcing batches (seqlab's collation for everyone)."""
    pairs = make_pairs(n_batches * batch_size, size, lo, hi, seed)
    return [
        collate_seq2seq(pairs[i : i + batch_size], BOS_ID, EOS_ID, PAD_ID)
        for i in range(0, len(pairs), batch_size)
    ]


# ------------------------------------------------------------------------------ counting


def train_flops(size: Size, B: int, S: int, T: int) -> int:
    """Matmul FLOPs of one training step (forward + backward) on padded (B, S), (B, T)."""
    d, f, L, V = size.d_model, size.d_ff, size.layers, size.vocab
    p_src = L * (4 * d * d + 2 * d * f) + L * 2 * d * d
    p_tgt = L * (6 * d * d + 2 * d * f)
    projections = 2 * (p_src * B * S + p_tgt * B * T + V * d * B * T)
    attention = L * 4 * B * S * S * d + L * (4 * B * T * T * d + 4 * B * T * S * d)
    return 3 * (projections + attention)


def batch_flops(size: Size, batch: Seq2SeqBatch) -> int:
    """:func:`train_flops` of one collated batch."""
    B, S = batch.src.shape
    return train_flops(size, B, S, batch.y_in.shape[1])


def parameter_count(size: Size) -> int:
    """Trainable parameters of the shared, tied model (each tensor once):

    V·d + L_e·(4d² + 4d + 2·d·d_ff + d_ff + d + 4d) + L_d·(8d² + 8d + 2·d·d_ff + d_ff + d + 6d)
    (embedding; attention W and b; FFN W and b; LayerNorm γ, β: 2 per encoder layer, 3 per
    decoder layer). The same for ``seqlab`` and ``nn``; Marian adds nothing trainable.
    """
    d, f, L, V = size.d_model, size.d_ff, size.layers, size.vocab
    ffn = 2 * d * f + f + d
    enc = 4 * d * d + 4 * d + ffn + 2 * 2 * d
    dec = 8 * d * d + 8 * d + ffn + 3 * 2 * d
    return V * d + L * enc + L * dec


def trainable(model: nn.Module) -> int:
    """Trainable parameters, a shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ------------------------------------------------------------------------------ seqlab


def seqlab_run_config(size: Size, overrides: tuple[str, ...] = ()) -> RunConfig:
    """The Multi30k preset with the sizes of ``size`` and then ``overrides`` (key=value)."""
    return resolve_run(
        PRESET,
        [
            f"model.d_model={size.d_model}",
            f"model.n_heads={size.n_heads}",
            f"model.d_ff={size.d_ff}",
            f"model.encoder_layers={size.layers}",
            f"model.decoder_layers={size.layers}",
            f"model.dropout={size.dropout}",
            f"task.vocab_size={size.vocab}",
            *overrides,
        ],
    )


def build_seqlab(
    size: Size, overrides: tuple[str, ...] = ()
) -> tuple[nn.Module, RunConfig, TranslationTask]:
    """seqlab's registered model, its resolved config and the (unprepared) task whose
    ``loss`` the Trainer calls; the loss reads no data, so no corpus is loaded."""
    cfg = seqlab_run_config(size, overrides)
    model = MODELS.get(cfg.model).target(
        cfg.model_cfg, src_vocab=size.vocab, tgt_vocab=size.vocab, pad_id=PAD_ID
    )
    task = TranslationTask(cfg.task_cfg, None, cfg.train.seed)
    return model, cfg, task


# ------------------------------------------------------------------------------ nn reference


def sinusoid(n: int, d: int) -> Tensor:
    """PE(pos, 2i) = sin(pos/10000^{2i/d}), PE(pos, 2i+1) = cos(…).  (n, d) float32."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]  # (n, 1)
    omega = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)  # (n, d)
    pe[:, 0::2] = torch.sin(pos * omega)
    pe[:, 1::2] = torch.cos(pos * omega[: d // 2])
    return pe.float()


class ReferenceTransformer(nn.Module):
    """``torch.nn.Transformer`` with shared, tied, √d-scaled embeddings and sinusoids.

    Shapes: src (B, S), src_mask (B, S) bool True = token, y_in (B, T), tgt_mask (B, T)
    -> logits (B, T, V).
    """

    def __init__(self, size: Size, max_len: int = 1024) -> None:
        super().__init__()
        d, p = size.d_model, size.dropout
        self.d = d
        self.embed = nn.Embedding(size.vocab, d, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        self.register_buffer("pe", sinusoid(max_len, d), persistent=False)
        self.drop = nn.Dropout(p)
        layer = dict(dim_feedforward=size.d_ff, dropout=p, batch_first=True)
        enc = nn.TransformerEncoderLayer(d, size.n_heads, **layer)
        dec = nn.TransformerDecoderLayer(d, size.n_heads, **layer)
        self.transformer = nn.Transformer(
            d,
            size.n_heads,
            custom_encoder=nn.TransformerEncoder(enc, size.layers, enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(dec, size.layers),
            batch_first=True,
        )
        for p_ in self.transformer.parameters():
            if p_.dim() == 2:
                nn.init.xavier_uniform_(p_)

    def embed_at(self, ids: Tensor) -> Tensor:
        x = self.embed(ids) * math.sqrt(self.d)  # (B, L, D)
        return self.drop(x + self.pe[: ids.size(1)])  # (B, L, D)

    def forward(self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor) -> Tensor:
        T = y_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(
            T, device=y_in.device, dtype=torch.bool
        )  # (T, T)
        h = self.transformer(
            self.embed_at(src),
            self.embed_at(y_in),
            tgt_mask=causal,
            src_key_padding_mask=~src_mask,
            tgt_key_padding_mask=~tgt_mask,
            memory_key_padding_mask=~src_mask,
            tgt_is_causal=True,
        )  # (B, T, D)
        return h @ self.embed.weight.T  # (B, T, V)


@torch.no_grad()
def copy_seqlab_into_reference(src: nn.Module, ref: ReferenceTransformer) -> None:
    """Give ``ref`` the weights of a seqlab ``transformer`` of the same size (W_q, W_k, W_v
    stacked into ``in_proj``), so that both compute the same function."""
    ref.embed.weight.copy_(src.src_embed.weight)
    stacks = (
        (src.encoder.layers, ref.transformer.encoder.layers, ("self_attn",)),
        (src.decoder.layers, ref.transformer.decoder.layers, ("self_attn", "cross_attn")),
    )
    for ours, theirs, attns in stacks:
        for a, b in zip(ours, theirs):
            for name, tname in zip(attns, ("self_attn", "multihead_attn")):
                sa, ta = getattr(a, name), getattr(b, tname)
                ta.in_proj_weight.copy_(torch.cat([sa.W_q.weight, sa.W_k.weight, sa.W_v.weight]))
                ta.in_proj_bias.copy_(torch.cat([sa.W_q.bias, sa.W_k.bias, sa.W_v.bias]))
                ta.out_proj.weight.copy_(sa.W_o.weight)
                ta.out_proj.bias.copy_(sa.W_o.bias)
            b.linear1.load_state_dict(a.ffn.W_1.state_dict())
            b.linear2.load_state_dict(a.ffn.W_2.state_dict())
            for i in (1, 2, 3) if len(attns) == 2 else (1, 2):
                getattr(b, f"norm{i}").load_state_dict(getattr(a, f"norm{i}").state_dict())


# ------------------------------------------------------------------------------ Hugging Face


def build_marian(size: Size, max_len: int = 256) -> nn.Module:
    """``MarianMTModel`` of the same sizes, random init, ids as seqlab's (pad 0, BOS 2 as
    decoder start, EOS 3); raises ImportError when ``transformers`` is not installed."""
    from transformers import MarianConfig, MarianMTModel

    p = size.dropout
    cfg = MarianConfig(
        vocab_size=size.vocab,
        d_model=size.d_model,
        encoder_layers=size.layers,
        decoder_layers=size.layers,
        encoder_attention_heads=size.n_heads,
        decoder_attention_heads=size.n_heads,
        encoder_ffn_dim=size.d_ff,
        decoder_ffn_dim=size.d_ff,
        activation_function="relu",
        dropout=p,
        attention_dropout=p,
        activation_dropout=p,
        max_position_embeddings=max_len,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,  # Marian's default forces token 0 at max_length
    )
    return MarianMTModel(cfg)


def marian_logits(model: nn.Module, batch: Seq2SeqBatch) -> Tensor:
    """Teacher-forced logits (B, T, V) of a Marian model on a seqlab batch."""
    return model(
        input_ids=batch.src,
        attention_mask=batch.src_mask.long(),
        decoder_input_ids=batch.y_in,
        decoder_attention_mask=batch.tgt_mask.long(),
        use_cache=False,
    ).logits


def with_dropout(size: Size, p: float) -> Size:
    return dataclasses.replace(size, dropout=p)
