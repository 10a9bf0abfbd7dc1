"""Length-bucketed token-budget batches: deterministic, resumable in O(1), sharded over ranks.

``TokenBudgetBatcher`` is a batch sampler over example indices (pass it to
``torch.utils.data.DataLoader(batch_sampler=...)``). One epoch is built in four steps, each a
pure function of ``(seed, epoch)`` through a local ``numpy.random.Generator`` (the global
Python / NumPy / torch RNGs are never read or advanced):

1. drop examples longer than ``max_len`` (counted in ``dropped`` and logged once, never silent);
2. shuffle, then sort by length with the shuffle as tie-break, either over the whole epoch
   (``sort_window=None``) or inside consecutive windows of ``sort_window`` examples
   (``sort_window=1`` is plain random batching);
3. pack greedily, in that order, into batches whose padded size fits the budget:
   B · (max_b ℓ_src[b] + max_b ℓ_tgt[b]) ≤ max_tokens   (one-sided: B · max_b ℓ[b] ≤ max_tokens),
   and B ≤ max_sentences;
4. shuffle the order of the batches.

DDP: every rank builds the same global batch list (same seed, no communication). If its length
n is not a multiple of ``world_size`` W, ``uneven="pad"`` (default) appends the first
W − (n mod W) batches of the list again, ``uneven="drop"`` removes the last n mod W; either way
is logged. Rank r then takes batches r, r + W, r + 2W, …, so every rank has the same count.

Resume: ``state_dict()`` holds ``epoch`` and ``position`` (batches this rank has consumed in the
epoch); ``load_state_dict`` rebuilds the epoch's list and indexes into it, so resuming costs one
epoch build (O(N log N)), never a replay of batches or data. ``state_dict`` is JSON-serialisable
and carries the settings and a fingerprint of the lengths, which ``load_state_dict`` checks.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import torch

logger = logging.getLogger("seqlab.data")

LengthsLike = Sequence[int] | np.ndarray | torch.Tensor

STATE_VERSION = 1


class Dropped(NamedTuple):
    """Examples removed by the ``max_len`` filter: how many, and their indices (ascending)."""

    count: int
    indices: np.ndarray


@dataclass(frozen=True)
class _EpochPlan:
    order: np.ndarray  # (N_kept,) example indices in packing order
    offsets: np.ndarray  # (n + 1,) batch b is order[offsets[b]:offsets[b + 1]]
    rank_batches: np.ndarray  # batch ids for this rank, in the order they are yielded


def _as_lengths(x: LengthsLike, name: str) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one length per example), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, got {arr.min()} at {arr.argmin()}")
    return arr


def _positive(name: str, value: int | None, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class TokenBudgetBatcher:
    """Resumable, length-bucketed batch sampler with a padded-token budget.

    Args:
        lengths: (N,) source (or only) length of each example.
        max_tokens: budget on the padded size of a batch, B · (max ℓ_src + max ℓ_tgt).
        tgt_lengths: (N,) target lengths for two-sided (seq2seq) batches, or None.
        max_len: examples with a side longer than this are dropped (and counted); None keeps all.
        max_sentences: cap on B, or None.
        seed: with the epoch, the only source of randomness.
        shuffle: False gives a fixed order (sorted by length, batches in ascending length) for
            evaluation; True shuffles examples before sorting and batches after packing.
        sort_window: None sorts the whole epoch; k sorts within windows of k shuffled examples
            (more randomness, more padding); 1 is random batching.
        rank, world_size: DDP position; each rank gets every W-th batch of the global list.
        uneven: what to do when the global batch count is not a multiple of ``world_size``.

    Deviations: a length of 0 counts as 1 in the budget (an empty side still takes a row of
    padding). Sort key is (target length, source length, shuffled position), as in fairseq.
    """

    def __init__(
        self,
        lengths: LengthsLike,
        max_tokens: int,
        *,
        tgt_lengths: LengthsLike | None = None,
        max_len: int | None = None,
        max_sentences: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        sort_window: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        uneven: Literal["pad", "drop"] = "pad",
    ) -> None:
        src = _as_lengths(lengths, "lengths")
        tgt = None if tgt_lengths is None else _as_lengths(tgt_lengths, "tgt_lengths")
        if tgt is not None and tgt.shape != src.shape:
            raise ValueError(
                f"lengths and tgt_lengths differ in size: {src.size} vs {tgt.size} examples"
            )
        _positive("max_tokens", max_tokens, allow_none=False)
        _positive("max_len", max_len)
        _positive("max_sentences", max_sentences)
        _positive("sort_window", sort_window)
        _positive("world_size", world_size, allow_none=False)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if uneven not in ("pad", "drop"):
            raise ValueError(f"uneven must be 'pad' or 'drop', got {uneven!r}")

        self.max_tokens, self.max_len, self.max_sentences = max_tokens, max_len, max_sentences
        self.seed, self.shuffle, self.sort_window = int(seed), shuffle, sort_window
        self.rank, self.world_size, self.uneven = rank, world_size, uneven
        self.num_total = int(src.size)
        digest = hashlib.sha1(src.tobytes())
        if tgt is not None:
            digest.update(b"|" + tgt.tobytes())
        self._fingerprint = digest.hexdigest()

        too_long = np.zeros(src.shape, dtype=bool)
        if max_len is not None:
            too_long = src > max_len if tgt is None else (src > max_len) | (tgt > max_len)
        self.dropped = Dropped(int(too_long.sum()), np.flatnonzero(too_long))
        if self.dropped.count:
            logger.warning(
                "dropped %d of %d examples longer than max_len=%d (first indices: %s)",
                self.dropped.count,
                self.num_total,
                max_len,
                self.dropped.indices[:10].tolist(),
            )
        self._kept = np.flatnonzero(~too_long)  # (N_kept,) original example indices
        if self._kept.size == 0:
            raise ValueError(
                f"no examples left: all {self.num_total} are longer than max_len={max_len}"
            )
        self._a = np.maximum(src[self._kept], 1)  # (N_kept,) cost length, source side
        self._b = None if tgt is None else np.maximum(tgt[self._kept], 1)  # (N_kept,)
        single = self._a if self._b is None else self._a + self._b  # (N_kept,)
        worst = int(single.argmax())
        if single[worst] > max_tokens:
            raise ValueError(
                f"example {int(self._kept[worst])} alone has padded size {int(single[worst])} "
                f"> max_tokens={max_tokens}: raise max_tokens to at least {int(single[worst])} "
                f"or lower max_len so that it is dropped"
            )
        # A batch never holds more examples than fit with the shortest one.
        cap = max_tokens // int(single.min())
        self._cap = cap if max_sentences is None else min(cap, max_sentences)

        self.epoch = 0
        self.position = 0
        self._plan: _EpochPlan | None = None
        self._plan_epoch = -1

    # -- the epoch plan: a pure function of (seed, epoch) -------------------------------------

    def _build(self, epoch: int) -> _EpochPlan:
        rng = np.random.default_rng([self.seed, epoch])
        n = self._kept.size
        perm = rng.permutation(n) if self.shuffle else np.arange(n)  # (N_kept,)
        pos = np.arange(n)  # (N_kept,) shuffled position: the random tie-break
        window = (
            np.zeros(n, dtype=np.int64) if self.sort_window is None else pos // self.sort_window
        )
        keys = [pos, self._a[perm]] + ([] if self._b is None else [self._b[perm]]) + [window]
        local = perm[np.lexsort(keys)]  # (N_kept,) sorted by (window, tgt, src, pos)
        offsets = self._pack(local)  # (n + 1,)
        n_batches = offsets.size - 1
        batches = rng.permutation(n_batches) if self.shuffle else np.arange(n_batches)  # (n,)

        w = self.world_size
        rest = n_batches % w
        if rest:
            if self.uneven == "pad":
                batches = np.concatenate([batches, np.resize(batches, w - rest)])
                how = f"repeated the first {w - rest} batch(es)"
            else:
                batches = batches[: n_batches - rest]
                how = f"dropped the last {rest} batch(es)"
            logger.info(
                "epoch %d: %d batches do not split evenly over world_size=%d; %s so that every "
                "rank gets %d",
                epoch,
                n_batches,
                w,
                how,
                batches.size // w,
            )
        return _EpochPlan(self._kept[local], offsets, batches[self.rank :: w])

    def _pack(self, local: np.ndarray) -> np.ndarray:
        """Greedy packing in the given order; returns batch offsets, shape (n + 1,).

        The padded size of order[i : i + k] is k · (running max of ℓ_src + running max of
        ℓ_tgt), non-decreasing in k, so each batch end is one binary search (a loop over
        batches, not over examples).
        """
        a = self._a[local]  # (N_kept,)
        b = None if self._b is None else self._b[local]  # (N_kept,)
        n, offsets, i = a.size, [0], 0
        while i < n:
            k = min(self._cap, n - i)
            cost = np.maximum.accumulate(a[i : i + k])  # (k,)
            if b is not None:
                cost = cost + np.maximum.accumulate(b[i : i + k])  # (k,)
            cost = cost * np.arange(1, k + 1)  # (k,) padded size of the first 1..k examples
            i += int(np.searchsorted(cost, self.max_tokens, side="right"))
            offsets.append(i)
        return np.asarray(offsets, dtype=np.int64)

    def _current(self) -> _EpochPlan:
        if self._plan is None or self._plan_epoch != self.epoch:
            self._plan, self._plan_epoch = self._build(self.epoch), self.epoch
        return self._plan

    # -- sampler protocol ---------------------------------------------------------------------

    @property
    def num_examples(self) -> int:
        """Examples kept after the ``max_len`` filter."""
        return int(self._kept.size)

    def __len__(self) -> int:
        """Batches per epoch for this rank (may vary slightly by epoch with two sides/windows)."""
        return int(self._current().rank_batches.size)

    def __iter__(self) -> Iterator[list[int]]:
        """Yield this rank's remaining batches of the current epoch, then move to the next epoch.

        ``position`` counts a batch as consumed when it is yielded.
        """
        plan = self._current()
        while self.position < plan.rank_batches.size:
            b = int(plan.rank_batches[self.position])
            self.position += 1
            yield plan.order[plan.offsets[b] : plan.offsets[b + 1]].tolist()
        self.epoch, self.position = self.epoch + 1, 0

    def set_epoch(self, epoch: int) -> None:
        """Select ``epoch``; its position is reset unless it already is the current epoch."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if epoch != self.epoch:
            self.epoch, self.position = int(epoch), 0

    # -- resume -------------------------------------------------------------------------------

    def _settings(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "max_tokens": int(self.max_tokens),
            "max_len": None if self.max_len is None else int(self.max_len),
            "max_sentences": None if self.max_sentences is None else int(self.max_sentences),
            "shuffle": bool(self.shuffle),
            "sort_window": None if self.sort_window is None else int(self.sort_window),
            "world_size": int(self.world_size),
            "uneven": self.uneven,
            "num_examples": self.num_total,
            "lengths_sha1": self._fingerprint,
        }

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """JSON-serialisable state. ``position``: batches this rank has consumed in the epoch;
        pass the trainer's own count when a DataLoader prefetches ahead of training."""
        pos = self.position if position is None else int(position)
        return {
            "version": STATE_VERSION,
            "epoch": int(self.epoch),
            "position": pos,
            **self._settings(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Seek to ``state``'s epoch and position. The rank is not part of the state: every rank
        of a DDP run may load rank 0's state. Settings that change the batches must match."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported batcher state version {state.get('version')!r}")
        for key, mine in self._settings().items():
            if state.get(key) != mine:
                raise ValueError(
                    f"batcher state does not match this batcher: {key}={state.get(key)!r} in "
                    f"the checkpoint, {mine!r} here; resume with the same data and settings"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or position < 0:
            raise ValueError(f"invalid batcher state: epoch={epoch}, position={position}")
        self.epoch, self.position = epoch, 0
        if position > len(self):
            raise ValueError(
                f"batcher state position {position} is past the end of epoch {epoch} "
                f"({len(self)} batches on this rank)"
            )
        self.position = position
