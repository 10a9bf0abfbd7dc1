"""The n best one-token extensions of each input's K live hypotheses, found through chunk
maxima instead of a top-k over all K·V of them (docs/perf-notes-decoding.md §25).

Beam search ranks the extensions of input b by

    total(b, k, j) = log P(y_<t of slot k) + log p(j | slot k)        k < K, j < V

and keeps the n = 2K best. Split each slot's row of V log-probabilities into chunks of C
consecutive tokens. An extension outside the n chunks with the largest totals has at least
n extensions, one in each of those chunks, at or above it, so the n best all lie in those n
chunks. The chunk totals need one vectorised maximum over the row, not a top-k, and
float rounding is monotone, so max_j fl(s + l_j) = fl(s + max_j l_j) exactly: the chosen
chunks' totals, and therefore the values returned, are bit-identical to the flat top-k's.
Only the order among exactly equal totals may differ, which ``torch.topk`` leaves
unspecified in either form.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 32  # C: tokens per chunk (docs/perf-notes-decoding.md §25); 0 = always the flat top-k


def flat_top_extensions(live_log_prob: Tensor, log_p: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The reference: the n best totals over all K·V extensions of each input.

    Shapes: live_log_prob (B, K), log_p (B, K, V) -> values (B, n) best first,
            index (B, n) long into the flattened K·V (k·V + j)
    """
    B, K, V = log_p.shape
    total = live_log_prob[:, :, None] + log_p  # (B, K, V)
    values, index = total.reshape(B, K * V).topk(n, dim=1)  # (B, n), (B, n)
    return values, index


def chunk_maxima(log_p: Tensor, chunk: int) -> Tensor:
    """max_j log p over each chunk of ``chunk`` consecutive tokens of a row (the last chunk
    may be shorter).  Shapes: log_p (B, K, V) (may be expanded along K) -> (B, K, ⌈V/C⌉)"""
    V = log_p.size(-1)
    whole = V // chunk * chunk
    maxima = log_p[..., :whole].unflatten(-1, (V // chunk, chunk)).amax(-1)  # (B, K, V//C)
    if whole < V:
        rest = log_p[..., whole:].amax(-1, keepdim=True)  # (B, K, 1)
        maxima = torch.cat([maxima, rest], dim=-1)  # (B, K, ⌈V/C⌉)
    return maxima


def top_extensions(
    live_log_prob: Tensor, log_p: Tensor, n: int, chunk: int | None = None
) -> tuple[Tensor, Tensor]:
    """The n best totals live_log_prob[b, k] + log_p[b, k, j] of each input b, best first:
    the same values as ``flat_top_extensions``, found through the chunk maxima (module
    docstring). ``chunk`` = C (None: ``CHUNK``); the flat top-k where chunks would not
    prune: fewer than 4·n·C extensions per input, V < 2C, or C = 0.

    Which path runs depends on the shapes of one input only, never on the batch size, so
    an input decoded alone breaks exactly equal totals (frequent with bf16 logits) as it
    does in a batch (tested). For 1–4 inputs the flat top-k would be ~0.02 ms faster
    (docs/perf-notes-decoding.md §25).

    Shapes: live_log_prob (B, K), log_p (B, K, V) (may be expanded along K), n ≤ K·V
            -> values (B, n) best first, index (B, n) long into the flattened K·V (k·V + j)
    """
    C = CHUNK if chunk is None else chunk
    B, K, V = log_p.shape
    if C <= 0 or V < 2 * C or 4 * n * C > K * V:
        return flat_top_extensions(live_log_prob, log_p, n)
    maxima = chunk_maxima(log_p, C)  # (B, K, N)
    N = maxima.size(-1)
    chunk_total = live_log_prob[:, :, None] + maxima  # (B, K, N)
    best = chunk_total.reshape(B, K * N).topk(n, dim=1).indices  # (B, n) best chunks
    slot = torch.div(best, N, rounding_mode="floor")  # (B, n)
    token = (best % N)[:, :, None] * C + torch.arange(C, device=log_p.device)  # (B, n, C)
    inside = token < V  # (B, n, C) the last chunk may be shorter
    token = token.clamp(max=V - 1)  # (B, n, C)
    rows = torch.arange(B, device=log_p.device)[:, None, None]  # (B, 1, 1)
    values = live_log_prob.gather(1, slot)[:, :, None] + log_p[rows, slot[:, :, None], token]
    values = values.masked_fill(~inside, float("-inf")).reshape(B, n * C)  # (B, n·C)
    top, pos = values.topk(n, dim=1)  # (B, n), (B, n)
    flat = (slot[:, :, None] * V + token).reshape(B, n * C).gather(1, pos)  # (B, n)
    return top, flat
