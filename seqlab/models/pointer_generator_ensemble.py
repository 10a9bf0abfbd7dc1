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

The pool itself (encode, init_state, step, the mean coverage) is ``Seq2SeqEnsemble``'s
(seqlab.models.ensemble); this class adds the copy task's teacher-forced details and the
coverage over OOV words.

Shapes: as ``PointerGenerator``: encode(src (B, S), …) -> memory; step(y_prev (B,), state)
-> log P (B, V + n_oov); forward(…) -> log P (B, T, V + n_oov) or PointerGeneratorOutput
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from seqlab.decode.ensemble import EnsembleState, linear_pool
from seqlab.models.ensemble import Seq2SeqEnsemble
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorOutput

__all__ = ["PointerGeneratorEnsemble"]


class PointerGeneratorEnsemble(Seq2SeqEnsemble):
    """The linear pool of M ``PointerGenerator`` members (module docstring), with the
    contract seqlab's copy decoding and evaluation use: ``encode`` (with the extended
    source and the optional inputs), ``init_state``, ``step``, ``attention_coverage``,
    ``oov_attention_coverage`` and ``forward`` (with ``details``).

    Shapes: see the module docstring.
    """

    def __init__(self, members: Sequence[PointerGenerator]) -> None:
        sizes = sorted({m.V_size for m in members})
        if len(sizes) > 1:
            raise ValueError(f"ensemble members have different target vocabularies: {sizes}")
        super().__init__(members)
        self.V_size = sizes[0]

    def oov_attention_coverage(self, state: EnsembleState) -> tuple[Tensor, Tensor]:
        """``attention_coverage`` with the mask of the source words outside the target
        vocabulary (``PointerGenerator.oov_attention_coverage``)."""
        cov, mask = self.attention_coverage(state)
        first = state.states[0]
        return cov, mask & (first.src_ext >= self.V_size)

    def forward(  # type: ignore[override]
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
