"""Collation: pad id sequences into (B, T) tensors and build teacher-forcing seq2seq batches.

Teacher forcing (Sutskever et al. 2014; Vaswani et al. 2017, §3.1 "shifted right"): the decoder
reads y_in = ⟨s⟩ y₁ … y_m and is trained to emit y_out = y₁ … y_m ⟨/s⟩, so y_out[:, t] is the
token that follows y_in[:, t]. Both have T = max_b m_b + 1 columns; row b has m_b + 1 real
tokens. Masks are bool, True = keep (DESIGN §5).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import torch
from torch import Tensor

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.nn.masks import padding_mask

IdSeq = Sequence[int] | Tensor


def pad_batch(seqs: Sequence[IdSeq], pad_id: int = PAD_ID) -> tuple[Tensor, Tensor]:
    """Right-pad B id sequences to the longest one.

    tokens[b, t] = seqs[b][t] for t < ℓ_b, else pad_id.

    Shapes:
        seqs:    B sequences (lists of ints or 1-D integer tensors), lengths ℓ_b ≥ 0
        returns: tokens (B, T) long with T = max_b ℓ_b, lengths (B,) long
    """
    if len(seqs) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    lengths = torch.tensor(list(map(len, seqs)), dtype=torch.long)  # (B,)
    if isinstance(seqs[0], Tensor):
        if set(map(Tensor.dim, seqs)) != {1}:
            raise ValueError("pad_batch takes 1-D tensors (one id sequence each)")
        flat = torch.cat(list(seqs)).long()  # (Σ ℓ_b,)
    else:
        flat = torch.tensor(list(chain.from_iterable(seqs)), dtype=torch.long)  # (Σ ℓ_b,)
    keep = padding_mask(lengths)  # (B, T)
    tokens = torch.full(keep.shape, pad_id, dtype=torch.long)  # (B, T)
    tokens[keep] = flat  # row-major order of the mask == concatenation order
    return tokens, lengths


@dataclass(frozen=True)
class Seq2SeqBatch:
    """A padded source/target batch for teacher forcing.

    Shapes:
        src:         (B, S) long, source ids, padded with pad
        src_lengths: (B,) long
        src_mask:    (B, S) bool, True = real source token
        y_in:        (B, T) long, ⟨s⟩ y₁ … y_m then pad (decoder input)
        y_out:       (B, T) long, y₁ … y_m ⟨/s⟩ then pad (prediction target)
        tgt_lengths: (B,) long, m_b + 1
        tgt_mask:    (B, T) bool, True = real target position (same for y_in and y_out)
        n_tokens:    int, Σ_b (m_b + 1): the non-pad target tokens, the loss normaliser (§8)
    """

    src: Tensor
    src_lengths: Tensor
    src_mask: Tensor
    y_in: Tensor
    y_out: Tensor
    tgt_lengths: Tensor
    tgt_mask: Tensor
    n_tokens: int

    @property
    def batch_size(self) -> int:
        return int(self.src.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Seq2SeqBatch:
        """A copy with every tensor on ``device`` (``n_tokens`` stays a Python int)."""
        moved = {
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **moved)


def collate_seq2seq(
    pairs: Sequence[tuple[IdSeq, IdSeq]],
    bos: int = BOS_ID,
    eos: int = EOS_ID,
    pad: int = PAD_ID,
) -> Seq2SeqBatch:
    """Collate (source ids, target ids) pairs into a ``Seq2SeqBatch``.

    y_in = [⟨s⟩; y] and y_out = [y; ⟨/s⟩], padded with ``pad`` to T = max_b m_b + 1.
    The source is padded as given (append ⟨/s⟩ to it beforehand if the model wants one).

    Shapes:
        pairs:   B pairs of id sequences, source length ℓ_b, target length m_b
        returns: Seq2SeqBatch with S = max_b ℓ_b, T = max_b m_b + 1
    """
    if len(pairs) == 0:
        raise ValueError("collate_seq2seq needs at least one (source, target) pair")
    srcs, tgts = zip(*pairs)
    src, src_lengths = pad_batch(srcs, pad)  # (B, S), (B,)
    y, m = pad_batch(tgts, pad)  # (B, T - 1), (B,)
    B = y.shape[0]
    y_in = torch.cat([torch.full((B, 1), bos, dtype=torch.long), y], dim=1)  # (B, T)
    y_out = torch.cat([y, torch.full((B, 1), pad, dtype=torch.long)], dim=1)  # (B, T)
    y_out[torch.arange(B), m] = eos  # ⟨/s⟩ right after the last real token of each row
    tgt_lengths = m + 1  # (B,)
    return Seq2SeqBatch(
        src=src,
        src_lengths=src_lengths,
        src_mask=padding_mask(src_lengths, src.shape[1]),  # (B, S)
        y_in=y_in,
        y_out=y_out,
        tgt_lengths=tgt_lengths,
        tgt_mask=padding_mask(tgt_lengths, y_in.shape[1]),  # (B, T)
        n_tokens=int(tgt_lengths.sum()),
    )
