"""Ancestral sampling with temperature, top-k and top-p (nucleus) filtering.

y_t ~ q(· | y_<t), where q is the model's next-token distribution reshaped in this order:

    1. temperature τ:  q ∝ exp(log p / τ)            (τ = 0 means argmax: greedy search)
    2. top-k (Fan et al. 2018): keep the k most probable tokens       (k = 0: all)
    3. top-p (Holtzman et al. 2020, "nucleus"): keep the smallest set of most probable
       tokens whose mass under q is ≥ p, always at least one token       (p = 1: all)

and renormalised. Sampling is reproducible through a ``torch.Generator``. The reported
log P(Y) is under the model itself (τ = 1, unfiltered), like every search in seqlab.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from seqlab.decode.greedy import MaxLen, argmax_token, decode_one_per_row, limit_meta
from seqlab.decode.state import DecodeResult, StepDecoder
from seqlab.nn.packed_linear import with_packed_linears
from seqlab.registry import SEARCHES


def check_filters(temperature: float, top_k: int, top_p: float) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = argmax), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row, −∞ elsewhere (Fan et al. 2018).

    Exactly k tokens survive (ties at the k-th value are broken by ``torch.topk``);
    k = 0 or k ≥ V keeps everything.

    Shapes: logits (..., V) -> (..., V)
    """
    check_filters(1.0, k, 1.0)
    V = logits.size(-1)
    if k == 0 or k >= V:
        return logits
    index = logits.topk(k, dim=-1).indices  # (..., k)
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, index, True)  # (..., V)
    return logits.masked_fill(~keep, float("-inf"))  # (..., V)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter (Holtzman et al. 2020, §3.1): keep V⁽ᵖ⁾, the smallest set of most
    probable tokens with Σ_{y ∈ V⁽ᵖ⁾} q(y) ≥ p; −∞ elsewhere.

    With tokens sorted by q descending, token i is kept iff the mass of the tokens before
    it is < p; the most probable token is always kept. p = 1 keeps everything.

    Shapes: logits (..., V) -> (..., V)
    """
    check_filters(1.0, 0, p)
    if p >= 1.0:
        return logits
    q = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), -1)  # (..., V)
    q_sorted, order = q.sort(dim=-1, descending=True)  # (..., V), (..., V)
    mass_before = q_sorted.cumsum(dim=-1) - q_sorted  # (..., V)
    keep_sorted = mass_before < p  # (..., V)
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (..., V)
    return logits.masked_fill(~keep, float("-inf"))  # (..., V)


def sampling_distribution(
    log_p: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """q(· | y_<t): temperature, then top-k, then top-p, renormalised (module docstring).

    Shapes: log_p (B, V) (log-probabilities or logits) -> (B, V) probabilities
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 here (0 means argmax), got {temperature}")
    z = log_p / temperature  # (B, V)
    z = top_p_filter(top_k_filter(z, top_k), top_p)  # (B, V)
    return torch.softmax(z, dim=-1)  # (B, V)


@torch.no_grad()
@with_packed_linears  # as greedy: packed bf16 / int8 weights (docs/perf-notes-decoding.md §34)
def sample(
    decoder: StepDecoder,
    state: Any,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    max_len: MaxLen,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    min_len: int = 0,
    pad_id: int = 0,
) -> DecodeResult:
    """Ancestral sampling y_t ~ q(· | y_<t), t = 1 … until EOS or max_len.

    ``temperature=0`` is argmax (greedy search, identical tokens and scores). With a
    ``generator`` seeded the same way (on the decoder's device) the samples repeat.
    ``min_len``: EOS is forbidden at steps t ≤ min_len (q renormalises without it).
    ``max_len``: an int for every row, or a (B,) tensor of per-row limits.

    Shapes:
        max_len: int, or (B,) long
        returns: DecodeResult with tokens (B, T), lengths (B,) (EOS counted),
                 scores = log_probs = log P(Y) under the model (B,)
    """
    check_filters(temperature, top_k, top_p)

    def draw(log_p: Tensor) -> Tensor:
        q = sampling_distribution(log_p, temperature, top_k, top_p)  # (B, V)
        return torch.multinomial(q, 1, generator=generator).squeeze(1)  # (B,)

    choose = argmax_token if temperature == 0 else draw
    tokens, lengths, log_prob = decode_one_per_row(
        decoder, state, batch_size, bos_id, eos_id, max_len, choose, min_len, pad_id
    )
    meta = {
        "search": "sample",
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "max_len": limit_meta(max_len),
        "min_len": min_len,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "distribution": "q = softmax(top_p(top_k(log p / temperature))); temperature 0 = argmax",
        "score": "log P(Y) under the model (temperature 1, unfiltered); |Y| counts EOS",
        "steps": tokens.size(1),
    }
    return DecodeResult(tokens, lengths, log_prob, log_prob.clone(), meta)


@dataclass(frozen=True)
class SamplingConfig:
    """Settings of ``sample`` (the generator and ids are passed at call time)."""

    max_len: int = 200
    min_len: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


SEARCHES.register("sample", SamplingConfig)(sample)
