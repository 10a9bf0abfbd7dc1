"""``seqlab export`` of Bengio et al.'s neural probabilistic LM (``nplm``), and the file read
back as a model of the LM contract (``seqlab.serve.export_lm`` has the loader).

The NPLM's state is the last n − 1 token ids read, a (B, n − 1) tensor, so one graph reads
a chunk and returns the logits and the window after it:

    lm  (x (B, T) long, window (B, n − 1) long) -> logits (B, T, V), window_out (B, n − 1)

B and T dynamic; generation calls it with T = 1. TorchScript files are traced; ONNX files
come from ``torch.onnx.export(dynamo=True)`` (the TorchScript-based exporter has no
``unfold`` with a dynamic length, which builds the n − 1 contexts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput
from seqlab.models.nplm import NPLMState
from seqlab.serve.export_transformer_lm import write_graph

NPLM = "nplm"
IO = (["x", "window"], ["logits", "window_out"])


class _Chunk(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, window: Tensor) -> tuple[Tensor, Tensor]:
        out = self.model(x, NPLMState(window))  # logits (B, T, V)
        return out.logits, out.state.window  # (B, T, V), (B, n−1)


def write_nplm(model: nn.Module, fmt: str, path: Path) -> dict[str, Any]:
    """Write the chunk graph of ``model`` (eval mode, CPU) to ``path``; its "lm" entry."""
    k = model.cfg.n - 1
    inputs = (torch.ones(2, 3, dtype=torch.long), torch.zeros(2, k, dtype=torch.long))
    dims = {"x": {0: "B", 1: "T"}, "window": {0: "B"}}
    write_graph(_Chunk(model).eval(), inputs, fmt, path, IO, dims)
    return {"inputs": IO[0], "outputs": IO[1], "window": k, "pad_id": model.pad_id,
            "files": {"chunk": path.name}}  # fmt: skip


class ExportedNPLM(nn.Module):
    """The exported chunk graph as an NPLM: ``init_state`` (the window full of the pad id,
    the eager model's start of stream), ``forward(x, state)``, ``step(x, state)``."""

    def __init__(self, run: Any, meta: dict[str, Any]) -> None:
        super().__init__()
        self.run, self.meta = run, meta
        self.k, self.pad_id = meta["lm"]["window"], meta["lm"]["pad_id"]
        self.cpu_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def init_state(self, batch_size: int, device: torch.device | str | None = None) -> NPLMState:
        return NPLMState(torch.full((batch_size, self.k), self.pad_id))  # (B, n−1)

    def forward(self, x: Tensor, state: NPLMState | None = None) -> LMOutput:
        """x (B, T) after ``state`` (None: the start of a stream) -> logits (B, T, V)."""
        if state is None:
            state = self.init_state(x.size(0))
        logits, window = self.run(x.contiguous(), state.window.to(x.dtype).contiguous())
        return LMOutput(logits, NPLMState(window))

    def step(self, x: Tensor, state: NPLMState | None) -> tuple[Tensor, NPLMState]:
        out = self.forward(x[:, None], state)  # (B, 1, V)
        return out.logits[:, 0], out.state
