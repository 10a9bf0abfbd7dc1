"""Batched decoding of many sentences for the translation task: length-sorted batches,
results back in input order, n-best lists and attention records.

Every search goes through ``seqlab.decode`` (greedy for beam 1 with one hypothesis, else
``beam_search``). Batching rules:

- The output length limit of a sentence is max_len(x) = ⌊a·|x| + b⌋ generated tokens
  (EOS counted), |x| its source subwords without EOS (fairseq's ``max_len_a/b``).
- Sentences are sorted by source length (longest first) and cut into batches of at most
  ``batch_tokens`` B·K·max(S, max_len) slots (S and max_len of the batch's longest
  source). Each row gets its own limit (the searches take a (B,) ``max_len``), so the
  translations do not depend on batch size or on which sentences are decoded together
  (USER-NEEDS §1).
- Results are written back to the input positions (the sort is undone by index).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.collate import collate_seq2seq, pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.decode.compiled import compiled_decoder
from seqlab.decode.greedy import greedy
from seqlab.errors import SeqlabError
from seqlab.nn.masks import padding_mask

__all__ = [
    "Hypothesis",
    "SearchSettings",
    "Translation",
    "attention_records",
    "batch_limits",
    "coverage_of",
    "decode_ids",
    "length_limit",
    "plan_batches",
]


@dataclass(frozen=True)
class SearchSettings:
    """How to decode: beam width K (1 with nbest 1 = greedy), n-best size, the length
    limit ⌊a·|x| + b⌋, GNMT length penalty α, GNMT coverage penalty β (beam search only;
    needs a model with ``attention_coverage``: bahdanau, luong), the batch budget, and
    ``compiled``: decode through the Transformer's compiled, weight-frozen step
    (``seqlab.decode.compiled``; the same search, a faster step after a first compile)."""

    beam: int = 5
    nbest: int = 1
    max_len_a: float = 1.2
    max_len_b: int = 10
    length_penalty: float = 0.6
    coverage_penalty: float = 0.0
    batch_tokens: int = 16000
    compiled: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.nbest <= self.beam:
            raise ValueError(f"need 1 <= nbest <= beam, got nbest={self.nbest} beam={self.beam}")
        if self.max_len_a < 0 or self.max_len_b < 0 or self.max_len_a + self.max_len_b <= 0:
            raise ValueError(
                f"need max_len_a, max_len_b >= 0 and a positive limit, got "
                f"{self.max_len_a}, {self.max_len_b}"
            )
        for name in ("length_penalty", "coverage_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if self.batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {self.batch_tokens}")

    @property
    def greedy(self) -> bool:
        return self.beam == 1 and self.nbest == 1


@dataclass
class Hypothesis:
    """One output: detokenised text, its subword ids (no EOS), the score the search ranked
    by (beam: log P / lp; greedy: log P) and log P(Y)."""

    text: str
    ids: list[int]
    score: float
    log_prob: float


@dataclass
class Translation:
    """All outputs for one source sentence, best first; with attention, the model's
    attention weights for the best hypothesis, trimmed to the real positions, labelled by
    ``source_pieces`` (columns, ending in ``</s>``) and ``target_pieces`` (rows: the
    position that predicts each piece, ending in ``</s>``)."""

    source: str
    hypotheses: list[Hypothesis]
    source_pieces: list[str] = field(default_factory=list)
    target_pieces: list[str] = field(default_factory=list)
    attention: dict[str, Tensor] | None = None
    # the pointer-generator's (copy_translation), per row of the attention: p_gen (T,) and
    # whether the word lies outside the target vocabulary (only a copy could produce it)
    p_gen: Tensor | None = None
    copied: list[bool] | None = None

    @property
    def text(self) -> str:
        return self.hypotheses[0].text


def length_limit(n_src: int, a: float, b: int) -> int:
    """max_len(x) = ⌊a·|x| + b⌋, at least 1 (generated tokens, EOS counted)."""
    return max(1, math.floor(a * n_src + b))


def plan_batches(src_lengths: Sequence[int], settings: SearchSettings) -> list[list[int]]:
    """Index batches: longest sources first, B·K·max(S, max_len) ≤ ``batch_tokens``.

    S = |x| + 1 and max_len = ``length_limit`` of the batch's first (longest) source, the
    largest of the batch. Every index appears exactly once; at least one per batch.
    """
    a, b, K = settings.max_len_a, settings.max_len_b, settings.beam
    order = sorted(range(len(src_lengths)), key=lambda i: (-src_lengths[i], i))
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        longest = src_lengths[order[start]]
        width = max(longest + 1, length_limit(longest, a, b))  # +1: the source EOS
        per_batch = max(1, settings.batch_tokens // (K * width))
        batches.append(order[start : start + per_batch])
        start += per_batch
    return batches


def batch_limits(src_lengths: Sequence[int], settings: SearchSettings) -> Tensor:
    """Each row's max_len = ``length_limit`` of its source, for the searches' per-row
    ``max_len``.  (B,) long."""
    a, b = settings.max_len_a, settings.max_len_b
    return torch.tensor([length_limit(n, a, b) for n in src_lengths], dtype=torch.long)  # (B,)


def _device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


class _CoverageError(SeqlabError, ValueError):
    """A coverage penalty asked of a model that keeps no attention coverage."""


def coverage_of(model: nn.Module, beta: float) -> Callable[..., Any]:
    """The model's ``attention_coverage``, which GNMT's coverage penalty β > 0 reads. A
    model without one — a single attention distribution per step is what the penalty
    sums — is refused with what to do (a ``SeqlabError``: the CLI prints it in one line)."""
    coverage = getattr(model, "attention_coverage", None)
    if coverage is None:
        raise _CoverageError(
            f"coverage_penalty {beta} needs a model whose decoder state "
            "keeps the attention it has paid to each source word (bahdanau, luong); "
            f"{type(model).__name__} does not: set the coverage penalty to 0"
        )
    return coverage


@torch.no_grad()
def decode_ids(
    model: nn.Module, sources: Sequence[Sequence[int]], settings: SearchSettings
) -> list[list[tuple[list[int], float, float]]]:
    """Decode source id sequences (each ending in EOS) with greedy or beam search.

    Returns, per input and in input order, the n-best ``(ids without EOS, score, log P)``
    best first. The model must be in the mode the caller wants (normally ``eval()``).

    Shapes (per batch): src (B, S), src_mask (B, S), per-row max_len (B,); greedy tokens
    (B, T); beam tokens (B, N, T).
    """
    device = _device(model)
    width = 1 if settings.greedy else settings.beam  # greedy and beam: separate steps (§51)
    decoder = compiled_decoder(model, width) if settings.compiled else model  # .step
    use_cp = settings.coverage_penalty > 0.0 and not settings.greedy
    coverage = coverage_of(model, settings.coverage_penalty) if use_cp else None
    out: list[list[tuple[list[int], float, float]] | None] = [None] * len(sources)
    n_src = [len(s) - 1 for s in sources]  # without the source EOS
    for batch in plan_batches(n_src, settings):
        src, lengths = pad_batch([sources[i] for i in batch], PAD_ID)  # (B, S), (B,)
        src, src_mask = src.to(device), padding_mask(lengths).to(device)  # (B, S), (B, S)
        limit = batch_limits([n_src[i] for i in batch], settings).to(device)  # (B,)
        memory = model.encode(src, src_mask)
        state = decoder.init_state(memory, src_mask)  # the compiled step's own cache
        B = len(batch)
        if settings.greedy:
            res = greedy(decoder, state, B, BOS_ID, EOS_ID, max_len=limit, pad_id=PAD_ID)
            tokens = res.tokens[:, None]  # (B, 1, T)
            lens = res.lengths[:, None]  # (B, 1)
            scores, logps = res.scores[:, None], res.log_probs[:, None]  # (B, 1), (B, 1)
        else:
            res = beam_search(
                decoder,
                state,
                B,
                BOS_ID,
                EOS_ID,
                max_len=limit,
                beam_size=settings.beam,
                n_best=settings.nbest,
                alpha=settings.length_penalty,
                pad_id=PAD_ID,
                coverage_penalty=settings.coverage_penalty,
                coverage=coverage,
            )
            tokens, lens = res.tokens, res.lengths  # (B, N, T), (B, N)
            scores, logps = res.scores, res.log_probs  # (B, N), (B, N)
        rows, lens = tokens.tolist(), lens.tolist()
        scores, logps = scores.float().tolist(), logps.float().tolist()
        for b, i in enumerate(batch):
            nbest = []
            for n in range(len(rows[b])):
                ids = rows[b][n][: lens[b][n]]
                if ids and ids[-1] == EOS_ID:
                    ids = ids[:-1]
                nbest.append((ids, scores[b][n], logps[b][n]))
            out[i] = nbest
    assert all(o is not None for o in out)
    return out  # type: ignore[return-value]


def _trim(name: str, x: Tensor, b: int, S: int, T: int) -> Tensor:
    """Row b of one attention tensor, real positions only: keys naming the encoder are
    (S, S), other self-attention (T, T), everything else (T, S) (the model contract)."""
    if "encoder" in name:
        rows, cols = S, S
    elif "self" in name:
        rows, cols = T, T
    else:
        rows, cols = T, S
    return x[b, ..., :rows, :cols]  # ([H,] rows, cols)


@torch.no_grad()
def attention_records(
    model: nn.Module, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
) -> list[dict[str, Tensor]] | None:
    """``model.attention_maps`` for (source, hypothesis) pairs, teacher-forced, one dict per
    pair: name → (L, [H,] rows, cols) for a per-layer list, ([H,] rows, cols) for a tensor.
    None when the model has no ``attention_maps``.

    Shapes: S_b = |x| + 1 (source EOS), T_b = |y| + 1 (the position predicting EOS).
    """
    maps_fn = getattr(model, "attention_maps", None)
    if maps_fn is None:
        return None
    device = _device(model)
    batch = collate_seq2seq(list(zip(sources, targets)), BOS_ID, EOS_ID, PAD_ID).to(device)
    maps = maps_fn(batch.src, batch.src_mask, batch.y_in, batch.tgt_mask)
    S_b, T_b = batch.src_lengths.tolist(), batch.tgt_lengths.tolist()
    records = []
    for b in range(batch.batch_size):
        rec: dict[str, Tensor] = {}
        for name, value in maps.items():
            if isinstance(value, Tensor):
                rec[name] = _trim(name, value, b, S_b[b], T_b[b]).float().cpu()  # ([H,] r, c)
            elif value:
                layers = [_trim(name, v, b, S_b[b], T_b[b]) for v in value]  # L × ([H,] r, c)
                rec[name] = torch.stack(layers).float().cpu()  # (L, [H,] rows, cols)
        records.append(rec)
    return records
