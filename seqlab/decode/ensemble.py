"""Decoding M models as one: the linear pool of their next-token distributions.

    P(y_t | y_<t, x) = (1/M) Σ_m P_m(y_t | y_<t, x)                        (B, V)

in log space log P = logsumexp_m(log P_m) − log M, each log P_m = log_softmax of member
m's logits taken in float32 at least. This is the ensemble of NMT practice (Sutskever et
al. 2014, §3.6, an ensemble of 5 deep LSTMs; fairseq and Marian average the members'
probabilities the same way): each member keeps its own decoder state, the search sees
one distribution per row and reorders every member's state with the same index (the
state is a dataclass holding the members' states, ``reorder_state`` walks it). A member's
static fields stay static (the rule recurses into each member's state).

With M = 1 the pool is the member's own log_softmax (tested: the same decoded tokens).

Shapes: step(y_prev (B,), EnsembleState) -> log P (B, V), EnsembleState
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqlab.decode.state import StepDecoder

__all__ = ["EnsembleDecoder", "EnsembleState", "linear_pool"]


def linear_pool(log_probs: Sequence[Tensor]) -> Tensor:
    """log (1/M) Σ_m P_m over the last axis, from M members' logits or log-probabilities
    (each is log_softmax-ed first, in float32 at least, so unnormalised logits are fine).

    Shapes: M tensors (..., V) -> (..., V)
    """
    if not log_probs:
        raise ValueError("linear_pool needs at least one member's distribution")
    dtype = torch.promote_types(log_probs[0].dtype, torch.float32)
    stacked = torch.stack([torch.log_softmax(lp.to(dtype), dim=-1) for lp in log_probs])
    return torch.logsumexp(stacked, dim=0) - math.log(len(log_probs))  # (..., V)


@dataclass
class EnsembleState:
    """The members' decoder states, in member order (each reordered by its own rules)."""

    states: tuple[Any, ...]


class EnsembleDecoder:
    """A ``StepDecoder`` over M member decoders that share one output vocabulary: each
    member steps on the same previous token with its own state, and the step returns the
    linear pool of their distributions (module docstring).

    Shapes: step(y_prev (B,), EnsembleState) -> log P (B, V), EnsembleState
    """

    def __init__(self, decoders: Sequence[StepDecoder]) -> None:
        if not decoders:
            raise ValueError("an ensemble needs at least one member")
        self.decoders = tuple(decoders)

    def init(self, states: Sequence[Any]) -> EnsembleState:
        """The ensemble's state from the members' initial states (one per member)."""
        if len(states) != len(self.decoders):
            raise ValueError(f"{len(self.decoders)} members but {len(states)} initial states")
        return EnsembleState(tuple(states))

    def step(self, y_prev: Tensor, state: EnsembleState) -> tuple[Tensor, EnsembleState]:
        outs = [d.step(y_prev, s) for d, s in zip(self.decoders, state.states)]
        sizes = {lp.size(-1) for lp, _ in outs}
        if len(sizes) != 1:
            raise ValueError(f"ensemble members disagree on the vocabulary size: {sorted(sizes)}")
        log_p = linear_pool([lp for lp, _ in outs])  # (B, V)
        return log_p, EnsembleState(tuple(s for _, s in outs))
