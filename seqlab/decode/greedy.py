"""Greedy decoding, and the one-hypothesis-per-row loop that sampling shares.

Greedy search picks ŷ_t = argmax_y log p(y | ŷ_<t, x) at every step (the notes, 003
"Beam search": beam width 1 "essentially becomes greedy search"). It does not maximise
log P(Y) over whole sequences; tests/decode/test_beam.py shows a tree where beam search
with K = 2 finds a more probable sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqlab.decode.scoring import forbid_eos, next_log_probs
from seqlab.decode.state import DecodeResult, StepDecoder, drop_done_inputs, state_device
from seqlab.nn.packed_linear import with_packed_linears
from seqlab.registry import SEARCHES

# Picks one token per row from the step's log-probabilities: (B, V) -> (B,) long.
Chooser = Callable[[Tensor], Tensor]

# A length limit: one int for every row, or one per row, (B,) long.
MaxLen = int | Tensor


def check_lengths(max_len: MaxLen, min_len: int) -> None:
    """1 ≤ every row's max_len, 0 ≤ min_len ≤ the smallest of them."""
    smallest = int(max_len.min()) if isinstance(max_len, Tensor) else max_len
    if smallest < 1:
        raise ValueError(f"max_len must be >= 1 for every row, got {smallest}")
    if not 0 <= min_len <= smallest:
        raise ValueError(f"min_len must be in [0, max_len] = [0, {smallest}], got {min_len}")


def row_limits(max_len: MaxLen, min_len: int, batch_size: int, device: torch.device) -> Tensor:
    """Each row's limit on generated tokens (EOS counted), checked.

    An int applies to every row; a (B,) tensor gives row b its own limit max_len[b]
    (translation's ⌊a·|x| + b⌋, so sentences of any length share one search).

    Shapes: max_len int or (B,) long -> (B,) long on ``device``
    """
    check_lengths(max_len, min_len)
    if not isinstance(max_len, Tensor):
        return torch.full((batch_size,), max_len, dtype=torch.long, device=device)  # (B,)
    if max_len.shape != (batch_size,) or max_len.dtype.is_floating_point:
        raise ValueError(
            f"a per-row max_len must be a ({batch_size},) integer tensor, "
            f"got shape {tuple(max_len.shape)} dtype {max_len.dtype}"
        )
    return max_len.to(device=device, dtype=torch.long)  # (B,)


def limit_meta(max_len: MaxLen) -> int | list[int]:
    """``max_len`` as the result's ``meta`` records it: the int, or the per-row list."""
    return max_len.tolist() if isinstance(max_len, Tensor) else max_len


@torch.no_grad()
def decode_one_per_row(
    decoder: StepDecoder,
    state: Any,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    max_len: MaxLen,
    choose: Chooser,
    min_len: int = 0,
    pad_id: int = 0,
    compact_done: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """Left-to-right decoding of one hypothesis per row, the next token from ``choose``.

    Step t = 1 … max_b L_b, with L_b = row b's limit (``max_len``: an int for every row,
    or (B,) per row): log p_t = log_softmax(step(y_{t−1}, state)) with y_0 = BOS; for
    t ≤ min_len EOS gets log p = −∞ (not renormalised); y_t = choose(log p_t). A row is
    finished once it has emitted EOS or reached t = L_b (then |Y| = L_b, no EOS): later
    positions hold ``pad_id`` and add nothing to its length or log-probability (the
    decoder still runs on it, fed EOS, so the batch keeps its shape — unless
    ``compact_done``: then, once the finished rows are at least an eighth of those still
    decoded, they leave the decoder's batch, ``drop_done_inputs``; the result is the
    same). Decoding stops when every row is finished. Row b's result is what decoding
    it alone with max_len = L_b gives.

    Shapes:
        max_len: int, or (B,) long
        returns: tokens (B, T) long, T ≤ max_b L_b; lengths (B,) long (EOS counted);
                 log P(Y) (B,) float
    """
    device = state_device(state)
    B = batch_size
    limit = row_limits(max_len, min_len, B, device)  # (B,)
    y_prev = torch.full((B,), bos_id, dtype=torch.long, device=device)  # (A,)
    finished = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
    lengths = torch.zeros(B, dtype=torch.long, device=device)  # (B,)
    log_prob: Tensor | None = None
    tokens: list[Tensor] = []
    active = torch.arange(B, device=device)  # (A,) the rows still in the decoder's batch
    for t in range(1, int(limit.max()) + 1):
        log_p, state = next_log_probs(decoder, y_prev, state)  # (A, V)
        if t <= min_len:
            log_p = forbid_eos(log_p, eos_id)  # (A, V)
        y_t = choose(log_p)  # (A,)
        log_p_t = log_p.gather(1, y_t[:, None]).squeeze(1)  # (A,)
        if active.numel() < B:  # rows that left the batch are finished: pad, log p 0
            y_t = y_t.new_full((B,), pad_id).index_copy_(0, active, y_t)  # (B,)
            log_p_t = log_p_t.new_zeros(B).index_copy_(0, active, log_p_t)  # (B,)
        y_t = y_t.masked_fill(finished, pad_id)  # (B,)
        log_p_t = log_p_t.masked_fill(finished, 0.0)  # (B,)
        log_prob = log_p_t if log_prob is None else log_prob + log_p_t  # (B,)
        lengths = lengths + (~finished).long()  # (B,)
        finished = finished | (y_t == eos_id) | (limit <= t)  # (B,)
        tokens.append(y_t)
        n_done = int(finished[active].sum())  # the step's one host sync; dropped rows are done
        if n_done == active.numel():
            break
        y_prev = y_t.masked_fill(finished, eos_id)[active]  # (A,) a valid id for every decoder
        if compact_done:
            state, y_prev, active = drop_done_inputs(state, y_prev, active, finished, 1, n_done)
    assert log_prob is not None  # every limit >= 1
    return torch.stack(tokens, dim=1), lengths, log_prob  # (B, T), (B,), (B,)


def argmax_token(log_p: Tensor) -> Tensor:
    """ŷ = argmax_y log p(y); ties go to the lowest token id.  (B, V) -> (B,)."""
    return log_p.argmax(dim=-1)  # (B,)


@torch.no_grad()
@with_packed_linears  # docs/perf-notes-decoding.md §34
def greedy(
    decoder: StepDecoder,
    state: Any,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    max_len: MaxLen,
    min_len: int = 0,
    pad_id: int = 0,
    compact_done: bool = True,
) -> DecodeResult:
    """Greedy search: ŷ_t = argmax_y log p(y | ŷ_<t, x), t = 1 … until EOS or max_len.

    ``max_len``: an int for every row, or a (B,) tensor of per-row limits (row b gives
    what it gives decoded alone with max_len[b]). ``min_len``: EOS is forbidden at steps
    t ≤ min_len, so a finished hypothesis has at least min_len tokens before its EOS.
    Finished rows stop changing (``pad_id`` after EOS or the row's limit); the loop ends
    as soon as every row is finished. ``compact_done`` removes finished rows from the
    decoder's batch once they are an eighth of it (the same result; False keeps them).

    Shapes:
        state:   from the model's ``init_state``, batch B = ``batch_size``
        max_len: int, or (B,) long
        returns: DecodeResult with tokens (B, T), lengths (B,), scores = log_probs =
                 log P(Y) (B,)
    """
    tokens, lengths, log_prob = decode_one_per_row(
        decoder, state, batch_size, bos_id, eos_id, max_len, argmax_token, min_len, pad_id,
        compact_done,
    )  # fmt: skip
    meta = {
        "search": "greedy",
        "max_len": limit_meta(max_len),
        "min_len": min_len,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "score": "log P(Y) = sum_t log p(y_t | y_<t); |Y| counts EOS",
        "steps": tokens.size(1),
    }
    return DecodeResult(tokens, lengths, log_prob, log_prob.clone(), meta)


@dataclass(frozen=True)
class GreedyConfig:
    """Settings of ``greedy`` (the ids come from the vocabulary, not the config)."""

    max_len: int = 200
    min_len: int = 0


SEARCHES.register("greedy", GreedyConfig)(greedy)
