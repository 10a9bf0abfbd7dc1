"""The decoder-step contract every search uses, generic state reordering, and the result.

DESIGN §6: a decoder exposes ``step(y_prev, state) -> (logits, state)``; the model builds
the initial state (e.g. ``model.init_state(memory, src_mask)``) and hands it to
``greedy`` / ``beam_search`` / ``sample``. A state is a small dataclass of tensors whose
batch axis is dim 0, so a search can keep, drop, repeat or permute batch rows with one
call, ``reorder_state(state, index)``: beam search expands B rows to B·K hypotheses once
and then, after every step, keeps the K surviving hypotheses of each input.

Static fields. Part of a state is fixed per input: built by ``init_state`` from the
encoder output and passed through unchanged by every ``step`` (the Transformer's
cross-attention K/V, encoder annotations, precomputed attention keys Uₐh, source masks,
image regions). Declare such a dataclass field with ``static_field()``. Beam search
reorders with ``within_inputs=True``, which leaves static fields untouched instead of
copying them (B·K rows of a (S, ·) tensor, every step). This is exact because

1. beam search's index never leaves an input's block: row b·K + k takes row b·K + k′
   (k, k′ ∈ [0, K)), since it is ``b·K + live_beam`` with ``live_beam`` ∈ [0, K); and
2. the K rows of one input of a static field are identical: ``repeat_rows`` copies row b
   to rows b·K … b·K + K − 1 (a full reorder) and ``step`` never changes the field,

so selecting rows within the block returns the tensor it was given. Every other caller
(``repeat_rows``, scoring n-best lists, anything that moves rows across inputs) uses the
default full reorder, which copies static fields like any other. ``full_reorder()``
turns the skip off (tests and benchmarks compare both).

Shared static fields. ``repeat_rows`` (B -> B·K) does not even copy a static field whose
value has a ``grouped(times)`` method (the Transformer's cross-attention ``KVCache``): it
keeps one row per input and records that rows b·K … b·K + K − 1 read row b
(``KVCache.group``), so the attention reads each input's keys once for its K hypotheses
(docs/perf-notes-decoding.md §15). ``full_reorder()`` turns this off too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor

State = TypeVar("State")

STATIC = "seqlab.decode.static"  # dataclass field metadata key set by ``static_field``
_FULL_REORDER: ContextVar[bool] = ContextVar("seqlab_full_reorder", default=False)
# Inside ``repeat_rows``: the factor by which static fields with ``grouped`` are shared.
_SHARE_TIMES: ContextVar[int] = ContextVar("seqlab_share_times", default=1)
_UNSHARED: ContextVar[bool] = ContextVar("seqlab_unshared", default=False)


@runtime_checkable
class StepDecoder(Protocol):
    """One decoding step: the previous token of every row -> next-token logits, new state.

    ``state`` is whatever the model's ``init_state`` built; the search never looks inside
    it, it only reorders its batch rows with ``reorder_state``.

    Shapes:
        y_prev:  (B,) long, the token emitted at the previous step (BOS at the first)
        returns: logits (B, V) (unnormalised; the search applies log_softmax), new state
    """

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]: ...


def static_field(**kwargs: Any) -> Any:
    """A dataclass field of a decoder state that is the same for every hypothesis of an
    input: set by ``init_state``, passed through unchanged by ``step`` (the module
    docstring says why beam search may then skip it). Otherwise like
    ``dataclasses.field(**kwargs)``.

    Shapes: any, batch on dim 0 like every state tensor.
    """
    metadata = {**kwargs.pop("metadata", {}), STATIC: True}
    return field(metadata=metadata, **kwargs)


def is_static(f: dataclasses.Field) -> bool:
    """Whether a dataclass field was declared with ``static_field``."""
    return bool(f.metadata.get(STATIC, False))


@contextlib.contextmanager
def full_reorder() -> Iterator[None]:
    """Within this block ``within_inputs=True`` is ignored and ``repeat_rows`` shares
    nothing: static fields are copied as before the two optimisations (for tests and
    benchmarks that compare them)."""
    token = _FULL_REORDER.set(True)
    try:
        yield
    finally:
        _FULL_REORDER.reset(token)


@contextlib.contextmanager
def unshared() -> Iterator[None]:
    """Within this block ``repeat_rows`` copies every static field (no ``grouped``
    sharing) while beam search still skips them when it reorders (for tests and
    benchmarks that measure the sharing alone)."""
    token = _UNSHARED.set(True)
    try:
        yield
    finally:
        _UNSHARED.reset(token)


def reorder_state(state: State, index: Tensor, *, within_inputs: bool = False) -> State:
    """Select batch rows ``index`` of every tensor in ``state`` (beam search bookkeeping).

        new[i] = state[index[i]]   for every tensor, along dim 0

    Rules, in order: a tensor is ``index_select``-ed on dim 0; an object with a
    ``reorder(index)`` method (e.g. ``TransformerDecoderState``, ``KVCache``) reorders
    itself (and is passed ``within_inputs`` when its ``reorder`` takes that keyword); a
    dataclass is rebuilt field by field (fields with ``init=False`` are left to its
    ``__post_init__``); namedtuples, tuples, lists and dicts are walked; ``None``, ints,
    floats, bools and strings pass through unchanged. Anything else raises ``TypeError``
    (give the class a ``reorder`` method).

    ``within_inputs=True`` promises that ``index`` keeps each row inside its input's
    block of K rows (beam search: b·K + k -> b·K + k′, same B·K); fields declared with
    ``static_field`` are then returned as they are, not copied (module docstring). Leave
    it False whenever rows move across inputs or the batch size changes.

    Shapes:
        index:   (B',) long, values in [0, B); B' may differ from B (expansion to B·K)
        returns: the same structure with every tensor's dim 0 of size B'
    """
    return _reorder(state, index, within_inputs and not full_reorder_on())


def full_reorder_on() -> bool:
    """Whether a ``full_reorder()`` block is active. Inside a compiled graph it reads
    False: dynamo cannot trace ``ContextVar.get``, so ``seqlab.decode.compiled`` reads the
    flag before its graph and reorders outside the graph when it is set."""
    return not torch.compiler.is_compiling() and _FULL_REORDER.get()


def reorder_fields(state: State, index: Tensor, within_inputs: bool = False) -> State:
    """The dataclass rule of ``reorder_state``: rebuild ``state`` with every ``init``
    field reordered, static fields kept as they are when ``within_inputs`` (for classes
    whose ``reorder`` method is just this)."""
    return _reorder_dataclass(state, index, within_inputs and not full_reorder_on())


def _reorder(state: Any, index: Tensor, skip_static: bool) -> Any:
    if isinstance(state, Tensor):
        return state.index_select(0, index)  # (B', ...)
    if state is None or isinstance(state, (bool, int, float, str)):
        return state
    reorder = getattr(state, "reorder", None)
    if callable(reorder):
        if skip_static and _takes_within_inputs(type(state)):
            return reorder(index, within_inputs=True)
        return reorder(index)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return _reorder_dataclass(state, index, skip_static)
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # namedtuple
        return type(state)(*(_reorder(x, index, skip_static) for x in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_reorder(x, index, skip_static) for x in state)
    if isinstance(state, dict):
        return type(state)((k, _reorder(v, index, skip_static)) for k, v in state.items())
    raise TypeError(
        f"reorder_state cannot reorder a {type(state).__name__}: use dataclasses, tensors, "
        "lists, tuples or dicts of them, or give the class a reorder(index) method"
    )


def _reorder_dataclass(state: Any, index: Tensor, skip_static: bool) -> Any:
    # Only repeat_rows sets a share, never inside a compiled graph (which cannot read it).
    share = 1 if torch.compiler.is_compiling() else _SHARE_TIMES.get()
    changes = {}
    for f in dataclasses.fields(state):
        if not f.init or (skip_static and is_static(f)):
            continue
        value = getattr(state, f.name)
        if share > 1 and is_static(f) and callable(getattr(value, "grouped", None)):
            changes[f.name] = value.grouped(share)  # one row per input, read by `share` rows
        else:
            changes[f.name] = _reorder(value, index, skip_static)
    return dataclasses.replace(state, **changes)


@functools.cache
def _takes_within_inputs(cls: type) -> bool:
    """Whether ``cls.reorder`` accepts the ``within_inputs`` keyword."""
    return "within_inputs" in inspect.signature(cls.reorder).parameters


def repeat_rows(
    state: State, batch_size: int, times: int, device: torch.device | None = None
) -> State:
    """Repeat each batch row ``times`` times, in order: rows b·times … b·times + times − 1
    are copies of row b (beam expansion B -> B·K, or scoring n-best lists). ``device``
    defaults to the state's (``state_device``).

    A static field whose value has a ``grouped(times)`` method is not copied but shared:
    ``value.grouped(times)`` stands for the repeated rows (module docstring; not inside
    ``full_reorder()``).

    Shapes: state with batch B -> batch B·times.
    """
    if device is None:
        device = state_device(state)
    index = torch.arange(batch_size, device=device).repeat_interleave(times)  # (B·times,)
    token = _SHARE_TIMES.set(1 if _FULL_REORDER.get() or _UNSHARED.get() else times)
    try:
        return reorder_state(state, index)
    finally:
        _SHARE_TIMES.reset(token)


def drop_done_inputs(
    state: State, y_prev: Tensor, active: Tensor, done: Tensor, K: int, n_done: int
) -> tuple[State, Tensor, Tensor]:
    """Remove the rows of inputs that are done from the decoder's batch (fairseq does the
    same for beam search), once they are at least an eighth of it: a done input no longer
    changes, so its K rows are wasted work at every later step (K = 1 for greedy). One full
    ``reorder_state`` of the remaining rows; static fields move by whole inputs
    (``KVCache.reorder`` keeps a shared cache shared). ``n_done`` = how many of the
    ``active`` inputs are done, which the caller has already read for its stop check (so
    a step costs one host sync, not two).

    Shapes: y_prev (A·K,), active (A,) input ids, done (B,) bool -> state and y_prev with
            A′·K rows, active (A′,)
    """
    if n_done == 0 or 8 * n_done < active.numel():
        return state, y_prev, active
    kept = (~done[active]).nonzero()[:, 0]  # (A′,) positions among the active inputs
    rows = (kept[:, None] * K + torch.arange(K, device=kept.device)).view(-1)  # (A′·K,)
    return reorder_state(state, rows), y_prev[rows], active[kept]


def state_device(state: Any) -> torch.device:
    """The device of the first tensor found in ``state`` (CPU when it holds none).

    Walks dataclass fields, lists, tuples, dicts and other objects' attributes.
    """
    stack, seen = [state], set()
    while stack:
        x = stack.pop()
        if isinstance(x, Tensor):
            return x.device
        if id(x) in seen or x is None or isinstance(x, (bool, int, float, str, type)):
            continue
        seen.add(id(x))
        if isinstance(x, (tuple, list)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif dataclasses.is_dataclass(x):  # also slots=True dataclasses
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x))
        elif hasattr(x, "__dict__"):
            stack.extend(vars(x).values())
    return torch.device("cpu")


@dataclass
class DecodeResult:
    """The output of every search.

    Tokens are the generated ones y_1 … y_|Y| (no BOS), EOS included when it was emitted,
    then ``pad_id``. ``lengths`` = |Y| counts that EOS. ``log_probs`` = log P(Y) =
    Σ_t log p(y_t | y_<t), the model's log-probabilities (temperature 1, no filtering);
    ``scores`` is what the search ranked by (beam: log P(Y) / lp(Y); greedy and
    sampling: log P(Y)). ``meta`` records the search, its settings and score formula.

    Shapes (N = n_best for beam search, absent for greedy / sampling):
        tokens:    (B, T) or (B, N, T) long, T = the longest |Y|
        lengths:   (B,) or (B, N) long
        scores:    (B,) or (B, N) float, sorted best first along N
        log_probs: (B,) or (B, N) float
    """

    tokens: Tensor
    lengths: Tensor
    scores: Tensor
    log_probs: Tensor
    meta: dict[str, Any] = field(default_factory=dict)
