"""The invariance checks of ``seqlab.eval.invariants`` for the pointer-generator (task
``copy_translation``; See et al. 2017).

The model's inputs are more than source ids. The extended target vocabulary V + n_oov
gives each source word outside the target vocabulary its own id for this batch. The
encoder may also read character n-grams and corpus statistics. The search may decode
through a decode-time rule (``task.block_unk``, ``task.unk_to_copy``). ``CopySources``
supplies all of it, so the five checks run unchanged:

- cached == full forward: ``step`` (the decoder LSTM cell, attention with coverage
  c^t = Σ_{t'<t} a^{t'}, the p_gen mixture) against ``forward`` (the fused decoder LSTM
  over all T, attention looped over t);
- padding changes nothing: compared on the V + n_oov_i columns sentence i has alone. In a
  batch, the ids past them belong to other sentences' OOVs and have probability 0;
- batched == unbatched, beam 1 == greedy: through the run's decode-time rule;
- search log P == forward log P: the forward's distribution passed through that rule
  (``forbid_unk`` or ``unk_to_copy``, then renormalised, as the searches do).

``task.replace_unk`` rewrites the output after the search, so it is not part of the
checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.collate import pad_batch
from seqlab.data.oov import CopyExample, collate_copy, source_inputs
from seqlab.data.vocab import PAD_ID
from seqlab.eval.invariants import Ids, Sources, Srcs, TeacherForced
from seqlab.nn.masks import padding_mask
from seqlab.tasks.copy_translation_decode import (
    UnkBlockedDecoder,
    UnkToCopyDecoder,
    forbid_unk,
    unk_to_copy,
)

__all__ = ["CopySources"]


class CopySources(Sources):
    """``CopyExample``s for the checks. ``vocab_size`` V: the target vocabulary (ids ≥ V
    are copies); ``block_unk`` / ``unk_to_copy``: the run's decode-time rule."""

    #: exported files compute P in float32 probability space (eq. 9): log P of a word of
    #: P < 1e-4 carries more than 1e-3 nats of rounding (seqlab.eval.export_invariants)
    export_floor = 1e-4

    def __init__(
        self,
        examples: Sequence[CopyExample],
        vocab_size: int,
        block_unk: bool = False,
        unk_to_copy: bool = False,
        coverage_penalty: float = 0.0,
    ) -> None:
        if block_unk and unk_to_copy:
            raise ValueError("block_unk and unk_to_copy: choose one")
        super().__init__(examples, coverage_penalty)
        self.vocab_size, self.block_unk, self.unk_to_copy = vocab_size, block_unk, unk_to_copy

    def src_ids(self, item: CopyExample) -> Ids:
        return item.src_ids

    def encode(self, model: nn.Module) -> tuple[Any, Tensor]:
        """Source ids, extended ids and the optional per-word inputs -> the decoder state."""
        device = next(model.parameters()).device
        rows = self.items
        src, lengths = pad_batch([e.src_ids for e in rows], PAD_ID)  # (B, S), (B,)
        src_ext, _ = pad_batch([e.src_ext for e in rows], PAD_ID)  # (B, S)
        src, src_ext = src.to(device), src_ext.to(device)  # (B, S)
        src_mask = padding_mask(lengths).to(device)  # (B, S)
        n_oov = max(len(e.oovs) for e in rows)
        memory = model.encode(src, src_mask, src_ext, n_oov, **source_inputs(rows, device))
        return model.init_state(memory, src_mask), src_mask

    def forward(self, model: nn.Module, targets: Srcs) -> TeacherForced:
        """Teacher-forced log P over the extended vocabulary (targets: extended ids)."""
        device = next(model.parameters()).device
        rows = [dataclasses.replace(e, tgt_ext=tuple(t)) for e, t in zip(self.items, targets)]
        b = collate_copy(rows).to(device)
        log_P = model(b.src, b.src_mask, b.y_in, b.tgt_mask, b.src_ext, b.n_oov,
                      src_grams=b.src_grams, src_stats=b.src_stats)  # fmt: skip
        log_p = torch.log_softmax(log_P.double(), dim=-1)  # (B, T, V + n_oov)
        return TeacherForced(log_p, b.y_in, b.y_out, b.tgt_lengths.tolist(), b.src.size(1))

    def width(self, i: int) -> int:
        return self.vocab_size + len(self.items[i].oovs)

    def decoder(self, model: nn.Module) -> Any:
        if self.unk_to_copy:
            return UnkToCopyDecoder(model, self.vocab_size)
        return UnkBlockedDecoder(model) if self.block_unk else model

    def search_log_p(self, log_p: Tensor) -> Tensor:
        """The rule applied per position, then renormalised.  (B, T, V') -> (B, T, V')."""
        if not (self.block_unk or self.unk_to_copy):
            return log_p
        flat = log_p.reshape(-1, log_p.size(-1))  # (B·T, V')
        ruled = unk_to_copy(flat, self.vocab_size) if self.unk_to_copy else forbid_unk(flat)
        return torch.log_softmax(ruled, dim=-1).view_as(log_p)  # (B, T, V')
