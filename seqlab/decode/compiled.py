"""Decoding through a compiled decoder step (opt-in; docs/decoding.md "Compiled decoding").

A Transformer's decoder step is one query row per hypothesis: for 32 rows in bf16 it is
~1,100 small operators, and each 32-row linear layer spends about half its time
reordering its weight into oneDNN's blocked layout. ``torch.compile(model.step,
dynamic=True)`` with inductor's **weight freezing** makes the step one graph whose linear
weights are packed once, as constants: on a 2-core avx512_bf16 CPU greedy decoding ran
1.73–1.82× the eager step and beam 5 1.21×, with the same tokens in float32
(docs/perf-notes-measured.md §23). The first pass over the shapes of a search compiles
(~50–70 s there); the compiled step is kept per model and reused.

Freezing copies the weights into the compiled code, so the compiled step is for inference
only: :func:`compiled_decoder` records the weights' in-place version counters and compiles
again when they have changed (an optimizer step, ``load_state_dict``), so a stale step is
never used; steps always run without autograd.
"""

from __future__ import annotations

import os
import shutil
import weakref
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.errors import SeqlabError

_COMPILED: weakref.WeakKeyDictionary[nn.Module, CompiledStep] = weakref.WeakKeyDictionary()


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend (inductor) would use: ``$CXX``, else
    g++ or clang++ on PATH; None if there is none."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def _weight_versions(model: nn.Module) -> tuple[int, ...]:
    """The in-place version counter of every parameter and buffer (bumped by optimizer
    steps, ``copy_``, ``load_state_dict``), and their identities."""
    tensors = [*model.parameters(), *model.buffers()]
    return (*(t._version for t in tensors), *(id(t) for t in tensors))


class CompiledStep:
    """A ``StepDecoder`` (``seqlab.decode.state``) whose ``step`` is ``model.step`` compiled
    with frozen weights (``freeze=False``: without, for measuring only). Use
    :func:`compiled_decoder` rather than building one directly.

    Shapes: as ``model.step``: y_prev (B,) long -> logits (B, V), new state.
    """

    def __init__(self, model: nn.Module, freeze: bool = True) -> None:
        if not callable(getattr(model, "step", None)):
            raise SeqlabError(f"{type(model).__name__} has no decoder step to compile")
        on_cpu = next(model.parameters()).device.type == "cpu"
        if on_cpu and cpp_compiler() is None:
            raise SeqlabError(
                "compiled decoding on a CPU needs a C++ compiler for torch.compile (g++ or "
                "clang++ on PATH, or $CXX): install one (e.g. apt install g++) or decode "
                "without --compile"
            )
        self.model = model
        self.versions = _weight_versions(model)
        import torch._inductor.config as inductor_config  # heavy: only when compiling

        self._inductor_config = inductor_config
        self.freeze = freeze  # False only to measure what freezing adds (the probe)
        self._step = torch.compile(model.step, dynamic=True)

    def init_state(self, memory: Tensor, src_mask: Tensor) -> Any:
        """The model's initial decoder state with the concatenating self-attention cache,
        the one the compiled step is measured and tested with: the "auto" cache's switch
        to a ``TreeKVCache`` adds graphs (dynamo's recompile limit was reached when both
        ran through one compiled step), for no gain compiled (docs/perf-notes-measured.md
        §24).  Shapes: as ``model.init_state``."""
        return self.model.init_state(memory, src_mask, cache="concat")

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        # Compiling is lazy (first call, and again for new shapes), so freezing is set around
        # every call; torch.compile(options={"freezing": True}) was measured not to freeze.
        # A TreeKVCache's Python bookkeeping (copy on a second write, grow the buffer,
        # record how far it is written) runs here, outside the graph (a state built by
        # ``model.init_state`` rather than ``init_state`` above may hold one).
        ready, written = getattr(state, "ready", None), getattr(state, "written", None)
        if callable(ready):
            state = ready()
        with torch.no_grad(), self._inductor_config.patch(freezing=self.freeze):
            logits, state = self._step(y_prev, state)
        if callable(written):
            state.written()
        return logits, state


def compiled_decoder(model: nn.Module) -> CompiledStep:
    """The compiled step of ``model``, compiled on first use and again whenever its
    weights have changed since. Only the Transformer's step is supported (its step is one
    graph, tested; other families keep Python structures in their state)."""
    from seqlab.models.transformer import TransformerSeq2Seq

    if not isinstance(model, TransformerSeq2Seq):
        raise SeqlabError(
            f"compiled decoding supports the Transformer only, not {type(model).__name__}; "
            "decode without it (the default)"
        )
    cached = _COMPILED.get(model)
    if cached is None or cached.versions != _weight_versions(model):
        cached = CompiledStep(model)
        _COMPILED[model] = cached
    return cached
