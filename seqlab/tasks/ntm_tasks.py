"""The Neural Turing Machine tasks ("ntm"): copy, repeat copy, associative recall and
priority sort on random bit vectors (Graves et al. 2014 §4; generators in
``seqlab.data.algorithmic_bits``), for the ``ntm`` and ``lstm_seq_baseline`` models.

* Training data: endless fresh batches (``BitsBatcher``); each batch draws one length
  uniformly from [min_len, max_len] (as Collier & Beel 2018) and ``batch_size`` sequences.
* Loss: binary cross-entropy of the sigmoid outputs, summed over the bits of the output
  phase only (the mask), normalised per sequence (``n_tokens`` = B): the paper's "cost per
  sequence", in nats (÷ ln 2 for bits).
* ``evaluate(split)``: ``valid`` holds ``n_eval`` fresh sequences of every training length
  min_len … max_len (held out: other seeds than training); ``test`` holds ``n_eval`` of each
  of ``test_lengths`` (generalisation to longer sequences). Metrics: ``loss`` (nats per
  sequence), ``cost_bits`` (bits per sequence), ``bit_errors`` (wrong bits per sequence
  after thresholding σ(logit) at 0.5, mean over the split) and ``bit_errors_max`` (the worst
  length's mean), and for ``test`` also ``bit_errors@L`` / ``cost_bits@L`` per length L.
* ``trace(model, length, seed)``: one example with the model's read/write weightings
  (``seqlab.inspect.memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.data.algorithmic_bits import BitsBatch, BitsBatcher, BitsSpec, generate, io_sizes
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task

__all__ = ["NTMTask", "NTMTaskConfig", "bit_errors", "masked_bce"]

LN2 = math.log(2.0)


@dataclass(frozen=True)
class NTMTaskConfig:
    """``problem``; ``width`` W bits per vector (paper: 8; recall 6); training lengths
    ``min_len`` … ``max_len`` (copy 1–20, repeat copy 1–10, recall 2–6 items, priority
    sort 20 inputs); ``test_lengths`` for generalisation; ``min_repeats``/``max_repeats``
    (repeat copy, 1–10), ``item_len`` (recall, 3), ``sort_keep`` (priority sort, 16 of 20);
    ``batch_size`` sequences per training batch; ``n_eval`` sequences per evaluated length;
    ``data_seed`` fixes the evaluation sets and, with the run seed, the training stream."""

    problem: Literal["copy", "repeat_copy", "recall", "priority_sort"] = "copy"
    width: int = 8
    min_len: int = 1
    max_len: int = 20
    test_lengths: tuple[int, ...] = (20, 30, 50, 100)
    min_repeats: int = 1
    max_repeats: int = 10
    item_len: int = 3
    sort_keep: float = 0.8
    batch_size: int = 32
    n_eval: int = 64
    eval_batch_size: int = 128
    batches_per_epoch: int = 1000
    data_seed: int = 1234

    def __post_init__(self) -> None:
        try:
            spec = self.spec()
        except ValueError as exc:
            raise ConfigError(f"task: {exc}") from None
        if not spec.min_length() <= self.min_len <= self.max_len:
            raise ConfigError(
                f"task.min_len/max_len: need {spec.min_length()} <= min_len <= max_len for "
                f"{self.problem}, got {self.min_len}, {self.max_len}"
            )
        bad = [n for n in self.test_lengths if n < spec.min_length()]
        if bad or not self.test_lengths:
            raise ConfigError(
                f"task.test_lengths must be a non-empty list of lengths >= {spec.min_length()}, "
                f"got {list(self.test_lengths)}"
            )
        for name in ("batch_size", "n_eval", "eval_batch_size", "batches_per_epoch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self, name)}")

    def spec(self) -> BitsSpec:
        return BitsSpec(
            self.problem,
            self.width,
            self.min_repeats,
            self.max_repeats,
            self.item_len,
            self.sort_keep,
        )


def masked_bce(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Per-sequence cost Σ_{t: mask} Σ_d BCE(σ(logit_td), y_td) in nats, in fp32.

    Shapes: logits, y (B, T, D_out); mask (B, T) bool → (B,)
    """
    bce = F.binary_cross_entropy_with_logits(logits.float(), y, reduction="none")  # (B, T, D)
    return (bce.sum(-1) * mask).sum(-1)  # (B,)


def bit_errors(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Wrong bits per sequence on the output phase, outputs thresholded at σ(logit) = 0.5.

    Shapes: logits, y (B, T, D_out); mask (B, T) bool → (B,) float
    """
    wrong = ((logits > 0).float() != y).float().sum(-1)  # (B, T)
    return (wrong * mask).sum(-1)  # (B,)


@TASKS.register("ntm", NTMTaskConfig)
class NTMTask(Task):
    """NTM bit-sequence tasks (copy, repeat copy, recall, priority sort), scored in bit
    errors and cost (bits) per sequence."""

    pad_id = 0
    inference_methods = ("trace",)

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        cfg = self.cfg
        self.bits = cfg.spec()
        valid_lengths = range(cfg.min_len, cfg.max_len + 1)
        self.splits = {
            "valid": self._fixed_set(valid_lengths, 1),
            "test": self._fixed_set(cfg.test_lengths, 2),
        }

    def _fixed_set(self, lengths: Any, salt: int) -> list[BitsBatch]:
        """``n_eval`` sequences of each length, in chunks of at most ``eval_batch_size``."""
        cfg, out = self.cfg, []
        for length in lengths:
            rng = np.random.default_rng([cfg.data_seed, salt, int(length)])
            left = cfg.n_eval
            while left:
                n = min(left, cfg.eval_batch_size)
                out.append(generate(self.bits, rng, n, int(length)))
                left -= n
        return out

    def model_kwargs(self) -> dict[str, Any]:
        d_in, d_out = io_sizes(self.bits)
        return {"input_size": d_in, "output_size": d_out}

    def train_lengths(self) -> np.ndarray:
        """Unused (the task makes its own batcher); one entry per batch of an epoch."""
        return np.full(self.cfg.batches_per_epoch, self.cfg.batch_size, dtype=np.int64)

    def make_batcher(self, batch_cfg: Any, seed: int, rank: int, world_size: int) -> BitsBatcher:
        """The Trainer's batch order: fresh batches (``train.batch`` is unused)."""
        return BitsBatcher(self.cfg.batches_per_epoch, self.cfg.batch_size, rank, world_size)

    def collate(self, indices: list[int], split: str = "train") -> BitsBatch:
        """``[epoch, index, rank]`` from the batcher → that training batch (generated)."""
        if split != "train" or len(indices) != 3:
            raise ValueError("the ntm task collates only training batch ids [epoch, index, rank]")
        cfg = self.cfg
        rng = np.random.default_rng([cfg.data_seed, 0, self.seed, *map(int, indices)])
        length = int(rng.integers(cfg.min_len, cfg.max_len + 1))
        return generate(self.bits, rng, cfg.batch_size, length)

    def loss(self, model: nn.Module, batch: BitsBatch, label_smoothing: float = 0.0) -> LossOutput:
        logits = model(batch.x).logits  # (B, T, D_out)
        cost = masked_bce(logits, batch.y, batch.mask).sum()  # ()
        return LossOutput(cost, cost.detach(), batch.n_tokens)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        if split not in self.splits:
            raise ValueError(f"split must be one of {sorted(self.splits)}, got {split!r}")
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        per_length: dict[int, list[Tensor]] = {}
        for batch in self.splits[split]:
            b = batch.to(device)
            logits = model(b.x).logits  # (B, T, D_out)
            cost = masked_bce(logits, b.y, b.mask).cpu()  # (B,)
            errors = bit_errors(logits, b.y, b.mask).cpu()  # (B,)
            per_length.setdefault(batch.length, []).append(torch.stack([cost, errors], 1))
        model.train(was_training)
        stats = {n: torch.cat(v).double() for n, v in per_length.items()}  # n → (n_eval, 2)
        every = torch.cat(list(stats.values()))  # (n_seq, 2)
        out = {
            "loss": float(every[:, 0].mean()),
            "cost_bits": float(every[:, 0].mean()) / LN2,
            "bit_errors": float(every[:, 1].mean()),
            "bit_errors_max": max(float(v[:, 1].mean()) for v in stats.values()),
        }
        if split == "test":
            for n, v in sorted(stats.items()):
                out[f"bit_errors@{n}"] = float(v[:, 1].mean())
                out[f"cost_bits@{n}"] = float(v[:, 0].mean()) / LN2
        return out

    @torch.no_grad()
    def trace(
        self, model: nn.Module, length: int, seed: int = 0, memory: bool = False
    ) -> dict[str, np.ndarray]:
        """One example of ``length`` run through ``model``: inputs, targets, outputs,
        mask, (NTM) read/write weightings and with ``memory`` the memory M_t of every
        step — ``seqlab.inspect.memory.memory_trace``."""
        from seqlab.inspect.memory import memory_trace

        rng = np.random.default_rng([self.cfg.data_seed, 3, int(length), int(seed)])
        return memory_trace(model, generate(self.bits, rng, 1, int(length)), memory=memory)
