"""``seqlab export`` of a recurrent language model (``rnn_lm``: the notes' RNN, GRU and
LSTM LMs, Zaremba et al. 2014), and the files read back as a model of the LM contract
(``seqlab generate|score|evaluate|check RUN --exported DIR``).

A language model has no encoder: one graph reads a chunk of the stream from a state and
returns the logits and the state after it,

    lm       (x (B, T) long, h (B, L, H)[, c (B, L, H)])
             -> logits (B, T, V), h_out (B, L, H)[, c_out (B, L, H)]
    lm_step  (x (B,) long, h[, c]) -> logits (B, V), h_out[, c_out]

(c for an LSTM only), with B and T dynamic: ``lm`` scores a whole chunk in one call
through the fused recurrent kernel, ``lm_step`` reads one token per call through the
cells (what ``generate`` feeds), h (and c) carried between calls as truncated BPTT
carries them between chunks. Two graphs because the fused path assembles torch's flat
weight list from the cells on every call, which at T = 1 costs more than the step
(docs/perf-notes-avx2.md §57: TorchScript sampled 4× slower than eager through ``lm``).
TorchScript files are traced (``torch.jit.trace``), ONNX files written by torch.onnx's
TorchScript-based exporter (``dynamo=False``: the fused recurrent layers become ONNX RNN /
GRU / LSTM nodes).
``export.json`` holds the format, model config, vocabulary size, the run's checkpoint,
and under "lm" the graphs' input / output names and files, the state's L and H.

``ExportedLM`` presents the file through the contract ``seqlab.tasks.lm_infer`` and
``seqlab.tasks.lm`` use: ``init_state(B)`` (zeros, the start of a stream), ``forward(x,
state)`` -> ``LMOutput(logits, state)``, ``step(x (B,), state)`` -> logits (B, V).

The Transformer LM's export is ``seqlab.serve.export_transformer_lm`` (a KV cache graph),
the NPLM's and the pointer sentinel LM's ``seqlab.serve.export_fields_lm`` (their state's
fixed-size tensors by name).
"""

from __future__ import annotations

import contextlib
import io as io_module
import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.errors import SeqlabError
from seqlab.models.lm_common import LMOutput
from seqlab.models.rnn_lm import RNNLMState
from seqlab.serve.export_fields_lm import STATES, ExportedFieldsLM
from seqlab.serve.export_transformer_lm import TRANSFORMER_LM, ExportedTransformerLM

LM_MODEL = "rnn_lm"


class _Chunk(nn.Module):
    """(x, h[, c]) -> (logits, h_out[, c_out]) through the model's fused layers."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, h: Tensor, c: Tensor | None = None) -> tuple[Tensor, ...]:
        out = self.model(x, RNNLMState(h, c), fused=True)  # logits (B, T, V)
        state = out.state
        return (out.logits, state.h) if c is None else (out.logits, state.h, state.c)


class _Step(nn.Module):
    """(x (B,), h[, c]) -> (logits (B, V), h_out[, c_out]) through the model's cells."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, h: Tensor, c: Tensor | None = None) -> tuple[Tensor, ...]:
        logits, state = self.model.step(x, RNNLMState(h, c))  # (B, V)
        return (logits, state.h) if c is None else (logits, state.h, state.c)


def lm_io(model: nn.Module) -> tuple[list[str], list[str]]:
    """The graph's input and output names (c only for an LSTM)."""
    if model.is_lstm:
        return ["x", "h", "c"], ["logits", "h_out", "c_out"]
    return ["x", "h"], ["logits", "h_out"]


def write_lm(model: nn.Module, fmt: str, paths: list[Path]) -> dict[str, Any]:
    """Write the chunk graph and the one-token step graph of ``model`` (eval mode, CPU)
    to ``paths``; its "lm" entry of ``export.json``."""
    state = model.init_state(2, "cpu")
    carried = (state.h, state.c) if model.is_lstm else (state.h,)
    names, outputs = lm_io(model)
    graphs = (
        (_Chunk(model).eval(), (torch.ones(2, 3, dtype=torch.long), *carried), {0: "B", 1: "T"}),
        (_Step(model).eval(), (torch.ones(2, dtype=torch.long), *carried), {0: "B"}),
    )  # B = 2, T = 3 traced: both dynamic
    # shape checks become constants of the trace; the tests prove the files equal to the
    # eager model at other batch sizes and chunk lengths
    for (module, inputs, dims), path in zip(graphs, paths, strict=True):
        state_axes = {n: {0: "B"} for n in names[1:] + outputs[1:]}
        write_graph(module, inputs, fmt, path, (names, outputs), {"x": dims, **state_axes},
                    dynamo=False, out_dims={"logits": dims})  # fmt: skip
    cfg = model.cfg
    return {"inputs": names, "outputs": outputs, "layers": cfg.layers, "hidden": cfg.hidden,
            "cell": cfg.cell, "files": {"chunk": paths[0].name, "step": paths[1].name}}  # fmt: skip


def write_graph(
    module: nn.Module,
    inputs: tuple[Tensor, ...],
    fmt: str,
    path: Path,
    io: tuple,
    dims: dict,
    dynamo: bool = True,
    out_dims: dict | None = None,
) -> None:
    """``module`` traced (TorchScript) or exported to ONNX at ``inputs``, the sizes named in
    ``dims`` ({input: {axis: name}}) dynamic: by the dynamo exporter, or with ``dynamo=False``
    by the TorchScript-based one (``out_dims``: the outputs' dynamic axes it needs)."""
    from seqlab.serve.export import _onnx

    with warnings.catch_warnings():
        for kind in (torch.jit.TracerWarning, DeprecationWarning, UserWarning, FutureWarning):
            warnings.simplefilter("ignore", kind)
        if fmt == "torchscript":
            torch.jit.trace(module, inputs, check_trace=False).save(str(path))
            return
        if not dynamo:
            axes = {**dims, **(out_dims or {})}
            axes = {n: axes[n] for n in io[0] + io[1] if n in axes}
            with contextlib.redirect_stdout(io_module.StringIO()):
                torch.onnx.export(module, inputs, str(path), input_names=io[0],
                                  output_names=io[1], dynamo=False, opset_version=17,
                                  dynamic_axes=axes)  # fmt: skip
            return
        names: dict[str, Any] = {}
        shapes = tuple({a: names.setdefault(d, torch.export.Dim(d)) for a, d in dims[n].items()}
                       if n in dims else None for n in io[0])  # fmt: skip
        _onnx(module, inputs, io, shapes, path)


def check_lm_exportable(name: str, model: nn.Module) -> None:
    """Refuse, before anything is written, the LMs whose state is not fixed-size tensors
    and recurrent layers without a fused kernel (a Python loop the trace would unroll)."""
    if name == TRANSFORMER_LM or name in STATES:
        return
    if name != LM_MODEL:
        raise SeqlabError(
            f"export: a '{name}' language model has no export (rnn_lm, transformer_lm, "
            f"{', '.join(STATES)} have one); sample from it with seqlab generate or serve"
        )
    if not model.rnn.has_fused:
        raise SeqlabError(
            f"export: this rnn_lm's '{model.cfg.cell}' layers have no fused kernel (a "
            "Python loop over time, which a trace would fix to one length); train with "
            "the default cell settings to export it, or serve it with seqlab serve"
        )


class ExportedLM(nn.Module):
    """The exported chunk graph as a language model (module doc).  ``run``: the loaded
    file, a callable of tensors returning a tuple; ``meta``: its ``export.json``."""

    def __init__(self, run: Any, meta: dict[str, Any], run_step: Any = None) -> None:
        super().__init__()
        self.run, self.run_step, self.meta = run, run_step, meta
        lm = meta["lm"]
        self.layers, self.hidden, self.is_lstm = lm["layers"], lm["hidden"], lm["cell"] == "lstm"
        # no weights of its own; an empty one says "CPU" to code reading a model's device
        self.cpu_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def init_state(self, batch_size: int, device: torch.device | str = "cpu") -> RNNLMState:
        """Zeros, the start of a stream.  -> h, c (B, L, H)"""
        h = torch.zeros(batch_size, self.layers, self.hidden)  # (B, L, H)
        return RNNLMState(h, torch.zeros_like(h) if self.is_lstm else None)

    def forward(self, x: Tensor, state: RNNLMState | None = None) -> LMOutput:
        """x (B, T) from ``state`` (None: zeros) -> logits (B, T, V), the state after."""
        out = self.run(*self._inputs(x, state))
        return LMOutput(out[0], RNNLMState(out[1], out[2] if self.is_lstm else None))

    def _inputs(self, x: Tensor, state: RNNLMState | None) -> tuple[Tensor, ...]:
        """x, h[, c] as the graphs take them (zeros for ``state`` None)."""
        if state is None:
            state = self.init_state(x.size(0))
        carried = (state.h, state.c) if self.is_lstm else (state.h,)
        return tuple(t.contiguous() for t in (x, *carried))

    def step(self, x: Tensor, state: RNNLMState | None) -> tuple[Tensor, RNNLMState]:
        """One token per row, through the step graph (the chunk graph with T = 1 where
        the export has none).  x (B,) -> logits (B, V)."""
        if self.run_step is None:
            out = self.forward(x[:, None], state)
            return out.logits[:, 0], out.state
        out = self.run_step(*self._inputs(x, state))
        return out[0], RNNLMState(out[1], out[2] if self.is_lstm else None)


def load_exported_lm(folder: Path, meta: dict[str, Any], threads: int | None = None) -> nn.Module:
    """The graphs of an LM export folder (either format) as an ``ExportedLM`` (rnn_lm) or
    an ``ExportedTransformerLM``."""
    from seqlab.serve.export import ExportedModule, _OnnxRunner

    files = meta["lm"]["files"]
    runs = {}
    for role, name in files.items():
        if meta["format"] == "onnx":
            run: Any = _OnnxRunner(folder / name, meta["lm"]["inputs"], threads)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                run = torch.jit.load(str(folder / name))
        runs[role] = ExportedModule(run, meta)
    if meta["model"] == TRANSFORMER_LM:
        return ExportedTransformerLM(runs["chunk"], meta)
    if meta["model"] in STATES:
        return ExportedFieldsLM(runs["chunk"], meta)
    return ExportedLM(runs["chunk"], meta, runs.get("step"))


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "export.json").read_text(encoding="utf-8"))
