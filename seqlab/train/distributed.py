"""Data-parallel training under ``torchrun``: join the process group, reduce, agree, leave.

``torchrun --nproc_per_node=N -m seqlab train …`` starts N copies of the CLI with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set. :func:`init_distributed`
reads them; a plain ``python -m seqlab train`` (no ``WORLD_SIZE``, or 1) runs single-process
and every collective below is the identity.

- backend: ``gloo`` on CPU, ``nccl`` on CUDA (device ``cuda:LOCAL_RANK``);
- timeout: ``SEQLAB_DIST_TIMEOUT`` seconds (default 600) for the rendezvous and for every
  collective; a rank that waits longer (another rank crashed or hangs) raises
  :class:`DistributedError` — one line saying which rank, which operation and what to do —
  instead of hanging (USER-NEEDS §9);
- only rank 0 writes (run directory, checkpoints, metrics, progress bar);
- the trainer wraps the model in ``DistributedDataParallel``; DDP *averages* gradients over
  the W ranks, which the loss normalisation of ``seqlab.train.steps`` accounts for.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from seqlab.errors import SeqlabError

T = TypeVar("T")

TIMEOUT_ENV = "SEQLAB_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
# Substrings of the errors gloo / NCCL / the c10d store raise when a peer is gone or late.
_COMM_FAILURES = (
    "timed out",
    "timeout",
    "connection closed",
    "connection reset",
    "broken pipe",
    "connection refused",
    "nccl",
    "gloo",
)


class DistributedError(SeqlabError, RuntimeError):
    """A rank could not join the group, or a collective failed (peer crashed or timed out)."""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"environment variable {name}={raw!r} is not an integer") from None


def dist_timeout(configured: float | None = None) -> float:
    """Seconds a rank waits for the others: ``configured``, else $SEQLAB_DIST_TIMEOUT, else 600."""
    if configured is not None:
        value = float(configured)
    else:
        raw = os.environ.get(TIMEOUT_ENV)
        try:
            value = DEFAULT_TIMEOUT_S if raw in (None, "") else float(raw)
        except ValueError:
            raise DistributedError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise DistributedError(f"the distributed timeout must be > 0 seconds, got {value}")
    return value


def resolve_device(requested: str, local_rank: int = 0) -> torch.device:
    """``auto`` → ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``; ``cuda`` gets the
    local rank appended. CUDA is only queried through ``torch.cuda.is_available()``."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError) as exc:
        raise SeqlabError(f"train.device={requested!r} is not a device ({exc})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SeqlabError(
                f"train.device={requested!r} but torch.cuda.is_available() is False; "
                "use train.device=cpu (or auto)"
            )
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job. ``world_size == 1``: no group, collectives are no-ops."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- collectives (identity when single-process) -----------------------------------------

    @contextlib.contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn a communication failure inside the block into a one-line DistributedError."""
        try:
            yield
        except DistributedError:
            raise
        except (RuntimeError, TimeoutError, ConnectionError) as exc:
            if not self.enabled or not is_comm_failure(exc):
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DistributedError(
                f"rank {self.rank}/{self.world_size}: {what} failed ({first}). Another rank "
                f"probably crashed or is stuck — see its output above. Each rank waits "
                f"{self.timeout_s:g}s for the others; set {TIMEOUT_ENV} to change that."
            ) from exc

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Σ over ranks, in place; returns ``tensor``."""
        if self.enabled:
            with self.guard("all_reduce"):
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (small picklable values: metrics, paths)."""
        if not self.enabled:
            return obj
        box = [obj]
        with self.guard("broadcast"):
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather_object(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        with self.guard("all_gather"):
            dist.all_gather_object(out, obj)
        return out

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on rank 0 only and give its result — or its SeqlabError — to every rank,
        so that a refusal on rank 0 (e.g. a non-empty run directory) stops all ranks."""
        result: tuple[str, Any] = ("ok", None)
        if self.is_main:
            try:
                result = ("ok", fn())
            except SeqlabError as exc:
                if not self.enabled:
                    raise
                result = ("error", str(exc))
        result = self.broadcast_object(result)
        if result[0] == "error":
            raise SeqlabError(result[1])
        return result[1]

    def barrier(self) -> None:
        if self.enabled:
            with self.guard("barrier"):
                dist.barrier()

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        """``DistributedDataParallel(model)`` when distributed, else ``model``."""
        if not self.enabled:
            return model
        ids = [device.index] if device.type == "cuda" else None
        with self.guard("DDP setup (parameter broadcast)"):
            return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def shutdown(self, *, clean: bool = False) -> None:
        """Leave the process group (idempotent).

        ``clean``: every rank got here on the normal path, so all of them first meet at a
        barrier. Without it the first rank to tear down gloo's connections can do so while a
        peer's transport thread still reads from them, and that peer aborts at exit
        ("terminate called without an active exception", seen ~1 run in 6 on two CPU ranks).
        On an error path the peers may be gone, so no barrier is attempted there.
        """
        if not (self.enabled and dist.is_initialized()):
            return
        if clean:
            with self.guard("the closing barrier"):
                dist.barrier()
        dist.destroy_process_group()


def in_torchrun_child() -> bool:
    """Whether this process is one rank of several started by torchrun (``WORLD_SIZE`` > 1)."""
    return _env_int("WORLD_SIZE", 1) > 1


def exit_without_teardown(code: int) -> NoReturn:
    """End a rank's process now: flush what was printed and logged, then ``os._exit(code)``.

    The command line ends a torchrun rank this way once its command has returned, after
    every file is written and the process group is left (:meth:`DistContext.shutdown`).
    It skips the interpreter's finalization and the C++ static destructors, where a
    native thread that is still alive (gloo's transport and worker threads, autograd's)
    may try to take the GIL after Python has begun to finalize, or be destroyed while
    still joinable, and abort the rank with "terminate called without an active
    exception" (SIGABRT) although its work is done. CI saw this once in about ten full
    test runs after the closing barrier went in (torch 2.13, gloo, two CPU ranks).
    What finalization would otherwise do for seqlab, closing files, is done by then;
    Python's ``atexit`` hooks do not run.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    os._exit(code)


def is_comm_failure(exc: BaseException) -> bool:
    """Whether ``exc`` looks like a lost or late peer rather than a bug in the step itself."""
    dist_errors = tuple(
        getattr(dist, name) for name in ("DistError", "DistBackendError", "DistNetworkError")
    )
    if isinstance(exc, dist_errors + (TimeoutError, ConnectionError)):
        return True
    text = str(exc).lower()
    return any(s in text for s in _COMM_FAILURES)


def init_distributed(device_request: str = "auto", timeout_s: float | None = None) -> DistContext:
    """Join the torchrun process group if the environment asks for one.

    Returns the context and sets the CUDA device of this rank. Raises DistributedError
    with the rank, the rendezvous address and a hint when the group cannot be formed.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    timeout = dist_timeout(timeout_s)
    if world <= 1:
        return DistContext(timeout_s=timeout)
    if not 0 <= rank < world:
        raise DistributedError(f"RANK={rank} is outside [0, WORLD_SIZE={world})")
    device = resolve_device(device_request, local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        try:
            dist.init_process_group(
                backend,
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=timeout),
            )
        except (RuntimeError, ValueError, TimeoutError, ConnectionError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DistributedError(
                f"rank {rank}/{world}: could not join the {backend} process group at {where} "
                f"({first}). Start every rank with the same torchrun command "
                f"(--nproc_per_node={world}, or --standalone), check the port is free; "
                f"each rank waits {timeout:g}s ({TIMEOUT_ENV})."
            ) from None
    return DistContext(rank, world, local_rank, backend, timeout)
