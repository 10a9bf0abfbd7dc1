"""Recurrent variants of ``benchmarks/peers.py``: seqlab's ``Recurrent`` (fused path) vs
``torch.nn.LSTM`` / ``torch.nn.GRU`` on the same shapes (../shared/docs/PEERS.md §4).

Workload: 2 layers, input 256, hidden 512, sequence 35, batch 64 (2,240 tokens per step),
forward + backward of loss = mean(out²) with respect to the weights and the input (as in
a language model, whose input is an embedding), no optimizer. seqlab's ``Recurrent``
assembles torch's flat weight list from its cells on every call (so gradients reach the
cells) and runs the same native kernel; the comparison measures what that costs.

FLOPs per step (:func:`rnn_flops`): 3 × Σ_layers 2 · gates · H · (in_l + H) per token,
gates = 4 (LSTM) or 3 (GRU), in_l = input size for layer 0 and H above; the elementwise
gate maths is not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmarks.peers_timing import peer_autocast
from seqlab.nn.recurrent import Recurrent

GATES = {"lstm": 4, "gru": 3}
TORCH = {"lstm": nn.LSTM, "gru": nn.GRU}


@dataclass(frozen=True)
class RNNShape:
    """Layers, input and hidden width, sequence length T and batch B."""

    layers: int = 2
    input_size: int = 256
    hidden: int = 512
    seq: int = 35
    batch: int = 64


def rnn_flops(kind: str, s: RNNShape) -> int:
    """Matmul FLOPs of one forward + backward step (module doc)."""
    per_token = sum(
        2 * GATES[kind] * s.hidden * ((s.input_size if layer == 0 else s.hidden) + s.hidden)
        for layer in range(s.layers)
    )
    return 3 * per_token * s.seq * s.batch


def build_rnn(impl: str, kind: str, s: RNNShape) -> nn.Module:
    """``impl`` "seqlab" (``Recurrent``) or "nn" (``nn.LSTM`` / ``nn.GRU``, batch first)."""
    if impl == "seqlab":
        return Recurrent(kind, s.input_size, s.hidden, num_layers=s.layers)  # type: ignore[arg-type]
    if impl == "nn":
        return TORCH[kind](s.input_size, s.hidden, num_layers=s.layers, batch_first=True)
    raise ValueError(f"unknown implementation {impl!r}; choose seqlab or nn")


def rnn_rep(
    module: nn.Module,
    s: RNNShape,
    precision: str,
    steps: int,
    seed: int = 0,
    device: str = "cpu",
) -> Callable[[], int]:
    """One repetition: ``steps`` forward + backward passes on ``device`` (the module is
    moved there); returns the tokens processed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(s.batch, s.seq, s.input_size, generator=g)  # (B, T, D)
    x = x.to(device).requires_grad_()
    module.to(device).train()

    def run() -> int:
        for _ in range(steps):
            cast = peer_autocast(precision, device)
            with cast:
                out: Tensor = module(x)[0]  # (B, T, H)
            loss = out.float().pow(2).mean()
            loss.backward()
            module.zero_grad(set_to_none=True)
            x.grad = None
        return steps * s.batch * s.seq

    return run
