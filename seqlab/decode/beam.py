"""Batched beam search with the GNMT length penalty and an exact stop rule.

One search serves every model (DESIGN §6): the decoder is called on K rows per input
(hypothesis k of input b in row b·K + k; the first step, where only slot 0 is live, on
the B inputs alone; inputs that are done leave the batch); candidate selection is one
vectorised
top-k over the K·V extensions of each input, and bookkeeping (back-pointers, the
finished set) is separate from it. docs/decoding.md states the rules; in short:

- Extensions are ranked by raw log P (as in Sutskever et al. 2014, Wu et al. 2016):
  the 2K best of the K·V; an EOS extension among the K best *finishes* (|Y| counts that
  EOS); the K best non-EOS extensions stay *live*. With K = 1 and α = 0 this is greedy
  search, token for token.
- Finished hypotheses are ranked by score(Y) = log P(Y) / lp(Y), lp(Y) = ((5+|Y|)/6)^α;
  each input keeps its n_best best (ties: the earlier found stays ahead). With a
  coverage penalty β > 0 (``coverage_penalty``, for a model that reports its attention
  coverage) the score adds GNMT's cp(X; Y) ≤ 0 (``gnmt_coverage_penalty``).
- Each input b has its own limit L_b (``max_len``: one int for all, or (B,) per input,
  e.g. translation's ⌊a·|x| + b⌋); the loop runs to max_b L_b.
- Stop rule, per input b: stop when b has n_best finished hypotheses and no live one can
  beat the worst of them, i.e. max_h bound(s_h) ≤ worst kept score, with
  bound(s) = max(s / lp(t+1), s / lp(L_b)) (``best_possible_score``: for α > 0 the
  penalty still grows, so a live hypothesis can rise to s / lp(L_b)). At t = L_b the
  live hypotheses are finalised as they are (no EOS). The rule is exact: stopping never
  changes the result of running every input to its limit (``stop_early=False``, tested;
  cp ≤ 0, so the bound holds with the coverage penalty too),
  and n_best never changes the 1-best. An input's result is the one it gets decoded
  alone with max_len = L_b (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from seqlab.decode.greedy import MaxLen, limit_meta, row_limits
from seqlab.decode.scoring import (
    GNMT_FORMULA,
    best_possible_score,
    forbid_eos,
    gnmt_coverage_penalty,
    next_log_probs,
    penalised_score,
)
from seqlab.decode.state import (
    DecodeResult,
    StepDecoder,
    drop_done_inputs,
    reorder_state,
    repeat_rows,
    state_device,
)
from seqlab.decode.top_extensions import top_extensions
from seqlab.nn.packed_linear import with_packed_linears
from seqlab.registry import SEARCHES

STOP_RULE = (
    "per input: stop when it has n_best finished hypotheses and "
    "max_live max(s/lp(t+1), s/lp(max_len)) <= its worst kept score (s = raw log P of a "
    "live hypothesis after t tokens, max_len = the input's own limit); else at its "
    "max_len, finalising live hypotheses as-is"
)


@dataclass
class Candidates:
    """Candidate selection of one step: the 2K best extensions of each input, best first.

    Shapes:
        log_prob: (B, 2K) raw log P(y_1 … y_t) of the extended hypothesis
        beam:     (B, 2K) long, slot k ∈ [0, K) of the live hypothesis it extends
        token:    (B, 2K) long, the appended token y_t
        finishes: (B, 2K) bool, EOS extension ranked among the K best (and finite)
        live:     (B, K) long, positions of the K best non-EOS extensions, best first
    """

    log_prob: Tensor
    beam: Tensor
    token: Tensor
    finishes: Tensor
    live: Tensor

    def for_inputs(self, active: Tensor, batch_size: int) -> Candidates:
        """These candidates of the A ``active`` inputs placed in rows ``active`` of a B-row
        set; the other (done, dropped) inputs get empty candidates: log P −∞, slot 0,
        token 0, nothing finishes. The bookkeeping masks done inputs anyway.

        Shapes: active (A,) long, every field (A, ·) -> (B, ·)
        """
        if active.numel() == batch_size:  # nothing dropped yet: active = 0 … B − 1
            return self
        K = self.live.size(1)

        def place(x: Tensor, empty: Tensor) -> Tensor:
            out = empty.expand(batch_size, x.size(1)).clone()  # (B, ·)
            out[active] = x
            return out

        ref = self.log_prob
        return Candidates(
            place(ref, ref.new_full((1, 1), float("-inf"))),
            place(self.beam, self.beam.new_zeros(1, 1)),
            place(self.token, self.token.new_zeros(1, 1)),
            place(self.finishes, self.finishes.new_zeros(1, 1)),
            place(self.live, torch.arange(K, device=ref.device)[None]),
        )


def select_candidates(live_log_prob: Tensor, log_p: Tensor, eos_id: int) -> Candidates:
    """Rank the K·V one-token extensions of the live hypotheses by raw log-probability.

        log P(y_≤t) = log P(y_<t) + log p(y_t | y_<t)

    At most K of the K·V extensions end in EOS (one per slot), so the 2K best hold at
    least K non-EOS ones: the live set never shrinks.

    Shapes: live_log_prob (B, K) (−∞ for an empty slot), log_p (B, K, V), V ≥ 2
            -> Candidates
    """
    B, K, V = log_p.shape
    if V < 2:
        raise ValueError(f"beam search needs a vocabulary of at least 2 tokens, got V={V}")
    # The 2K best of live_log_prob[:, k] + log_p[:, k, j], found through chunk maxima.
    top, index = top_extensions(live_log_prob, log_p, 2 * K)  # (B, 2K), (B, 2K) best first
    beam = torch.div(index, V, rounding_mode="floor")  # (B, 2K)
    token = index % V  # (B, 2K)
    is_eos = token == eos_id  # (B, 2K)
    rank = torch.arange(2 * K, device=log_p.device)  # (2K,)
    finishes = is_eos & (rank < K) & torch.isfinite(top)  # (B, 2K)
    # Distinct keys, non-EOS first in rank order: the first K are the K best non-EOS.
    key = rank + is_eos.long() * (2 * K)  # (B, 2K)
    live = key.argsort(dim=1)[:, :K]  # (B, K)
    return Candidates(top, beam, token, finishes, live)


@dataclass
class Finished:
    """Bookkeeping: the n_best best finished hypotheses of each input so far, best first.

    ``parent`` is the live slot, at step |Y| − 1, that the last token extends (the rest of
    the tokens are recovered from the back-pointers). Empty entries have valid = False,
    score −∞ and length 0.

    Shapes: every field (B, N)
    """

    score: Tensor
    log_prob: Tensor
    length: Tensor
    last_token: Tensor
    parent: Tensor
    valid: Tensor

    @classmethod
    def empty(cls, B: int, N: int, dtype: torch.dtype, device: torch.device) -> Finished:
        minus_inf = torch.full((B, N), float("-inf"), dtype=dtype, device=device)  # (B, N)
        zeros = torch.zeros(B, N, dtype=torch.long, device=device)  # (B, N)
        invalid = torch.zeros(B, N, dtype=torch.bool, device=device)  # (B, N)
        return cls(minus_inf, minus_inf.clone(), zeros, zeros.clone(), zeros.clone(), invalid)

    def add(
        self,
        log_prob: Tensor,
        length: int,
        last_token: Tensor,
        parent: Tensor,
        valid: Tensor,
        alpha: float,
        penalty: Tensor | None = None,
    ) -> Finished:
        """Merge M new hypotheses of length ``length``; keep the N best by penalised score
        log P / lp, plus ``penalty`` (the coverage penalty cp ≤ 0) where given.

        Shapes: log_prob, last_token, parent, valid, penalty (B, M) -> Finished (B, N)
        """
        N = self.score.size(1)
        score = penalised_score(log_prob, length, alpha)  # (B, M)
        if penalty is not None:
            score = score + penalty.to(score.dtype)  # (B, M)
        score = score.masked_fill(~valid, float("-inf"))  # (B, M)
        lengths = torch.full_like(parent, length)  # (B, M)
        merged = [
            torch.cat([old, new], dim=1)  # (B, N + M)
            for old, new in zip(
                (self.score, self.log_prob, self.length, self.last_token, self.parent, self.valid),
                (score, log_prob, lengths, last_token, parent, valid),
            )
        ]
        # Stable: on equal scores the hypothesis found earlier (listed first) stays ahead.
        order = merged[0].argsort(dim=1, descending=True, stable=True)[:, :N]  # (B, N)
        return Finished(*(x.gather(1, order) for x in merged))

    def cannot_improve(self, bound: Tensor) -> Tensor:
        """The stop test: N finished and bound ≤ the worst kept score.  (B,) -> (B,) bool."""
        return self.valid.all(dim=1) & (bound <= self.score[:, -1])  # (B,)


@dataclass
class BackPointers:
    """Bookkeeping: per step t, each live slot's token y_t and the slot it came from.

    Shapes: tokens[t−1], parents[t−1] (B, K) for steps t = 1 …
    """

    tokens: list[Tensor] = field(default_factory=list)
    parents: list[Tensor] = field(default_factory=list)

    def push(self, token: Tensor, parent: Tensor) -> None:
        self.tokens.append(token)
        self.parents.append(parent)

    def backtrace(self, finished: Finished, pad_id: int) -> Tensor:
        """The token sequences of the finished hypotheses, ``pad_id`` after |Y|.

        Follows the back-pointers from step |Y| − 1 down to 1, all hypotheses at once
        (a hypothesis joins when the step index reaches its own length).

        Shapes: finished (B, N) -> (B, N, T), T = the longest |Y|
        """
        n = finished.length.masked_fill(~finished.valid, 0)  # (B, N)
        T = int(n.max().item()) if n.numel() else 0
        position = torch.arange(T, device=n.device)  # (T,)
        out = torch.full((*n.shape, T), pad_id, dtype=torch.long, device=n.device)  # (B, N, T)
        at_end = position == (n - 1)[:, :, None]  # (B, N, T)
        out = torch.where(at_end, finished.last_token[:, :, None], out)  # (B, N, T)
        slot = finished.parent  # (B, N), the slot at step |Y| − 1
        for s in range(T - 1, 0, -1):
            active = n > s  # (B, N)
            y_s = self.tokens[s - 1].gather(1, slot)  # (B, N)
            out[:, :, s - 1] = torch.where(active, y_s, out[:, :, s - 1])  # (B, N)
            slot = torch.where(active, self.parents[s - 1].gather(1, slot), slot)  # (B, N)
        return out


@torch.no_grad()
@with_packed_linears  # docs/perf-notes-decoding.md §34
def beam_search(
    decoder: StepDecoder,
    state: Any,
    batch_size: int,
    bos_id: int,
    eos_id: int,
    max_len: MaxLen,
    beam_size: int = 4,
    n_best: int = 1,
    alpha: float = 0.0,
    min_len: int = 0,
    pad_id: int = 0,
    stop_early: bool = True,
    compact_done: bool = True,
    coverage_penalty: float = 0.0,
    coverage: Callable[[Any], tuple[Tensor, Tensor]] | None = None,
) -> DecodeResult:
    """Beam search (width K = ``beam_size``) ranking finished hypotheses by GNMT's
    score(Y) = log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, §7).

    Only slot 0 of each input is live at t = 1 (the others start at log P = −∞, so no
    hypothesis is found twice), so the first step runs on the B inputs themselves; the
    state is then expanded once to B·K rows (``repeat_rows``) and reordered after every
    later step to the surviving hypotheses (``reorder_state(..., within_inputs=True)``:
    rows stay within their input's block, so static state fields are not copied).
    ``max_len``: an int for every input, or a (B,) tensor of per-input limits L_b; input
    b is finalised at t = L_b, exactly as if decoded alone with max_len = L_b, and the
    loop runs to max_b L_b.
    ``min_len``: EOS is forbidden at steps t ≤ min_len (≤ every L_b).
    ``stop_early=False`` runs every input to its limit (same result, slower: the stop
    rule is exact). ``compact_done`` drops the rows of inputs that are done (stopped or
    at their limit) from the decoder's batch once they are an eighth of it
    (``drop_done_inputs``; the same results as ``compact_done=False``, which keeps every
    input's K rows to the end, up to the batch's floating-point effects; tested). See the
    module docstring and docs/decoding.md for the selection and stop rules.

    ``coverage_penalty`` β > 0 adds GNMT's coverage penalty to the score of a finished
    hypothesis, score(Y) = log P(Y) / lp(Y) + cp(X; Y), cp = β Σ_i log min(Σ_j p_ij, 1)
    (Wu et al. 2016, §7; ``gnmt_coverage_penalty``). It needs ``coverage``: a function of
    the state after a step that returns, per row, the attention each source position has
    received over the steps so far, that step included, and the source mask, both
    (rows, S) (e.g. ``PointerGenerator.attention_coverage``). A hypothesis' cp is read
    from the row it extends, at the step that finishes it.

    Deviations: candidates are ranked by raw log P; the length and coverage penalties
    only rank finished hypotheses (as GNMT, fairseq, OpenNMT-py).

    Shapes:
        state:   from the model's ``init_state``, batch B = ``batch_size``
        max_len: int, or (B,) long
        returns: DecodeResult with tokens (B, N, T), lengths (B, N) (EOS counted),
                 scores = log P / lp (+ cp) (B, N) sorted best first, log_probs = log P (B, N);
                 N = ``n_best`` ≤ K
    """
    if beam_size < 1 or not 1 <= n_best <= beam_size:
        raise ValueError(f"need 1 <= n_best <= beam_size, got {n_best=} {beam_size=}")
    if not 0.0 <= coverage_penalty < float("inf"):
        raise ValueError(
            f"coverage_penalty must be a finite number >= 0 (0 = off), got {coverage_penalty}"
        )
    if coverage_penalty > 0.0 and coverage is None:
        raise ValueError(
            "coverage_penalty > 0 needs the model's attention coverage: pass coverage="
            "a function of the decoder state returning (coverage (rows, S), source mask)"
        )
    B, K, N = batch_size, beam_size, n_best
    device = state_device(state)
    limit = row_limits(max_len, min_len, B, device)  # (B,) L_b
    limit_steps = set(limit.tolist())  # the steps t at which some input reaches its limit
    # Step 1 runs on the B inputs: only slot 0 is live then, and the K rows of an input
    # would be identical; the state is expanded to B·K rows after it.
    y_prev = torch.full((B,), bos_id, dtype=torch.long, device=device)  # (B,) at t = 1
    live_log_prob = torch.full((B, K), float("-inf"), device=device)  # (B, K)
    live_log_prob[:, 0] = 0.0
    history = BackPointers()
    finished: Finished | None = None
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
    # The inputs whose rows are in the state (all until one is done and compacted away).
    active = torch.arange(B, device=device)  # (A,)
    t = 0
    # A compiled step can select inside its graph (seqlab.decode.compiled.select_step, off
    # by default): from t = 2 on (t = 1 expands slot 0), when no coverage penalty reads
    # the state; it answers None when off.
    select_step = getattr(decoder, "select_step", None)
    for t in range(1, int(limit.max()) + 1):
        A = active.numel()
        fused = None  # (the Candidates fields, the state) where the step's graph selected
        if select_step is not None and t > 1 and coverage_penalty == 0.0:
            fused = select_step(y_prev, live_log_prob, active, eos_id, state, t <= min_len)
        if fused is None:
            log_p, state = next_log_probs(decoder, y_prev, state)  # (A·K, V); (B, V) at t = 1
            if t <= min_len:
                log_p = forbid_eos(log_p, eos_id)  # (A·K, V)
            if t == 1:  # every slot of an input sees the same distribution (slot 0's)
                log_p = log_p[:, None].expand(B, K, log_p.size(-1))  # (B, K, V)
            log_p = log_p.reshape(A, K, -1)  # (A, K, V)
            if finished is None:
                finished = Finished.empty(B, N, log_p.dtype, device)
                live_log_prob = live_log_prob.to(log_p.dtype)  # (B, K)
            cand = select_candidates(live_log_prob[active], log_p, eos_id)
        else:
            cand, state = Candidates(*fused[0]), fused[1]
        # Candidate selection, for the active inputs; the others get empty candidates.
        cand = cand.for_inputs(active, B)
        assert finished is not None  # t = 1 always takes the path above
        cp = None  # (B, K) the coverage penalty of each slot's hypothesis after this step
        if coverage_penalty > 0.0:
            assert coverage is not None
            cp = _slot_coverage_penalty(state, coverage, coverage_penalty, t, active, B, K)

        # Bookkeeping: finished set, then the new live set and its back-pointers.
        open_rows = ~done[:, None]  # (B, 1)
        finished = finished.add(
            cand.log_prob,
            t,
            cand.token,
            cand.beam,
            cand.finishes & open_rows,
            alpha,
            None if cp is None else cp.gather(1, cand.beam),
        )
        live_log_prob = cand.log_prob.gather(1, cand.live)  # (B, K)
        live_beam = cand.beam.gather(1, cand.live)  # (B, K)
        live_token = cand.token.gather(1, cand.live)  # (B, K)
        history.push(live_token, live_beam)
        if t in limit_steps:  # finalise the live hypotheses of inputs at their limit as-is
            at_limit = limit == t  # (B,)
            keep = torch.isfinite(live_log_prob) & open_rows & at_limit[:, None]  # (B, K)
            penalty = None if cp is None else cp.gather(1, live_beam)  # (B, K)
            finished = finished.add(live_log_prob, t, live_token, live_beam, keep, alpha, penalty)
            done = done | at_limit  # (B,)
        if stop_early:  # cp ≤ 0 never makes a live hypothesis score above this bound
            best_live = live_log_prob.max(dim=1).values  # (B,)
            bound = best_possible_score(best_live, t, limit, alpha)  # (B,)
            done = done | finished.cannot_improve(bound)  # (B,)
        n_done = int(done[active].sum())  # the step's one host sync; dropped inputs are done
        if n_done == A:
            break
        if t == 1:  # B -> B·K rows, row b·K + k = input b; every slot extends slot 0
            state = repeat_rows(state, B, K, device)  # batch B·K
        else:  # a·K + k -> a·K + k' (live_beam ∈ [0, K)): static fields are not copied.
            index = (torch.arange(A, device=device)[:, None] * K + live_beam[active]).view(-1)
            state = reorder_state(state, index, within_inputs=True)  # batch A·K
        y_prev = live_token[active].view(-1)  # (A·K,)
        if compact_done:
            state, y_prev, active = drop_done_inputs(state, y_prev, active, done, K, n_done)

    assert finished is not None  # every limit >= 1
    tokens = history.backtrace(finished, pad_id)  # (B, N, T)
    lengths = finished.length.masked_fill(~finished.valid, 0)  # (B, N)
    meta = {
        "search": "beam",
        "beam_size": K,
        "n_best": N,
        "alpha": alpha,
        "max_len": limit_meta(max_len),
        "min_len": min_len,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "score": GNMT_FORMULA + (" + cp(X; Y)" if coverage_penalty > 0.0 else ""),
        "coverage_penalty": coverage_penalty,
        "stop_rule": STOP_RULE,
        "stop_early": stop_early,
        "steps": t,
    }
    return DecodeResult(tokens, lengths, finished.score, finished.log_prob, meta)


def _slot_coverage_penalty(
    state: Any,
    coverage: Callable[[Any], tuple[Tensor, Tensor]],
    beta: float,
    t: int,
    active: Tensor,
    B: int,
    K: int,
) -> Tensor:
    """cp of every slot's hypothesis after step t, from the decoder's rows: (B, K).

    The rows are the B inputs at t = 1 (every slot of an input then extends slot 0) and
    the A·K hypotheses of the ``active`` inputs after it; dropped inputs get 0 (nothing of
    theirs is added any more).

    Shapes: coverage(state) -> (rows, S), (rows, S) bool; active (A,) -> (B, K)
    """
    cov, mask = coverage(state)  # (rows, S), (rows, S)
    cp = gnmt_coverage_penalty(cov, mask, beta)  # (rows,)
    if t == 1:
        return cp[:, None].expand(B, K)  # (B, K)
    cp = cp.view(active.numel(), K)  # (A, K)
    if active.numel() == B:
        return cp
    full = cp.new_zeros(B, K)  # (B, K)
    full[active] = cp
    return full


@dataclass(frozen=True)
class BeamConfig:
    """Settings of ``beam_search`` (the ids come from the vocabulary, not the config)."""

    max_len: int = 200
    min_len: int = 0
    beam_size: int = 4
    n_best: int = 1
    alpha: float = 0.0


SEARCHES.register("beam", BeamConfig)(beam_search)
