"""``seqlab export`` for the RNN encoder–decoders (Sutskever, Cho, Bahdanau, Luong): the
encoder and one decoder step with the decoder state as named tensors.

Each of these models keeps its decoder state in a dataclass of batch-first tensors
(``BahdanauState``: s, h, U_a_h, src_mask, alpha, cov; ``LuongState``: h, c, h_tilde,
h_bar, keys_pre, src_mask, alpha, cov; …). The export flattens it by field name:

    encoder  (src (B, S) long, src_mask (B, S) bool) -> every field but src_mask, in the
             dataclass's order (what ``model.init_state(model.encode(src, src_mask),
             src_mask)`` holds)
    step     (y_prev (B,) long, [src_mask (B, S) bool,] every field but src_mask)
             -> logits (B, V), then each field the step changes (``<name>_out``)

Fields declared ``static_field`` (annotations, precomputed keys, the summary c, the
mask) are inputs of the step only: the step never changes them. Batch is dim 0 of every
field; the fields with a source axis have it on dim 1 (found by encoding two source
lengths). ``export.json`` lists the fields with their static flag and dynamic axes, and
``FieldsState`` / ``seqlab.serve.export.ExportedDecoder`` drive them by name.

Formats: TorchScript (``torch.jit.trace``) and ONNX from the TorchScript-based exporter
(``torch.onnx.export(dynamo=False)``), which writes the packed bidirectional encoder as
ONNX LSTM / GRU nodes with per-row ``sequence_lens``; ``torch.export`` (the dynamo path)
cannot trace ``pack_padded_sequence``, whose batch sizes depend on the lengths' values.
An encoder that runs a Python loop over time (a GRU with ``reset_after=False``, which
has no fused kernel) would be traced at one source length and is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io as io_module
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.state import is_static
from seqlab.errors import SeqlabError
from seqlab.nn.recurrent import Recurrent

RNN_MODELS = ("sutskever", "cho", "bahdanau", "luong")
MASK = "src_mask"


@dataclass(frozen=True)
class FieldLayout:
    """The decoder state's fields: names in dataclass order, which are static, which carry
    the source axis on dim 1, and whether the state holds the source mask."""

    state_cls: type
    names: tuple[str, ...]  # every field but src_mask
    static: frozenset[str]
    source_axis: frozenset[str]  # fields whose dim 1 is S
    has_mask: bool

    @property
    def dynamic(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.static)

    def io(self) -> tuple[tuple[list[str], list[str]], tuple[list[str], list[str]]]:
        """(encoder inputs, outputs), (step inputs, outputs) as names."""
        mask = [MASK] if self.has_mask else []
        encoder = (["src", MASK], list(self.names))
        step = (["y_prev", *mask, *self.names], ["logits", *(f"{n}_out" for n in self.dynamic)])
        return encoder, step

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": "fields",
            "fields": [
                {"name": n, "static": n in self.static, "source_axis": n in self.source_axis}
                for n in self.names
            ],
            "has_mask": self.has_mask,
        }


def _state(model: nn.Module, src: Tensor) -> Any:
    src_mask = src != PAD_ID  # (B, S)
    return model.init_state(model.encode(src, src_mask), src_mask)


def check_exportable(model: nn.Module, name: str) -> None:
    """Refuse a model whose encoder would be traced at one source length."""
    for module in model.modules():
        if isinstance(module, Recurrent) and not module.has_fused:
            raise SeqlabError(
                f"export: this '{name}' model has a GRU with reset_after=False, which runs "
                "a Python loop over time (no fused kernel), so its trace would hold one "
                "source length; train with model.reset_after=true to export it, or serve "
                "it with seqlab serve"
            )


def field_layout(model: nn.Module) -> FieldLayout:
    """Read the state's fields from two encodings (S = 5 and 6), so that the fields with
    a source axis are the ones whose dim 1 follows S."""
    with torch.no_grad():
        a = _state(model, torch.tensor([[5, 6, 7, 8, EOS_ID]]))
        b = _state(model, torch.tensor([[5, 6, 7, 8, 9, EOS_ID]]))
    fields = dataclasses.fields(a)
    names = tuple(f.name for f in fields if f.name != MASK)
    for n in names:
        if not isinstance(getattr(a, n), Tensor):
            raise SeqlabError(f"export: state field {n!r} of {type(a).__name__} is not a tensor")
    source = frozenset(
        n for n in names if getattr(a, n).dim() > 1 and getattr(a, n).shape != getattr(b, n).shape
    )
    return FieldLayout(
        type(a),
        names,
        frozenset(f.name for f in fields if is_static(f) and f.name != MASK),
        source,
        any(f.name == MASK for f in fields),
    )


class FieldsEncoder(nn.Module):
    """(src, src_mask) -> the initial state's fields (every one but src_mask)."""

    def __init__(self, model: nn.Module, layout: FieldLayout) -> None:
        super().__init__()
        self.model, self.names = model, layout.names

    def forward(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, ...]:
        state = self.model.init_state(self.model.encode(src, src_mask), src_mask)
        return tuple(getattr(state, n) for n in self.names)


class FieldsStep(nn.Module):
    """(y_prev, [src_mask,] fields…) -> (logits, the fields the step changes…)."""

    def __init__(self, model: nn.Module, layout: FieldLayout) -> None:
        super().__init__()
        self.model, self.layout = model, layout

    def forward(self, y_prev: Tensor, *inputs: Tensor) -> tuple[Tensor, ...]:
        names = ((MASK,) if self.layout.has_mask else ()) + self.layout.names
        state = self.layout.state_cls(**dict(zip(names, inputs)))
        logits, new = self.model.step(y_prev, state)  # (B, V)
        return (logits, *(getattr(new, n) for n in self.layout.dynamic))


def example_inputs(
    model: nn.Module, layout: FieldLayout
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Inputs to trace with: 2 × 5 source tokens (one padded) and the state they encode to."""
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [5, 6, EOS_ID, PAD_ID, PAD_ID]])  # (2, 5)
    src_mask = src != PAD_ID  # (2, 5)
    with torch.no_grad():  # distinct tensors: a tracer takes one tensor passed twice
        # (Luong's alpha and cov both start as the same zeros) for one input
        fields = tuple(t.clone() for t in FieldsEncoder(model, layout).eval()(src, src_mask))
    mask = (src_mask,) if layout.has_mask else ()
    return (src, src_mask), (torch.tensor([BOS_ID, BOS_ID]), *mask, *fields)


def write(
    model: nn.Module, layout: FieldLayout, fmt: str, paths: list[Path]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trace or export the encoder and the step to ``paths[0]``, ``paths[1]``; their
    input/output names for ``export.json``."""
    enc_inputs, step_inputs = example_inputs(model, layout)
    (enc_in, enc_out), (step_in, step_out) = layout.io()
    # fresh wrappers are in training mode: an exporter that restores their mode after
    # tracing would switch the model's dropout on with them
    encoder, step = FieldsEncoder(model, layout).eval(), FieldsStep(model, layout).eval()
    with warnings.catch_warnings():
        # the encoder's length checks become constants of the trace; tests prove the
        # files equal to the eager model at other batch sizes and source lengths
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        if fmt == "torchscript":
            torch.jit.trace(encoder, enc_inputs, check_trace=False).save(str(paths[0]))
            torch.jit.trace(step, step_inputs, check_trace=False).save(str(paths[1]))
        else:
            axes = _dynamic_axes(layout)
            for module, inputs, names, outputs, path in (
                (encoder, enc_inputs, enc_in, enc_out, paths[0]),
                (step, step_inputs, step_in, step_out, paths[1]),
            ):
                quiet = contextlib.redirect_stdout(io_module.StringIO())
                with quiet, _without_packed_shape_notes():
                    torch.onnx.export(
                        module,
                        inputs,
                        str(path),
                        input_names=names,
                        output_names=outputs,
                        dynamic_axes={n: axes[n] for n in names + outputs if n in axes},
                        dynamo=False,
                        opset_version=17,
                    )
    return {"inputs": enc_in, "outputs": enc_out}, {"inputs": step_in, "outputs": step_out}


_PACKED_SHAPE_NOTES = ("shape inference of prim::PackPadded", "shape inference of prim::PadPacked")
# torch's C++ exporter warns that it has no shape rule for the packed sequence; the ONNX
# LSTM / GRU nodes it writes take the lengths themselves, and tests/serve/
# test_export_rnn.py proves the files equal to the eager model at other shapes


@contextlib.contextmanager
def _without_packed_shape_notes() -> Iterator[None]:
    """Hold what C++ writes to stderr (fd 2) meanwhile; give back every line but the
    exporter's notes on packed sequences."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            kept = [
                line
                for line in text.splitlines(True)
                if not any(note in line for note in _PACKED_SHAPE_NOTES)
            ]
            if kept:
                sys.stderr.write("".join(kept))


def _dynamic_axes(layout: FieldLayout) -> dict[str, dict[int, str]]:
    axes: dict[str, dict[int, str]] = {
        "src": {0: "B", 1: "S"},
        MASK: {0: "B", 1: "S"},
        "y_prev": {0: "B"},
        "logits": {0: "B"},
    }
    for n in layout.names:
        dims = {0: "B", 1: "S"} if n in layout.source_axis else {0: "B"}
        axes[n] = axes[f"{n}_out"] = dims
    return axes


@dataclass
class FieldsState:
    """An exported RNN step's state for seqlab's searches: the named fields, batch on
    dim 0. ``reorder`` index_selects every field, except the static ones (and the mask)
    when beam search reorders within an input's block of hypotheses (``within_inputs``),
    exactly as ``reorder_state`` treats the eager state's ``static_field``s.

    Shapes: fields[name] (B, …); src_mask (B, S) bool or None
    """

    fields: dict[str, Tensor]
    static: frozenset[str]
    src_mask: Tensor | None

    def reorder(self, index: Tensor, within_inputs: bool = False) -> FieldsState:
        """Rows ``index`` of every field.  index (B',) -> batch B'."""
        keep = self.static if within_inputs else frozenset()
        fields = {n: t if n in keep else t.index_select(0, index) for n, t in self.fields.items()}
        mask = self.src_mask
        if mask is not None and not within_inputs:
            mask = mask.index_select(0, index)  # (B', S)
        return FieldsState(fields, self.static, mask)


class FieldsDriver:
    """Calls an exported RNN encoder and step by the names in ``export.json``."""

    def __init__(self, meta: dict[str, Any]) -> None:
        fields = meta["state"]["fields"]
        self.names = [f["name"] for f in fields]
        self.static = frozenset(f["name"] for f in fields if f["static"])
        self.has_mask = bool(meta["state"]["has_mask"])
        self.dynamic = [n for n in self.names if n not in self.static]

    def init_state(self, encoder: Any, src: Tensor, src_mask: Tensor) -> FieldsState:
        outputs = encoder(src, src_mask)
        return FieldsState(
            dict(zip(self.names, outputs)), self.static, src_mask if self.has_mask else None
        )

    def step(self, step: Any, y_prev: Tensor, state: FieldsState) -> tuple[Tensor, FieldsState]:
        mask = (state.src_mask,) if self.has_mask else ()
        logits, *changed = step(y_prev, *mask, *(state.fields[n] for n in self.names))
        fields = {**state.fields, **dict(zip(self.dynamic, changed))}
        return logits, FieldsState(fields, self.static, state.src_mask)
