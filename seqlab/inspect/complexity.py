"""Measured cost of RNN, RNN + attention and Transformer against sequence length t, width
k and depth d, beside the notes' table (notes 004, "Computational Cost and Parallelism"):

    model        training     training memory   test (decode)   test memory   seq. ops   path
    RNN          t·k²·d       t·k·d             t·k²·d          k·d           t          t
    RNN+attn.    t²·k²·d      t²·k·d            t²·k²·d         t·k·d         t          1
    Transformer  t²·k·d       t·k·d             t²·k·d          t·k·d         d          1

Measured per configuration (source and target both of length t, batch B, vocabulary V):

* ``train_s``: wall time of one training step, forward + cross-entropy + backward
  (median of ``repeats`` after one warm-up; no optimizer update, which is O(params));
* ``activation_bytes``: bytes of the tensors autograd saves for the backward pass
  (``torch.autograd.graph.saved_tensors_hooks``; each storage once; parameters left out)
  — the "training memory" of the notes, exact and free of allocator noise;
* ``peak_bytes`` (CUDA only): ``torch.cuda.max_memory_allocated`` during the step;
* ``decode_s``: greedy decoding (``seqlab.decode.greedy``) of exactly t tokens
  (min_len = max_len = t) for B sources of length t, encoder included;
* ``state_bytes``: bytes held by the decoder state after t steps of ``model.step``
  (hidden states, attention memory, the Transformer's K/V cache) — the "test memory".

A log-log least-squares fit, cost ≈ C·xᵖ, gives the exponent p per axis (:func:`fit_exponent`).

Models (registered, dropout 0): RNN = ``sutskever`` (d-layer LSTM encoder and decoder);
RNN + attention = ``luong`` (the same LSTMs, general score, ``input_feed=False`` so the
teacher-forced decoder is one fused call as in ``sutskever``); Transformer =
``transformer`` (d encoder + d decoder layers, d_model = k, 4 heads, d_ff = 4k).

Deviations from the notes' assumptions, which the fitted exponents show: the notes count
the attention score as a k² network recomputed for every pair, while ``luong``'s general
score precomputes W_a h̄ (t²·k, not t²·k²); the Transformer also has t·k²·d projection
and feed-forward terms, which dominate while t < k; at small sizes fixed per-call
overheads flatten every exponent towards 0.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.decode.greedy import greedy
from seqlab.models.luong import Luong, LuongConfig
from seqlab.models.sutskever import Sutskever, SutskeverConfig
from seqlab.models.transformer import TransformerConfig, TransformerSeq2Seq

FAMILIES = ("rnn", "rnn_attention", "transformer")
PAD, BOS, EOS = 0, 1, 2

# The notes' table: symbolic cost and the exponents of (t, k, d) it implies.
NOTES: dict[str, dict[str, Any]] = {
    "rnn": {
        "label": "RNN (sutskever)",
        "train": ("t·k²·d", (1, 2, 1)),
        "train_memory": ("t·k·d", (1, 1, 1)),
        "test": ("t·k²·d", (1, 2, 1)),
        "test_memory": ("k·d", (0, 1, 1)),
        "sequential": "t",
        "path": "t",
    },
    "rnn_attention": {
        "label": "RNN+attention (luong)",
        "train": ("t²·k²·d", (2, 2, 1)),
        "train_memory": ("t²·k·d", (2, 1, 1)),
        "test": ("t²·k²·d", (2, 2, 1)),
        "test_memory": ("t·k·d", (1, 1, 1)),
        "sequential": "t",
        "path": "1",
    },
    "transformer": {
        "label": "Transformer",
        "train": ("t²·k·d", (2, 1, 1)),
        "train_memory": ("t·k·d", (1, 1, 1)),
        "test": ("t²·k·d", (2, 1, 1)),
        "test_memory": ("t·k·d", (1, 1, 1)),
        "sequential": "d",
        "path": "1",
    },
}
METRICS = ("train_s", "activation_bytes", "decode_s", "state_bytes")
# measured metric → the notes' column it is compared with
NOTES_COLUMN = {
    "train_s": "train",
    "activation_bytes": "train_memory",
    "decode_s": "test",
    "state_bytes": "test_memory",
}


def build_model(family: str, k: int, d: int, vocab: int) -> nn.Module:
    """The registered model standing for ``family`` at width k and depth d (dropout 0)."""
    if family == "rnn":
        return Sutskever(
            SutskeverConfig(emb_dim=k, hidden_size=k, layers=d, dropout=0.0), vocab, vocab
        )
    if family == "rnn_attention":
        cfg = LuongConfig(emb_dim=k, hidden_size=k, layers=d, input_feed=False, dropout=0.0)
        return Luong(cfg, vocab, vocab)
    if family == "transformer":
        if k % 4:
            raise ValueError(f"the Transformer's width k must be a multiple of 4 heads, got {k}")
        cfg = TransformerConfig(
            d_model=k, n_heads=4, d_ff=4 * k, encoder_layers=d, decoder_layers=d, dropout=0.0
        )
        return TransformerSeq2Seq(cfg, vocab, vocab)
    raise ValueError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")


def random_batch(B: int, t: int, vocab: int, seed: int = 0) -> tuple[Tensor, ...]:
    """src, src_mask, y_in, tgt_mask, y_out of length t (ids ≥ 3: no pad/BOS/EOS inside)."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (B, t), generator=gen)  # (B, t)
    y_out = torch.randint(3, vocab, (B, t), generator=gen)  # (B, t)
    y_in = torch.cat([torch.full((B, 1), BOS), y_out[:, :-1]], dim=1)  # (B, t)
    mask = torch.ones(B, t, dtype=torch.bool)  # (B, t)
    return src, mask, y_in, mask, y_out


def _training_loss(model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
    src, src_mask, y_in, tgt_mask, y_out = batch
    logits = model(src, src_mask, y_in, tgt_mask)  # (B, t, V)
    return F.cross_entropy(logits.flatten(0, 1), y_out.flatten())


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def train_step_seconds(model: nn.Module, batch: tuple[Tensor, ...], repeats: int = 3) -> float:
    """Median time of forward + loss + backward (gradients zeroed, no update)."""
    model.train()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        _training_loss(model, batch).backward()

    return median_seconds(step, repeats)


def activation_bytes(model: nn.Module, batch: tuple[Tensor, ...]) -> int:
    """Bytes autograd saves for backward in one forward + loss (each storage counted
    once; storages of parameters excluded: they exist whether or not we train)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _training_loss(model, batch)
    return sum(saved.values())


def cuda_peak_bytes(model: nn.Module, batch: tuple[Tensor, ...]) -> int | None:
    """Peak CUDA memory of one training step above what was allocated before; None on CPU."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    model.zero_grad(set_to_none=True)
    _training_loss(model, batch).backward()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def tensor_bytes(obj: Any) -> int:
    """Bytes of every tensor inside ``obj`` (dataclasses, tuples, lists, dicts), each
    storage once."""
    seen: dict[int, int] = {}

    def walk(x: Any) -> None:
        if isinstance(x, Tensor):
            seen[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        elif is_dataclass(x) and not isinstance(x, type):
            for value in vars(x).values():
                walk(value)
        elif isinstance(x, dict):
            for value in x.values():
                walk(value)
        elif isinstance(x, list | tuple):
            for value in x:
                walk(value)

    walk(obj)
    return sum(seen.values())


@torch.no_grad()
def decode_state_bytes(model: nn.Module, batch: tuple[Tensor, ...], steps: int) -> int:
    """Bytes of the decoder state after ``steps`` calls of ``model.step`` (argmax tokens)."""
    src, src_mask = batch[0], batch[1]
    model.eval()
    state = model.init_state(model.encode(src, src_mask), src_mask)
    y = torch.full((src.shape[0],), BOS, dtype=torch.long)  # (B,)
    for _ in range(steps):
        logits, state = model.step(y, state)  # (B, V)
        y = logits.argmax(-1)  # (B,)
    return tensor_bytes(state)


def decode_seconds(model: nn.Module, batch: tuple[Tensor, ...], t: int, repeats: int = 3) -> float:
    """Median time to encode B sources and greedily decode exactly t tokens each."""
    src, src_mask = batch[0], batch[1]
    model.eval()

    @torch.no_grad()
    def run() -> None:
        state = model.init_state(model.encode(src, src_mask), src_mask)
        greedy(model, state, src.shape[0], BOS, EOS, max_len=t, min_len=t, pad_id=PAD)

    return median_seconds(run, repeats)


@dataclass
class Point:
    """One measured configuration."""

    family: str
    t: int
    k: int
    d: int
    params: int
    train_s: float
    activation_bytes: int
    decode_s: float
    state_bytes: int
    peak_bytes: int | None = None


def measure(
    family: str, t: int, k: int, d: int, batch: int = 8, vocab: int = 64, repeats: int = 3
) -> Point:
    """Every metric of the module docstring for one (family, t, k, d)."""
    torch.manual_seed(0)
    model = build_model(family, k, d, vocab)
    data = random_batch(batch, t, vocab)
    return Point(
        family=family,
        t=t,
        k=k,
        d=d,
        params=sum(p.numel() for p in model.parameters()),
        train_s=train_step_seconds(model, data, repeats),
        activation_bytes=activation_bytes(model, data),
        decode_s=decode_seconds(model, data, t, repeats),
        state_bytes=decode_state_bytes(model, data, t),
        peak_bytes=cuda_peak_bytes(model, data),
    )


@dataclass(frozen=True)
class Fit:
    """cost ≈ C · x^exponent, least squares in log-log; r2 of that line."""

    exponent: float
    C: float
    r2: float


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """Least-squares line through (ln x, ln y): slope = exponent p, intercept = ln C.

    Needs at least two distinct positive x and positive y."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"need >= 2 (x, y) pairs of equal count, got {len(xs)} and {len(ys)}")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("a log-log fit needs positive x and y")
    lx = torch.tensor(xs, dtype=torch.float64).log()  # (N,)
    ly = torch.tensor(ys, dtype=torch.float64).log()  # (N,)
    dx = lx - lx.mean()
    if float((dx * dx).sum()) == 0.0:
        raise ValueError("a log-log fit needs at least two distinct x values")
    slope = (dx * (ly - ly.mean())).sum() / (dx * dx).sum()
    intercept = ly.mean() - slope * lx.mean()
    resid = ly - (intercept + slope * lx)
    total = ((ly - ly.mean()) ** 2).sum()
    r2 = 1.0 - float((resid**2).sum() / total) if float(total) > 0 else 1.0
    return Fit(float(slope), float(intercept.exp()), r2)


@dataclass(frozen=True)
class Sweep:
    """Axes swept one at a time around the base (t, k, d)."""

    t: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    k: tuple[int, ...] = (32, 64, 128, 256)
    d: tuple[int, ...] = (1, 2, 4)
    base: tuple[int, int, int] = (64, 32, 1)
    batch: int = 8
    vocab: int = 64
    repeats: int = 3


QUICK = Sweep(t=(4, 8), k=(8, 16), d=(1, 2), base=(4, 8, 1), batch=2, vocab=16, repeats=1)


def configurations(sweep: Sweep) -> list[tuple[str, int, int, int]]:
    """(axis, t, k, d) for every point of the sweep, base point once per axis."""
    t0, k0, d0 = sweep.base
    out = [("t", t, k0, d0) for t in sweep.t]
    out += [("k", t0, k, d0) for k in sweep.k]
    out += [("d", t0, k0, d) for d in sweep.d]
    return out


def run_sweep(
    sweep: Sweep,
    families: Iterable[str] = FAMILIES,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure every family over the sweep and fit the exponents per axis and metric.

    Returns a JSON-able record: "points" (axis + Point fields), "fits"
    [family][metric][axis] = {exponent, C, r2}, "notes" (the notes' table), the sweep."""
    points: list[dict[str, Any]] = []
    for family in families:
        for axis, t, k, d in configurations(sweep):
            p = measure(family, t, k, d, sweep.batch, sweep.vocab, sweep.repeats)
            points.append({"axis": axis, **asdict(p)})
            if log is not None:
                log(
                    f"{family:<14} t={t:<4} k={k:<4} d={d}  train {p.train_s * 1e3:8.2f} ms  "
                    f"act {p.activation_bytes / 2**20:7.2f} MiB  decode {p.decode_s * 1e3:8.1f} ms"
                )
    return {"sweep": asdict(sweep), "points": points, "fits": fit_all(points), "notes": NOTES}


def fit_all(points: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """fits[family][metric][axis] from the points swept along that axis; "t_top" fits
    only the 3 largest t (where the t² terms, if any, have taken over)."""
    fits: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for family in dict.fromkeys(p["family"] for p in points):
        fits[family] = {}
        for metric in METRICS:
            fits[family][metric] = {}
            for axis in ("t", "k", "d"):
                rows = [p for p in points if p["family"] == family and p["axis"] == axis]
                xs = [p[axis] for p in rows]
                ys = [p[metric] for p in rows]
                if len(set(xs)) >= 2 and min(ys, default=0) > 0:
                    fits[family][metric][axis] = asdict(fit_exponent(xs, ys))
                if axis == "t" and len(set(xs)) >= 4 and min(ys) > 0:
                    top = sorted(zip(xs, ys))[-3:]
                    fit = fit_exponent([x for x, _ in top], [y for _, y in top])
                    fits[family][metric]["t_top"] = asdict(fit)
    return fits
