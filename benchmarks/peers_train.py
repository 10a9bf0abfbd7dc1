"""Training-step variants of ``benchmarks/peers.py``: seqlab vs nn.Transformer vs HF Marian
vs OpenNMT-py 3.0.4 (benchmarks/peers_onmt.py; pre-LN, so not quite the same maths).

One step = forward, label-smoothed (ε = 0.1) cross-entropy normalised by the non-pad
target tokens, backward, Adam (lr 1e-3, β = (0.9, 0.98), ε = 1e-9) — the same maths for
every implementation. Where they differ is *how*:

* ``seqlab`` runs the Trainer's own path, not a copy of it: ``TranslationTask.loss`` (which
  calls ``token_cross_entropy``) inside ``seqlab.train.steps.accumulate_gradients`` under
  ``seqlab.train.precision.autocast_context``, then ``apply_update`` (gradient norm measured
  as the Trainer always does, no clipping here because the peers do not clip; optimizer
  from ``build_optimizer``, i.e. fused Adam; the preset's schedule stepped).
* the peers are driven the way a user of each library writes a loop: ``torch.autocast``,
  ``F.cross_entropy(label_smoothing=0.1, ignore_index=pad)``, ``torch.optim.Adam``
  (default implementation), ``zero_grad(set_to_none=True)``.

A variant is one (implementation, precision); a repetition runs it over a fixed list of
batches and returns the target (non-pad) tokens it trained on. Every model lives on the
``device`` it was built for (``cpu`` or ``cuda``), the batches too, and autocast is that
device's. On CUDA seqlab's ``build_optimizer`` picks the fused Adam kernel as on a CPU;
the peers keep ``torch.optim.Adam``'s default (foreach on CUDA).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import peers_models as pm
from benchmarks import peers_onmt as ponmt
from benchmarks.peers_timing import peer_autocast
from seqlab.data.collate import Seq2SeqBatch
from seqlab.data.vocab import PAD_ID
from seqlab.train.distributed import DistContext
from seqlab.train.optim import build_optimizer
from seqlab.train.precision import autocast_context
from seqlab.train.schedules import build_schedule
from seqlab.train.steps import accumulate_gradients, apply_update

IMPLEMENTATIONS = ("seqlab", "nn", "hf", "onmt")
PRECISIONS = ("fp32", "bf16")
LABEL_SMOOTHING = 0.1
ADAM = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9}


@dataclass
class Trainee:
    """A built model and the function that trains it for one step on one batch.

    ``step(batch, precision)`` returns the loss (a float, mean over non-pad tokens).
    """

    impl: str
    model: nn.Module
    step: Callable[[Seq2SeqBatch, str], float]


def seqlab_trainee(size: pm.Size, device: str = "cpu", overrides: tuple[str, ...] = ()) -> Trainee:
    """seqlab's model, optimizer and schedule as the Trainer builds them (the preset with
    ``overrides``); its step path. The schedule's length, which the Trainer fits to
    ``train.max_minutes``, is fixed long enough for any benchmark (the cosine would refuse
    a step past its warm-up otherwise)."""
    model, cfg, task = pm.build_seqlab(size, ("schedule.total_steps=1000000", *overrides))
    model.to(device)  # before the optimizer, as the Trainer does
    optimizer = build_optimizer(model, cfg.train.optim)
    schedule = build_schedule(optimizer, cfg.schedule, cfg.schedule_cfg)
    dist = DistContext()
    count = [0]

    def step(batch: Seq2SeqBatch, precision: str) -> float:
        model.train()
        loss_sum, nll_sum, n = accumulate_gradients(
            model,
            task,
            [batch],
            dist,
            label_smoothing=LABEL_SMOOTHING,
            autocast=lambda: autocast_context(precision, device),  # type: ignore[arg-type]
        )
        count[0] += 1
        stats = apply_update(
            model, optimizer, schedule, loss_sum, nll_sum, n, dist, step=count[0], clip_norm=None
        )
        return stats.loss_sum / max(stats.n_tokens, 1)

    return Trainee("seqlab", model, step)


def peer_trainee(
    impl: str,
    model: nn.Module,
    logits_of: Callable,
    device: str = "cpu",
    schedule_of: Callable[[torch.optim.Optimizer], Any] | None = None,
) -> Trainee:
    """A user-written loop around any model mapping a batch to (B, T, V) logits; with
    ``schedule_of`` its learning rate follows that schedule (stepped after each update)."""
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), **ADAM)
    schedule = schedule_of(optimizer) if schedule_of is not None else None

    def step(batch: Seq2SeqBatch, precision: str) -> float:
        model.train()
        with peer_autocast(precision, device):
            logits = logits_of(model, batch)  # (B, T, V)
            loss = F.cross_entropy(
                logits.flatten(0, 1),
                batch.y_out.flatten(),
                ignore_index=PAD_ID,
                label_smoothing=LABEL_SMOOTHING,
            )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if schedule is not None:
            schedule.step()
        return float(loss.detach())

    return Trainee(impl, model, step)


def _reference_logits(model: nn.Module, b: Seq2SeqBatch) -> torch.Tensor:
    return model(b.src, b.src_mask, b.y_in, b.tgt_mask)


def build_trainee(
    impl: str, size: pm.Size, device: str = "cpu", overrides: tuple[str, ...] | None = None
) -> Trainee:
    """``impl`` in IMPLEMENTATIONS, on ``device``; ImportError when its library is missing.

    ``overrides`` (key=value on the preset) given: seqlab's run takes them, and a peer's
    Adam follows the same schedule (``build_schedule`` on the preset's ``schedule``) — for
    comparing training curves rather than step times; None: the peers keep a constant lr.
    """
    if impl == "seqlab":
        return seqlab_trainee(size, device, overrides or ())
    schedule_of = None
    if overrides is not None:
        cfg = pm.seqlab_run_config(size, overrides)
        schedule_of = lambda opt: build_schedule(opt, cfg.schedule, cfg.schedule_cfg)  # noqa: E731
    peers = {
        "nn": lambda: (pm.ReferenceTransformer(size), _reference_logits),
        "hf": lambda: (pm.build_marian(size), pm.marian_logits),
        "onmt": lambda: (ponmt.build_onmt(size), ponmt.onmt_logits),
    }
    if impl in peers:
        model, logits_of = peers[impl]()
        return peer_trainee(impl, model, logits_of, device, schedule_of)
    raise ValueError(f"unknown implementation {impl!r}; choose from {IMPLEMENTATIONS}")


def train_rep(trainee: Trainee, batches: list[Seq2SeqBatch], precision: str) -> Callable[[], int]:
    """One repetition: a step on every batch; returns the target tokens trained on."""
    tokens = sum(b.n_tokens for b in batches)

    def run() -> int:
        for b in batches:
            trainee.step(b, precision)
        return tokens

    return run
