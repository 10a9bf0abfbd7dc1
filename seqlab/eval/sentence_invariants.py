"""Invariance checks on a trained sentence classifier or tagger (``seqlab check`` on a
``classify`` or ``tag`` run).

A classifier reads a padded batch (x, mask[, grams]) and returns logits (B, C); a tagger
reads (words, chars, mask) and returns emissions P (B, T, K), decoded by argmax, Viterbi
under the IOB2 constraint, or a CRF. The padding and the other sentences of a batch must
not change what a sentence gets; these checks measure that on the user's checkpoint and
data, as ``seqlab.eval.invariants`` does for translation:

1. **batched == unbatched.** Each sentence alone (no padding) against the same sentence
   inside the padded, length-mixed batch of all N: log-softmax over the classes
   (classifier) or over the tags at every real word (tagger); for a tagger also the
   decoded tags and −log p(ŷ | x) of the decoded path (CRF: log Z(x) − s(x, ŷ), Lafferty
   et al. 2001; softmax: −Σ_t log p(ŷ_t | x)).
2. **more padding changes nothing.** The batch with ``extra`` more padded positions after
   every sentence (PAD ids, mask False) against the batch as built: the same quantities.
3. **fused == readable** (models with a recurrent layer that has a fused kernel). Every
   :class:`seqlab.nn.recurrent.Recurrent` of a copy forced onto seqlab's step-by-step
   cells, against PyTorch's fused kernel (the default path).
4. **Viterbi score == s(x, ŷ)** (CRF taggers). The score Viterbi reports for its path
   against the CRF's score of that path, s(x, y) = Σ_t P[t, y_t] + Σ_t A[y_{t−1}, y_t] +
   A_start[y_1] + A_end[y_T]; and log Z(x) ≥ s(x, ŷ) (the best path cannot outweigh the
   sum over all paths).

Differences are absolute, in nats; float64 by default (tolerance 1e-8), float32 1e-3
(``TOLERANCE``). A decoded tag that differs is a mismatch and fails the check.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.data.vocab import PAD_ID
from seqlab.eval.invariants import TOLERANCE, Check, largest
from seqlab.nn.recurrent import Recurrent

__all__ = ["Batches", "run_sentence_checks"]

Inputs = tuple[Tensor, ...]


@dataclass
class Batches:
    """How a task builds the model's inputs for some of its N sentences.

    ``make(indices, extra)`` returns the forward's arguments for those sentences, padded
    to the longest plus ``extra`` positions, and the mask (B, T) (True = real word);
    ``tagger`` says whether the model's output is per word (B, T, K) or per sentence (B, C).
    """

    make: Callable[[list[int], int], tuple[Inputs, Tensor]]
    n: int
    tagger: bool


@dataclass
class _Out:
    """One batch's outputs, as float64 where they are compared."""

    log_p: Tensor  # (B, T, K) tagger, (B, 1, C) classifier
    mask: Tensor  # (B, T) tagger, (B, 1) all True for a classifier
    tags: Tensor | None = None  # (B, T) decoded, tagger only
    path_nll: Tensor | None = None  # (B,) −log p(ŷ | x), tagger only
    emissions: Tensor | None = None  # (B, T, K) P as the model returned it, tagger only


def pad_positions(t: Tensor, extra: int, value: float | bool) -> Tensor:
    """``t`` (B, T, …) with ``extra`` more positions on dim 1 set to ``value``."""
    if extra == 0:
        return t
    pad = [0, 0] * (t.dim() - 2) + [0, extra]  # F.pad lists the last dim first
    return F.pad(t, pad, value=value)


def _run(model: nn.Module, b: Batches, indices: list[int], extra: int = 0) -> _Out:
    inputs, mask = b.make(indices, extra)
    device = next(model.parameters()).device
    inputs, mask = tuple(t.to(device) for t in inputs), mask.to(device)
    out = model(*inputs)  # (B, C) or (B, T, K)
    if not b.tagger:
        log_p = torch.log_softmax(out.double(), dim=-1).unsqueeze(1)  # (B, 1, C)
        return _Out(log_p, torch.ones(log_p.shape[:2], dtype=torch.bool, device=device))
    log_p = torch.log_softmax(out.double(), dim=-1)  # (B, T, K)
    tags = model.decode(out, mask)  # (B, T)
    crf = getattr(model, "crf", None)
    if crf is not None:
        path_nll = crf.nll(out, tags, mask).double()  # (B,)
    else:
        picked = log_p.gather(2, tags.unsqueeze(2)).squeeze(2)  # (B, T)
        path_nll = -torch.where(mask, picked, 0.0).sum(1)  # (B,)
    return _Out(log_p, mask, tags, path_nll, out)


def _compare(a: _Out, ia: int, b: _Out, ib: int, label: str) -> tuple[float, str, int]:
    """Largest |Δ| between sentence ``ia`` of ``a`` and ``ib`` of ``b`` over its real
    positions (log p, then the path's −log p), its place, and 1 if the tags differ."""
    n = int(a.mask[ia].sum())
    d = (a.log_p[ia, :n] - b.log_p[ib, :n]).abs().amax(dim=-1)  # (n,)
    t = int(d.argmax())
    worst = float(d[t])
    where = f"{label}, word {t + 1}" if a.tags is not None else label
    if a.path_nll is not None and b.path_nll is not None:
        dp = float((a.path_nll[ia] - b.path_nll[ib]).abs())
        if dp != dp or dp > worst:
            worst, where = dp, f"{label}, −log p(ŷ | x)"
    differ = 0
    if a.tags is not None and b.tags is not None:
        differ = int(not torch.equal(a.tags[ia, :n], b.tags[ib, :n]))
    return worst, where, differ


def _compare_all(together: _Out, others: list[tuple[_Out, int]]) -> tuple[float, str, int]:
    """Sentence i of ``together`` against row ``others[i][1]`` of ``others[i][0]``, for
    every i: the largest |Δ|, its place and how many sentences' tags differ."""
    diffs, mismatches = [], 0
    for i, (other, row) in enumerate(others):
        d, where, differ = _compare(together, i, other, row, f"sentence {i}")
        diffs.append((d, where))
        mismatches += differ
    worst, where = largest(diffs)
    return worst, where, mismatches


def _what(b: Batches) -> str:
    if b.tagger:
        return "log p over the tags at every word, ŷ and −log p(ŷ | x)"
    return "log p over the classes"


def check_batched(model: nn.Module, b: Batches, together: _Out, tol: float) -> Check:
    """1. Each sentence alone == the same sentence in the batch of all N."""
    worst, where, mismatches = _compare_all(
        together, [(_run(model, b, [i]), 0) for i in range(b.n)]
    )
    compared = f"{_what(b)}, {b.n} sentences in one padded batch vs alone"
    return Check("batched == unbatched", compared, worst, tol, mismatches, where)


def check_more_padding(
    model: nn.Module, b: Batches, together: _Out, tol: float, extra: int = 7
) -> Check:
    """2. ``extra`` more padded positions after every sentence change nothing."""
    padded = _run(model, b, list(range(b.n)), extra)
    worst, where, mismatches = _compare_all(together, [(padded, i) for i in range(b.n)])
    compared = f"{_what(b)}, the batch vs the batch with {extra} more padded positions"
    return Check("more padding changes nothing", compared, worst, tol, mismatches, where)


def readable_copy(model: nn.Module) -> nn.Module | None:
    """A copy whose every fused-capable ``Recurrent`` runs seqlab's step-by-step cells;
    None when the model has none (nothing to compare)."""
    twin = copy.deepcopy(model)
    layers = [m for m in twin.modules() if isinstance(m, Recurrent) and m.has_fused]
    for layer in layers:  # an instance attribute shadows the class's forward
        layer.forward = functools.partial(Recurrent.forward, layer, fused=False)
    return twin if layers else None


def check_fused(model: nn.Module, b: Batches, together: _Out, tol: float) -> Check | None:
    """3. The fused kernels == the readable cells, on the batch of all N."""
    twin = readable_copy(model)
    if twin is None:
        return None
    cells = _run(twin, b, list(range(b.n)))
    worst, where, mismatches = _compare_all(together, [(cells, i) for i in range(b.n)])
    compared = f"{_what(b)}: fused kernel vs step-by-step cells"
    return Check("fused == readable", compared, worst, tol, mismatches, where)


def check_viterbi_score(model: nn.Module, b: Batches, together: _Out, tol: float) -> Check | None:
    """4. CRF: Viterbi's score == s(x, ŷ) of its path, and log Z(x) ≥ s(x, ŷ), on the
    emissions of the batch of all N."""
    crf = getattr(model, "crf", None)
    if crf is None:
        return None
    P, mask = together.emissions, together.mask  # (B, T, K), (B, T)
    path, viterbi_score = crf.decode(P, mask)  # (B, T), (B,)
    s = crf.score(P, path, mask)  # (B,)
    log_z = crf.log_partition(P, mask)  # (B,)
    d = (viterbi_score.double() - s.double()).abs()  # (B,)
    over = (s - log_z).double().clamp(min=0.0)  # (B,) > 0 only if a path outweighs Z
    diffs = [(float(torch.maximum(d[i], over[i])), f"sentence {i}") for i in range(b.n)]
    worst, where = largest(diffs)
    compared = f"Viterbi's score vs s(x, ŷ), and log Z(x) ≥ s(x, ŷ), {b.n} sentences"
    return Check("Viterbi score == s(x, ŷ)", compared, worst, tol, 0, where)


@torch.no_grad()
def run_sentence_checks(
    model: nn.Module, batches: Batches, dtype: torch.dtype = torch.float64
) -> list[Check]:
    """The checks on the task's N sentences, the model copied to ``dtype`` in eval mode
    (the caller's model is not changed); ``fused == readable`` only for models with a
    fused-capable recurrent layer, the Viterbi check only for CRF taggers."""
    if dtype not in TOLERANCE:
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    if batches.n < 1:
        raise ValueError("run_sentence_checks needs at least one sentence")
    tol = TOLERANCE[dtype]
    m = copy.deepcopy(model).to(dtype).eval()
    together = _run(m, batches, list(range(batches.n)))
    checks: Sequence[Check | None] = [
        check_batched(m, batches, together, tol),
        check_more_padding(m, batches, together, tol),
        check_fused(m, batches, together, tol),
        check_viterbi_score(m, batches, together, tol),
    ]
    return [c for c in checks if c is not None]


def classify_batches(task: object, ids: list[list[int]], grams: list | None) -> Batches:
    """``Batches`` of a classify task's sentences (word ids, optional n-gram ids)."""

    def make(indices: list[int], extra: int) -> tuple[Inputs, Tensor]:
        g = None if grams is None else [grams[i] for i in indices]
        batch = task._batch([ids[i] for i in indices], [0] * len(indices), g)  # type: ignore[attr-defined]
        x = pad_positions(batch.x, extra, PAD_ID)  # (B, T + extra)
        mask = pad_positions(batch.mask, extra, False)  # (B, T + extra)
        if batch.grams is None:
            return (x, mask), mask
        return (x, mask, pad_positions(batch.grams, extra, 0)), mask  # grams (B, T', G)

    return Batches(make, len(ids), tagger=False)


def tag_batches(task: object, words: list, chars: list) -> Batches:
    """``Batches`` of a tag task's sentences (word ids, per word its character ids)."""

    def make(indices: list[int], extra: int) -> tuple[Inputs, Tensor]:
        gold = [[0] * len(words[i]) for i in indices]
        batch = task._batch([words[i] for i in indices], [chars[i] for i in indices], gold)  # type: ignore[attr-defined]
        w = pad_positions(batch.words, extra, PAD_ID)  # (B, T + extra)
        c = pad_positions(batch.chars, extra, PAD_ID)  # (B, T + extra, W)
        mask = pad_positions(batch.mask, extra, False)  # (B, T + extra)
        return (w, c, mask), mask

    return Batches(make, len(words), tagger=True)
