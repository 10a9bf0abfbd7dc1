"""A run decoded through its exported files: ``seqlab translate|evaluate RUN --exported DIR``.

``ExportedModel`` presents the encoder and step that ``seqlab export`` wrote (TorchScript,
or ONNX run by onnxruntime) through the model contract the translation task decodes with
(DESIGN §6): ``encode`` runs the exported encoder and returns the initial decoder state,
``init_state`` passes it on, ``step`` runs the exported step, and ``forward`` (the
teacher-forced logits the task's loss reads) steps through the target prefix:

    logits[:, t] = step(y_in[:, t], state_t)          (B, T, V), state_0 = encoder(src)

So the run's own tokenizer, search settings, detokenisation and sacreBLEU evaluate the
exported files, and ``evaluate --exported`` can be set beside plain ``evaluate`` (same
BLEU, loss to float rounding: tests/serve/test_exported_model.py). A pointer-generator
run gets ``seqlab.serve.exported_pointer.ExportedPointerGenerator`` instead (its task
reads the teacher-forced p_gen and attention, which that class steps out of the files).

Shapes: encode(src (B, S), src_mask (B, S)) -> state; step(y_prev (B,), state) ->
logits (B, V), state; forward(src, src_mask, y_in (B, T), tgt_mask) -> (B, T, V)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.errors import SeqlabError
from seqlab.serve.export import ExportedDecoder, load_exported
from seqlab.serve.export_lm import load_exported_lm, read_meta


class ExportedModel(nn.Module):
    """The exported encoder and step as a model of the decoder contract (module doc)."""

    def __init__(self, encoder: Any, step: Any) -> None:
        super().__init__()
        self.decoder = ExportedDecoder(encoder, step)
        self.meta = step.meta
        # no weights of its own (they are in the files); an empty one says "CPU" to the
        # code that reads a model's device from its first parameter
        self.cpu_anchor = nn.Parameter(torch.zeros(0), requires_grad=False)
        state = self.meta.get("state", {})
        fields = {f["name"] for f in state.get("fields", [])}
        if "cov" in fields and "src_mask" in state.get("given", []):  # Bahdanau, Luong
            self.attention_coverage = _fields_coverage

    def encode(self, src: Tensor, src_mask: Tensor) -> Any:
        return self.decoder.init_state(src, src_mask)  # the initial state is the memory

    def init_state(self, memory: Any, src_mask: Tensor) -> Any:
        return memory

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        return self.decoder.step(y_prev, state)  # (B, V)

    @torch.no_grad()
    def forward(self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor) -> Tensor:
        state = self.encode(src, src_mask)
        logits = []
        for t in range(y_in.size(1)):  # left to right: position t reads y_<=t only
            out, state = self.step(y_in[:, t], state)
            logits.append(out.float())
        return torch.stack(logits, 1)  # (B, T, V)


def _fields_coverage(state: Any) -> tuple[Tensor, Tensor]:
    """What beam search's coverage penalty reads from an exported RNN state, as the eager
    model's ``attention_coverage``: Σ_k α_k over the steps taken and the source mask.

    Shapes: state with B rows -> (B, S) float, (B, S) bool
    """
    return state.tensors["cov"], state.tensors["src_mask"]


def use_exported(loaded: Any, folder: str | Path, threads: int | None = None) -> Any:
    """``loaded`` (a translation, pointer-generator or language-model run from
    ``seqlab.load``) with its model replaced by the
    files ``seqlab export`` wrote to ``folder``; refused, saying why, when they are not
    this run's kind of model or vocabulary."""
    folder = Path(folder)
    if not (folder / "export.json").is_file():
        raise SeqlabError(f"--exported {folder}: no export.json there; write it with seqlab export")
    if loaded.config.task not in ("translation", "copy_translation", "lm"):
        raise SeqlabError(
            f"--exported decodes translation, pointer-generator and language-model runs; "
            f"this run's task is {loaded.config.task}"
        )
    meta = read_meta(folder)
    vocab = {k: v for k, v in loaded.task.model_kwargs().items() if k != "pad_id"}
    if meta.get("model") != loaded.config.model or meta.get("vocab_sizes") != vocab:
        raise SeqlabError(
            f"--exported {folder}: its export.json is a '{meta.get('model')}' model with "
            f"vocabularies {meta.get('vocab_sizes')}; this run is a '{loaded.config.model}' "
            f"with {vocab}: export this run (seqlab export RUN --out DIR)"
        )
    if loaded.config.task == "lm":
        return dataclasses.replace(loaded, model=load_exported_lm(folder, meta, threads))
    encoder, step = load_exported(folder, threads=threads)
    if loaded.config.task == "copy_translation":
        from seqlab.serve.exported_pointer import ExportedPointerGenerator

        return dataclasses.replace(loaded, model=ExportedPointerGenerator(encoder, step))
    return dataclasses.replace(loaded, model=ExportedModel(encoder, step))
