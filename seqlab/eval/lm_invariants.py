"""Invariance checks on a trained language model (``seqlab check`` on an ``lm`` run).

The LM contract (``seqlab.models.lm_common``) promises that three ways of reading a
stream give the same log p(y⟨t⟩ | y⟨<t⟩); these checks measure it on the user's
checkpoint and text (N rows of T tokens of a split), over the full vocabulary at every
position, as ``seqlab.eval.invariants`` does for translation:

1. **cached == full forward.** ``step`` one token at a time from ``init_state`` (what
   ``generate`` and ``score`` do) against ``forward`` over the T tokens at once.
2. **carried state == one pass.** ``forward`` over the first ⌊T/2⌋ tokens, then over the
   rest from the state it returned (truncated BPTT's carry, as training and evaluation
   read a stream), against one pass over all T.
3. **batched == unbatched.** ``forward`` over the N rows in one batch against each row
   alone: rows do not leak into each other.
4. **fused == readable** (models whose ``forward`` takes ``fused``: the RNN LM).
   PyTorch's fused ``nn.RNN/GRU/LSTM`` kernel against seqlab's step-by-step cells.

Differences are absolute, on log-probabilities; float64 by default (tolerance 1e-8),
float32 1e-3 (``TOLERANCE``). T must fit the model's context (a Transformer LM's
``model.context``): past it, ``step`` slides a window, which ``forward`` does not.
"""

from __future__ import annotations

import copy
import inspect

import torch
from torch import Tensor, nn

from seqlab.eval.invariants import TOLERANCE, Check, largest

__all__ = ["lm_rows", "run_lm_checks"]


def lm_rows(stream: Tensor, rows: int, length: int) -> Tensor:
    """The first ``rows`` · ``length`` tokens of a split's stream as rows.

    Shapes: stream (N,) long -> (rows', length) long, rows' = min(rows, N // length) ≥ 1.
    """
    n = min(rows, stream.numel() // length)
    if n < 1:
        raise ValueError(
            f"the split has {stream.numel()} tokens, fewer than one row of {length}: "
            "give a smaller length"
        )
    return stream[: n * length].view(n, length)  # (rows', T)


def _log_probs(logits: Tensor) -> Tensor:
    return torch.log_softmax(logits.double(), dim=-1)  # (B, T, V)


def _row_diffs(a: Tensor, b: Tensor, offset: int = 0) -> list[tuple[float, str]]:
    """Per row, the largest |a − b| over V and positions, and the position.  (B, T, V)."""
    d = (a - b).abs().amax(dim=-1)  # (B, T)
    out = []
    for i in range(d.size(0)):
        t = int(d[i].argmax())
        out.append((float(d[i, t]), f"row {i}, position {offset + t + 1}"))
    return out


def _start(model: nn.Module, B: int, device: torch.device) -> object:
    """The state before any token (the cached path; ``forward(x)`` alone is the uncached)."""
    return model.init_state(B, device)


def check_lm_cached(model: nn.Module, x: Tensor, tol: float) -> Check:
    """1. ``step`` token by token == ``forward`` over the rows.  x (B, T)."""
    full = _log_probs(model(x).logits)  # (B, T, V), state None: the start of a stream
    state = _start(model, x.size(0), x.device)
    steps = []
    for t in range(x.size(1)):
        logits, state = model.step(x[:, t], state)  # (B, V)
        steps.append(logits)
    worst, where = largest(_row_diffs(full, _log_probs(torch.stack(steps, dim=1))))
    return Check("cached == full forward", f"log p over V at {x.numel()} positions", worst, tol,
                 worst=where)  # fmt: skip


def check_lm_carry(model: nn.Module, x: Tensor, tol: float) -> Check:
    """2. Two chunks with the carried state == one pass.  x (B, T), T ≥ 2."""
    k = x.size(1) // 2
    one = _log_probs(model(x).logits)  # (B, T, V)
    first = model(x[:, :k], _start(model, x.size(0), x.device))
    second = _log_probs(model(x[:, k:], first.state).logits)  # (B, T − k, V)
    diffs = _row_diffs(one[:, :k], _log_probs(first.logits)) + _row_diffs(one[:, k:], second, k)
    worst, where = largest(diffs)
    compared = f"log p over V, {x.size(1)} tokens in one pass vs {k} + {x.size(1) - k}"
    return Check("carried state == one pass", compared, worst, tol, worst=where)


def check_lm_batched(model: nn.Module, x: Tensor, tol: float) -> Check:
    """3. The B rows together == each row alone.  x (B, T)."""
    together = _log_probs(model(x).logits)  # (B, T, V)
    diffs = []
    for i in range(x.size(0)):
        alone = _log_probs(model(x[i : i + 1]).logits)  # (1, T, V)
        d, place = _row_diffs(together[i : i + 1], alone)[0]
        diffs.append((d, place.replace("row 0", f"row {i}", 1)))
    worst, where = largest(diffs)
    return Check("batched == unbatched", f"log p over V, {x.size(0)} rows together vs alone",
                 worst, tol, worst=where)  # fmt: skip


def check_lm_fused(model: nn.Module, x: Tensor, tol: float) -> Check:
    """4. The fused kernel == the readable cells (``forward(..., fused=...)``).  x (B, T)."""
    fused = _log_probs(model(x, None, fused=True).logits)  # (B, T, V)
    cells = _log_probs(model(x, None, fused=False).logits)  # (B, T, V)
    worst, where = largest(_row_diffs(fused, cells))
    compared = f"log p over V at {x.numel()} positions: fused kernel vs step-by-step cells"
    return Check("fused == readable", compared, worst, tol, worst=where)


@torch.no_grad()
def run_lm_checks(model: nn.Module, x: Tensor, dtype: torch.dtype = torch.float64) -> list[Check]:
    """The checks on the rows ``x`` (B, T), T ≥ 2, the model copied to ``dtype`` in eval
    mode (the caller's model is not changed); ``fused == readable`` only for models whose
    ``forward`` takes ``fused``."""
    if dtype not in TOLERANCE:
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    if x.dim() != 2 or x.size(1) < 2:
        raise ValueError(f"need rows of at least 2 tokens, shape (B, T), got {tuple(x.shape)}")
    tol = TOLERANCE[dtype]
    m = copy.deepcopy(model).to(dtype).eval()
    x = x.to(next(m.parameters()).device)
    checks = [check_lm_cached(m, x, tol), check_lm_carry(m, x, tol), check_lm_batched(m, x, tol)]
    if "fused" in inspect.signature(m.forward).parameters:
        checks.append(check_lm_fused(m, x, tol))
    return checks
