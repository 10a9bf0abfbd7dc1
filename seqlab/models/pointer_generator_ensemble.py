"""M pointer-generators (See et al. 2017) decoded and scored as one model.

Each member m gives a distribution over the same extended vocabulary V + n_oov (eq. 9):
P_m(w) = p_gen,m P_vocab,m(w) + (1 − p_gen,m) Σ_{i: w_i = w} a_{m,i}. The ensemble is
their linear pool (seqlab.decode.ensemble):

    P(w) = (1/M) Σ_m P_m(w)                                         (B, [T,] V + n_oov)

so an OOV source word's probability is the members' mean copy mass,
(1/M) Σ_m (1 − p_gen,m) Σ_{i: w_i = w} a_{m,i}, and the pool's own generation share is
the mean of the p_gen,m (both exact). For inspection and for the decode-time rules that
read attention (``replace_unk``, GNMT's coverage penalty) the ensemble reports the
members' mean attention a^t and mean coverage c^t; they are summaries, not one member's
attention.

The members must share the source and target vocabularies and the encoder's optional
inputs (n-grams, word statistics; ``seqlab.ensemble_load`` checks it when loading runs).
Not in See et al. 2017; ensembling is the practice of NMT (Sutskever et al. 2014 §3.6).

Shapes: as ``PointerGenerator``: encode(src (B, S), …) -> memory; step(y_prev (B,), state)
-> log P (B, V + n_oov); forward(…) -> log P (B, T, V + n_oov) or PointerGeneratorOutput
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.decode.ensemble import EnsembleDecoder, EnsembleState, linear_pool
from seqlab.models.pointer_generator import (
    PointerGenerator,
    PointerGeneratorMemory,
    PointerGeneratorOutput,
)

__all__ = ["EnsembleMemory", "PointerGeneratorEnsemble"]


@dataclass
class EnsembleMemory:
    """Each member's ``encode`` output, in member order."""

    memories: tuple[PointerGeneratorMemory, ...]


class PointerGeneratorEnsemble(nn.Module):
    """The linear pool of M ``PointerGenerator`` members (module docstring), with the
    contract seqlab's copy decoding and evaluation use: ``encode``, ``init_state``,
    ``step``, ``attention_coverage``, ``oov_attention_coverage`` and ``forward``.

    Shapes: see the module docstring.
    """

    def __init__(self, members: Sequence[PointerGenerator]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        sizes = sorted({m.V_size for m in members})
        if len(sizes) != 1:
            raise ValueError(f"ensemble members have different target vocabularies: {sizes}")
        self.members = nn.ModuleList(members)
        self.V_size = sizes[0]
        self._decoder = EnsembleDecoder(list(members))

    def encode(
        self,
        src: Tensor,
        src_mask: Tensor,
        src_ext: Tensor | None = None,
        n_oov: int | None = None,
        src_grams: Tensor | None = None,
        src_stats: Tensor | None = None,
    ) -> EnsembleMemory:
        args = (src, src_mask, src_ext, n_oov, src_grams, src_stats)
        return EnsembleMemory(tuple(m.encode(*args) for m in self.members))

    def init_state(self, memory: EnsembleMemory, src_mask: Tensor) -> EnsembleState:
        return self._decoder.init(
            [m.init_state(mem, src_mask) for m, mem in zip(self.members, memory.memories)]
        )

    def step(self, y_prev: Tensor, state: EnsembleState) -> tuple[Tensor, EnsembleState]:
        """log (1/M) Σ_m P_m(w) over V + n_oov.  y_prev (B,) -> (B, V + n_oov), state"""
        return self._decoder.step(y_prev, state)

    def attention_coverage(self, state: EnsembleState) -> tuple[Tensor, Tensor]:
        """The members' mean Σ_{t' ≤ t} a^{t'} and the source mask (``PointerGenerator.
        attention_coverage``).  -> (B, S) float, (B, S) bool"""
        covs = [PointerGenerator.attention_coverage(s) for s in state.states]
        return torch.stack([c for c, _ in covs]).mean(0), covs[0][1]

    def oov_attention_coverage(self, state: EnsembleState) -> tuple[Tensor, Tensor]:
        """``attention_coverage`` with the mask of the source words outside the target
        vocabulary (``PointerGenerator.oov_attention_coverage``)."""
        cov, mask = self.attention_coverage(state)
        first = state.states[0]
        return cov, mask & (first.src_ext >= self.V_size)

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
        """Teacher forcing: the pooled log P (B, T, V + n_oov), or with ``details`` a
        ``PointerGeneratorOutput`` whose p_gen, attention, coverage and coverage loss are
        the members' means."""
        outs = [
            m(src, src_mask, y_in, tgt_mask, src_ext, n_oov, True, src_grams, src_stats)
            for m in self.members
        ]
        log_P = linear_pool([o.log_probs for o in outs])  # (B, T, V + n_oov)
        if not details:
            return log_P

        def mean(field: str) -> Tensor:
            return torch.stack([getattr(o, field) for o in outs]).mean(0)

        return PointerGeneratorOutput(
            log_P, mean("p_gen"), mean("attention"), mean("coverage"), mean("cov_loss")
        )
