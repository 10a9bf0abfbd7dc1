"""``seqlab export``: a translation checkpoint (the Transformer, and the RNN
encoder–decoders of ``seqlab.serve.export_rnn``) as TorchScript or ONNX — the
encoder and one decoder step with its state as explicit tensors — plus reference loops
that run the exported step: ``greedy_exported`` and ``beam_exported`` (seqlab's own
``beam_search`` driving the exported files through ``ExportedDecoder``), checked equal
to eager decoding in tests/serve/test_export.py. A language model has no encoder: its
graphs are written by ``seqlab.serve.export_lm`` (and, per family,
``export_transformer_lm`` and ``export_fields_lm``) into the same kind of folder.

Files written to ``out`` (``.pt`` for TorchScript, ``.onnx`` for ONNX), for the Transformer:

    encoder      (src (B, S) long, src_mask (B, S) bool)
                 -> memory (B, S, D), cross_k (L, B, H, S, Dh), cross_v (L, B, H, S, Dh)
    step         (y_prev (B,) long, src_mask (B, S) bool, self_k (L, B, H, t, Dh),
                  self_v (L, B, H, t, Dh), cross_k, cross_v)
                 -> logits (B, V), self_k (L, B, H, t+1, Dh), self_v (L, B, H, t+1, Dh)
    export.json  format, model config, vocabulary sizes, BOS / EOS / PAD ids, the
                 encoder's and the step's input / output names, the state's layout

The self-attention caches start empty (t = 0). TorchScript files are traced
(``torch.jit.trace``): the cache length and the positional offset stay dynamic because
they are read from the cache's shape. ONNX files come from ``torch.onnx.export(dynamo=True)``
with B, S and t declared dynamic (needs the ``onnx`` and ``onnxscript`` packages;
``onnxruntime`` runs them in ``load_exported``). The RNN encoder–decoders' state is a
dataclass of named tensors, exported field by field (``export_rnn``); so are ConvS2S's
(its buffers of past inputs and its position, ``export_codec``) and the
pointer-generator's (with its per-batch extended vocabulary).
"""

from __future__ import annotations

import contextlib
import io as io_module
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.decode.greedy import MaxLen
from seqlab.decode.state import DecodeResult
from seqlab.errors import SeqlabError
from seqlab.nn.multihead import KVCache
from seqlab.nn.transformer_decoder import DecoderLayerState, TransformerDecoderState
from seqlab.serve.export_fields_lm import STATES as FIELDS_LMS
from seqlab.serve.export_fields_lm import write_fields_lm
from seqlab.serve.export_lm import LM_MODEL, check_lm_exportable, write_lm
from seqlab.serve.export_rnn import (
    FIELDS_MODELS,
    POINTER_GENERATOR,
    FieldsDriver,
    FieldsState,
    check_exportable,
    decode_rule,
    field_layout,
    unk_rule,
)
from seqlab.serve.export_rnn import write as write_fields
from seqlab.serve.export_transformer_lm import TRANSFORMER_LM, write_transformer_lm


class _Encoder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        memory = self.model.encode(src, src_mask)  # (B, S, D)
        state = self.model.init_state(memory, src_mask)
        cross_k = torch.stack([layer.cross_kv.k for layer in state.layers])  # (L, B, H, S, Dh)
        cross_v = torch.stack([layer.cross_kv.v for layer in state.layers])  # (L, B, H, S, Dh)
        return memory, cross_k, cross_v


class _Step(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        y_prev: Tensor,
        src_mask: Tensor,
        self_k: Tensor,
        self_v: Tensor,
        cross_k: Tensor,
        cross_v: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        layers = [
            DecoderLayerState(KVCache(self_k[i], self_v[i]), KVCache(cross_k[i], cross_v[i]))
            for i in range(cross_k.size(0))
        ]
        logits, state = self.model.step(y_prev, TransformerDecoderState(layers, src_mask))
        new_k = torch.stack([layer.self_kv.k for layer in state.layers])  # (L, B, H, t+1, Dh)
        new_v = torch.stack([layer.self_kv.v for layer in state.layers])  # (L, B, H, t+1, Dh)
        return logits, new_k, new_v


FORMATS = {"torchscript": ".pt", "onnx": ".onnx"}
ENCODER_IO = (["src", "src_mask"], ["memory", "cross_k", "cross_v"])
STEP_IO = (
    ["y_prev", "src_mask", "self_k", "self_v", "cross_k", "cross_v"],
    ["logits", "self_k_out", "self_v_out"],
)


FAMILIES = {"transformer": "translation", **dict.fromkeys(FIELDS_MODELS, "translation"),
            POINTER_GENERATOR: "copy_translation"}  # fmt: skip
"""The model families with an exportable decoder step, and their task."""


def _check(task: str, name: str, model: nn.Module, fmt: str) -> None:
    if fmt not in FORMATS:
        raise SeqlabError(f"export: unknown format {fmt!r}: use torchscript or onnx")
    if task == "lm":
        check_lm_exportable(name, model)
    elif FAMILIES.get(name) != task:
        raise SeqlabError(
            f"export: a '{name}' model of task '{task}' cannot be exported: only the "
            "Transformer, the RNN encoder-decoders and ConvS2S "
            f"({', '.join(FIELDS_MODELS)}) of task translation, the pointer-generator "
            "of task copy_translation and the recurrent language models (rnn_lm) have an "
            "exportable decoder step (their state is plain tensors); serve the others "
            "with seqlab serve"
        )
    if name not in ("transformer", LM_MODEL, TRANSFORMER_LM, *FIELDS_LMS):
        check_exportable(model, name)
    if fmt == "onnx":
        try:
            import onnx  # noqa: F401
            import onnxscript  # noqa: F401
        except ImportError as exc:
            raise SeqlabError(
                f"export --format onnx needs the onnx and onnxscript packages ({exc}): "
                "pip install 'seqlab[export]', or use --format torchscript"
            ) from None


@contextlib.contextmanager
def _quiet_registration() -> Iterator[None]:
    """torch.onnx's dynamo exporter logs a warning for each torchvision operator it cannot
    register when torchvision is not installed (seqlab does not use it); hold those back."""
    logger = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _onnx(module: nn.Module, inputs: tuple[Tensor, ...], io: tuple, dims: dict, path: Path):
    names, outputs = io
    quiet = contextlib.redirect_stdout(io_module.StringIO())
    with quiet, _quiet_registration(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # notes on merged dynamic axis names
        warnings.simplefilter("ignore", FutureWarning)  # torch's own pytree deprecations
        torch.onnx.export(
            module,
            inputs,
            str(path),
            input_names=names,
            output_names=outputs,
            dynamo=True,
            # by name, or (a module taking *args) one entry per input in order
            dynamic_shapes=dims if isinstance(dims, tuple) else {n: dims[n] for n in names},
            verbose=False,
        )


def _examples(model: nn.Module) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Inputs to trace with: a batch of 2 × 5 source tokens and a cache of 2 positions."""
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [5, 6, EOS_ID, PAD_ID, PAD_ID]])  # (2, 5)
    src_mask = src != PAD_ID  # (2, 5)
    _, cross_k, cross_v = _Encoder(model)(src, src_mask)
    L, B, H, _, Dh = cross_k.shape
    self_kv = torch.zeros(L, B, H, 2, Dh)  # (L, B, H, 2, Dh)
    y = torch.tensor([BOS_ID, BOS_ID])  # (2,)
    return (src, src_mask), (y, src_mask, self_kv, self_kv.clone(), cross_k, cross_v)


def export(loaded: Any, out: str | Path, fmt: str = "torchscript") -> list[Path]:
    """Write a loaded run's encoder, decoder step and ``export.json`` to ``out``; their
    paths."""
    config = loaded.config
    vocab = {k: v for k, v in loaded.task.model_kwargs().items() if k != "pad_id"}
    info = {"config": config.to_dict()["model"], "vocab_sizes": vocab,
            "checkpoint": {"path": str(loaded.checkpoint), "step": loaded.step}}  # fmt: skip
    if config.model == POINTER_GENERATOR:  # the run's <unk> rule, applied at each step
        info["decode"] = decode_rule(loaded.task.cfg, loaded.model.V_size)
    return export_model(loaded.model, config.model, out, fmt, task=config.task, info=info)


@torch.no_grad()
def export_model(
    model: nn.Module,
    name: str,
    out: str | Path,
    fmt: str = "torchscript",
    task: str = "translation",
    info: dict[str, Any] | None = None,
) -> list[Path]:
    """Write ``model`` (a translation model of family ``name``) as encoder, decoder step
    and ``export.json`` (with ``info`` merged in) to ``out``; their paths. Nothing is
    written when the model cannot be exported. The model is traced in eval mode on the
    CPU and left in the mode and on the device it came in (an exporter that restores
    the mode of a fresh wrapper module would otherwise leave it in training mode)."""
    _check(task, name, model, fmt)
    was_training = model.training
    device = next(model.parameters()).device
    try:
        return _export_eval(model.eval().cpu(), name, Path(out), fmt, info)
    finally:
        model.train(was_training).to(device)


def _export_eval(
    model: nn.Module, name: str, out: Path, fmt: str, info: dict[str, Any] | None
) -> list[Path]:
    """Write the files into a fresh folder beside ``out``, then move them into ``out``,
    ``export.json`` last: an export that fails leaves ``out`` as it was, and a folder with
    an ``export.json`` holds that export's files (each move is atomic). Every file the
    exporters wrote moves, the ONNX weights the dynamo exporter keeps beside a graph
    (``encoder.onnx.data``) included."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-", dir=out.parent) as tmp:
        written = _write_files(model, name, Path(tmp), fmt, info)
        out.mkdir(exist_ok=True)
        (out / "export.json").unlink(missing_ok=True)  # the old set is incomplete from here
        meta = written[-1]  # export.json
        for path in sorted(Path(tmp).iterdir()):
            if path != meta:
                os.replace(path, out / path.name)
        os.replace(meta, out / meta.name)
    return [out / p.name for p in written]


def _write_files(
    model: nn.Module, name: str, out: Path, fmt: str, info: dict[str, Any] | None
) -> list[Path]:
    ext = FORMATS[fmt]
    if name in (LM_MODEL, TRANSFORMER_LM, *FIELDS_LMS):  # no encoder (export_lm)
        if name == LM_MODEL:
            paths = [out / f"lm{ext}", out / f"lm_step{ext}", out / "export.json"]
            lm = write_lm(model, fmt, paths[:2])
        elif name == TRANSFORMER_LM:
            paths = [out / f"lm{ext}", out / "export.json"]
            lm = write_transformer_lm(model, fmt, paths[0])
        else:
            paths = [out / f"lm{ext}", out / "export.json"]
            lm = write_fields_lm(model, name, fmt, paths[0])
        meta = {"format": fmt, "model": name, "task": "lm", **(info or {}), "lm": lm}
        paths[-1].write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return paths
    paths = [out / f"encoder{ext}", out / f"step{ext}", out / "export.json"]
    if name != "transformer":
        layout = field_layout(model, name)
        encoder_io, step_io = write_fields(model, name, layout, fmt, paths)
        state = layout.to_json()
    else:
        _write_transformer(model, fmt, paths)
        encoder_io = {"inputs": ENCODER_IO[0], "outputs": ENCODER_IO[1]}
        step_io = {"inputs": STEP_IO[0], "outputs": STEP_IO[1]}
        state = {"layout": "kv_cache"}
    meta = {
        "format": fmt,
        "model": name,
        **(info or {}),
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "pad_id": PAD_ID,
        "encoder": encoder_io,
        "step": step_io,
        "state": state,
    }
    if (positions := position_tables(model, name)) is not None:
        meta["positions"] = positions
    paths[2].write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return paths


def position_tables(model: nn.Module, name: str) -> dict[str, int] | None:
    """How many source and target positions the exported graphs have vectors for: their
    position tables are constants of the export (the eager sinusoidal table grows
    instead; ``seqlab.nn.positional``), so a longer source or a longer decode has no
    vector there. None for the families without positions (the RNNs, the
    pointer-generator)."""
    if name == "convs2s":
        return {"source": model.src_pos.max_len, "target": model.tgt_pos.max_len}
    if name == "transformer":
        pos = model.pos
        n = pos.PE.size(0) if hasattr(pos, "PE") else pos.max_len
        return {"source": n, "target": n}
    return None


def _write_transformer(model: nn.Module, fmt: str, paths: list[Path]) -> None:
    enc_inputs, step_inputs = _examples(model)
    encoder, step = _Encoder(model).eval(), _Step(model).eval()  # eval: see export_model
    with warnings.catch_warnings():
        # shape checks in the layers become constants of the trace; the test proves the
        # exported step equal to the eager one at other batch sizes and cache lengths
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13: TorchScript too
        if fmt == "torchscript":
            torch.jit.trace(encoder, enc_inputs, check_trace=False).save(str(paths[0]))
            torch.jit.trace(step, step_inputs, check_trace=False).save(str(paths[1]))
            return
        B, S, t = torch.export.Dim("B"), torch.export.Dim("S"), torch.export.Dim("t")
        dims = {
            "src": {0: B, 1: S},
            "src_mask": {0: B, 1: S},
            "y_prev": {0: B},
            "self_k": {1: B, 3: t},
            "self_v": {1: B, 3: t},
            "cross_k": {1: B, 3: S},
            "cross_v": {1: B, 3: S},
        }
        _onnx(encoder, enc_inputs, ENCODER_IO, dims, paths[0])
        _onnx(step, step_inputs, STEP_IO, dims, paths[1])


class _OnnxRunner:
    """An onnxruntime session called like the TorchScript module: tensors in and out.

    ``inputs`` are the declared input names (``export.json``), in call order; the
    exporter drops an input the graph never reads (an RNN step's last attention weights,
    which it only writes), so each tensor is fed by its name, and unread ones are skipped.
    """

    def __init__(self, path: Path, inputs: list[str], threads: int | None = None) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # no busy-waiting between ops: torch's own OpenMP threads run between the calls
        # (argmax, the search), and two spinning pools on the same cores starve each
        # other (2 threads: 9.6 ms a Luong step with spinning, 3.6 ms without, this CPU)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads is not None:  # else onnxruntime's default: one per physical core
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), options)
        self.inputs = inputs
        self.read = {i.name for i in self.session.get_inputs()}

    def __call__(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        feed = {n: x.numpy() for n, x in zip(self.inputs, tensors) if n in self.read}
        return tuple(torch.from_numpy(y) for y in self.session.run(None, feed))


class ExportedModule:
    """One exported file (TorchScript module or onnxruntime session) as a callable of
    tensors returning a tuple of tensors, with its folder's ``export.json`` as ``meta``."""

    def __init__(self, run: Any, meta: dict[str, Any]) -> None:
        self.run, self.meta = run, meta

    def __call__(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        out = self.run(*inputs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def load_exported(
    folder: str | Path, threads: int | None = None
) -> tuple[ExportedModule, ExportedModule]:
    """(encoder, step) callables of an ``export`` folder, either format: tensors in, a
    tuple of tensors out (the signatures in ``export.json`` and the module docs).
    ``threads``: onnxruntime's intra-op threads for ONNX files (None: its default, one
    per physical core); TorchScript runs on torch's threads (``torch.set_num_threads``)."""
    folder = Path(folder)
    meta = json.loads((folder / "export.json").read_text(encoding="utf-8"))
    if meta.get("task") == "lm":
        raise SeqlabError(
            f"{folder} holds a language model's export (one graph, no encoder): read it "
            "with seqlab.serve.export_lm.load_exported_lm, or seqlab generate|score "
            "RUN --exported DIR"
        )
    ext = FORMATS[meta["format"]]
    files = folder / f"encoder{ext}", folder / f"step{ext}"
    if meta["format"] == "onnx":
        names = meta["encoder"]["inputs"], meta["step"]["inputs"]
        encoder, step = (_OnnxRunner(f, n, threads) for f, n in zip(files, names))
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            encoder, step = (torch.jit.load(str(f)) for f in files)
    return ExportedModule(encoder, meta), ExportedModule(step, meta)


@torch.no_grad()
def greedy_exported(
    encoder: Any,
    step: Any,
    src: Tensor,
    src_mask: Tensor,
    max_len: int,
    extra: dict[str, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Reference greedy loop over the exported step (any exported family, through
    ``ExportedDecoder``): tokens (B, T) (PAD after EOS) and log P (B,).
    Shapes: src, src_mask (B, S); ``extra``: the encoder's other inputs by name (the
    pointer-generator's ``src_ext``, ``oov`` …; ``export.json``'s encoder inputs)."""
    decoder = ExportedDecoder(encoder, step)
    state = decoder.init_state(src, src_mask, **(extra or {}))
    B = src.size(0)
    y = torch.full((B,), BOS_ID, dtype=torch.long)  # (B,)
    done = torch.zeros(B, dtype=torch.bool)  # (B,)
    tokens, log_p = [], torch.zeros(B)
    for _ in range(max_len):
        logits, state = decoder.step(y, state)  # (B, V)
        lp = torch.log_softmax(logits.float(), -1)  # (B, V)
        y = lp.argmax(-1)  # (B,)
        log_p += torch.where(done, 0.0, lp.gather(1, y[:, None])[:, 0])  # (B,)
        tokens.append(torch.where(done, PAD_ID, y))
        done |= y == EOS_ID
        if bool(done.all()):
            break
    return torch.stack(tokens, 1), log_p  # (B, T), (B,)


@dataclass
class ExportedState:
    """The exported step's state as a decoder state for seqlab's searches.

    The caches keep the exported layout, batch on dim 1 (not dim 0 as the state contract
    says), so the class reorders itself: ``reorder`` index_selects dim 1 of the caches
    and dim 0 of the mask. ``cross_k``, ``cross_v`` and ``src_mask`` never change after
    the encoder (static, like the eager ``TransformerDecoderState``'s): with
    ``within_inputs=True`` (beam search's per-step reorder) they are kept as they are.

    Shapes: self_k, self_v (L, B, H, t, Dh); cross_k, cross_v (L, B, H, S, Dh);
            src_mask (B, S) bool
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Tensor
    cross_v: Tensor
    src_mask: Tensor

    def reorder(self, index: Tensor, within_inputs: bool = False) -> ExportedState:
        """Rows ``index`` of every batch axis.  index (B',) -> batch B'."""
        self_k = self.self_k.index_select(1, index)  # (L, B', H, t, Dh)
        self_v = self.self_v.index_select(1, index)  # (L, B', H, t, Dh)
        if within_inputs:
            return ExportedState(self_k, self_v, self.cross_k, self.cross_v, self.src_mask)
        return ExportedState(
            self_k,
            self_v,
            self.cross_k.index_select(1, index),  # (L, B', H, S, Dh)
            self.cross_v.index_select(1, index),  # (L, B', H, S, Dh)
            self.src_mask.index_select(0, index),  # (B', S)
        )


class ExportedDecoder:
    """The exported encoder and step behind the decoder-step contract
    (``seqlab.decode.state.StepDecoder``), so ``greedy`` / ``beam_search`` run on them
    unchanged: ``init_state`` runs the exported encoder, ``step`` the exported step. The
    state's layout comes from ``export.json`` (``step.meta``, set by ``load_exported``):
    the Transformer's caches (``ExportedState``) or named fields
    (``seqlab.serve.export_rnn.FieldsState``). A pointer-generator's decode-time rule
    for ``<unk>`` (``export.json`` "decode": the run's ``unk_to_copy`` or ``block_unk``)
    is applied to each step's log P as the task applies it."""

    def __init__(self, encoder: Any, step: Any) -> None:
        self.encoder, self.exported_step = encoder, step
        meta = getattr(step, "meta", None) or {}
        layout = meta.get("state", {}).get("layout", "kv_cache")
        self.fields = FieldsDriver(meta) if layout == "fields" else None
        self.rule = unk_rule(meta.get("decode"))
        self.positions = meta.get("positions")

    def _check_position(self, what: str, n: int) -> None:
        """A clear error where the exported graphs have no position vector for position
        ``n`` − 1 (``position_tables``), instead of ONNX Runtime's index error or a
        silently clamped slice."""
        if self.positions is not None and n > self.positions[what]:
            raise SeqlabError(
                f"the exported model has position vectors for {self.positions[what]} "
                f'{what} positions (export.json "positions"), and this decode needs '
                f"{n}: "
                + (
                    "use shorter sources"
                    if what == "source"
                    else "lower the decode's maximum length (--max-len-a / --max-len-b)"
                )
                + ", or decode from the checkpoint without --exported"
            )

    def init_state(
        self, src: Tensor, src_mask: Tensor, **extra: Tensor
    ) -> ExportedState | FieldsState:
        """Encoder outputs (and empty self-attention caches).  src, src_mask (B, S);
        ``extra``: the encoder's other inputs by name (the pointer-generator's)."""
        self._check_position("source", src.size(1))
        if self.fields is not None:
            inputs = {"src": src, "src_mask": src_mask, **extra}
            return self.fields.init_state(self.encoder, inputs)
        _, cross_k, cross_v = self.encoder(src, src_mask)  # (L, B, H, S, Dh) each
        L, B, H, _, Dh = cross_k.shape
        empty = cross_k.new_zeros(L, B, H, 0, Dh)  # (L, B, H, 0, Dh)
        return ExportedState(empty, empty.clone(), cross_k, cross_v, src_mask)

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        """y_prev (B,) long -> logits (B, V), the next state."""
        if isinstance(state, ExportedState):
            self._check_position("target", state.self_k.size(3) + 1)
        elif "steps" in state.tensors:  # ConvS2S: the position is the width of "steps"
            self._check_position("target", state.tensors["steps"].size(1) + 1)
        if self.fields is not None:
            logits, state = self.fields.step(self.exported_step, y_prev, state)
            return self.rule(logits), state
        logits, self_k, self_v = self.exported_step(
            y_prev, state.src_mask, state.self_k, state.self_v, state.cross_k, state.cross_v
        )
        return logits, ExportedState(self_k, self_v, state.cross_k, state.cross_v, state.src_mask)


@torch.no_grad()
def beam_exported(
    encoder: Any,
    step: Any,
    src: Tensor,
    src_mask: Tensor,
    max_len: MaxLen,
    beam_size: int = 4,
    n_best: int = 1,
    alpha: float = 0.0,
    min_len: int = 0,
    extra: dict[str, Tensor] | None = None,
) -> DecodeResult:
    """Reference beam loop over the exported step: ``seqlab.decode.beam_search`` itself
    (same selection, length penalty, stop rule, per-input ``max_len``) driving
    ``ExportedDecoder``; the eager search's result for the same settings.

    Shapes: src, src_mask (B, S); max_len int or (B,) long; ``extra`` as in
    ``greedy_exported`` -> DecodeResult with tokens (B, N, T), lengths, scores,
    log_probs (B, N)."""
    decoder = ExportedDecoder(encoder, step)
    return beam_search(
        decoder,
        decoder.init_state(src, src_mask, **(extra or {})),
        src.size(0),
        BOS_ID,
        EOS_ID,
        max_len,
        beam_size=beam_size,
        n_best=n_best,
        alpha=alpha,
        min_len=min_len,
        pad_id=PAD_ID,
    )
