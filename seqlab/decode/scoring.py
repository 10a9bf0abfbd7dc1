"""Scores of output sequences: step log-probabilities, the GNMT length and coverage
penalties, the bound beam search stops on, and log P(Y) recomputed by teacher forcing.

Conventions shared by every search (docs/decoding.md):
- log p(y_t | y_<t, x) = log_softmax(logits_t), computed in float32 at least.
- |Y| counts the generated tokens including the final EOS (not BOS, not padding).
- ``min_len`` forbids EOS by setting its log-probability to −∞ *without* renormalising
  the other tokens, so every reported log P(Y) is the model's own and equals
  ``sequence_log_prob`` recomputed on the same tokens.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from seqlab.decode.state import StepDecoder

GNMT_FORMULA = "score(Y) = log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6) ** alpha; |Y| counts EOS"


def step_log_probs(logits: Tensor) -> Tensor:
    """log p(· | y_<t) = log_softmax(logits) over the vocabulary, in float32 at least.

    Shapes: logits (..., V) -> (..., V), dtype float32 or float64
    """
    dtype = torch.promote_types(logits.dtype, torch.float32)
    return F.log_softmax(logits.to(dtype), dim=-1)  # (..., V)


def next_log_probs(decoder: StepDecoder, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
    """The decoder's step and log p(· | y_<t) = ``step_log_probs`` of its logits, as every
    search takes them. A decoder with a ``log_prob_step`` method returns both itself: the
    compiled step computes the log_softmax inside its graph, fused with the output layer
    (``seqlab.decode.compiled``; docs/perf-notes-amx.md §50).

    Shapes: y_prev (B,) long -> log_p (B, V) float32 or float64, new state
    """
    own = getattr(decoder, "log_prob_step", None)
    if own is not None:
        return own(y_prev, state)
    logits, state = decoder.step(y_prev, state)  # (B, V)
    return step_log_probs(logits), state  # (B, V)


def forbid_eos(log_p: Tensor, eos_id: int) -> Tensor:
    """log p with EOS set to −∞ (``min_len``), the other entries unchanged (no renormalising).

    In place: writes the one EOS column of ``log_p`` (a fresh ``step_log_probs`` output in
    the searches) and returns it; a vocabulary-wide ``masked_fill`` copy cost ~1 ms per
    beam step here (docs/perf-notes-decoding.md §13).

    Shapes: log_p (..., V) -> the same tensor (..., V)
    """
    log_p[..., eos_id] = float("-inf")  # (..., V)
    return log_p


def gnmt_length_penalty(length: Tensor | int, alpha: float) -> Tensor:
    """Wu et al. 2016 (GNMT), §7, s(Y, X): lp(Y) = (5 + |Y|)^α / (5 + 1)^α = ((5 + |Y|) / 6)^α.

    lp(1) = 1; for α > 0 it grows with |Y| (longer hypotheses are divided by more, which
    offsets log P(Y) falling with every token); α = 0 gives lp = 1 (raw log-probabilities).

    Deviations: |Y| counts EOS (the paper does not say). GNMT's coverage penalty cp(X; Y) is
    ``gnmt_coverage_penalty``, added by beam search where the model reports its coverage.

    Shapes: length (...) int or long tensor -> (...) float64
    """
    n = torch.as_tensor(length, dtype=torch.float64)  # (...)
    return ((5.0 + n) / 6.0) ** alpha  # (...)


def gnmt_coverage_penalty(coverage: Tensor, mask: Tensor, beta: float) -> Tensor:
    """Wu et al. 2016 (GNMT), §7, the coverage penalty of s(Y, X):

        cp(X; Y) = β Σ_{i=1}^{|X|} log(min(Σ_{j=1}^{|Y|} p_{i,j}, 1.0))

    p_{i,j}: the attention of output step j on source position i; ``coverage`` holds the
    sums Σ_j p_{i,j} over the hypothesis' steps (EOS's step included). cp ≤ 0, and it is 0
    once every source position has received a total attention of at least 1: it favours
    hypotheses that attend to (translate) every source word. It never decreases as a
    hypothesis grows (the sums only grow), so 0 bounds it from above.

    Deviations: the sum runs over the positions of ``mask`` (a source padded in a batch
    has no attention there); a sum below the smallest normal float counts as that float
    (log 0 = −∞ would make the hypothesis unrankable; softmax attention is positive
    anyway).

    Shapes: coverage (..., S) float, mask (..., S) bool -> (...) float (coverage's dtype)
    """
    tiny = torch.finfo(coverage.dtype).tiny
    per_word = coverage.clamp(min=tiny, max=1.0).log()  # (..., S)
    return beta * per_word.masked_fill(~mask, 0.0).sum(-1)  # (...)


def penalised_score(log_prob: Tensor, length: Tensor | int, alpha: float) -> Tensor:
    """score(Y) = log P(Y) / lp(Y) (GNMT §7 s(Y, X), without the coverage term cp).

    Shapes: log_prob (...) float, length (...) long -> (...) in log_prob's dtype
    """
    lp = gnmt_length_penalty(length, alpha).to(log_prob.device)  # (...)
    return (log_prob / lp).to(log_prob.dtype)  # (...)


def best_possible_score(
    live_log_prob: Tensor, t: int, max_len: int | Tensor, alpha: float
) -> Tensor:
    """Upper bound on the penalised score of any hypothesis that extends a live one.

    A live hypothesis h has t tokens and raw log-probability s_h ≤ 0. Any hypothesis Y
    grown from it has |Y| = n with t < n ≤ max_len and log P(Y) ≤ s_h (every extra token
    adds log p ≤ 0), so, as lp(n) > 0,

        score(Y) = log P(Y) / lp(n) ≤ s_h / lp(n) ≤ max_{t<n≤max_len} s_h / lp(n).

    s_h / lp(n) is monotone in n (s_h ≤ 0 and lp is monotone), so the maximum is at an end:
    α > 0: lp grows, s_h / lp(n) rises towards 0, the bound is s_h / lp(max_len);
    α < 0: the bound is s_h / lp(t + 1); α = 0: s_h itself. The bound is tight (reached
    when every later token has probability 1). Taking max(s_h / lp(t+1), s_h / lp(max_len))
    covers every α. A search may stop when this bound cannot beat its worst kept result;
    using lp(t) or lp(t+1) for α > 0 is *not* a bound (OpenNMT-py#1320,
    huggingface/transformers#20901). ``max_len`` may differ per entry (each input of a
    beam search has its own limit); lp(t + 1) is then taken at min(t + 1, max_len).

    Shapes: live_log_prob (...) float, −∞ for dead hypotheses; max_len int or (...) long
            -> (...) same dtype
    """
    far_len = torch.as_tensor(max_len, device=live_log_prob.device)  # () or (...)
    near = penalised_score(live_log_prob, far_len.clamp(max=t + 1), alpha)  # (...)
    far = penalised_score(live_log_prob, far_len, alpha)  # (...)
    return torch.maximum(near, far)  # (...)


def sequence_lengths(tokens: Tensor, eos_id: int) -> Tensor:
    """|Y| per row: the position of the first EOS plus one (EOS counted), else T.

    Shapes: tokens (B, T) long -> (B,) long
    """
    is_eos = tokens == eos_id  # (B, T)
    first = is_eos.long().argmax(dim=1)  # (B,) argmax returns the first maximal index
    T = tokens.size(1)
    return torch.where(is_eos.any(dim=1), first + 1, torch.full_like(first, T))  # (B,)


@torch.no_grad()
def sequence_log_prob(
    decoder: StepDecoder,
    state: Any,
    tokens: Tensor,
    eos_id: int,
    *,
    bos_id: int,
    lengths: Tensor | None = None,
) -> Tensor:
    """log P(Y) = Σ_{t=1}^{|Y|} log p(y_t | y_<t) by teacher forcing ``tokens`` through step().

    The decoder is fed BOS, then y_1 … y_{T−1}; positions t ≥ |Y| (padding after EOS)
    add nothing. ``lengths`` defaults to ``sequence_lengths(tokens, eos_id)``.

    Shapes:
        tokens:  (B, T) long, as returned by the searches (beam: flatten (B, N, T) to
                 (B·N, T) and repeat the state with ``repeat_rows(state, B, N)``)
        lengths: (B,) long or None
        returns: (B,) float
    """
    B, T = tokens.shape
    if lengths is None:
        lengths = sequence_lengths(tokens, eos_id)  # (B,)
    inside = torch.arange(T, device=tokens.device) < lengths[:, None]  # (B, T)
    # Padding may not be a valid vocabulary index: feed / look up EOS there instead.
    y = torch.where(inside, tokens, torch.full_like(tokens, eos_id))  # (B, T)
    y_prev = torch.full((B,), bos_id, dtype=torch.long, device=tokens.device)  # (B,)
    total: Tensor | None = None
    for t in range(T):
        logits, state = decoder.step(y_prev, state)  # (B, V)
        log_p = step_log_probs(logits).gather(1, y[:, t : t + 1]).squeeze(1)  # (B,)
        log_p = log_p.masked_fill(~inside[:, t], 0.0)  # (B,)
        total = log_p if total is None else total + log_p  # (B,)
        y_prev = y[:, t]  # (B,)
    if total is None:
        return torch.zeros(B, device=tokens.device)  # (B,)
    return total
