"""The task contract the Trainer drives, and the token-level loss every seq2seq task uses.

A task owns its data (readers, tokenizer, examples), builds its model from the registry,
turns example indices into batches, computes the loss and evaluates. The Trainer knows
nothing else about it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.nn.row_packing import PaddedRows
from seqlab.nn.smoothed_cross_entropy import smoothed_cross_entropy


@dataclass
class LossOutput:
    """Summed (not averaged) token losses of one batch.

    The Trainer divides by the number of non-pad target tokens of the whole accumulated
    and distributed batch (DESIGN §7), so 1 process × k accumulation == k processes.

    Shapes:
        loss_sum: () float — Σ over non-pad tokens of the training loss (label-smoothed)
        nll_sum:  () float — Σ of −log p(y) (for perplexity), detached
        n_tokens: int — non-pad target tokens in this batch
    """

    loss_sum: Tensor
    nll_sum: Tensor
    n_tokens: int


def token_cross_entropy(
    logits: Tensor,
    target: Tensor,
    pad_id: int,
    label_smoothing: float = 0.0,
    fused: bool = True,
) -> LossOutput:
    """Σ_t CE(softmax(logits_t), y_t) over non-pad targets.

    With label smoothing ε (Szegedy et al. 2016; Vaswani 2017 §5.4) the target is
    (1 − ε)·onehot(y) + ε/V, i.e. loss = (1 − ε)·(−log p(y)) + ε·(−(1/V) Σ_v log p(v)).

    Two paths compute the same function (tests/tasks/test_base.py proves it, values and
    gradients, fp32 and bf16):

    * ``fused=False`` — the readable one: the non-pad rows in fp32, one log-softmax shared
      by the loss and the NLL, the two terms of the formula above.
    * ``fused=True`` (default) — ``seqlab.nn.smoothed_cross_entropy``: from 2¹⁹ logits on,
      one softmax in the logits' own dtype (float32 accumulation) gives the loss and the
      NLL of each token, and its backward writes (p − ε/V)·g in one pass plus a write at
      the targets; smaller batches, and GPUs, take ``F.cross_entropy``, faster where
      operator overheads dominate and where torch's CUDA kernels are fused. Under autocast
      on a CPU ``F.cross_entropy`` would copy the (N, V) logits to float32 and make four
      more (N, V) passes in its backward, plus a second pass for the NLL: the loss alone
      on the Multi30k Transformer's (1,344 × 8,000) bf16 logits took 25 ms, now 10; the
      training step gains 3–5 % (docs/perf-notes-training.md §32).
      Padding rows (``pad_id``) get loss 0 and no gradient; per-token losses are summed in
      fp32.

    Shapes:
        logits: (B, T, V) any float dtype, or (N, V) for target (N,)
        target: (B, T) long, pad_id at padding
    """
    keep = target != pad_id  # (B, T)
    n_tokens = int(keep.sum())
    if fused:
        V = logits.size(-1)
        loss, nll = smoothed_cross_entropy(
            logits.reshape(-1, V), target.reshape(-1), pad_id, label_smoothing
        )  # (B·T,) each, 0 at padding
        return LossOutput(loss.float().sum(), nll.float().sum(), n_tokens)
    h = logits[keep]  # (N, V)
    if h.dtype in (torch.float16, torch.bfloat16):
        h = h.float()
    lp = torch.log_softmax(h, dim=-1)  # (N, V), one log-softmax for loss and NLL
    nll = -lp.gather(1, target[keep].unsqueeze(1)).squeeze(1)  # (N,)  −log p(y)
    if label_smoothing:
        smooth = -lp.mean(dim=-1)  # (N,)  −(1/V) Σ_v log p(v)
        loss_sum = ((1.0 - label_smoothing) * nll + label_smoothing * smooth).sum()
    else:
        loss_sum = nll.sum()
    nll_sum = nll.detach().sum()
    return LossOutput(loss_sum, nll_sum, n_tokens)


def seq2seq_token_loss(
    model: nn.Module, batch: Any, pad_id: int, label_smoothing: float = 0.0
) -> LossOutput:
    """``token_cross_entropy`` of a teacher-forced seq2seq model on a ``Seq2SeqBatch``.

    A model whose class sets ``output_rows = True`` (the Transformer) computes the logits of
    the real target positions alone, (N, V) instead of (B, T, V), where
    ``PaddedRows.of`` finds that it pays (a CPU batch with padding): the output layer and
    the loss skip the padding rows (docs/perf-notes-training.md §36). Other models, and
    other batches, take the (B, T, V) logits; the loss is the same either way.
    """
    inner = getattr(model, "module", model)  # under DistributedDataParallel
    # The real target positions, as the decoder packs them (``collate_seq2seq``: tgt_mask is
    # the same for y_in and y_out; a pad target inside it is still ignored by pad_id).
    rows = PaddedRows.of(batch.tgt_mask) if getattr(inner, "output_rows", False) else None
    if rows is None:
        logits = model(batch.src, batch.src_mask, batch.y_in, batch.tgt_mask)  # (B, T, V)
        return token_cross_entropy(logits, batch.y_out, pad_id, label_smoothing)
    logits = model(batch.src, batch.src_mask, batch.y_in, batch.tgt_mask, rows=rows)  # (N, V)
    return token_cross_entropy(logits, rows.pack(batch.y_out), pad_id, label_smoothing)


class Task(ABC):
    """Base class of every registered task.

    Life cycle: ``__init__(cfg, data_dir, seed)`` → ``prepare(tokenizer_state)`` (load
    data; train or restore the tokenizer) → ``build_model`` → batches by
    ``train_lengths`` + ``collate`` → ``loss`` / ``evaluate``.
    """

    pad_id: int = 0

    def __init__(self, cfg: Any, data_dir: Path | None = None, seed: int = 0) -> None:
        self.cfg = cfg
        self.data_dir = data_dir
        self.seed = seed

    @abstractmethod
    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        """Load/generate the data; restore the tokenizer from a checkpoint if given."""

    def tokenizer_state(self) -> dict[str, Any] | None:
        """JSON-serialisable tokenizer state saved in the run and every checkpoint."""
        return None

    @abstractmethod
    def model_kwargs(self) -> dict[str, Any]:
        """Arguments the model needs from the data (vocabulary sizes, pad id)."""

    def init_model(self, model: nn.Module) -> None:
        """Called by ``build_model`` on every freshly built model, before any checkpoint is
        loaded into it (e.g. to copy a pretrained network's weights in at the start of a
        run). Default: nothing."""
        return None

    @abstractmethod
    def train_lengths(self) -> np.ndarray:
        """(N,) per-example cost length used by the token-budget batcher."""

    @abstractmethod
    def collate(self, indices: list[int], split: str = "train") -> Any:
        """Example indices → a batch object with ``n_tokens`` and ``to(device)``."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any, label_smoothing: float = 0.0) -> LossOutput:
        """Summed loss of one batch (see LossOutput)."""

    @abstractmethod
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """Metrics on a held-out split (model in eval mode, no gradients)."""
