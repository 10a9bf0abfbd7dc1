"""``seqlab export`` for the RNN encoder–decoders (Sutskever, Cho, Bahdanau, Luong), ConvS2S
and the pointer-generator: the encoder and one decoder step with the decoder state as
named tensors (ConvS2S's list of buffers and int position through its codec,
``seqlab.serve.export_codec``).

Each of these models keeps its decoder state in a dataclass of batch-first tensors
(``BahdanauState``: s, h, U_a_h, src_mask, alpha, cov; ``LuongState``: h, c, h_tilde,
h_bar, keys_pre, src_mask, alpha, cov; …). The export flattens it by field name:

    encoder  (src (B, S) long, src_mask (B, S) bool) -> every field but src_mask, in the
             dataclass's order (what ``model.init_state(model.encode(src, src_mask),
             src_mask)`` holds)
    step     (y_prev (B,) long, [src_mask (B, S) bool,] every field but src_mask)
             -> logits (B, V), then each field the step changes (``<name>_out``)

Fields declared ``static_field`` (annotations, precomputed keys, the summary c, the
mask) are inputs of the step only: the step never changes them. The pointer-generator's
encoder also takes ``src_ext``, ``oov`` (B, n_oov; its width is n_oov, the state's int
field, read as a traced size) and its n-gram / statistics inputs, and its step reads
``src_mask``, ``src_ext`` and ``oov`` again (``FieldLayout.given`` / ``sizes``).
Batch is dim 0 of every field; the fields with a source axis have it on dim 1 (found by
encoding two source lengths). ``export.json`` lists the fields with their static flag
and dynamic axes, and ``FieldsState`` / ``seqlab.serve.export.ExportedDecoder`` drive
them by name.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.errors import SeqlabError
from seqlab.nn.recurrent import Recurrent
from seqlab.serve.export_codec import DataclassCodec, codec_of

FIELDS_MODELS = ("sutskever", "cho", "bahdanau", "luong", "convs2s")  # state: named tensors
MASK = "src_mask"
POINTER_GENERATOR = "pointer_generator"
SIZES = {"n_oov": "oov"}  # an int field of the state -> the input whose dim 1 is that int


def encoder_inputs(model: nn.Module, name: str) -> list[str]:
    """The exported encoder's inputs: the source and its mask; for the pointer-generator
    also its extended ids ``src_ext`` (B, S), ``oov`` (B, n_oov) (only its width is read:
    n_oov, the number of extended ids) and, when the model reads them, the character
    n-gram ids ``src_grams`` (B, S, G) and word statistics ``src_stats`` (B, S, F)."""
    if name != POINTER_GENERATOR:
        return ["src", MASK]
    extra = ["src_grams"] if model.src_gram_embed is not None else []
    extra += ["src_stats"] if model.src_stat_proj is not None else []
    return ["src", MASK, "src_ext", "oov", *extra]


def encode_state(model: nn.Module, name: str, inputs: dict[str, Tensor]) -> Any:
    """The model's initial decoder state for the encoder inputs ``inputs`` (by name)."""
    src, src_mask = inputs["src"], inputs[MASK]
    if name != POINTER_GENERATOR:
        return model.init_state(model.encode(src, src_mask), src_mask)
    memory = model.encode(
        src,
        src_mask,
        inputs["src_ext"],
        inputs["oov"].shape[1],  # n_oov, a traced size
        src_grams=inputs.get("src_grams"),
        src_stats=inputs.get("src_stats"),
    )
    return model.init_state(memory, src_mask)


def example_batch(model: nn.Module, name: str, S: int) -> dict[str, Tensor]:
    """Encoder inputs of 2 sources of S tokens (the second padded after 3), by name."""
    row = [5 + i for i in range(S - 1)] + [EOS_ID]
    src = torch.tensor([row, [5, 6, EOS_ID] + [PAD_ID] * (S - 3)])  # (2, S)
    inputs = {"src": src, MASK: src != PAD_ID}
    if name == POINTER_GENERATOR:
        V = model.V_size
        src_ext = src.clone()
        src_ext[0, 1], src_ext[1, 0] = V, V + 1  # two source words outside the vocabulary
        inputs["src_ext"] = src_ext
        inputs["oov"] = torch.zeros(2, 2, dtype=torch.long)  # n_oov = 2
        if model.src_gram_embed is not None:
            K = model.src_gram_embed.num_embeddings - 1
            grams = torch.arange(1, 2 * S * 3 + 1).remainder(K).add(1).view(2, S, 3)
            inputs["src_grams"] = grams.masked_fill(src[..., None] == PAD_ID, 0)  # (2, S, 3)
        if model.src_stat_proj is not None:
            F_ = model.src_stat_proj.in_features
            inputs["src_stats"] = torch.linspace(0, 1, 2 * S * F_).view(2, S, F_)
    return {n: inputs[n] for n in encoder_inputs(model, name)}


@dataclass(frozen=True)
class FieldLayout:
    """The exported signatures of one model: the encoder's inputs; the state's fields
    that are encoder inputs (``given``: the mask, the pointer-generator's extended ids),
    its int fields carried as the width of an input (``sizes``: n_oov as ``oov``), and
    the rest (``names``, in dataclass order: the encoder's outputs), which of those are
    static and which have the source axis on dim 1."""

    state_cls: type
    codec: DataclassCodec
    inputs: tuple[str, ...]
    given: tuple[str, ...]
    sizes: dict[str, str]
    names: tuple[str, ...]
    static: frozenset[str]
    source_axis: frozenset[str]

    @property
    def dynamic(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.static)

    @property
    def step_state_inputs(self) -> tuple[str, ...]:
        return (*self.given, *self.sizes.values(), *self.names)

    def io(self) -> tuple[tuple[list[str], list[str]], tuple[list[str], list[str]]]:
        """(encoder inputs, outputs), (step inputs, outputs) as names."""
        encoder = (list(self.inputs), list(self.names))
        outputs = ["logits", *(f"{n}_out" for n in self.dynamic)]
        return encoder, (["y_prev", *self.step_state_inputs], outputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": "fields",
            "fields": [
                {"name": n, "static": n in self.static, "source_axis": n in self.source_axis}
                for n in self.names
            ],
            "given": list(self.given),
            "sizes": dict(self.sizes),
        }


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


def field_layout(model: nn.Module, name: str) -> FieldLayout:
    """Read the state's fields (through the family's codec) from two encodings (S = 5 and
    6), so that the fields with a source axis are the ones whose dim 1 follows S."""
    codec = codec_of(model, name)
    with torch.no_grad():
        a, b = (encode_state(model, name, example_batch(model, name, S)) for S in (5, 6))
    inputs = tuple(encoder_inputs(model, name))
    sizes = {f: i for f, i in SIZES.items() if f in {x.name for x in dataclasses.fields(a)}}
    fa, fb = codec.fields(a, frozenset(sizes)), codec.fields(b, frozenset(sizes))
    given = tuple(n for n in fa if n in inputs)
    names = tuple(n for n in fa if n not in given)
    for n in names:
        if not isinstance(fa[n], Tensor):
            raise SeqlabError(f"export: state field {n!r} of {type(a).__name__} is not a tensor")
    source = frozenset(n for n in names if fa[n].dim() > 1 and fa[n].shape[1] != fb[n].shape[1])
    static = codec.static(a) & frozenset(names)
    return FieldLayout(type(a), codec, inputs, given, sizes, names, static, source)


class FieldsEncoder(nn.Module):
    """(the encoder inputs…) -> the initial state's fields ``layout.names``."""

    def __init__(self, model: nn.Module, name: str, layout: FieldLayout) -> None:
        super().__init__()
        self.model, self.name, self.layout = model, name, layout

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        state = encode_state(self.model, self.name, dict(zip(self.layout.inputs, inputs)))
        fields = self.layout.codec.fields(state, frozenset(self.layout.sizes))
        return tuple(fields[n] for n in self.layout.names)


class FieldsStep(nn.Module):
    """(y_prev, given…, sizes…, fields…) -> (logits, the fields the step changes…)."""

    def __init__(self, model: nn.Module, layout: FieldLayout) -> None:
        super().__init__()
        self.model, self.layout = model, layout

    def forward(self, y_prev: Tensor, *inputs: Tensor) -> tuple[Tensor, ...]:
        by_name = dict(zip(self.layout.step_state_inputs, inputs))
        fields = {n: by_name[n] for n in (*self.layout.given, *self.layout.names)}
        sizes = {f: by_name[i].shape[1] for f, i in self.layout.sizes.items()}  # traced sizes
        state = self.layout.codec.state(self.layout.state_cls, fields, sizes)
        logits, new = self.model.step(y_prev, state)
        out = self.layout.codec.fields(new, frozenset(self.layout.sizes))
        return (logits, *(out[n] for n in self.layout.dynamic))


def example_inputs(
    model: nn.Module, name: str, layout: FieldLayout
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Inputs to trace with: ``example_batch`` (2 × 5 sources, one padded) and the state
    they encode to."""
    batch = example_batch(model, name, 5)
    with torch.no_grad():  # distinct tensors: a tracer takes one tensor passed twice
        # (Luong's alpha and cov both start as the same zeros) for one input
        out = FieldsEncoder(model, name, layout).eval()(*batch.values())
        by_name = {**batch, **{n: t.clone() for n, t in zip(layout.names, out)}}
    state = tuple(by_name[n] for n in layout.step_state_inputs)
    return tuple(batch.values()), (torch.tensor([BOS_ID, BOS_ID]), *state)


def write(
    model: nn.Module, name: str, layout: FieldLayout, fmt: str, paths: list[Path]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Trace or export the encoder and the step to ``paths[0]``, ``paths[1]``; their
    input/output names for ``export.json``."""
    enc_inputs, step_inputs = example_inputs(model, name, layout)
    (enc_in, enc_out), (step_in, step_out) = layout.io()
    # fresh wrappers are in training mode: an exporter that restores their mode after
    # tracing would switch the model's dropout on with them
    encoder = FieldsEncoder(model, name, layout).eval()
    step = FieldsStep(model, layout).eval()
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
                with quiet, _without_packed_shape_notes(), _readable_gram_mean(model):
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


@contextlib.contextmanager
def _readable_gram_mean(model: nn.Module) -> Iterator[None]:
    """A pointer-generator's n-gram mean as the masked mean meanwhile: torch.onnx has no
    EmbeddingBag with a padding id (``PointerGenerator.gram_mean``, equal by test)."""
    before = getattr(model, "fused_gram_mean", None)
    if before is None:
        yield
        return
    model.fused_gram_mean = False
    try:
        yield
    finally:
        model.fused_gram_mean = before


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
        "src_ext": {0: "B", 1: "S"},
        "oov": {0: "B", 1: "n_oov"},
        "src_grams": {0: "B", 1: "S", 2: "G"},
        "src_stats": {0: "B", 1: "S"},
        "y_prev": {0: "B"},
        "logits": {0: "B", 1: "V_ext"} if layout.sizes else {0: "B"},  # V + n_oov
    }
    for n in layout.names:  # batch, the source axis, and the codec's own (ConvS2S's t)
        dims = {0: "B", 1: "S"} if n in layout.source_axis else {0: "B"}
        free = layout.codec.free_axes.get(n, {})
        axes[n] = {**dims, **free}
        axes[f"{n}_out"] = {**dims, **{d: f"{a}_out" for d, a in free.items()}}
    return axes


@dataclass
class FieldsState:
    """An exported step's state for seqlab's searches: its inputs by name (the fields,
    and the encoder inputs the step reads again: the mask, the extended ids, ``oov``),
    batch on dim 0. ``reorder`` index_selects every one, except the static ones when
    beam search reorders within an input's block of hypotheses (``within_inputs``),
    exactly as ``reorder_state`` treats the eager state's ``static_field``s.

    Shapes: tensors[name] (B, …)
    """

    tensors: dict[str, Tensor]
    static: frozenset[str]

    def reorder(self, index: Tensor, within_inputs: bool = False) -> FieldsState:
        """Rows ``index`` of every tensor.  index (B',) -> batch B'."""
        keep = self.static if within_inputs else frozenset()
        return FieldsState(
            {n: t if n in keep else t.index_select(0, index) for n, t in self.tensors.items()},
            self.static,
        )


class FieldsDriver:
    """Calls an exported encoder and step of the ``fields`` layout by the names in
    ``export.json``: the state holds every step input but ``y_prev``."""

    def __init__(self, meta: dict[str, Any]) -> None:
        state = meta["state"]
        self.encoder_inputs = list(meta["encoder"]["inputs"])
        self.names = [f["name"] for f in state["fields"]]
        self.step_inputs = list(meta["step"]["inputs"])[1:]  # after y_prev
        self.carried = [*state["given"], *state["sizes"].values()]  # encoder inputs
        self.static = frozenset(f["name"] for f in state["fields"] if f["static"])
        self.static |= frozenset(self.carried)
        self.dynamic = [o[: -len("_out")] for o in meta["step"]["outputs"][1:]]

    def init_state(self, encoder: Any, inputs: dict[str, Tensor]) -> FieldsState:
        """Run the encoder on ``inputs`` (every name of ``encoder_inputs``)."""
        missing = [n for n in self.encoder_inputs if n not in inputs]
        if missing:
            raise SeqlabError(
                f"exported encoder: inputs {missing} are missing; it takes "
                f"{self.encoder_inputs} (export.json)"
            )
        outputs = encoder(*(inputs[n] for n in self.encoder_inputs))
        tensors = {**{n: inputs[n] for n in self.carried}, **dict(zip(self.names, outputs))}
        return FieldsState(tensors, self.static)

    def step(self, step: Any, y_prev: Tensor, state: FieldsState) -> tuple[Tensor, FieldsState]:
        logits, *changed = step(y_prev, *(state.tensors[n] for n in self.step_inputs))
        tensors = {**state.tensors, **dict(zip(self.dynamic, changed))}
        return logits, FieldsState(tensors, state.static)


def decode_rule(task_cfg: Any, vocab_size: int) -> dict[str, Any]:
    """``export.json``'s "decode" of a copy_translation run: its decode-time treatment of
    ``<unk>`` ("to_copy", "blocked", "replace" or "allowed") and V."""
    if getattr(task_cfg, "unk_to_copy", False):
        unk = "to_copy"
    elif getattr(task_cfg, "block_unk", False):
        unk = "blocked"
    elif getattr(task_cfg, "replace_unk", False):
        unk = "replace"  # after decoding (attention); not a step rule
    else:
        unk = "allowed"
    return {"unk": unk, "vocab_size": vocab_size, "unk_id": UNK_ID}


def unk_rule(decode: dict[str, Any] | None) -> Callable[[Tensor], Tensor]:
    """The step rule of an export's "decode" (``decode_rule``): log P (B, V + n_oov) ->
    log P with ``<unk>``'s mass moved to the copies, or with ``<unk>`` −∞, or as it is."""
    from seqlab.tasks.copy_translation_decode import forbid_unk, unk_to_copy

    unk = (decode or {}).get("unk", "allowed")
    if unk == "to_copy":
        return lambda log_p: unk_to_copy(log_p, decode["vocab_size"], decode["unk_id"])
    if unk == "blocked":
        return lambda log_p: forbid_unk(log_p, decode["unk_id"])
    return lambda log_p: log_p
