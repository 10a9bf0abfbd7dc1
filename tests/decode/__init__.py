"""Decoders shared by the seqlab.decode tests.

- ``ScriptedDecoder``: next-token probabilities looked up by prefix in a hand-written
  table, so every search result can be checked by hand.
- ``AttnGRUDecoder``: a small random neural decoder (GRU cell + dot attention over a
  padded memory) whose state is a dataclass, for invariants (beam 1 == greedy, batched ==
  unbatched, score == recomputed log P).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from seqlab.nn.masks import masked_softmax, padding_mask

# Token ids of the scripted vocabulary (V = 4); BOS is only ever fed, never predicted.
EOS, A, B_, C = 0, 1, 2, 3
BOS = 3
PAD = -1  # deliberately not a vocabulary id: padding must never be fed to a decoder


@dataclass
class ScriptState:
    """prefix: (B, t) tokens emitted so far; steps: calls made (an int, passes reorder)."""

    prefix: Tensor
    steps: int = 0


class ScriptedDecoder:
    """p(y | prefix) from ``table[prefix]`` (probabilities over V = 4), else ``default``.

    Records the batch size of every step() call in ``batch_sizes``.
    """

    def __init__(self, table: dict[tuple[int, ...], list[float]], default: list[float]) -> None:
        self.table = table
        self.default = default
        self.batch_sizes: list[int] = []

    def init_state(self, batch_size: int) -> ScriptState:
        return ScriptState(torch.zeros(batch_size, 0, dtype=torch.long))  # (B, 0)

    def step(self, y_prev: Tensor, state: ScriptState) -> tuple[Tensor, ScriptState]:
        self.batch_sizes.append(y_prev.size(0))
        prefix = state.prefix
        if state.steps > 0:  # the first y_prev is BOS, not part of the prefix
            prefix = torch.cat([prefix, y_prev[:, None]], dim=1)  # (B, t)
        rows = [self.table.get(tuple(p), self.default) for p in prefix.tolist()]
        p = torch.tensor(rows, dtype=torch.float64)  # (B, V)
        return p.log(), ScriptState(prefix, state.steps + 1)  # (B, V)


def log(p: float) -> float:
    return math.log(p)


@dataclass
class AttnGRUState:
    """h (B, D); memory (B, S, D) padded; mask (B, S) bool True = real; t steps taken."""

    h: Tensor
    memory: Tensor
    mask: Tensor
    t: int = 0


class AttnGRUDecoder(nn.Module):
    """h_t = GRU(E[y_{t−1}], h_{t−1}); α = softmax_mask(memory h_t); c = Σ α memory;
    logits = W [h_t; c] + b, plus ``eos_bias + eos_ramp · t`` on EOS at step t (so that
    hypotheses of many lengths compete)."""

    def __init__(
        self,
        V: int = 7,
        D: int = 8,
        eos_id: int = 0,
        eos_bias: float = 0.0,
        eos_ramp: float = 0.0,
    ) -> None:
        super().__init__()
        self.eos_id, self.eos_ramp = eos_id, eos_ramp
        self.embed = nn.Embedding(V, D)
        self.cell = nn.GRUCell(D, D)
        self.out = nn.Linear(2 * D, V)
        with torch.no_grad():
            self.out.bias[eos_id] += eos_bias
        self.double().eval()

    def init_state(self, memory: Tensor, mask: Tensor) -> AttnGRUState:
        m = mask[:, :, None].to(memory.dtype)  # (B, S, 1)
        h = (memory * m).sum(1) / m.sum(1)  # (B, D) mean of the real positions
        return AttnGRUState(torch.tanh(h), memory, mask)

    def step(self, y_prev: Tensor, state: AttnGRUState) -> tuple[Tensor, AttnGRUState]:
        h = self.cell(self.embed(y_prev), state.h)  # (B, D)
        scores = (state.memory @ h[:, :, None]).squeeze(2)  # (B, S)
        alpha = masked_softmax(scores, state.mask)  # (B, S)
        c = (alpha[:, :, None] * state.memory).sum(1)  # (B, D)
        logits = self.out(torch.cat([h, c], dim=1))  # (B, V)
        logits[:, self.eos_id] += self.eos_ramp * (state.t + 1)
        return logits, replace(state, h=h, t=state.t + 1)


def padded_memory(memories: list[Tensor], S: int, seed: int = 1) -> tuple[Tensor, Tensor]:
    """Stack per-sentence memories (S_i, D) into (B, S, D) padded with random garbage."""
    g = torch.Generator().manual_seed(seed)
    D = memories[0].size(1)
    out = torch.randn(len(memories), S, D, generator=g, dtype=torch.float64) * 5  # (B, S, D)
    for i, m in enumerate(memories):
        out[i, : m.size(0)] = m
    lengths = torch.tensor([m.size(0) for m in memories])  # (B,)
    return out, padding_mask(lengths, S)  # (B, S, D), (B, S)


def random_memories(lengths: list[int], D: int = 8, seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, D, generator=g, dtype=torch.float64) for n in lengths]
