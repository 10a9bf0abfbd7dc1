"""Decoding variants of ``benchmarks/peers.py``: seqlab.decode vs Hugging Face ``generate``.

Every variant decodes the same source sentences (U[14, 20] tokens + EOS) in batches of 32,
in input order, and produces exactly ``n_new`` tokens per sentence: EOS is forbidden until
then (seqlab ``min_len = max_len = n_new``; HF ``min_new_tokens = max_new_tokens``), so
every implementation does the same number of steps on the same number of hypotheses.

* ``seqlab``: ``model.encode`` → ``model.init_state`` (per-layer K/V cache, cross-attention
  K/V projected once) → ``seqlab.decode.greedy`` / ``beam_search`` (GNMT α = 0.6 as the
  preset; with a fixed length it changes no work), as ``seqlab.tasks.translation_eval``
  decodes, under seqlab's ``decoding_context`` (autocast; int8 for seqlab alone).
* ``hf``: ``MarianMTModel.generate(num_beams=K, do_sample=False, use_cache=True)``.

:func:`check_cached_batched` proves the fast path computes what the slow one does: the
batched, K/V-cached decode of each sentence equals its own unbatched decode through
:class:`UncachedDecoder`, which recomputes the whole prefix with the teacher-forced
decoder at every step (no cache, no padding, no other rows).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmarks.peers_timing import peer_autocast
from seqlab.data.collate import pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, greedy
from seqlab.decode.compiled import compiled_decoder
from seqlab.decode.precision import decoding_context
from seqlab.nn.masks import padding_mask

ALPHA = 0.6  # the preset's length_penalty


def source_batches(
    sources: list[list[int]], batch_size: int = 32, device: str | torch.device = "cpu"
) -> list[tuple[Tensor, Tensor]]:
    """Padded (src (B, S), src_mask (B, S)) batches in input order, on ``device``."""
    out = []
    for i in range(0, len(sources), batch_size):
        src, lengths = pad_batch(sources[i : i + batch_size], PAD_ID)  # (B, S), (B,)
        out.append((src.to(device), padding_mask(lengths, src.shape[1]).to(device)))
    return out


def search(decoder: object, state: object, B: int, beam: int, n_new: int) -> Tensor:
    """seqlab's greedy (beam 1) or beam search for exactly ``n_new`` tokens.  -> (B, n_new)."""
    if beam == 1:
        return greedy(
            decoder, state, B, BOS_ID, EOS_ID, max_len=n_new, min_len=n_new, pad_id=PAD_ID
        ).tokens  # (B, n_new)
    res = beam_search(
        decoder,
        state,
        B,
        BOS_ID,
        EOS_ID,
        max_len=n_new,
        beam_size=beam,
        alpha=ALPHA,
        min_len=n_new,
        pad_id=PAD_ID,
    )
    return res.tokens[:, 0]  # (B, n_new) the 1-best


@torch.no_grad()
def seqlab_decode(
    model: nn.Module,
    src: Tensor,
    src_mask: Tensor,
    beam: int,
    n_new: int,
    compiled: bool = False,
    cache: str | None = None,
) -> Tensor:
    """Batched, K/V-cached decode of one batch with seqlab.decode; ``compiled``: through the
    compiled, weight-frozen decoder step (``seqlab.decode.compiled``; ``translate
    --compile``); ``cache``: a Transformer's self-attention cache, "auto", "tree" or
    "concat" (``TransformerDecoderLayer.init_state``; None: the model's default, "auto";
    the compiled step's is "concat", ``CompiledStep.init_state``).  -> (B, n_new)."""
    memory = model.encode(src, src_mask)  # (B, S, D)
    extra = {} if cache is None else {"cache": cache}  # other families take no cache
    state = model.init_state(memory, src_mask, **extra)
    decoder = compiled_decoder(model, beam) if compiled else model
    return search(decoder, state, src.size(0), beam, n_new)


@torch.no_grad()
def hf_decode(model: nn.Module, src: Tensor, src_mask: Tensor, beam: int, n_new: int) -> Tensor:
    """``generate`` with the KV cache; the decoder-start token removed.  -> (B, n_new)."""
    out = model.generate(
        input_ids=src,
        attention_mask=src_mask.long(),
        num_beams=beam,
        do_sample=False,
        max_new_tokens=n_new,
        min_new_tokens=n_new,
        use_cache=True,
    )  # (B, 1 + n_new)
    return out[:, 1:]


DECODERS: dict[str, Callable[[nn.Module, Tensor, Tensor, int, int], Tensor]] = {
    "seqlab": seqlab_decode,
    "seqlab-compiled": functools.partial(seqlab_decode, compiled=True, cache="concat"),
    "seqlab-concat": functools.partial(seqlab_decode, cache="concat"),
    "seqlab-tree": functools.partial(seqlab_decode, cache="tree"),
    "hf": hf_decode,
}


def decode_rep(
    impl: str,
    model: nn.Module,
    batches: list[tuple[Tensor, Tensor]],
    beam: int,
    n_new: int,
    precision: str,
) -> Callable[[], int]:
    """One repetition: decode every batch; returns the number of sentences. The model
    and the batches must be on one device already; autocast is that device's."""
    fn = DECODERS[impl]
    autocast_of = "seqlab" if impl.startswith("seqlab") else impl
    n = sum(src.size(0) for src, _ in batches)
    device = batches[0][0].device
    model.eval()

    def run() -> int:
        cast = (
            decoding_context(precision, device)  # autocast, or int8 (seqlab only)
            if autocast_of == "seqlab"
            else peer_autocast(precision, device)
        )
        with cast:
            for src, mask in batches:
                tokens = fn(model, src, mask, beam, n_new)
                assert tokens.shape == (src.size(0), n_new), tokens.shape
        return n

    return run


# ---------------------------------------------------------------------------- the check


@dataclass
class UncachedState:
    """The encoder output and the whole prefix decoded so far (BOS first).

    Shapes: memory (B, S, D), src_mask (B, S), prefix (B, t) long.
    """

    memory: Tensor
    src_mask: Tensor
    prefix: Tensor


class UncachedDecoder:
    """StepDecoder that re-runs a seqlab encoder–decoder's teacher-forced decoder over the
    full prefix at every step and keeps the last position: no K/V cache (O(t²) per step)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def init_state(self, memory: Tensor, src_mask: Tensor) -> UncachedState:
        prefix = torch.zeros(memory.size(0), 0, dtype=torch.long, device=memory.device)
        return UncachedState(memory, src_mask, prefix)  # prefix (B, 0)

    def step(self, y_prev: Tensor, state: UncachedState) -> tuple[Tensor, UncachedState]:
        m = self.model
        prefix = torch.cat([state.prefix, y_prev[:, None]], dim=1)  # (B, t)
        y = m.pos(m.tgt_embed(prefix))  # (B, t, D)
        h = m.decoder(y, state.memory, None, state.src_mask)[0]  # (B, t, D) causal
        return m.output(h[:, -1]), UncachedState(state.memory, state.src_mask, prefix)  # (B, V)


@torch.no_grad()
def uncached_decode(model: nn.Module, source: list[int], beam: int, n_new: int) -> Tensor:
    """One sentence alone (no padding), no cache, on the model's device.  -> (n_new,)."""
    src = torch.tensor([source], device=next(model.parameters()).device)  # (1, S)
    mask = torch.ones_like(src, dtype=torch.bool)  # (1, S)
    dec = UncachedDecoder(model)
    state = dec.init_state(model.encode(src, mask), mask)
    return search(dec, state, 1, beam, n_new)[0]


@torch.no_grad()
def check_cached_batched(
    model: nn.Module, sources: list[list[int]], beam: int, n_new: int, batch_size: int = 32
) -> tuple[int, int]:
    """(sentences whose batched cached decode == their unbatched uncached decode, total).

    Run in the model's own dtype (fp32), eval mode.
    """
    model.eval()
    same = 0
    device = next(model.parameters()).device
    for i, (src, mask) in enumerate(source_batches(sources, batch_size, device)):
        fast = seqlab_decode(model, src, mask, beam, n_new)  # (B, n_new)
        for b in range(src.size(0)):
            slow = uncached_decode(model, sources[i * batch_size + b], beam, n_new)
            same += int(torch.equal(fast[b], slow))
    return same, len(sources)
