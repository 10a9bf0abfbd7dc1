"""A pointer-generator run decoded through its exported files: ``seqlab translate|evaluate|
serve|check RUN --exported DIR`` on a ``copy_translation`` run (See et al. 2017).

``ExportedPointerGenerator`` presents the encoder and step ``seqlab export`` wrote
(``seqlab.serve.export_rnn``: the state flattened by field name) through the
``PointerGenerator`` contract the task decodes and evaluates with:

- ``encode(src, src_mask, src_ext, n_oov, src_grams, src_stats)`` runs the exported
  encoder (n_oov passed as the width of a (B, n_oov) input, ``oov``) and returns the
  initial state; ``init_state`` passes it on;
- ``step(y_prev, state)`` runs the exported step: log P over V + n_oov (eq. 9), the
  state's a^t, p_gen, c^{t+1} = c^t + a^t and covloss_t updated by the step;
- ``forward(…, details=True)`` steps through the target prefix and returns what the
  eager teacher-forced pass returns (``PointerGeneratorOutput``: log P (B, T, V′), p_gen
  (B, T), a^t and c^t (B, T, S), covloss (B, T)), so the task's loss, p_gen statistics
  and ``<unk>`` replacement read the exported files;
- ``attention_coverage`` / ``oov_attention_coverage``: the state's c^t and the source
  mask (all words, or those outside the target vocabulary), for GNMT's coverage penalty.

The task applies the run's ``<unk>`` rule itself (``UnkToCopyDecoder``, ``forbid_unk``),
so the step here returns the model's own distribution: ``ExportedDecoder``'s rule from
``export.json`` "decode" (what ``greedy_exported`` / ``beam_exported`` apply) is off.

Shapes: src, src_mask, src_ext (B, S); y_prev (B,); log P (B, V + n_oov)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.vocab import UNK_ID
from seqlab.errors import SeqlabError
from seqlab.models.pointer_generator import PointerGeneratorOutput
from seqlab.serve.export import ExportedDecoder
from seqlab.serve.export_rnn import FieldsState


def _as_is(log_p: Tensor) -> Tensor:
    return log_p


class ExportedPointerGenerator(nn.Module):
    """The exported pointer-generator through the model's contract (module doc)."""

    def __init__(self, encoder: Any, step: Any) -> None:
        super().__init__()
        self.decoder = ExportedDecoder(encoder, step)
        self.decoder.rule = _as_is  # the task applies the run's <unk> rule (module doc)
        self.meta = step.meta
        self.V_size = int(self.meta["vocab_sizes"]["tgt_vocab"])
        self.inputs = list(self.meta["encoder"]["inputs"])
        # no weights of its own; an empty one says "CPU" to code reading a model's device
        self.cpu_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def encode(
        self,
        src: Tensor,
        src_mask: Tensor,
        src_ext: Tensor | None = None,
        n_oov: int | None = None,
        src_grams: Tensor | None = None,
        src_stats: Tensor | None = None,
    ) -> FieldsState:
        """The exported encoder on the model's inputs -> the initial decoder state."""
        if src_ext is None:  # as the eager model: no extended vocabulary, OOVs read as UNK
            src_ext, n_oov = torch.where(src < self.V_size, src, UNK_ID), 0
        oov = src.new_zeros(src.size(0), int(n_oov or 0))  # (B, n_oov): only its width is read
        given = {"src_ext": src_ext, "oov": oov, "src_grams": src_grams, "src_stats": src_stats}
        extra = {n: given[n] for n in self.inputs if n not in ("src", "src_mask")}
        missing = [n for n, t in extra.items() if t is None]
        if missing:
            raise SeqlabError(
                f"the exported pointer-generator's encoder reads {missing} "
                f'(export.json "encoder"), which this run\'s data does not give: '
                "export the run these files came from"
            )
        return self.decoder.init_state(src, src_mask, **extra)

    def init_state(self, memory: FieldsState, src_mask: Tensor) -> FieldsState:
        return memory  # the exported encoder's outputs are the initial state

    def step(self, y_prev: Tensor, state: FieldsState) -> tuple[Tensor, FieldsState]:
        return self.decoder.step(y_prev, state)  # log P (B, V + n_oov)

    @staticmethod
    def attention_coverage(state: FieldsState) -> tuple[Tensor, Tensor]:
        """c^t (after the last step) and the source mask.  -> (B, S), (B, S) bool"""
        return state.tensors["cov"], state.tensors["src_mask"]

    def oov_attention_coverage(self, state: FieldsState) -> tuple[Tensor, Tensor]:
        """c^t over the source words outside the target vocabulary only.  -> (B, S) ×2"""
        t = state.tensors
        return t["cov"], t["src_mask"] & (t["src_ext"] >= self.V_size)

    @torch.no_grad()
    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        y_in: Tensor,
        tgt_mask: Tensor,
        src_ext: Tensor | None = None,
        n_oov: int | None = None,
        details: bool = False,
        src_grams: Tensor | None = None,
        src_stats: Tensor | None = None,
    ) -> Tensor | PointerGeneratorOutput:
        """Teacher forcing through the exported step, left to right (row t reads y_≤t)."""
        state = self.encode(src, src_mask, src_ext, n_oov, src_grams, src_stats)
        log_P, p_gen, attn, covs, losses = [], [], [], [], []
        for t in range(y_in.size(1)):
            covs.append(state.tensors["cov"])  # c^t: what step t sees
            out, state = self.step(y_in[:, t], state)
            log_P.append(out.float())  # (B, V′)
            p_gen.append(state.tensors["p_gen"])  # (B,)
            attn.append(state.tensors["a"])  # (B, S)
            losses.append(state.tensors["cov_loss"])  # (B,)
        log_probs = torch.stack(log_P, 1)  # (B, T, V + n_oov)
        if not details:
            return log_probs
        return PointerGeneratorOutput(
            log_probs, torch.stack(p_gen, 1), torch.stack(attn, 1), torch.stack(covs, 1),
            torch.stack(losses, 1),
        )  # fmt: skip
