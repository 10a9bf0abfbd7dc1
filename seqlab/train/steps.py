"""One optimizer step over k microbatches on W ranks, normalised by the whole batch's tokens.

For an update over microbatches i = 1…k on ranks r = 1…W, with ℓ_{r,i} the summed token
loss of microbatch i on rank r and n_{r,i} its non-pad target tokens (``LossOutput``):

    N = Σ_r Σ_i n_{r,i}                        (one all-reduce before the backward passes)
    L = (1 / N) Σ_r Σ_i ℓ_{r,i}                (the mean token loss of the whole batch)

Each rank back-propagates ℓ_{r,i} · W / N for each of its microbatches, accumulating in
``.grad``; DDP then *averages* over the W ranks, so every rank holds
∇L = (1/W) Σ_r Σ_i ∇ℓ_{r,i} · W / N. Hence 1 process × k accumulation == k processes × 1
== one batch of the union (DESIGN §7, USER-NEEDS §8). Normalising each microbatch by its
own n_{r,i} instead (the bug of huggingface/transformers#34191) weights short batches up.

DDP's gradient all-reduce runs only on the last microbatch (``no_sync()`` on the others).
Then: gradient norm ‖∇L‖ measured before clipping (Pascanu et al. 2013), a non-finite loss
or norm stops the run or skips the update (``train.nonfinite``), optimizer step, schedule
step.

Deviations: a skipped (non-finite) update still consumes its batches and advances the
step counter and the schedule (fairseq does not count it as an update).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from seqlab.errors import SeqlabError
from seqlab.tasks.base import Task
from seqlab.train.distributed import DistContext
from seqlab.train.optim import clip_grad_norm


class NonFiniteLossError(SeqlabError, FloatingPointError):
    """The loss or the gradient norm became NaN/inf and ``train.nonfinite=stop``."""


class OutOfMemory(SeqlabError, MemoryError):
    """A training microbatch did not fit in memory; the message names its shapes and the
    settings that make it smaller (USER-NEEDS §11)."""


def _is_out_of_memory(exc: BaseException) -> bool:
    """torch's CUDA / MPS out-of-memory error, or the CPU allocator's failure."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def _shapes(batch: Any) -> str:
    """``name (d0, d1)`` for every tensor field of a batch object."""
    fields = vars(batch) if hasattr(batch, "__dict__") else {}
    parts = [f"{k} {tuple(v.shape)}" for k, v in fields.items() if isinstance(v, Tensor)]
    return ", ".join(parts) or type(batch).__name__


def out_of_memory(exc: BaseException, batch: Any, device: torch.device, step: int) -> OutOfMemory:
    """The one-line error for ``exc`` raised while training on ``batch``."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return OutOfMemory(
        f"out of memory on {device} at update {step} in a microbatch of {int(batch.n_tokens):,} "
        f"tokens ({_shapes(batch)}): {first[:160]}. Make the microbatches smaller: "
        "train.batch.max_tokens or train.batch.max_len (language models: task.batch_size or "
        "task.bptt), and raise train.accum_steps to keep the tokens per update"
    )


def mark_updated(optimizer: torch.optim.Optimizer) -> None:
    """Bump the version counter of every parameter ``optimizer`` updates.

    A fused step (``torch.optim.Adam(fused=True)``, what seqlab trains with on CPU and GPU)
    writes the weights in place without bumping it (torch 2.13; tested), so caches keyed on
    it would keep an earlier step's weights: the searches' packed weights
    (``seqlab.nn.packed_linear``), which a validation decode under bf16 autocast or int8
    uses, and the compiled decoder step's weight check (``seqlab.decode.compiled``)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    with torch.no_grad():
        torch.autograd.graph.increment_version(params)


@dataclass
class StepStats:
    """What one optimizer step measured, summed over every rank and microbatch.

    loss_sum / nll_sum: Σ token losses (label-smoothed / plain −log p); n_tokens: N;
    grad_norm: ‖∇L‖ before clipping; skipped: the update was not applied (non-finite).
    """

    loss_sum: float
    nll_sum: float
    n_tokens: int
    grad_norm: float
    skipped: bool


def accumulate_gradients(
    model: nn.Module,
    task: Task,
    microbatches: Sequence[Any],
    dist: DistContext,
    *,
    label_smoothing: float = 0.0,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
    step: int = 0,
) -> tuple[Tensor, Tensor, int]:
    """Backward ℓ_i · W / N for every microbatch (see module doc); ``.grad`` must be zero.

    Returns this rank's (Σ ℓ_i, Σ nll_i) as 0-d fp32 tensors (no host sync) and the global N.
    Running out of memory in a microbatch raises ``OutOfMemory`` naming it (``step``: the
    update's number, for the message).
    """
    if not microbatches:
        raise ValueError("accumulate_gradients needs at least one microbatch")
    n_local = sum(int(b.n_tokens) for b in microbatches)
    device = next(model.parameters()).device
    if dist.enabled:
        n = torch.tensor([n_local], dtype=torch.int64, device=device)  # (1,)
        total = dist.all_reduce_sum(n)  # (1,) N over every rank
        N = int(total.item())
    else:
        N = n_local
    scale = dist.world_size / max(N, 1)
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)  # ()
    nll_sum = torch.zeros((), dtype=torch.float32, device=device)  # ()
    last = len(microbatches) - 1
    for i, batch in enumerate(microbatches):
        # Gradients are all-reduced once, after the last microbatch (DDP no_sync).
        sync = contextlib.nullcontext() if i == last or not dist.enabled else model.no_sync()
        try:
            with sync:
                with autocast():
                    out = task.loss(model, batch, label_smoothing)
                loss = out.loss_sum.float() * scale  # () fp32
                (scaler.scale(loss) if scaler is not None else loss).backward()
        except (RuntimeError, MemoryError) as exc:
            if not _is_out_of_memory(exc):
                raise
            raise out_of_memory(exc, batch, device, step) from exc
        loss_sum += out.loss_sum.detach().float()
        nll_sum += out.nll_sum.detach().float()
    return loss_sum, nll_sum, N


def apply_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    loss_sum: Tensor,
    nll_sum: Tensor,
    n_tokens: int,
    dist: DistContext,
    *,
    step: int,
    clip_norm: float | None,
    nonfinite: Literal["stop", "skip"] = "stop",
    scaler: torch.amp.GradScaler | None = None,
) -> StepStats:
    """Clip, check finiteness, step the optimizer and the schedule, zero the gradients.

    ``step`` is the 1-based number of the update being taken (for the error message).
    With an enabled fp16 GradScaler, overflowing gradients are the scaler's business (it
    skips the step and lowers the scale); only a non-finite *loss* is reported.
    """
    scaling = scaler is not None and scaler.is_enabled()
    if scaling:
        scaler.unscale_(optimizer)
    grad_norm = clip_grad_norm(model.parameters(), clip_norm)  # () pre-clip ‖∇L‖
    sums = torch.stack([loss_sum, nll_sum])  # (2,)
    sums = dist.all_reduce_sum(sums)  # (2,) global; identical on every rank
    loss_g, nll_g, norm = (*sums.tolist(), float(grad_norm))
    finite = math.isfinite(loss_g) and (scaling or math.isfinite(norm))
    if not finite and nonfinite == "stop":
        mean = loss_g / max(n_tokens, 1)
        raise NonFiniteLossError(
            f"step {step}: the loss is {mean} and the gradient norm {norm} (non-finite). "
            "Lower train.optim.lr (or lengthen the warmup), enable clipping "
            "(train.clip_norm=1.0), try train.precision=fp32, or set train.nonfinite=skip "
            "to skip such updates"
        )
    if finite:
        if scaling:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        mark_updated(optimizer)
    elif scaling:
        scaler.update()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return StepStats(loss_g, nll_g, n_tokens, norm, skipped=not finite)
