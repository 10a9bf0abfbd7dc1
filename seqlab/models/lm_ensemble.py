"""An ensemble of language models: the linear pool of their next-token distributions.

    P(y⟨t⟩ | y⟨<t⟩) = (1/M) Σ_m P_m(y⟨t⟩ | y⟨<t⟩)

(model averaging as in Zaremba et al. 2014, whose ensemble of 38 large LSTM LMs reached
Penn Treebank test perplexity 68.7 against one model's 78.4, as tabled by Inan et al. 2016;
the same ``seqlab.decode.ensemble.linear_pool`` the translation ensembles use). Each member
reads the same tokens with its own state; the pool keeps the members' states side by side.
It follows the LM contract (``seqlab.models.lm_common``): ``forward`` returns log P of the
pool as its logits (a log_softmax leaves them unchanged, so the ``lm`` task's loss,
``score`` and sampling read it as any model's), ``step`` one token, ``init_state`` the
members' initial states. By Jensen's inequality the pool's NLL of a text is never above
the members' mean NLL.

Shapes: forward(x (B, T), state) -> logits (B, T, V) = log P; step(x (B,), state) ->
(log P (B, V), state).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.decode.ensemble import linear_pool
from seqlab.models.lm_common import LMOutput, detach_state

__all__ = ["LMEnsemble", "LMEnsembleState"]


@dataclass
class LMEnsembleState:
    """The members' states, in member order (``None`` for a member that keeps none)."""

    members: list[Any]

    def detach(self) -> LMEnsembleState:
        return LMEnsembleState([detach_state(s) for s in self.members])


class LMEnsemble(nn.Module):
    """The linear pool of M language models over one vocabulary (module docstring).

    ``cfg.context``: the shortest bounded context among the members (a Transformer LM's),
    so that ``prime`` feeds a prompt every member can read; absent when none is bounded."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("LMEnsemble needs at least one member")
        self.members = nn.ModuleList(members)
        contexts = [getattr(getattr(m, "cfg", None), "context", None) for m in members]
        bounded = [c for c in contexts if isinstance(c, int)]
        self.cfg = SimpleNamespace(context=min(bounded)) if bounded else SimpleNamespace()

    def init_state(self, batch_size: int, device: torch.device | str) -> LMEnsembleState:
        return LMEnsembleState([m.init_state(batch_size, device) for m in self.members])

    def forward(self, x: Tensor, state: LMEnsembleState | None = None) -> LMOutput:
        """Shapes: x (B, T) long -> logits (B, T, V) = log of the pooled P, state."""
        states = state.members if state is not None else [None] * len(self.members)
        outs = [m(x, s) for m, s in zip(self.members, states)]
        log_p = linear_pool([o.logits for o in outs])  # (B, T, V)
        return LMOutput(log_p, LMEnsembleState([o.state for o in outs]))

    def step(self, x: Tensor, state: LMEnsembleState) -> tuple[Tensor, LMEnsembleState]:
        """Shapes: x (B,) long -> log P (B, V), state."""
        steps = [m.step(x, s) for m, s in zip(self.members, state.members)]
        return linear_pool([lp for lp, _ in steps]), LMEnsembleState([s for _, s in steps])
