"""Two optional training terms for the pointer-generator that favour copying (issue 8).

Neither is in See et al. 2017, whose loss is eq. 13 alone; both default off.

**Copy-token weight** w ≥ 1 (``task.copy_weight``): the target tokens that only copying
can produce — extended ids ≥ V, source words outside the target vocabulary — weigh w in
the NLL instead of 1 (a class weight on the rare, copied tokens):

    loss = Σ_t m_t · (−log P(y_t)),   m_t = w if y_t ≥ V else 1

**Copy-switch supervision** λ ≥ 0 (``task.switch_lambda``), after Gulcehre et al. 2016
("Pointing the Unknown Words", §3.3), who train their switching network on whether the
target word is copied: a binary cross-entropy on p_gen where the reference decides it,

    switch_t = −log(1 − p_gen_t)   if y_t ≥ V                     (only a copy gives y_t)
               −log p_gen_t        if y_t is nowhere in the source (only the vocabulary does)
               0                   otherwise (y_t is in both: either route is right)

A fact worth knowing about this term: where it is not 0 it is already a summand of the
NLL. If y_t ≥ V, eq. 9 gives P(y_t) = (1 − p_gen) Σ_{i: w_i = y_t} a_i, so −log P(y_t) =
−log(1 − p_gen) − log Σ a_i; if y_t is not in the source, P(y_t) = p_gen P_vocab(y_t), so
−log P(y_t) = −log p_gen − log P_vocab(y_t). Supervising the switch with λ therefore weighs
the switch's own factor of those tokens' NLL by 1 + λ and leaves the attention and
vocabulary factors at 1, whereas ``copy_weight`` weighs all of a copied token's NLL
(tests/tasks/test_copy_losses.py checks both identities).

Shapes: y_out (B, T) long extended ids; src_ext (B, S) long; p_gen (B, T) in (0, 1);
keep (B, T) bool or 0/1 mask of real target tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["copied_targets", "copy_switch_loss", "copy_token_weights"]

_TINY = 1e-12  # log(0) guard: p_gen is a sigmoid in fp32 and can round to 0 or 1


def copied_targets(y_out: Tensor, V: int) -> Tensor:
    """(B, T) bool: the targets only copying can produce (extended ids ≥ V)."""
    return y_out >= V


def copy_token_weights(y_out: Tensor, keep: Tensor, V: int, weight: float) -> Tensor:
    """m_t · keep_t: ``weight`` on copied targets, 1 on the other real targets, 0 on pad.

    Shapes: y_out (B, T), keep (B, T) -> (B, T) float
    """
    keep = keep.to(torch.float32)
    if weight == 1.0:
        return keep
    return keep * torch.where(copied_targets(y_out, V), weight, 1.0)  # (B, T)


def copy_switch_loss(p_gen: Tensor, y_out: Tensor, src_ext: Tensor, keep: Tensor, V: int) -> Tensor:
    """Σ_t switch_t over the real targets (module docstring; Gulcehre et al. 2016 §3.3).

    Shapes: p_gen (B, T), y_out (B, T), src_ext (B, S), keep (B, T) -> ()
    """
    keep = keep.bool()
    copy = copied_targets(y_out, V) & keep  # (B, T) only a copy gives y_t
    in_source = (y_out.unsqueeze(-1) == src_ext.unsqueeze(1)).any(-1)  # (B, T)
    generate = ~in_source & keep  # (B, T) only the vocabulary gives y_t
    p = p_gen.float()
    to_copy = -torch.log((1.0 - p).clamp_min(_TINY))  # (B, T)
    to_generate = -torch.log(p.clamp_min(_TINY))  # (B, T)
    zero = p.new_zeros(())
    return torch.where(copy, to_copy, zero).sum() + torch.where(generate, to_generate, zero).sum()
