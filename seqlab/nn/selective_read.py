"""CopyNet's selective read: Gu, Lu, Li & Li 2016, "Incorporating Copying Mechanism in
Sequence-to-Sequence Learning", §3.3 ("State update").

A copying decoder whose input is only the embedding of the previous word cannot tell
which source word it just copied when that word is outside the target vocabulary: every
copied word enters as E[<unk>] (See et al. 2017, §2.2). The selective read adds the
encoder states at the source positions holding the previous word:

    ζ_t = Σ_τ ρ_tτ h_τ,    ρ_tτ = 1/K_t  if x_τ = y_{t−1},  0 otherwise,
    K_t = #{τ : x_τ = y_{t−1}}                                   (ζ_t = 0 when K_t = 0)

so the decoder knows what it copied and from where (the state at that position carries
the position's context), and can move on to the next source word instead of copying the
same one again.

Deviation from Gu et al.: their ρ_tτ is proportional to the copy probability of x_τ at
step t − 1; here the K_t matching positions weigh the same. The two differ only when
y_{t−1} occurs more than once in the source, and the uniform ρ needs no step t − 1, so a
teacher-forced decoder stays fused over all T. Words are compared by extended id (a
source word outside the target vocabulary has the id V + k of its row,
seqlab.data.oov), so a copied word and a word of the target vocabulary that also occurs
in the source are both read. Special ids (padding, <unk>, <s>, </s>) read nothing.
"""

from __future__ import annotations

from torch import Tensor

from seqlab.data.vocab import EOS_ID

__all__ = ["selective_read"]


def selective_read(y_prev: Tensor, src_ext: Tensor, src_mask: Tensor, h: Tensor) -> Tensor:
    """ζ = Σ_τ ρ_τ h_τ with ρ uniform over the unmasked source positions whose extended id
    equals y_prev (a special id, or no match: ζ = 0).

    Shapes:
        y_prev: (B,) or (B, T) extended ids      src_ext: (B, S) extended ids
        src_mask: (B, S) bool                    h: (B, S, D) encoder states
        returns: ζ (B, D) or (B, T, D), in h's dtype
    """
    one_step = y_prev.dim() == 1
    y = y_prev.unsqueeze(1) if one_step else y_prev  # (B, T)
    match = y.unsqueeze(-1) == src_ext.unsqueeze(1)  # (B, T, S)  x_τ = y_{t−1}
    match = match & src_mask.unsqueeze(1) & (y > EOS_ID).unsqueeze(-1)  # (B, T, S)
    rho = match.to(h.dtype)  # (B, T, S)
    rho = rho / rho.sum(dim=-1, keepdim=True).clamp_min(1.0)  # 1/K_t on the matches
    zeta = rho @ h  # (B, T, D)
    return zeta.squeeze(1) if one_step else zeta
