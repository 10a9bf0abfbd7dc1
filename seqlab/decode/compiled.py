"""Decoding through a compiled decoder step (opt-in; docs/decoding.md "Compiled decoding").

A Transformer's decoder step is one query row per hypothesis: for 32 rows in bf16 it is
~1,100 small operators, and each 32-row linear layer spends about half its time
reordering its weight into oneDNN's blocked layout. ``torch.compile(model.step,
dynamic=True)`` with inductor's **weight freezing** makes the step one graph whose linear
weights are packed once, as constants: on a 2-core avx512_bf16 CPU greedy decoding ran
1.73–1.82× the eager step and beam 5 1.21×, with the same tokens in float32
(docs/perf-notes-measured.md §23). The first pass over the shapes of a search compiles
(~50–70 s there, half that since docs/perf-notes-compiled-beam.md §56's fewer graphs);
the compiled step is kept per model and reused.

Freezing copies the weights into the compiled code, so the compiled step is for inference
only: :func:`compiled_decoder` records the weights' in-place version counters and compiles
again when they have changed (an optimizer step, ``load_state_dict``), so a stale step is
never used; steps always run without autograd.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.decode.scoring import forbid_eos, step_log_probs
from seqlab.decode.state import full_reorder_on, reorder_state
from seqlab.errors import SeqlabError
from seqlab.nn.multihead import separate_projections
from seqlab.train.precision import read_cpu_flags

# model -> {SDPA rewrite on?: its compiled step} (one entry where greedy and beam search
# agree on the rewrite, two where they do not: ``sdpa_rewrite_for``)
_COMPILED: weakref.WeakKeyDictionary[nn.Module, dict[bool, CompiledStep]] = (
    weakref.WeakKeyDictionary()
)


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend (inductor) would use: ``$CXX``, else
    g++ or clang++ on PATH; None if there is none."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


@contextlib.contextmanager
def attention_pattern_off() -> Iterator[None]:
    """Inside: inductor keeps an attention written as ``softmax(q kᵀ / √d) v`` as written
    instead of rewriting it into ``aten._scaled_dot_product_flash_attention``
    (``torch/_inductor/fx_passes/fuse_attention.py``, whose every replacement is gated
    by its ``_sfdp_params_check``, answered "no" here). Only graphs compiled inside are
    affected (docs/perf-notes-amx.md §49)."""
    from torch._inductor.fx_passes import fuse_attention

    saved = fuse_attention._sfdp_params_check
    fuse_attention._sfdp_params_check = lambda match: False
    try:
        yield
    finally:
        fuse_attention._sfdp_params_check = saved


def _general_sizes() -> contextlib.AbstractContextManager:
    """Dynamo's shape settings for tracing the step: sizes 1 are not specialised where the
    code does not need it (``backed_size_oblivious``: the cache at t = 1 and a batch of
    one share the general graph; a guard is still added where a size of 1 changes what
    runs), and two sizes equal by chance are not assumed equal (``use_duck_shape`` off:
    the memory's rows and the step's rows differ in beam search).
    docs/perf-notes-compiled-beam.md §56."""
    import torch.fx.experimental._config as fx_config

    return fx_config.patch(backed_size_oblivious=True, use_duck_shape=False)


def sdpa_rewrite_for(device_type: str, beam: int, cpu_flags: frozenset[str]) -> bool:
    """Whether the compiled step of a width-``beam`` search lets inductor rewrite its
    attention into SDPA, as measured on two CPUs (docs/perf-notes-compiled-beam.md):
    beam search (B·K rows) is faster without the rewrite on an AMX and on an AMD Zen 5 CPU
    (§49, §51); greedy search (B rows) is faster with it where the CPU has ``amx_bf16``
    (§49) and without it where it has not (§52). Off the CPU nothing was measured, so
    inductor keeps its rewrite there."""
    if device_type != "cpu":
        return True
    return beam == 1 and "amx_bf16" in cpu_flags


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """This machine's CPU flags, read once (``compiled_decoder`` runs once per batch)."""
    return read_cpu_flags()


def _weight_versions(model: nn.Module) -> tuple[int, ...]:
    """The in-place version counter of every parameter and buffer (bumped by optimizer
    steps, ``copy_``, ``load_state_dict``), and their identities."""
    tensors = [*model.parameters(), *model.buffers()]
    return (*(t._version for t in tensors), *(id(t) for t in tensors))


@dataclass
class PendingReorder:
    """A compiled step's decoder state, and the within-input reorder that beam search has
    asked of it since (``reorder_state(..., within_inputs=True)``, every step), not yet
    applied: the next compiled step applies it inside its graph, where inductor gathers
    the self-attention cache in the same pass that appends the new position (one copy of
    the cache per step instead of two; docs/perf-notes-decoding.md §26).

    Any other reorder (beam search's expansion, dropping done inputs), or any reorder
    inside a ``full_reorder()`` block, applies the pending one first, eagerly.

    Shapes: index (B',) long, rows of ``state`` (None: nothing pending)
    """

    state: Any
    index: Tensor | None = None

    def reorder(self, index: Tensor, within_inputs: bool = False) -> Any:
        """new[i] = this[index[i]] = state[self.index[index[i]]]: pending when within
        inputs (``reorder_state`` passes False inside ``full_reorder()``), else applied."""
        if within_inputs:
            return PendingReorder(self.state, index if self.index is None else self.index[index])
        return reorder_state(self.resolved(), index)

    def resolved(self) -> Any:
        """The state with the pending reorder applied, eagerly."""
        if self.index is None:
            return self.state
        return reorder_state(self.state, self.index, within_inputs=True)


def _holds_tree_cache(state: Any) -> bool:
    """Whether a decoder state holds a ``TreeKVCache`` (its bookkeeping runs outside the
    graph, so its reorder does too)."""
    from seqlab.nn.tree_kv_cache import TreeKVCache

    layers = getattr(state, "layers", ())
    return any(isinstance(getattr(lay, "self_kv", None), TreeKVCache) for lay in layers)


class CompiledStep:
    """A ``StepDecoder`` (``seqlab.decode.state``) whose ``step`` is ``model.step`` compiled
    with frozen weights (``freeze=False``: without, for measuring only). Use
    :func:`compiled_decoder` rather than building one directly.

    Shapes: as ``model.step``: y_prev (B,) long -> logits (B, V), new state.
    """

    def __init__(self, model: nn.Module, freeze: bool = True, sdpa_rewrite: bool = True) -> None:
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
        # False: a pending reorder runs before the graph, eagerly (only to measure §26).
        self.reorder_in_graph = True
        # False: ``log_prob_step`` takes the log_softmax eagerly (only to measure §50).
        self.log_probs_in_graph = True
        # True: beam search selects its candidates inside the step's graph (``select_step``).
        # Off by default: §54 measured 1.008× (twice) on an AVX2-only CPU in fp32, under
        # the 1.02× its plan asked; kept so that it can be measured where bf16 is native.
        self.select_in_graph = False
        # Whether inductor may rewrite the step's attention into SDPA (§49, §51, §52;
        # ``compiled_decoder`` passes ``sdpa_rewrite_for``'s answer).
        self.sdpa_rewrite = sdpa_rewrite
        self._step = torch.compile(self._reorder_then_step, dynamic=True)

    def _reorder_then_step(
        self,
        y_prev: Tensor,
        state: Any,
        index: Tensor | None,
        log_probs: bool = False,
        sdpa_rewrite: bool = True,
        live_log_prob: Tensor | None = None,
        eos_id: int = -1,
        ban_eos: bool = False,
    ) -> Any:
        """The compiled function: a pending within-input reorder, then ``model.step``, and
        with ``log_probs`` its logits' ``step_log_probs`` (one graph per value); with
        ``live_log_prob`` (A, K) also beam search's ``select_candidates`` on those log p
        (EOS banned first where ``ban_eos``: ``forbid_eos``), returned as the tuple of the
        ``Candidates`` fields in place of log p.
        ``sdpa_rewrite`` changes nothing here, but dynamo guards a bool argument the traced
        code branches on, so it keys the graph: a graph compiled with inductor's attention
        rewrite is never reused without it (two ``CompiledStep`` of one model share this
        function's code and so its graphs; an argument never read is not guarded)."""
        if not sdpa_rewrite:  # the branch is the guard (tests/decode/test_compiled.py)
            pass
        if index is not None:
            state = reorder_state(state, index, within_inputs=True)
        logits, state = self.model.step(y_prev, state)
        if live_log_prob is not None:
            from seqlab.decode.beam import select_candidates  # beam imports this module

            A, K = live_log_prob.shape
            log_p = step_log_probs(logits)  # (A·K, V)
            if ban_eos:
                log_p = forbid_eos(log_p, eos_id)  # (A·K, V)
            cand = select_candidates(live_log_prob, log_p.reshape(A, K, -1), eos_id)
            return (cand.log_prob, cand.beam, cand.token, cand.finishes, cand.live), state
        return (step_log_probs(logits) if log_probs else logits), state

    def init_state(self, memory: Tensor, src_mask: Tensor) -> Any:
        """The model's initial decoder state with the concatenating self-attention cache,
        the one the compiled step is measured and tested with: the "auto" cache's switch
        to a ``TreeKVCache`` adds graphs (dynamo's recompile limit was reached when both
        ran through one compiled step), for no gain compiled (docs/perf-notes-measured.md
        §24).  Shapes: as ``model.init_state``."""
        return canonical_state(self.model.init_state(memory, src_mask, cache="concat"))

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, PendingReorder]:
        """``model.step`` compiled; the state comes back as a ``PendingReorder``, so that
        beam search's next reorder runs inside the next step's graph."""
        return self._compiled(y_prev, state, log_probs=False)

    def log_prob_step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, PendingReorder]:
        """``step`` and the log_softmax of its logits (``step_log_probs``) in one graph,
        where inductor fuses the cast and the normalisation into one pass over the (B, V)
        logits; the searches call this (``seqlab.decode.scoring.next_log_probs``).

        Shapes: y_prev (B,) long -> log_p (B, V) float32, new state
        """
        if not self.log_probs_in_graph:
            logits, state = self.step(y_prev, state)
            return step_log_probs(logits), state
        return self._compiled(y_prev, state, log_probs=True)

    def select_step(
        self,
        y_prev: Tensor,
        live_log_prob: Tensor,
        active: Tensor,
        eos_id: int,
        state: Any,
        ban_eos: bool,
    ) -> tuple[tuple[Tensor, ...], PendingReorder] | None:
        """``log_prob_step`` and beam search's candidate selection on its log p
        (``seqlab.decode.beam.select_candidates``; ``ban_eos``: after ``forbid_eos``, for
        t ≤ ``min_len``) in one graph, so that the (A·K, V) log p never leave it: the graph
        returns the 2K best extensions of each input instead
        (docs/perf-notes-compiled-beam.md §54). None when ``select_in_graph`` is off (the
        default; §54): the search then selects eagerly.

        Shapes: y_prev (A·K,) long, live_log_prob (B, K), active (A,) long: the rows of
                ``live_log_prob`` in the state -> (log_prob (A, 2K), beam (A, 2K),
                token (A, 2K), finishes (A, 2K), live (A, K)) as ``Candidates``, new state
        """
        if not (self.select_in_graph and self.log_probs_in_graph):
            return None  # checked before any work: beam search asks at every step
        live = live_log_prob[active]  # (A, K)
        return self._compiled(y_prev, state, True, live, eos_id, ban_eos)

    def _first_step(
        self, y_prev: Tensor, state: Any, index: Tensor | None, log_probs: bool
    ) -> tuple[Tensor, PendingReorder]:
        """The step at t = 0 (empty self-attention cache), run eagerly: once per batch, and
        a graph of its own if compiled (dynamo does not generalise a size 0), ~15 s of
        compiling on a 2-core CPU for one eager step's milliseconds (§56).
        Shapes: as ``step`` / ``log_prob_step``."""
        with torch.no_grad():
            if index is not None:
                state = reorder_state(state, index, within_inputs=True)
            logits, state = self.model.step(y_prev, state)  # (B, V)
        return (step_log_probs(logits) if log_probs else logits), PendingReorder(state)

    def _compiled(
        self,
        y_prev: Tensor,
        state: Any,
        log_probs: bool,
        live_log_prob: Tensor | None = None,
        eos_id: int = -1,
        ban_eos: bool = False,
    ) -> tuple[Any, PendingReorder]:
        """The compiled step's call: a pending reorder into the graph (or eagerly), the
        state's cache bookkeeping around it.  -> logits or log_p (B, V) (or the candidate
        fields of ``select_step``), new state"""
        index = None
        if isinstance(state, PendingReorder):
            state, index = state.state, state.index
        tree = _holds_tree_cache(state)
        reorder_in_graph = self.reorder_in_graph and not full_reorder_on() and not tree
        if index is not None and not reorder_in_graph:
            state, index = reorder_state(state, index, within_inputs=True), None
        if getattr(state, "length", None) == 0 and live_log_prob is None and not tree:
            return self._first_step(y_prev, state, index, log_probs)
        if index is None and reorder_in_graph and _shared_memory_rows(state):
            # Beam search's first step after the expansion has no reorder pending: the
            # identity takes the graph every later step takes (§56), instead of one more.
            index = torch.arange(y_prev.size(0), device=y_prev.device)  # (B·K,)
        # Dynamo guards how an input view lies in its base, and the searches pass views
        # at some steps only: the ids' few bytes are copied rather than a graph added.
        y_prev, index = _not_a_view(y_prev), _not_a_view(index)
        # Compiling is lazy (first call, and again for new shapes), so freezing is set around
        # every call; torch.compile(options={"freezing": True}) was measured not to freeze.
        # A TreeKVCache's Python bookkeeping (copy on a second write, grow the buffer,
        # record how far it is written) runs here, outside the graph (a state built by
        # ``model.init_state`` rather than ``init_state`` above may hold one).
        ready, written = getattr(state, "ready", None), getattr(state, "written", None)
        if callable(ready):
            state = ready()
        # Self-attention's q, k, v: one product by the stacked weights (folded once with
        # frozen weights; docs/perf-notes-compiled-beam.md §53), except where inductor may
        # rewrite the attention into SDPA, whose pattern then no longer matches (§49's
        # rewrite, measured with three products, keeps them).
        if self.sdpa_rewrite:
            keep_attention, projections = contextlib.nullcontext(), separate_projections()
        else:
            keep_attention, projections = attention_pattern_off(), contextlib.nullcontext()
        freezing = self._inductor_config.patch(freezing=self.freeze)
        with torch.no_grad(), freezing, keep_attention, projections, _general_sizes():
            out, state = self._step(
                y_prev, state, index, log_probs, self.sdpa_rewrite, live_log_prob, eos_id,
                ban_eos,
            )  # fmt: skip
        if callable(written):
            state.written()
        return out, PendingReorder(state)


def _shared_memory_rows(state: Any) -> bool:
    """Whether the state's memory keys are shared by several rows (beam search's grouped
    cross-attention cache: ``KVCache.group`` > 1)."""
    layers = getattr(state, "layers", None)
    return bool(layers) and getattr(layers[0].cross_kv, "group", 1) > 1


def _not_a_view(t: Tensor | None) -> Tensor | None:
    """``t`` itself, or a copy if it is a view of another tensor (§56)."""
    return t.clone() if t is not None and t._base is not None else t


def canonical_state(state: Any) -> Any:
    """The Transformer's initial decoder state in the layout the compiled graphs are
    traced with, so that a new batch reuses them (dynamo guards every input's strides and
    aliasing): each layer's empty self-attention keys and values as two tensors (one
    tensor for both is guarded as ``k is v``, which no later step's cache satisfies) and
    the memory's keys and values contiguous (``project_kv`` gives a transposed view, a
    graph returns them contiguous, and strides are guarded: without this, greedy then
    beam search compiled 6 graphs, not 4). One copy of the memory's keys and values per
    batch, not per step (docs/perf-notes-compiled-beam.md §56)."""
    layers = []
    for layer in state.layers:
        empty, cross = layer.self_kv.k, layer.cross_kv
        self_kv = dataclasses.replace(layer.self_kv, v=torch.empty_like(empty))
        cross = dataclasses.replace(cross, k=cross.k.contiguous(), v=cross.v.contiguous())
        layers.append(dataclasses.replace(layer, self_kv=self_kv, cross_kv=cross))
    return dataclasses.replace(state, layers=layers)


def compiled_decoder(model: nn.Module, beam: int = 1) -> CompiledStep:
    """The compiled step of ``model`` for a search of width ``beam``, compiled on first use
    and again whenever its weights have changed since. Whether inductor may rewrite the
    step's attention into SDPA depends on the search and the CPU (``sdpa_rewrite_for``);
    one step is kept per model and setting, so greedy and beam search get separate steps
    where their settings differ. Only the Transformer's step is
    supported (its step is one graph, tested; other families keep Python structures in
    their state)."""
    from seqlab.models.transformer import TransformerSeq2Seq

    if not isinstance(model, TransformerSeq2Seq):
        raise SeqlabError(
            f"compiled decoding supports the Transformer only, not {type(model).__name__}; "
            "decode without it (the default)"
        )
    if beam < 1:
        raise SeqlabError(f"compiled_decoder: beam must be >= 1, got {beam}")
    device_type = next(model.parameters()).device.type
    rewrite = sdpa_rewrite_for(device_type, beam, _cpu_flags())
    steps = _COMPILED.setdefault(model, {})
    cached = steps.get(rewrite)
    if cached is None or cached.versions != _weight_versions(model):
        cached = CompiledStep(model, sdpa_rewrite=rewrite)
        steps[rewrite] = cached
    return cached
