"""Language-model metrics from a summed negative log-likelihood, in one place.

For a held-out stream y⟨1⟩ … y⟨N⟩ and NLL = −Σ_t ln p(y⟨t⟩ | y⟨<t⟩) (natural log, nats):

    loss (nats per token)   = NLL / N
    perplexity (word level) = exp(NLL / N)                      (Mikolov 2010; Zaremba 2014)
    nats per character      = NLL / N_char
    bits per character      = NLL / (N_char · ln 2) = nats/char ÷ ln 2   (Graves 2013)

Word-level N counts every predicted token, the end-of-sentence token ⟨/s⟩ included (the
PTB convention). For a character model N_char = N. Sums are taken over the whole split
first and divided once, never averaged per batch (a shorter last batch must not weigh
more).

Deviations: none.
"""

from __future__ import annotations

import math
from typing import Literal

LN2 = math.log(2.0)


def _check(nll_sum: float, n: int) -> None:
    if n < 1:
        raise ValueError(f"need at least one token, got n={n}")
    if not nll_sum >= 0.0:  # also rejects NaN
        raise ValueError(f"a negative log-likelihood sum is >= 0, got {nll_sum}")


def nats_per_token(nll_sum: float, n_tokens: int) -> float:
    """NLL / N: the mean cross-entropy in nats (the training loss)."""
    _check(nll_sum, n_tokens)
    return nll_sum / n_tokens


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """exp(NLL / N); ``inf`` when the mean NLL exceeds what a float can exponentiate."""
    mean = nats_per_token(nll_sum, n_tokens)
    return math.exp(mean) if mean < 709.0 else math.inf


def nats_per_char(nll_sum: float, n_chars: int) -> float:
    """NLL / N_char."""
    return nats_per_token(nll_sum, n_chars)


def bits_per_char(nll_sum: float, n_chars: int) -> float:
    """NLL / (N_char · ln 2)."""
    return nats_per_char(nll_sum, n_chars) / LN2


def lm_metrics(nll_sum: float, n_tokens: int, level: Literal["word", "char"]) -> dict[str, float]:
    """The ``lm`` task's evaluation metrics.

    word: ``loss`` (nats/token) and ``ppl``; char: ``loss`` (= nats/char), ``nats_per_char``
    and ``bpc``. Example: NLL = 4 ln 2 over N = 2 words → loss 2 ln 2, ppl 4; the same
    over N = 4 characters → 1 bit per character.
    """
    if level == "word":
        return {"loss": nats_per_token(nll_sum, n_tokens), "ppl": perplexity(nll_sum, n_tokens)}
    if level == "char":
        nats = nats_per_char(nll_sum, n_tokens)
        return {"loss": nats, "nats_per_char": nats, "bpc": bits_per_char(nll_sum, n_tokens)}
    raise ValueError(f"level must be 'word' or 'char', got {level!r}")
