"""What every language model shares: its output, state handling and the output layer.

A language model factorises P(y⟨1⟩ … y⟨T⟩) = Π_t P(y⟨t⟩ | y⟨<t⟩) (notes 003, "Language
model and sequence generation"); it reads x⟨t⟩ = y⟨t−1⟩ and predicts y⟨t⟩. The LM
contract (every model registered for the ``lm`` task):

* ``__init__(cfg, vocab: int, pad_id: int = 0)``;
* ``init_state(batch_size, device) -> State | None`` — a dataclass of tensors with batch
  on dim 0 and a ``detach()`` method (truncated BPTT); ``None``: the model keeps nothing;
* ``forward(x (B, T) long, state=None) -> LMOutput`` — ``state=None`` means "start of the
  stream" (zero / empty state);
* ``step(x (B,) long, state) -> (logits (B, V), state)`` — one token, for generation;
  step by step == ``forward`` over the whole sequence (tested for every model).

Helpers here: :class:`LMOutput`; :func:`detach_state` / :func:`state_tensors` /
:func:`fill_state` (generic walks over a state, so the ``lm`` task can carry, detach and
checkpoint any model's state); :class:`VocabProjection` (the tied or untied output layer);
:func:`prime` (feed a prompt, return the state); :func:`token_log_probs` (log p(y⟨t⟩ | y⟨<t⟩)
of a given continuation).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from seqlab.nn.embedding import tied_logits
from seqlab.nn.packed_linear import linear


@dataclass
class LMOutput:
    """The result of ``model(x, state)``.

    Shapes:
        logits: (B, T, V) unnormalised log-scores (a mixture model returns log-probabilities,
                which log_softmax leaves unchanged)
        state:  the state after x⟨T⟩ (for the next chunk of the stream), or None
        extras: name → tensor for inspection, e.g. the pointer sentinel's gate g (B, T)
    """

    logits: Tensor
    state: Any = None
    extras: dict[str, Tensor] = field(default_factory=dict)


class LanguageModel(Protocol):
    """The LM contract (module docstring), for type hints."""

    def init_state(self, batch_size: int, device: torch.device | str) -> Any: ...

    def __call__(self, x: Tensor, state: Any = None) -> LMOutput: ...

    def step(self, x: Tensor, state: Any) -> tuple[Tensor, Any]: ...


# --------------------------------------------------------------------------- states


def detach_state(state: Any) -> Any:
    """Cut the graph behind a state (truncated BPTT): gradients of the next chunk stop here.

    Uses the state's own ``detach()`` when it has one; otherwise walks tensors, dataclasses,
    lists, tuples and dicts. ``None`` stays ``None``.
    """
    if state is None or isinstance(state, (bool, int, float, str)):
        return state
    if isinstance(state, Tensor):
        return state.detach()
    own = getattr(state, "detach", None)
    if callable(own):
        return own()
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        fields = dataclasses.fields(state)
        return dataclasses.replace(
            state, **{f.name: detach_state(getattr(state, f.name)) for f in fields if f.init}
        )
    if isinstance(state, (list, tuple)):
        return type(state)(detach_state(x) for x in state)
    if isinstance(state, dict):
        return {k: detach_state(v) for k, v in state.items()}
    raise TypeError(f"cannot detach a {type(state).__name__}: give it a detach() method")


def _children(state: Any) -> list[tuple[str, Any]]:
    """(name, value) of a state's parts: dataclass fields, list/tuple items, dict entries."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return [(f.name, getattr(state, f.name)) for f in dataclasses.fields(state) if f.init]
    if isinstance(state, (list, tuple)):
        return [(str(i), x) for i, x in enumerate(state)]
    if isinstance(state, dict):
        return [(str(k), v) for k, v in state.items()]
    if state is None or isinstance(state, (bool, int, float, str)):
        return []
    parts = getattr(state, "__dict__", None)
    if parts is None:
        raise TypeError(f"cannot walk a {type(state).__name__} state")
    return list(parts.items())


def state_tensors(state: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every tensor of ``state`` under a dotted name (``h``, ``layers.0.k``): what the
    ``lm`` task stores in a checkpoint. ``None`` gives ``{}``."""
    if isinstance(state, Tensor):
        return {prefix or "state": state}
    out: dict[str, Tensor] = {}
    for name, value in _children(state):
        out.update(state_tensors(value, f"{prefix}.{name}" if prefix else name))
    return out


def fill_state(template: Any, tensors: dict[str, Tensor], prefix: str = "") -> Any:
    """A state shaped like ``template`` (e.g. ``model.init_state(B, device)``) holding the
    tensors of :func:`state_tensors`; a name missing from ``tensors`` raises ``KeyError``,
    a field the template leaves ``None`` takes the tensor saved under its name if any.
    Shapes must match the template's."""
    if isinstance(template, Tensor):
        key = prefix or "state"
        value = tensors[key]
        if value.shape != template.shape:
            raise ValueError(
                f"state tensor {key}: shape {tuple(value.shape)}, expected {tuple(template.shape)}"
            )
        return value.to(template.device)
    if template is None:  # an optional part the saved state may hold
        return tensors.get(prefix or "state")
    if isinstance(template, (bool, int, float, str)):
        return template
    filled = {
        name: fill_state(value, tensors, f"{prefix}.{name}" if prefix else name)
        for name, value in _children(template)
    }
    if dataclasses.is_dataclass(template):
        return dataclasses.replace(template, **filled)
    if isinstance(template, (list, tuple)):
        return type(template)(filled[str(i)] for i in range(len(template)))
    if isinstance(template, dict):
        return {k: filled[str(k)] for k in template}
    new = object.__new__(type(template))
    new.__dict__.update(filled)
    return new


# --------------------------------------------------------------------------- output layer


class VocabProjection(nn.Module):
    """logits = h W_outᵀ + b, with W_out = E (the input embedding) when tied.

    Tying (Press & Wolf 2017; Inan et al. 2017) shares one matrix between the input lookup
    and the pre-softmax projection: fewer parameters, and usually lower perplexity. The tied
    matrix is not stored here (a module may not own the embedding twice): the model passes
    ``E`` to ``forward``.

    Shapes:
        h: (B, T, D) or (B, D)   E: (V, D)   returns: (B, T, V) or (B, V)

    Deviations: none (the bias b is kept when tied, as in Press & Wolf's code).
    """

    def __init__(self, d: int, V: int, tied: bool, bias: bool = True) -> None:
        super().__init__()
        self.tied = tied
        self.W_out = None if tied else nn.Parameter(torch.empty(V, d))  # (V, D)
        self.b = nn.Parameter(torch.zeros(V)) if bias else None  # (V,)
        if self.W_out is not None:
            nn.init.normal_(self.W_out, 0.0, d**-0.5)

    def forward(self, h: Tensor, E: Tensor | None = None) -> Tensor:
        if self.W_out is None:
            if E is None:
                raise ValueError("a tied VocabProjection needs the embedding matrix E")
            return tied_logits(h, E, self.b)  # (B, [T,] V)
        return linear(h, self.W_out, self.b)  # (B, [T,] V); packed inside a search


# --------------------------------------------------------------------------- prompts, scores


@torch.no_grad()
def prime(model: Any, context: Tensor) -> Any:
    """The state after reading ``context`` (a prompt) from ``model.init_state``.

    A model with a bounded context (``model.cfg.context``, the Transformer LM) reads only
    the last context − 1 tokens, leaving room for the token fed to the next ``step``.

    Shapes: context (B, T) long, T ≥ 0 -> the model's state with batch B
    """
    state = model.init_state(context.size(0), context.device)
    limit = getattr(getattr(model, "cfg", None), "context", None)
    if isinstance(limit, int) and context.size(1) > limit - 1:
        context = context[:, context.size(1) - (limit - 1) :]  # (B, limit − 1)
    if context.size(1) == 0:
        return state
    return model(context, state).state


@torch.no_grad()
def token_log_probs(model: Any, context: Tensor, continuation: Tensor) -> Tensor:
    """log p(y⟨t⟩ | context, y⟨<t⟩) of every continuation token, in one forward pass.

    The model reads [context ; continuation[:-1]] from the start-of-stream state; the
    first continuation token is predicted from the last context token, so the context
    must hold at least one token (e.g. the sentence boundary ⟨/s⟩).

    Shapes: context (B, C) long with C ≥ 1, continuation (B, T) long -> (B, T) float32
    """
    if context.size(1) < 1:
        raise ValueError("token_log_probs needs at least one context token")
    x = torch.cat([context, continuation[:, :-1]], dim=1)  # (B, C + T − 1)
    logits = model(x, None).logits[:, context.size(1) - 1 :]  # (B, T, V)
    log_p = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return log_p.gather(2, continuation[:, :, None]).squeeze(2)  # (B, T)
