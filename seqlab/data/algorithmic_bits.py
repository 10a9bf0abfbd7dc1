"""Seeded bit-sequence tasks of the Neural Turing Machine paper (Graves et al. 2014 §4):
copy, repeat copy, associative recall and priority sort, and an endless batch stream.

Every example is a pair of sequences over the same T steps: inputs x ∈ {0,1}^{T×D_in}
(plus a few scalar channels) and targets y ∈ {0,1}^{T×D_out}, with an output mask that is
True on the steps where the model must answer (the loss and the bit errors count only
those). During the output phase the input is all zero. With width W (bits per vector):

copy (length L; D_in = W + 1, D_out = W; T = 2L + 1)
    t < L: the L random vectors;  t = L: delimiter channel W = 1;
    t = L + 1 … 2L: target = the L vectors again (mask True).
repeat_copy (length L, n repeats; D_in = W + 2, D_out = W + 1; T = L + 2 + nL)
    t < L: the vectors;  t = L: delimiter channel W = 1 and channel W + 1 = the repeat
    count n normalised to mean 0, variance 1 over the training range (as the paper);
    t = L + 1 … L + nL: the vectors n times;  t = L + 1 + nL: end marker (output W = 1).
recall (length = n items of K vectors; D_in = W + 2, D_out = W; T = (n + 1)(K + 1) + K + 1)
    each item: one step with item delimiter W = 1, then its K vectors; then the query:
    a step with query delimiter W + 1 = 1, the K vectors of item q (q < n − 1, uniform),
    the query delimiter again; then target = item q + 1 (K steps, mask True).
priority_sort (length = n inputs, n_out = round(keep·n) outputs; D_in = W + 2,
    D_out = W; T = n + 1 + n_out)
    t < n: a vector and its priority ∈ U(−1, 1) on channel W;  t = n: delimiter W + 1;
    t = n + 1 …: the n_out highest-priority vectors, highest first (paper: 20 in, 16 out).

Sequences of one batch share L (and n items / inputs); repeat copy draws n per sequence,
so its batches are padded at the end (mask False there). Generation is a pure function
of a numpy Generator, so a seed fixes every batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor

from seqlab.data.batching import Dropped

Problem = Literal["copy", "repeat_copy", "recall", "priority_sort"]
PROBLEMS: tuple[str, ...] = get_args(Problem)

__all__ = [
    "PROBLEMS",
    "BitsBatch",
    "BitsBatcher",
    "BitsSpec",
    "Problem",
    "generate",
    "io_sizes",
]


@dataclass
class BitsBatch:
    """A batch of bit sequences.

    Shapes:
        x:    (B, T, D_in) float32 inputs (0/1 bits plus scalar channels)
        y:    (B, T, D_out) float32 targets (0 outside the output phase)
        mask: (B, T) bool, True on the output steps that are scored
        length: int, the task length L of the batch (sequence, items or inputs)
        n_tokens: int = B — the loss is normalised per sequence
    """

    x: Tensor
    y: Tensor
    mask: Tensor
    length: int

    @property
    def n_tokens(self) -> int:
        return int(self.x.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> BitsBatch:
        return BitsBatch(
            self.x.to(device, non_blocking=non_blocking),
            self.y.to(device, non_blocking=non_blocking),
            self.mask.to(device, non_blocking=non_blocking),
            self.length,
        )


@dataclass(frozen=True)
class BitsSpec:
    """What to generate: ``problem``, ``width`` W, and the problem's own settings —
    ``min_repeats``/``max_repeats`` (repeat copy; also the range that normalises n),
    ``item_len`` K (recall), ``sort_keep`` (priority sort: outputs per input)."""

    problem: Problem = "copy"
    width: int = 8
    min_repeats: int = 1
    max_repeats: int = 10
    item_len: int = 3
    sort_keep: float = 0.8

    def __post_init__(self) -> None:
        if self.problem not in PROBLEMS:
            raise ValueError(f"problem must be one of {PROBLEMS}, got {self.problem!r}")
        if self.width < 1 or self.item_len < 1:
            raise ValueError(f"width and item_len must be >= 1, got {self.width}, {self.item_len}")
        if not 1 <= self.min_repeats <= self.max_repeats:
            raise ValueError(
                f"need 1 <= min_repeats <= max_repeats, got {self.min_repeats}, {self.max_repeats}"
            )
        if not 0.0 < self.sort_keep <= 1.0:
            raise ValueError(f"sort_keep must be in (0, 1], got {self.sort_keep}")

    def min_length(self) -> int:
        """Smallest valid length: 2 items for recall (a query needs a successor), else 1."""
        return 2 if self.problem == "recall" else 1

    def sort_outputs(self, n: int) -> int:
        """n_out = round(keep · n), at least 1 (20 inputs → 16 outputs at keep 0.8)."""
        return max(1, min(n, int(round(self.sort_keep * n))))


def io_sizes(spec: BitsSpec) -> tuple[int, int]:
    """(D_in, D_out) of ``spec.problem`` (module doc)."""
    W = spec.width
    return {
        "copy": (W + 1, W),
        "repeat_copy": (W + 2, W + 1),
        "recall": (W + 2, W),
        "priority_sort": (W + 2, W),
    }[spec.problem]


def _bits(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(0, 2, size=shape).astype(np.float32)


def _copy(rng: np.random.Generator, B: int, L: int, W: int) -> tuple[np.ndarray, ...]:
    T = 2 * L + 1
    bits = _bits(rng, B, L, W)  # (B, L, W)
    x = np.zeros((B, T, W + 1), np.float32)  # (B, T, W + 1)
    y = np.zeros((B, T, W), np.float32)  # (B, T, W)
    mask = np.zeros((B, T), bool)  # (B, T)
    x[:, :L, :W] = bits
    x[:, L, W] = 1.0  # delimiter
    y[:, L + 1 :] = bits
    mask[:, L + 1 :] = True
    return x, y, mask


def _repeat_copy(
    rng: np.random.Generator, B: int, L: int, spec: BitsSpec
) -> tuple[np.ndarray, ...]:
    W, lo, hi = spec.width, spec.min_repeats, spec.max_repeats
    n = rng.integers(lo, hi + 1, size=B)  # (B,) repeats per sequence
    mu = (lo + hi) / 2.0  # mean and std of the uniform integer law on [lo, hi]
    sigma = np.sqrt(((hi - lo + 1) ** 2 - 1) / 12.0) or 1.0
    T = L + 2 + int(n.max()) * L
    bits = _bits(rng, B, L, W)  # (B, L, W)
    x = np.zeros((B, T, W + 2), np.float32)  # (B, T, W + 2)
    y = np.zeros((B, T, W + 1), np.float32)  # (B, T, W + 1)
    x[:, :L, :W] = bits
    x[:, L, W] = 1.0  # delimiter
    x[:, L, W + 1] = (n - mu) / sigma  # normalised repeat count
    j = np.arange(T - L - 1)  # (T − L − 1,) index into the output phase
    copying = j[None, :] < (n * L)[:, None]  # (B, T − L − 1)
    y[:, L + 1 :, :W] = np.where(copying[..., None], bits[:, j % L], 0.0)
    b = np.arange(B)
    y[b, L + 1 + n * L, W] = 1.0  # end marker
    mask = np.zeros((B, T), bool)  # (B, T)
    mask[:, L + 1 :] = j[None, :] <= (n * L)[:, None]  # the copies and the end marker
    return x, y, mask


def _recall(rng: np.random.Generator, B: int, n: int, spec: BitsSpec) -> tuple[np.ndarray, ...]:
    W, K = spec.width, spec.item_len
    items = _bits(rng, B, n, K, W)  # (B, n, K, W)
    q = rng.integers(0, n - 1, size=B)  # (B,) query item, never the last
    start_q = n * (K + 1)  # the query delimiter step
    T = start_q + K + 2 + K
    x = np.zeros((B, T, W + 2), np.float32)  # (B, T, W + 2)
    y = np.zeros((B, T, W), np.float32)  # (B, T, W)
    block = np.zeros((B, n, K + 1, W + 2), np.float32)  # (B, n, K + 1, W + 2)
    block[:, :, 0, W] = 1.0  # item delimiter before each item
    block[:, :, 1:, :W] = items
    x[:, :start_q] = block.reshape(B, n * (K + 1), W + 2)
    b = np.arange(B)
    x[:, start_q, W + 1] = 1.0  # query delimiter, left
    x[:, start_q + 1 : start_q + 1 + K, :W] = items[b, q]  # (B, K, W)
    x[:, start_q + 1 + K, W + 1] = 1.0  # query delimiter, right
    y[:, T - K :] = items[b, q + 1]  # (B, K, W) the item after the query
    mask = np.zeros((B, T), bool)  # (B, T)
    mask[:, T - K :] = True
    return x, y, mask


def _priority_sort(
    rng: np.random.Generator, B: int, n: int, spec: BitsSpec
) -> tuple[np.ndarray, ...]:
    W = spec.width
    n_out = spec.sort_outputs(n)
    T = n + 1 + n_out
    bits = _bits(rng, B, n, W)  # (B, n, W)
    priority = rng.uniform(-1.0, 1.0, size=(B, n)).astype(np.float32)  # (B, n)
    x = np.zeros((B, T, W + 2), np.float32)  # (B, T, W + 2)
    y = np.zeros((B, T, W), np.float32)  # (B, T, W)
    x[:, :n, :W] = bits
    x[:, :n, W] = priority
    x[:, n, W + 1] = 1.0  # delimiter
    order = np.argsort(-priority, axis=1, kind="stable")[:, :n_out]  # (B, n_out) highest first
    y[:, n + 1 :] = np.take_along_axis(bits, order[..., None], axis=1)  # (B, n_out, W)
    mask = np.zeros((B, T), bool)  # (B, T)
    mask[:, n + 1 :] = True
    return x, y, mask


def generate(spec: BitsSpec, rng: np.random.Generator, batch_size: int, length: int) -> BitsBatch:
    """A batch of ``batch_size`` sequences of task length ``length`` (module doc).

    Shapes: returns BitsBatch with x (B, T, D_in), y (B, T, D_out), mask (B, T)
    """
    if length < spec.min_length():
        raise ValueError(f"{spec.problem} needs length >= {spec.min_length()}, got {length}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if spec.problem == "copy":
        x, y, mask = _copy(rng, batch_size, length, spec.width)
    elif spec.problem == "repeat_copy":
        x, y, mask = _repeat_copy(rng, batch_size, length, spec)
    elif spec.problem == "recall":
        x, y, mask = _recall(rng, batch_size, length, spec)
    else:
        x, y, mask = _priority_sort(rng, batch_size, length, spec)
    return BitsBatch(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask), length)


STATE_VERSION = 1


class BitsBatcher:
    """An endless, seeded stream of training batches with the interface of
    :class:`seqlab.data.batching.TokenBudgetBatcher` (``epoch``, ``position``, ``len``,
    iteration, ``state_dict`` / ``load_state_dict``), so the Trainer drives it unchanged.

    An "epoch" is ``batches_per_epoch`` batches (bookkeeping only: every batch is fresh
    data). It yields ``[epoch, index, rank]``; the task generates that batch from a
    Generator seeded by (data seed, run seed, epoch, index, rank), so resuming at
    (epoch, position) continues the same stream without replaying it.
    """

    def __init__(
        self,
        batches_per_epoch: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if batches_per_epoch < 1 or batch_size < 1:
            raise ValueError(
                f"batches_per_epoch and batch_size must be >= 1, got {batches_per_epoch}, "
                f"{batch_size}"
            )
        self.batches_per_epoch, self.batch_size = batches_per_epoch, batch_size
        self.rank, self.world_size = rank, world_size
        self.epoch, self.position = 0, 0
        self.dropped = Dropped(0, np.zeros(0, dtype=np.int64))

    @property
    def tokens_per_batch(self) -> int:
        return self.batch_size

    @property
    def num_examples(self) -> int:
        return self.batches_per_epoch * self.batch_size * self.world_size

    def describe(self) -> str:
        return (
            f"fresh generated batches of {self.batch_size} sequences "
            f"({self.batches_per_epoch} batches per epoch)"
        )

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[list[int]]:
        while self.position < len(self):
            self.position += 1
            yield [self.epoch, self.position - 1, self.rank]
        self.epoch, self.position = self.epoch + 1, 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = int(epoch), 0

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        pos = self.position if position is None else int(position)
        return {
            "version": STATE_VERSION,
            "kind": "bits",
            "epoch": self.epoch,
            "position": pos,
            "batches_per_epoch": self.batches_per_epoch,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION or state.get("kind") != "bits":
            raise ValueError(
                "the checkpoint's batcher is not a bit-sequence stream of this version"
            )
        for key in ("batches_per_epoch", "batch_size", "world_size"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"the checkpoint's batcher has {key}={state[key]}, this run "
                    f"{getattr(self, key)}: resume with the same task settings"
                )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
