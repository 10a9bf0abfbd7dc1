"""M encoder-decoder models decoded and scored as one: the linear pool of their
distributions (seqlab.decode.ensemble),

    P(y_t | y_<t, x) = (1/M) Σ_m P_m(y_t | y_<t, x)                      (B, [T,] V)

for any models with the decoder contract (DESIGN §6): ``encode(src, src_mask, …)``,
``init_state(memory, src_mask)``, ``step(y_prev, state)``, and a teacher-forced
``forward(src, src_mask, y_in, tgt_mask)`` returning logits. Each member encodes the source
itself and keeps its own decoder state; the searches see one distribution per row.
Teacher forcing returns the pooled log P, so the loss and perplexity of the ensemble are
those of the pool (cross-entropy on log-probabilities: log_softmax leaves them as they are).
Sutskever et al. 2014 (§3.6) decode an ensemble of 5 LSTMs so; fairseq and Marian pool
probabilities the same way.

When every member reports its attention coverage (Bahdanau, Luong), the ensemble reports
the members' mean, which GNMT's coverage penalty then reads. When every member has
``attention_maps``, so has the ensemble: "cross", the members' mean alignment (B, T, S),
each member's being its cross-attention (an RNN's α; a Transformer's or ConvS2S's last
decoder layer, averaged over heads: the alignment fairseq's ensembles average too).

Shapes: encode(src (B, S), src_mask (B, S), …) -> EnsembleMemory; step(y_prev (B,),
EnsembleState) -> log P (B, V); forward(src, src_mask, y_in (B, T), tgt_mask) -> (B, T, V)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.decode.ensemble import EnsembleDecoder, EnsembleState, linear_pool

__all__ = ["EnsembleMemory", "Seq2SeqEnsemble"]


@dataclass
class EnsembleMemory:
    """Each member's ``encode`` output, in member order."""

    memories: tuple[Any, ...]


class Seq2SeqEnsemble(nn.Module):
    """The linear pool of M encoder-decoder members (module docstring).

    Shapes: see the module docstring.
    """

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = nn.ModuleList(members)
        self._decoder = EnsembleDecoder(list(members))
        if all(hasattr(m, "attention_coverage") for m in members):
            self.attention_coverage = self._mean_coverage
        if all(hasattr(m, "attention_maps") for m in members):
            self.attention_maps = self._mean_alignment

    def encode(self, src: Tensor, src_mask: Tensor, *args: Any, **kwargs: Any) -> EnsembleMemory:
        return EnsembleMemory(tuple(m.encode(src, src_mask, *args, **kwargs) for m in self.members))

    def init_state(self, memory: EnsembleMemory, src_mask: Tensor) -> EnsembleState:
        return self._decoder.init(
            [m.init_state(mem, src_mask) for m, mem in zip(self.members, memory.memories)]
        )

    def step(self, y_prev: Tensor, state: EnsembleState) -> tuple[Tensor, EnsembleState]:
        """log (1/M) Σ_m P_m(y_t).  y_prev (B,) -> (B, V), state"""
        return self._decoder.step(y_prev, state)

    def _mean_coverage(self, state: EnsembleState) -> tuple[Tensor, Tensor]:
        """The members' mean attention coverage Σ_{t' ≤ t} a^{t'} and the source mask
        (each member's ``attention_coverage``).  -> (B, S) float, (B, S) bool"""
        covs = [m.attention_coverage(s) for m, s in zip(self.members, state.states)]
        return torch.stack([c for c, _ in covs]).mean(0), covs[0][1]

    def forward(self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor) -> Tensor:
        """Teacher forcing: the pooled log P.  -> (B, T, V)"""
        return linear_pool([m(src, src_mask, y_in, tgt_mask) for m in self.members])

    @torch.no_grad()
    def _mean_alignment(
        self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor
    ) -> dict[str, Tensor]:
        """{"cross": (1/M) Σ_m A_m} of the teacher-forced pass, A_m = ``alignment`` of member
        m's ``attention_maps``.  -> {"cross": (B, T, S)}"""
        maps = [alignment(m.attention_maps(src, src_mask, y_in, tgt_mask)) for m in self.members]
        return {"cross": torch.stack([a.float() for a in maps]).mean(0)}


def alignment(maps: dict[str, Any]) -> Tensor:
    """One model's source alignment from its ``attention_maps``: "cross" itself when it is
    one tensor (an RNN's α), else its last layer; averaged over heads when it has them.

    Shapes: "cross" (B, T, S), or L × (B, [H,] T, S) -> (B, T, S)
    """
    cross = maps["cross"]
    a = cross if isinstance(cross, Tensor) else cross[-1]  # (B, [H,] T, S)
    return a.mean(1) if a.dim() == 4 else a  # (B, T, S)
