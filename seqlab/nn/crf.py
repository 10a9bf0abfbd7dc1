"""Linear-chain conditional random field over tag sequences (Lafferty et al. 2001), as the
output layer of a BiLSTM tagger (Lample et al. 2016, §2.2).

For emissions P ∈ R^{n×K} (P[t, k]: score of tag k at word t, from the BiLSTM) and a tag
path y = (y₁ … y_n), the path score adds transitions and emissions (Lample eq. 1, with
the start and end tags y₀, y_{n+1} kept as separate vectors):

    s(x, y) = A_start[y₁] + Σ_{t=2}^{n} A[y_{t−1}, y_t] + Σ_{t=1}^{n} P[t, y_t] + A_end[y_n]

    p(y | x) = exp s(x, y) / Z(x),      Z(x) = Σ_{y'} exp s(x, y')          (Lample eq. 2)

    −log p(y | x) = log Z(x) − s(x, y)                                      (training loss)

log Z by the forward algorithm in log space (α: log-sum of every path prefix ending in k):

    α₁(k) = A_start[k] + P[1, k]
    α_t(k) = P[t, k] + log Σ_j exp(α_{t−1}(j) + A[j, k])
    log Z = log Σ_k exp(α_n(k) + A_end[k])

and the best path y* = argmax_y s(x, y) by Viterbi (δ: best prefix score, ψ: backpointers):

    δ₁(k) = A_start[k] + P[1, k]
    δ_t(k) = P[t, k] + max_j (δ_{t−1}(j) + A[j, k]),   ψ_t(k) = argmax_j (…)
    y*_n = argmax_k (δ_n(k) + A_end[k]),   y*_{t−1} = ψ_t(y*_t)

Batches: sequences are left-aligned with a bool mask (True = real word), every sequence
at least one word long. At a padded step α and δ are held and ψ is the identity, so the
value at the last real word reaches the end unchanged. The loops run over time steps,
never over batch items; there is no fused PyTorch kernel for these recursions.
tests/nn/test_crf.py checks log Z, s and Viterbi against brute-force enumeration of all
K^n paths (float64), the NLL gradient by gradcheck, and batched == one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

Constraint = Literal["none", "iob2"]


def iob2_allowed(tags: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Which transitions IOB2 allows: ``I-X`` only after ``B-X`` or ``I-X``, never first.

    Returns ``allowed`` (K, K) bool with allowed[j, k] = tag k may follow tag j, and
    ``allowed_start`` (K,) bool (tag k may begin a sentence). Any tag may end one.
    """
    K = len(tags)
    allowed = torch.ones(K, K, dtype=torch.bool)  # (K, K)
    allowed_start = torch.ones(K, dtype=torch.bool)  # (K,)
    for k, tag in enumerate(tags):
        if not tag.startswith("I-"):
            continue
        kind = tag[2:]
        allowed_start[k] = False
        for j, prev in enumerate(tags):
            allowed[j, k] = prev in (f"B-{kind}", f"I-{kind}")
    return allowed, allowed_start


def _check(P: Tensor, mask: Tensor) -> None:
    if P.dim() != 3 or mask.shape != P.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(
            f"need emissions (B, T, K) and a bool mask (B, T), got {tuple(P.shape)} and "
            f"{tuple(mask.shape)} {mask.dtype}"
        )
    if P.shape[1] == 0 or not bool(mask[:, 0].all()):
        raise ValueError("every sequence needs at least one word (mask[:, 0] all True)")


class CRF(nn.Module):
    """Linear-chain CRF: transition scores A, A_start, A_end and the three computations
    (path score, log-partition, Viterbi) over emissions P.

    ``constraint="iob2"`` (needs ``tags``) gives the transitions IOB2 forbids (I-X after
    O or after another type, I-X first) a score of −∞: such paths have probability 0 in
    training and are never decoded.

    Shapes:
        P:    (B, T, K) emissions (upcast to at least fp32 here)
        y:    (B, T) long gold tags (any value at padding)
        mask: (B, T) bool, True = real word, left-aligned, mask[:, 0] all True
        score / log_partition / nll: (B,)      decode: tags (B, T) (0 at padding), (B,)

    Deviations: Lample 2016 adds start/end as two extra tags of one (K+2)×(K+2) matrix;
    here they are the vectors A_start, A_end (the same model). Their transitions are
    learned freely; the IOB2 constraint is an option of this module.
    """

    def __init__(
        self, K: int, constraint: Constraint = "none", tags: Sequence[str] | None = None
    ) -> None:
        super().__init__()
        if K < 1:
            raise ValueError(f"K must be >= 1, got {K}")
        self.K, self.constraint = K, constraint
        self.A = nn.Parameter(torch.empty(K, K))  # A[j, k]: score of tag j → tag k
        self.A_start = nn.Parameter(torch.empty(K))  # score of starting with tag k
        self.A_end = nn.Parameter(torch.empty(K))  # score of ending with tag k
        if constraint == "iob2":
            if tags is None or len(tags) != K:
                raise ValueError("constraint='iob2' needs the K tag names in tags")
            allowed, allowed_start = iob2_allowed(tags)
        elif constraint == "none":
            allowed = torch.ones(K, K, dtype=torch.bool)  # (K, K)
            allowed_start = torch.ones(K, dtype=torch.bool)  # (K,)
        else:
            raise ValueError(f"constraint must be 'none' or 'iob2', got {constraint!r}")
        self.register_buffer("allowed", allowed, persistent=False)
        self.register_buffer("allowed_start", allowed_start, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.A, -0.1, 0.1)
        nn.init.uniform_(self.A_start, -0.1, 0.1)
        nn.init.uniform_(self.A_end, -0.1, 0.1)

    def transitions(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """(A, A_start, A_end) in ``dtype`` with forbidden transitions at −∞."""
        A = self.A.to(dtype).masked_fill(~self.allowed, float("-inf"))  # (K, K)
        A_start = self.A_start.to(dtype).masked_fill(~self.allowed_start, float("-inf"))  # (K,)
        return A, A_start, self.A_end.to(dtype)

    def _prepare(self, P: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        _check(P, mask)
        if P.shape[-1] != self.K:
            raise ValueError(f"emissions have {P.shape[-1]} tags, the CRF has K={self.K}")
        dtype = torch.promote_types(P.dtype, torch.float32)
        return (P.to(dtype), *self.transitions(dtype))

    def score(self, P: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        """s(x, y) of the given paths.  (B, T, K), (B, T), (B, T) -> (B,)."""
        P, A, A_start, A_end = self._prepare(P, mask)
        y = y.masked_fill(~mask, 0)  # (B, T) any valid index at padding
        emit = P.gather(2, y.unsqueeze(2)).squeeze(2)  # (B, T)  P[t, y_t]
        trans = A[y[:, :-1], y[:, 1:]]  # (B, T−1)  A[y_{t−1}, y_t]
        # where(), not multiplication by the mask: a −∞ at padding must not become NaN.
        s = torch.where(mask, emit, 0.0).sum(1)  # (B,)
        s = s + torch.where(mask[:, 1:], trans, 0.0).sum(1)  # (B,)
        last = mask.sum(1) - 1  # (B,) index of the last real word
        y_last = y.gather(1, last.unsqueeze(1)).squeeze(1)  # (B,)
        return s + A_start[y[:, 0]] + A_end[y_last]  # (B,)

    def log_partition(self, P: Tensor, mask: Tensor) -> Tensor:
        """log Z(x) by the forward algorithm.  (B, T, K), (B, T) -> (B,)."""
        P, A, A_start, A_end = self._prepare(P, mask)
        alpha = A_start + P[:, 0]  # (B, K)  α₁
        for t in range(1, P.shape[1]):
            # α_t(k) = P[t, k] + log Σ_j exp(α_{t−1}(j) + A[j, k])
            step = torch.logsumexp(alpha.unsqueeze(2) + A, dim=1) + P[:, t]  # (B, K)
            alpha = torch.where(mask[:, t, None], step, alpha)  # (B, K) held at padding
        return torch.logsumexp(alpha + A_end, dim=1)  # (B,)

    def nll(self, P: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        """−log p(y | x) = log Z(x) − s(x, y) per sentence.  -> (B,)."""
        return self.log_partition(P, mask) - self.score(P, y, mask)  # (B,)

    def forward(self, P: Tensor, y: Tensor, mask: Tensor) -> Tensor:
        """The training loss: ``nll`` (B,)."""
        return self.nll(P, y, mask)

    @torch.no_grad()
    def decode(self, P: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Viterbi: the best path y* and its score s(x, y*).

        Returns tags (B, T) long (0 at padding) and scores (B,).
        """
        P, A, A_start, A_end = self._prepare(P, mask)
        return viterbi(P, mask, A, A_start, A_end)


def viterbi(
    P: Tensor, mask: Tensor, A: Tensor, A_start: Tensor, A_end: Tensor
) -> tuple[Tensor, Tensor]:
    """Batched Viterbi decoding (see the module docstring); −∞ marks forbidden moves.

    Also decodes a softmax tagger under the IOB2 constraint: P = log p(tag), A = 0 where
    allowed and −∞ elsewhere gives the most probable valid tag sequence.

    Shapes:
        P: (B, T, K)  mask: (B, T) bool  A: (K, K)  A_start, A_end: (K,)
        returns: tags (B, T) long (0 at padding), scores (B,)
    """
    _check(P, mask)
    B, T, K = P.shape
    delta = A_start + P[:, 0]  # (B, K)  δ₁
    identity = torch.arange(K, device=P.device).expand(B, K)  # (B, K)
    psi = []
    for t in range(1, T):
        best, argbest = (delta.unsqueeze(2) + A).max(dim=1)  # (B, K) max_j δ_{t−1}(j) + A[j, k]
        keep = mask[:, t, None]  # (B, 1)
        delta = torch.where(keep, best + P[:, t], delta)  # (B, K) held at padding
        psi.append(torch.where(keep, argbest, identity))  # (B, K) identity at padding
    scores, y_t = (delta + A_end).max(dim=1)  # (B,), (B,)
    path = [y_t]
    for back in reversed(psi):
        y_t = back.gather(1, y_t.unsqueeze(1)).squeeze(1)  # (B,)  y*_{t−1} = ψ_t(y*_t)
        path.append(y_t)
    tags = torch.stack(path[::-1], dim=1)  # (B, T)
    return tags.masked_fill(~mask, 0), scores  # (B, T), (B,)
