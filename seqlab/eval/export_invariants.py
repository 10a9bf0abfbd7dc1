"""eager == exported: the checks ``seqlab check RUN --exported DIR`` adds to the five of
``seqlab.eval.invariants`` (USER-NEEDS §14, "test exported vs eager outputs … for every
architecture"; the differentiators' "eager == exported", on *your* run and sentences).

The exported files (``seqlab export``: TorchScript, or ONNX run by onnxruntime) hold the
encoder and one decoder step in float32; ``seqlab.serve.exported_model.ExportedModel``
presents them through the decoder contract. Both checks compare them with the run's eager
model copied to float32, the precision the files were written in:

6. **eager == exported (forward).** log p(y_t | y_<t, x) over V at every target position
   of the eager model's own beam output, the N sentences in one padded batch: the eager
   teacher-forced ``forward`` against the exported encoder and step, stepped through the
   same target prefix (what ``evaluate --exported`` computes its loss from).
7. **eager == exported (beam K).** Beam search with the run's settings over the N
   sentences, through the eager model and through the exported files: the same tokens,
   scores within the tolerance. Beam search reorders the exported state between steps
   (the Transformer's caches, an RNN's named fields), which the forward check never does.

A pointer-generator's exported step computes its mixture P(w) = p_gen P_vocab(w) +
(1 − p_gen) Σ_{i: w_i = w} a_i in probability space, in float32, so log P of a rare word
carries ~1e-8 / P of rounding (onnxruntime's kernels differ from torch's by that much):
check 6 compares its log p only where the eager p ≥ 1e-4 (``CopySources.export_floor``;
worst seen there 4.4e-4 nats, against 9.7e-4 over every column). A Transformer's, an
RNN's or ConvS2S's step returns logits, whose log-softmax is taken in float64 here, so
check 6 compares every column of V for them.

A language model's export (``seqlab.serve.export_lm``) gets two checks of its own
(``run_lm_export_checks``): the rows read as two halves with the state carried, and one
token per call against the eager forward.

A failure means the files do not decode as the checkpoint does: they were exported from
another checkpoint of the run (``export.json`` "checkpoint" says which), or an exporter
traced something a later input changes (a length, a batch size). Tolerance: 1e-3 nats,
the float32 one of ``seqlab.eval.invariants.TOLERANCE``; correct files differ by ~1e-6
(TorchScript) to ~1e-5 (onnxruntime's kernels), and a token may flip at a near-tie
(reported, as it is a difference a user would see).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from seqlab.eval.invariants import (
    TOLERANCE,
    Check,
    Sources,
    Srcs,
    _compare,
    _search,
    _targets,
    largest,
)
from seqlab.tasks.translation_eval import SearchSettings

__all__ = [
    "check_exported_forward",
    "check_exported_search",
    "run_export_checks",
    "run_lm_export_checks",
]


def check_exported_forward(
    eager: nn.Module, exported: nn.Module, sources: Sources, hyps: Srcs, tol: float
) -> Check:
    """6. Teacher-forced log p over V: eager ``forward`` == the exported step stepped
    through the same prefix, on the hypotheses ``hyps`` (EOS included)."""
    targets = _targets(hyps)
    want = sources.forward(eager, targets)  # (B, T, V′)
    got = sources.forward(exported, targets)  # (B, T, V′)
    floor = sources.export_floor
    diffs = []
    for i, n in enumerate(want.lengths):
        d = (want.log_p[i, :n] - got.log_p[i, :n]).abs()  # (n, V′)
        if floor > 0:  # only where the eager p ≥ floor (Sources.export_floor); a NaN in a
            # masked column still fails: the log-softmax of Sources.forward spreads it to the row
            d = d.masked_fill(want.log_p[i, :n] < math.log(floor), 0.0)
        d = d.amax(dim=-1)  # (n,)
        t = int(d.argmax())
        diffs.append((float(d[t]), f"sentence {i}, target position {t + 1}"))
    worst, where = largest(diffs)
    over = "V" if floor == 0 else f"V′ where p ≥ {floor:g}"
    compared = f"log p over {over} at {sum(want.lengths)} target positions, float32"
    return Check("eager == exported (forward)", compared, worst, tol, worst=where)


def check_exported_search(
    eager: nn.Module, exported: nn.Module, sources: Sources, settings: SearchSettings,
    eager_out: Any, tol: float,
) -> Check:  # fmt: skip
    """7. Beam search through the exported files == through the eager model (its result
    ``eager_out``): tokens equal, scores within ``tol``."""
    got = _search(exported, sources, settings)
    return _compare(f"eager == exported (beam {settings.beam})",
                    f"{len(sources)} outputs: tokens, score, float32",
                    eager_out, got, "scores", tol)  # fmt: skip


@torch.no_grad()
def run_export_checks(
    model: nn.Module, exported: nn.Module, sources: Sources | Srcs, settings: SearchSettings
) -> list[Check]:
    """Checks 6 and 7 on ``sources`` (a ``Sources``, or id sequences ending in EOS):
    ``model`` (copied to float32, eval mode; the caller's is not changed) against
    ``exported`` (an ``ExportedModel``)."""
    if not isinstance(sources, Sources):
        sources = Sources(sources, settings.coverage_penalty)
    if not len(sources):
        raise ValueError("run_export_checks needs at least one source sentence")
    tol = TOLERANCE[torch.float32]
    eager = copy.deepcopy(model).float().eval()
    out = _search(eager, sources, settings)
    return [
        check_exported_forward(eager, exported, sources, out.tokens, tol),
        check_exported_search(eager, exported, sources, settings, out, tol),
    ]


def _lm_diff(name: str, compared: str, want: torch.Tensor, got: torch.Tensor, tol: float) -> Check:
    """Largest |Δ log p| over V between two (B, T, V) logit tensors, and where."""
    d = (torch.log_softmax(want.double(), -1) - torch.log_softmax(got.double(), -1)).abs()
    d = d.amax(dim=-1)  # (B, T)
    flat = int(d.argmax())
    b, t = divmod(flat, d.size(1))
    worst = float(d.max())
    return Check(name, compared, worst, tol, worst=f"row {b}, position {t + 1}" if worst else "")


@torch.no_grad()
def run_lm_export_checks(model: nn.Module, exported: nn.Module, x: torch.Tensor) -> list[Check]:
    """A language model against its exported chunk graph (``seqlab.serve.export_lm``), on
    rows ``x`` (B, T), T ≥ 2, the eager model copied to float32 (eval mode):

    - **eager == exported (carried state)**: both read the first half of every row from
      the start of the stream, then the second half from the state the first returned
      (truncated BPTT's carry, evaluation over a stream): log p over V at every position;
    - **eager == exported (step)**: the exported graph fed one token per call (what
      ``generate`` does) against the eager forward over the whole row."""
    if x.dim() != 2 or x.size(1) < 2:
        raise ValueError(f"run_lm_export_checks needs rows of >= 2 tokens, got {tuple(x.shape)}")
    tol = TOLERANCE[torch.float32]
    eager = copy.deepcopy(model).float().eval()
    half = x.size(1) // 2
    first, rest = x[:, :half], x[:, half:]
    e1 = eager(first, None)
    want = torch.cat([e1.logits, eager(rest, e1.state).logits], 1)  # (B, T, V)
    x1 = exported(first, None)
    got = torch.cat([x1.logits, exported(rest, x1.state).logits], 1)  # (B, T, V)
    B, T = x.shape
    carried = _lm_diff("eager == exported (carried state)",
                       f"log p over V, {B} rows of {T} read as {half} + {T - half}, float32",
                       want, got, tol)  # fmt: skip
    state, steps = exported.init_state(B), []
    for t in range(T):
        logits, state = exported.step(x[:, t], state)  # (B, V)
        steps.append(logits)
    stepped = _lm_diff("eager == exported (step)",
                       f"log p over V, {B} rows: one token per call vs the eager forward",
                       eager(x, None).logits, torch.stack(steps, 1), tol)  # fmt: skip
    return [carried, stepped]
