"""``seqlab export`` of the language models whose state is a few fixed-size tensors: Bengio
et al.'s NPLM (``nplm``: the last n − 1 ids read) and Merity et al.'s pointer sentinel
LSTM (``pointer_sentinel``: the LSTM's h and c, and the pointer window's L − 1 outputs,
ids and filled flags); and the file read back as a model of the LM contract
(``seqlab.serve.export_lm`` has the loader).

One graph reads a chunk from the state, the state flattened by field name:

    lm  (x (B, T) long, <field> (B, …) …) -> logits (B, T, V), [gate (B, T),
        pointer (B, T, L − 1 + T),] <field>_out (B, …) …

(gate and pointer: the pointer sentinel's g and a_i, what ``explain`` shows), B and T
dynamic; generation calls it with T = 1. ``export.json`` "lm" lists the fields and each
one's start-of-stream value (every field of ``init_state`` is one constant: the pad id,
zeros, False), from which ``ExportedFieldsLM.init_state`` rebuilds it. TorchScript files
are traced; ONNX files come from the dynamo exporter for the NPLM (the TorchScript-based
one has no ``unfold`` of a dynamic length) and from the TorchScript-based one for the
pointer sentinel (its LSTM becomes an ONNX LSTM node).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput
from seqlab.models.nplm import NPLMState
from seqlab.models.pointer_sentinel import PointerSentinelState

STATES: dict[str, type] = {"nplm": NPLMState, "pointer_sentinel": PointerSentinelState}
EXTRAS = {"pointer_sentinel": ("gate", "pointer")}
DYNAMO = {"nplm": True, "pointer_sentinel": False}


def field_names(name: str) -> list[str]:
    names = [f.name for f in dataclasses.fields(STATES[name])]
    assert len(names) <= 5, "_Chunk takes at most five fields"
    return names


class _Chunk(nn.Module):
    """(x, fields…) -> (logits, extras…, fields_out…) through the model's forward."""

    def __init__(self, model: nn.Module, name: str) -> None:
        super().__init__()
        self.model, self.cls, self.extras = model, STATES[name], EXTRAS.get(name, ())
        self.names = field_names(name)

    def forward(
        self, x: Tensor, f0: Tensor, f1: Tensor | None = None, f2: Tensor | None = None,
        f3: Tensor | None = None, f4: Tensor | None = None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        # the fields by position, not *fields: the dynamo exporter wants one entry per input
        fields = [f for f in (f0, f1, f2, f3, f4) if f is not None][: len(self.names)]
        out = self.model(x, self.cls(*fields))  # logits (B, T, V)
        extras = (out.extras[e] for e in self.extras)
        return (out.logits, *extras, *(getattr(out.state, n) for n in self.names))


def write_fields_lm(model: nn.Module, name: str, fmt: str, path: Path) -> dict[str, Any]:
    """Write the chunk graph of ``model`` (eval mode, CPU) to ``path``; its "lm" entry."""
    from seqlab.serve.export_lm import write_graph

    names, extras = field_names(name), EXTRAS.get(name, ())
    start = model.init_state(1, "cpu")
    init = {}
    for n in names:
        t = getattr(start, n)  # (1, …)
        if not bool((t == t.flatten()[0]).all()):
            raise ValueError(f"{name}: init_state's {n} is not one constant")
        init[n] = {"shape": list(t.shape[1:]), "dtype": str(t.dtype).removeprefix("torch."),
                   "fill": t.flatten()[0].item()}  # fmt: skip
    state = model.init_state(2, "cpu")
    inputs = (torch.ones(2, 3, dtype=torch.long), *(getattr(state, n) for n in names))
    io = (["x", *names], ["logits", *extras, *(f"{n}_out" for n in names)])
    dims = {"x": {0: "B", 1: "T"}, **{n: {0: "B"} for n in names}}
    out_dims = {"logits": {0: "B", 1: "T"}, "gate": {0: "B", 1: "T"},
                "pointer": {0: "B", 1: "T", 2: "P"}}  # fmt: skip
    out_dims.update({f"{n}_out": {0: "B"} for n in names})
    write_graph(_Chunk(model, name).eval(), inputs, fmt, path, io, dims,
                dynamo=DYNAMO[name], out_dims=out_dims)  # fmt: skip
    return {"inputs": io[0], "outputs": io[1], "fields": names, "extras": list(extras),
            "init": init, "files": {"chunk": path.name}}  # fmt: skip


class ExportedFieldsLM(nn.Module):
    """The exported chunk graph as the NPLM or the pointer sentinel LM: ``init_state``
    (the eager model's start of stream, from ``export.json``), ``forward(x, state)``
    (with the pointer sentinel's gate and pointer in ``extras``), ``step(x, state)``."""

    def __init__(self, run: Any, meta: dict[str, Any]) -> None:
        super().__init__()
        self.run, self.meta = run, meta
        lm = meta["lm"]
        self.cls, self.names, self.extras = STATES[meta["model"]], lm["fields"], lm["extras"]
        self.init = lm["init"]
        self.cpu_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def init_state(self, batch_size: int, device: torch.device | str | None = None) -> Any:
        fields = [torch.full((batch_size, *f["shape"]), f["fill"], dtype=getattr(torch, f["dtype"]))
                  for f in (self.init[n] for n in self.names)]  # fmt: skip
        return self.cls(*fields)

    def forward(self, x: Tensor, state: Any = None) -> LMOutput:
        """x (B, T) after ``state`` (None: the start of a stream) -> logits (B, T, V)."""
        if state is None:
            state = self.init_state(x.size(0))
        out = self.run(x.contiguous(), *(getattr(state, n).contiguous() for n in self.names))
        k = 1 + len(self.extras)
        extras = dict(zip(self.extras, out[1:k]))
        return LMOutput(out[0], self.cls(*out[k:]), extras)

    def step(self, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        out = self.forward(x[:, None], state)  # (B, 1, V)
        return out.logits[:, 0], out.state
