"""Invariance checks a user runs on a trained translation model (``seqlab check``).

Each check computes one thing two ways that must agree by construction, and reports the
largest difference and where it is (USER-NEEDS §1, §2, §6; the test suite proves the
same properties on tiny models, this runs them on *your* checkpoint and data):

1. **cached == full forward.** log p(y_t | y_<t, x) from the incremental decoder
   (``init_state`` + ``step``: KV cache, recurrent state, ConvS2S input window) against
   the teacher-forced ``forward`` over the whole target, over the full vocabulary, at
   every position of the model's own beam output, the N sentences in one padded batch.
2. **padding changes nothing.** The teacher-forced log-probabilities of each sentence
   alone (no padding) against the same sentence inside the padded batch of all N.
3. **batched == unbatched.** Beam search (K, the run's length limits and penalties) over
   the N sentences in one batch against one sentence at a time: the same tokens, the
   same scores.
4. **beam 1 == greedy.** Beam search with K = 1 against greedy search, α = β = 0 (with a
   length penalty, K = 1 may keep searching after its first EOS and legitimately find a
   longer hypothesis that scores better; with α = 0 it cannot): the same tokens, the
   same log P(Y).
5. **search log P == forward log P.** The log P(Y) = Σ_t log p(y_t | y_<t, x) beam search
   reports for its best hypothesis against the same sum from the teacher-forced forward.

Differences are absolute, on log-probabilities (nats). The checks run in float64 by
default (``dtype``), where two correct paths differ by ~1e-12 and any mask, cache or
bookkeeping bug shows as ≥ 1e-3; in float32 (the precision most runs decode in) the
tolerance is 1e-3 and a token may flip at a near-tie (reported, as it is a real
difference a user would see).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.collate import collate_seq2seq, pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.decode.greedy import greedy
from seqlab.nn.masks import padding_mask
from seqlab.tasks.translation_eval import SearchSettings, batch_limits, coverage_of

__all__ = ["TOLERANCE", "Check", "Sources", "TeacherForced", "largest", "run_checks"]

TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-3}

Ids = Sequence[int]
Srcs = Sequence[Ids]  # id sequences, one per sentence


@dataclass
class Check:
    """One check's outcome: ``max_diff`` the largest absolute difference (nats), at
    ``worst`` (which sentence and position); ``mismatches`` outputs whose tokens differ."""

    name: str
    compared: str
    max_diff: float
    tol: float
    mismatches: int = 0
    worst: str = ""

    @property
    def passed(self) -> bool:
        return self.mismatches == 0 and self.max_diff <= self.tol  # NaN fails

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


@dataclass
class _Output:
    """A search's best hypothesis per sentence: tokens (EOS included when emitted),
    log P(Y), the search's score."""

    tokens: list[list[int]]
    log_probs: list[float]
    scores: list[float]


@dataclass
class TeacherForced:
    """Teacher-forced log p at every target position of a batch, and where its rows end.

    Shapes: log_p (B, T, V') float64; y_in, y_out (B, T) long; lengths (B,) = m_b + 1
    """

    log_p: Tensor
    y_in: Tensor
    y_out: Tensor
    lengths: list[int]
    src_len: int


class Sources:
    """The sentences the checks run on, for a model with the plain translation contract
    (``encode(src, src_mask)``, ``forward(src, src_mask, y_in, tgt_mask)`` -> logits):
    source id sequences ending in EOS. A model with more inputs (the pointer-generator's
    extended vocabulary) subclasses it (``seqlab.eval.copy_invariants``)."""

    #: the smallest p whose log p "eager == exported" compares (0: all of V; logits)
    export_floor = 0.0

    def __init__(self, items: Sequence[Any], coverage_penalty: float = 0.0) -> None:
        self.items = list(items)
        self.coverage_penalty = coverage_penalty

    def __len__(self) -> int:
        return len(self.items)

    def one(self, i: int) -> Sources:
        """Sentence i alone."""
        other = copy.copy(self)
        other.items = [self.items[i]]
        return other

    def src_ids(self, item: Any) -> Ids:
        return item

    def encode(self, model: nn.Module) -> tuple[Any, Tensor]:
        """Pad, encode, build the decoder state.  src (B, S), src_mask (B, S)."""
        device = next(model.parameters()).device
        src, lengths = pad_batch([self.src_ids(e) for e in self.items], PAD_ID)  # (B, S), (B,)
        src, src_mask = src.to(device), padding_mask(lengths).to(device)  # (B, S), (B, S)
        return model.init_state(model.encode(src, src_mask), src_mask), src_mask

    def forward(self, model: nn.Module, targets: Srcs) -> TeacherForced:
        """Teacher-forced log p over V at every target position (targets without EOS)."""
        device = next(model.parameters()).device
        pairs = list(zip(self.items, targets))
        b = collate_seq2seq(pairs, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)
        src, src_mask = b.src.to(device), b.src_mask.to(device)  # (B, S)
        y_in, tgt_mask = b.y_in.to(device), b.tgt_mask.to(device)  # (B, T)
        logits = model(src, src_mask, y_in, tgt_mask)  # (B, T, V)
        log_p = torch.log_softmax(logits.double(), dim=-1)  # (B, T, V)
        return TeacherForced(log_p, b.y_in, b.y_out, b.tgt_lengths.tolist(), b.src.size(1))

    def width(self, i: int) -> int | None:
        """How many output columns of sentence i mean the same alone and in a batch (None:
        all; the extended vocabulary grows with the batch's source OOVs)."""
        return None

    def decoder(self, model: nn.Module) -> Any:
        """What the searches call ``step`` on (a decode-time wrapper, or the model)."""
        return model

    def search_log_p(self, log_p: Tensor) -> Tensor:
        """The distribution the search decodes from, given the model's.  (..., V')."""
        return log_p

    def coverage(self, model: nn.Module) -> Any:
        beta = self.coverage_penalty
        return coverage_of(model, beta) if beta > 0 else None


def _search(
    model: nn.Module, sources: Sources, settings: SearchSettings, use_greedy: bool = False
) -> _Output:
    """Greedy, or beam search with ``settings``, over ``sources`` as one batch."""
    state, src_mask = sources.encode(model)
    B = len(sources)
    n_src = [len(sources.src_ids(e)) - 1 for e in sources.items]
    limit = batch_limits(n_src, settings).to(src_mask.device)  # (B,)
    dec = sources.decoder(model)
    if use_greedy:
        r = greedy(dec, state, B, BOS_ID, EOS_ID, max_len=limit, pad_id=PAD_ID)
        tokens, lengths, logp, score = r.tokens, r.lengths, r.log_probs, r.scores  # (B, T), (B,)
    else:
        cov = settings.coverage_penalty
        r = beam_search(
            dec, state, B, BOS_ID, EOS_ID, max_len=limit, beam_size=settings.beam,
            alpha=settings.length_penalty, pad_id=PAD_ID, coverage_penalty=cov,
            coverage=sources.coverage(model) if cov > 0 else None,
        )  # fmt: skip
        tokens, lengths = r.tokens[:, 0], r.lengths[:, 0]  # (B, T), (B,)
        logp, score = r.log_probs[:, 0], r.scores[:, 0]  # (B,), (B,)
    rows = [row[:n] for row, n in zip(tokens.tolist(), lengths.tolist())]
    return _Output(rows, logp.double().tolist(), score.double().tolist())


def _targets(hyps: Srcs) -> list[list[int]]:
    """A hypothesis without its EOS (``collate_seq2seq`` appends one to y_out)."""
    return [list(h[:-1]) if h and h[-1] == EOS_ID else list(h) for h in hyps]


def _cached_log_probs(model: nn.Module, sources: Sources, y_in: Tensor) -> Tensor:
    """The model's log p through ``step``, one position at a time.  y_in (B, T) -> (B, T, V')."""
    state, src_mask = sources.encode(model)
    y_in = y_in.to(src_mask.device)
    out = []
    for t in range(y_in.size(1)):
        logits, state = model.step(y_in[:, t], state)  # (B, V')
        out.append(torch.log_softmax(logits.double(), dim=-1))
    return torch.stack(out, dim=1)  # (B, T, V')


def largest(diffs: Sequence[tuple[float, str]]) -> tuple[float, str]:
    """The largest difference and its place; NaN counts as the largest."""
    worst, where = 0.0, ""
    for d, place in diffs:
        if math.isnan(d) or d > worst:
            worst, where = d, place
            if math.isnan(d):
                break
    return worst, where


def check_cached(model: nn.Module, sources: Sources, hyps: Srcs, tol: float) -> Check:
    """1. ``step`` one position at a time == ``forward`` over the whole target, on the
    hypotheses ``hyps`` (EOS included), the sources in one padded batch for both."""
    full = sources.forward(model, _targets(hyps))  # (B, T, V')
    step = _cached_log_probs(model, sources, full.y_in)  # (B, T, V')
    diffs = []
    for i, n in enumerate(full.lengths):
        d = (full.log_p[i, :n] - step[i, :n]).abs().amax(dim=-1)  # (n,)
        t = int(d.argmax())
        diffs.append((float(d[t]), f"sentence {i}, target position {t + 1}"))
    worst, where = largest(diffs)
    compared = f"log p over V at {sum(full.lengths)} target positions"
    return Check("cached == full forward", compared, worst, tol, worst=where)


def check_padding(model: nn.Module, sources: Sources, hyps: Srcs, tol: float) -> Check:
    """2. Teacher-forced log p of each (source, hypothesis) alone == inside the batch."""
    targets = _targets(hyps)
    batched = sources.forward(model, targets)  # (B, T, V')
    diffs = []
    for i, n in enumerate(batched.lengths):
        alone = sources.one(i).forward(model, [targets[i]]).log_p[0]  # (n, V'_i)
        w = sources.width(i)
        d = (batched.log_p[i, :n, :w] - alone[:, :w]).abs().amax(dim=-1)  # (n,)
        t = int(d.argmax())
        diffs.append((float(d[t]), f"sentence {i}, target position {t + 1}"))
    worst, where = largest(diffs)
    S, T = batched.src_len, batched.y_in.size(1)
    compared = f"log p over V, {len(sources)} sentences alone vs padded to S={S}, T={T}"
    return Check("padding changes nothing", compared, worst, tol, worst=where)


def _compare(name: str, compared: str, a: _Output, b: _Output, field: str, tol: float) -> Check:
    """Tokens must be equal; ``field`` (scores or log_probs) within ``tol``."""
    mismatched = [i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y]
    same = [i for i in range(len(a.tokens)) if i not in set(mismatched)]
    va, vb = getattr(a, field), getattr(b, field)
    worst, where = largest([(abs(va[i] - vb[i]), f"sentence {i}") for i in same])
    if mismatched:
        where = f"tokens differ in sentences {', '.join(map(str, mismatched[:10]))}" + (
            f"; largest {field} difference at {where}" if where else ""
        )
    return Check(name, compared, worst, tol, len(mismatched), where)


def check_batched(
    model: nn.Module, sources: Sources, settings: SearchSettings, batched: _Output, tol: float
) -> Check:
    """3. Beam search over each source alone == its row of ``batched`` (the same search
    over all sources at once): tokens equal, scores within ``tol``."""
    alone = [_search(model, sources.one(i), settings) for i in range(len(sources))]
    single = _Output(*([o.tokens[0] for o in alone], [o.log_probs[0] for o in alone],
                       [o.scores[0] for o in alone]))  # fmt: skip
    return _compare(f"batched == unbatched (beam {settings.beam})",
                    f"{len(sources)} outputs in one batch vs one at a time: tokens, score",
                    batched, single, "scores", tol)  # fmt: skip


def check_beam_one(
    model: nn.Module, sources: Sources, settings: SearchSettings, tol: float
) -> Check:
    """4. Beam search with K = 1 == greedy (α = β = 0; ``settings``' length limits)."""
    one = SearchSettings(beam=1, max_len_a=settings.max_len_a, max_len_b=settings.max_len_b,
                         length_penalty=0.0, coverage_penalty=0.0)  # fmt: skip
    beam = _search(model, sources, one)
    plain = _search(model, sources, one, use_greedy=True)
    return _compare("beam 1 == greedy", f"{len(sources)} outputs (α = β = 0): tokens, log P(Y)",
                    beam, plain, "log_probs", tol)  # fmt: skip


def check_search_log_prob(model: nn.Module, sources: Sources, out: _Output, tol: float) -> Check:
    """5. The log P(Y) beam search reported == Σ_t log p(y_t | y_<t, x) from ``forward``
    (through the decode-time rule the search uses, ``Sources.search_log_p``)."""
    full = sources.forward(model, _targets(out.tokens))  # (B, T, V')
    log_p = sources.search_log_p(full.log_p)  # (B, T, V')
    picked = log_p.gather(2, full.y_out.to(log_p.device)[..., None])[..., 0]  # (B, T)
    diffs = []
    for i, hyp in enumerate(out.tokens):
        n = len(hyp)  # |Y|: EOS counted when the search emitted it
        diffs.append((abs(float(picked[i, :n].sum()) - out.log_probs[i]), f"sentence {i}"))
    worst, where = largest(diffs)
    return Check("search log P == forward log P",
                 f"{len(sources)} beam outputs: reported log P(Y) vs Σ_t log p",
                 worst, tol, worst=where)  # fmt: skip


@torch.no_grad()
def run_checks(
    model: nn.Module,
    sources: Sources | Srcs,
    settings: SearchSettings,
    dtype: torch.dtype = torch.float64,
) -> list[Check]:
    """The five checks on ``sources`` (a ``Sources``, or id sequences ending in EOS), the
    model copied to ``dtype`` and put in eval mode (the caller's model is not changed)."""
    if not isinstance(sources, Sources):
        sources = Sources(sources, settings.coverage_penalty)
    if not len(sources):
        raise ValueError("run_checks needs at least one source sentence")
    if dtype not in TOLERANCE:
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    tol = TOLERANCE[dtype]
    m = copy.deepcopy(model).to(dtype).eval()
    out = _search(m, sources, settings)
    return [
        check_cached(m, sources, out.tokens, tol),
        check_padding(m, sources, out.tokens, tol),
        check_batched(m, sources, settings, out, tol),
        check_beam_one(m, sources, settings, tol),
        check_search_log_prob(m, sources, out, tol),
    ]
