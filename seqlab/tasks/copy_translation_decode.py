"""Decoding for the copy_translation task: greedy or beam search over the extended
vocabulary, and three decode-time treatments of ``<unk>`` (docs/pointer-generator.md, "Why
copying is low, and `<unk>` at decode time").

With a 2,000-word target vocabulary the model attends to the right source word but often
puts more mass on generating ``<unk>`` than on copying it: in training, only 6.9 % of the
source words outside both vocabularies occur in their reference (are answered by a copy).
Neither option below is in See et al. 2017; both change decoding only (the trained model
and the teacher-forced loss / ppl are untouched):

- ``block_unk`` (``UnkBlockedDecoder``): log P(<unk>) = −∞ at every step, so the search
  picks a vocabulary word or a copy.
- ``replace_unk`` (``replace_unk_by_attention``): after decoding, each ``<unk>`` left in
  the output is replaced by the source word with the highest attention weight at that
  step (Luong et al. 2015, §3.3; Jean et al. 2015).
- ``unk_to_copy`` (``UnkToCopyDecoder``): at every step, before the search chooses, the
  mass of ``<unk>`` moves to the source words outside the target vocabulary, shared in
  proportion to their copy probabilities — the in-search form of ``replace_unk``, so a
  word's generated-``<unk>`` and copy masses add up instead of competing (``unk_to_copy``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.collate import pad_batch
from seqlab.data.oov import CopyExample, source_inputs
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqlab.decode.beam import beam_search
from seqlab.decode.greedy import greedy
from seqlab.decode.state import StepDecoder
from seqlab.nn.masks import padding_mask
from seqlab.tasks.translation_eval import SearchSettings, batch_limits, plan_batches

__all__ = [
    "UnkBlockedDecoder",
    "CopyDecoded",
    "UnkToCopyDecoder",
    "decode_copy",
    "decode_copy_detailed",
    "forbid_unk",
    "model_device",
    "replace_unk_by_attention",
    "unk_to_copy",
]


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a model without any)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def forbid_unk(log_p: Tensor, unk_id: int = UNK_ID) -> Tensor:
    """log P with the ``<unk>`` entry set to −∞ (probability 0), the others unchanged.

    Shapes: log_p (..., V + n_oov) -> (..., V + n_oov)
    """
    unk = torch.zeros(log_p.size(-1), dtype=torch.bool, device=log_p.device)  # (V',)
    unk[unk_id] = True
    return log_p.masked_fill(unk, float("-inf"))  # (..., V')


class UnkBlockedDecoder:
    """``block_unk``: a decode-time constraint, not part of See et al. 2017. The wrapped
    decoder's ``step`` with log P(<unk>) = −∞ (``forbid_unk``) at every decoding step,
    applied before the search chooses, so greedy and beam search emit a vocabulary word
    or a copied source word, never ``<unk>``.

    The searches take log_softmax of what ``step`` returns, so the remaining ids are
    renormalised: the search decodes from P(y_t | y_t ≠ <unk>, y_<t, x). Greedy picks what
    the unrenormalised mask would pick; beam search ranks hypotheses by the renormalised
    log P, and both report it, not the model's own log P(Y).

    Shapes: step(y_prev (B,), state) -> log P (B, V + n_oov) with column ``unk_id`` −∞,
    state
    """

    def __init__(self, decoder: StepDecoder, unk_id: int = UNK_ID) -> None:
        self.decoder, self.unk_id = decoder, unk_id

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        log_p, state = self.decoder.step(y_prev, state)  # (B, V')
        return forbid_unk(log_p, self.unk_id), state


def unk_to_copy(log_p: Tensor, vocab_size: int, unk_id: int = UNK_ID) -> Tensor:
    """``unk_to_copy``: ``<unk>``'s probability moved onto the copy ids, not in See et al.

    The target ``<unk>`` stands for "a word outside the target vocabulary", and the only
    such words the model can write are the source's, the extended ids k ≥ V, whose
    probability is their copy mass P(k) = (1 − p_gen)·Σ_{i: x_i = k} a_i. With
    M = Σ_{k ≥ V} P(k) (the copy mass on all of them):

        P'(k) = P(k) · (1 + P(<unk>) / M)   for k ≥ V,     P'(<unk>) = 0,

    the other ids unchanged: Σ P' = Σ P, and the share of ``<unk>`` each source word gets is
    its share of the attention on such words. A row with none (M = 0: every extended id at
    the model's floor, log P = log(tiny), seqlab.models.pointer_generator) just loses
    ``<unk>``, as with ``forbid_unk``; the searches renormalise it. In log space:
    log P'(k) = log P(k) + log1p(P(<unk>) / M).

    Shapes: log_p (B, V + n_oov) -> (B, V + n_oov)
    """
    floor = math.log(torch.finfo(log_p.dtype).tiny)
    copy = log_p[:, vocab_size:]  # (B, n_oov)
    real = copy > floor  # (B, n_oov)  an id of this row's source
    mass = copy.exp().masked_fill(~real, 0.0).sum(-1, keepdim=True)  # (B, 1)  M
    p_unk = log_p[:, unk_id : unk_id + 1].exp()  # (B, 1)
    gain = torch.log1p(p_unk / mass.clamp_min(torch.finfo(log_p.dtype).tiny))  # (B, 1)
    out = log_p.clone()
    out[:, vocab_size:] = torch.where(real, copy + gain, copy)  # (B, n_oov)
    out[:, unk_id] = float("-inf")
    return out


class UnkToCopyDecoder(UnkBlockedDecoder):
    """``unk_to_copy``: the wrapped decoder's ``step`` with ``<unk>``'s mass moved onto the
    source words outside the target vocabulary (``unk_to_copy``) at every step.

    Shapes: step(y_prev (B,), state) -> log P (B, V + n_oov) with column ``unk_id`` −∞,
    state
    """

    def __init__(self, decoder: StepDecoder, vocab_size: int, unk_id: int = UNK_ID) -> None:
        super().__init__(decoder, unk_id)
        self.vocab_size = vocab_size

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        log_p, state = self.decoder.step(y_prev, state)  # (B, V')
        return unk_to_copy(log_p, self.vocab_size, self.unk_id), state


def replace_unk_by_attention(
    ids: Sequence[int], attention: Tensor, src_ext: Sequence[int]
) -> list[int]:
    """``replace_unk`` (Luong et al. 2015, §3.3; Jean et al. 2015): each ``<unk>`` at output
    step t becomes the source word i* = argmax_i a_i^t, the position the model attended to
    most when it emitted that ``<unk>``. The word is written as it is in the source (no
    dictionary): ``src_ext[i*]``, its target id when it is a target word, else its copy id
    V + k. The source's final ``</s>`` is not a candidate (ties: the first position); with
    no source word the ``<unk>`` stays. Other ids are unchanged.

    Shapes: ids (T,); attention (≥ T, ≥ S) with row t = the step that emitted ids[t]
    (``PointerGeneratorOutput.attention`` of the teacher-forced pass on the output);
    src_ext (S,), the example's extended source ids ending in ``</s>`` -> (T,)
    """
    n_words = len(src_ext) - 1  # without the final </s>
    if n_words < 1 or UNK_ID not in ids:
        return list(ids)
    best = attention[: len(ids), :n_words].argmax(dim=-1).tolist()  # (T,)
    return [int(src_ext[best[t]]) if j == UNK_ID else int(j) for t, j in enumerate(ids)]


@dataclass
class CopyDecoded:
    """One decoded sentence. ``ids``: extended ids without EOS (≥ V: a word of the source
    outside the target vocabulary, produced only by copying). ``score``: what the search
    ranked by (beam: log P / lp; greedy: log P) and ``log_prob``: log P(Y), both under the
    distribution the search read (with ``unk_to_copy``, ``<unk>``'s mass moved to the
    copies). Teacher-forced on the decoded steps (EOS included, before ``replace_unk``):
    ``p_gen`` (T,) and the attention a^t (T, S), S = the source's ids with its EOS.
    ``others``: with ``settings.nbest`` = N > 1, the search's next N − 1 hypotheses, best
    first, as (ids without EOS, score, log P(Y))."""

    ids: list[int]
    score: float
    log_prob: float
    p_gen: Tensor
    attention: Tensor
    others: list[tuple[list[int], float, float]] = field(default_factory=list)


def decode_copy(
    model: nn.Module,
    examples: Sequence[CopyExample],
    settings: SearchSettings,
    block_unk: bool = False,
    replace_unk: bool = False,
    unk_to_copy_vocab: int | None = None,
    coverage_penalty: float = 0.0,
    coverage_words: str = "all",
) -> list[tuple[list[int], float]]:
    """Decode each example with greedy (beam 1) or beam search over the extended
    vocabulary; returns, in input order, (extended ids without EOS, mean p_gen of its
    steps): ``decode_copy_detailed``'s ``ids`` and the mean of its ``p_gen``."""
    decoded = decode_copy_detailed(
        model,
        examples,
        settings,
        block_unk,
        replace_unk,
        unk_to_copy_vocab,
        coverage_penalty,
        coverage_words,
    )
    return [(d.ids, float(d.p_gen.mean())) for d in decoded]


@torch.no_grad()
def decode_copy_detailed(
    model: nn.Module,
    examples: Sequence[CopyExample],
    settings: SearchSettings,
    block_unk: bool = False,
    replace_unk: bool = False,
    unk_to_copy_vocab: int | None = None,
    coverage_penalty: float = 0.0,
    coverage_words: str = "all",
) -> list[CopyDecoded]:
    """Decode each example with greedy (beam 1) or beam search over the extended
    vocabulary; returns one ``CopyDecoded`` per example, in input order. Batches as
    ``translation_eval.decode_ids``: longest sources first within the token budget
    (``plan_batches``), each row with its own limit ⌊a·|x| + b⌋ (``batch_limits``).
    ``block_unk``: the search never emits ``<unk>`` (``UnkBlockedDecoder``);
    ``replace_unk``: each ``<unk>`` of the output becomes its most-attended source word
    (``replace_unk_by_attention``; p_gen is that of the decoded steps);
    ``unk_to_copy_vocab`` V: ``<unk>``'s mass goes to the copies (``UnkToCopyDecoder``).
    ``coverage_penalty`` β > 0: beam search adds GNMT's cp(X; Y) to each finished
    hypothesis' score (``gnmt_coverage_penalty``; not used by greedy search), summed over
    every source word (``coverage_words`` ``all``) or over the source words outside the
    target vocabulary only (``oov``; ``PointerGenerator.oov_attention_coverage``).

    Shapes (per batch): src, src_ext (B, S); per-row max_len (B,); greedy tokens (B, T);
    beam tokens (B, 1, T).
    """
    if block_unk + replace_unk + (unk_to_copy_vocab is not None) > 1:
        raise ValueError("decode_copy: block_unk, replace_unk and unk_to_copy: choose one")
    if replace_unk and settings.nbest > 1:
        raise ValueError(
            "replace_unk rewrites the best hypothesis from its attention: decode nbest 1, or "
            "use unk_to_copy (which works inside the search, for every hypothesis)"
        )
    if coverage_words not in ("all", "oov"):
        raise ValueError(
            f"decode_copy: coverage_words must be 'all' or 'oov', got {coverage_words!r}"
        )
    coverage = model.attention_coverage if coverage_words == "all" else model.oov_attention_coverage
    device = model_device(model)
    decoder = UnkBlockedDecoder(model) if block_unk else model
    if unk_to_copy_vocab is not None:
        decoder = UnkToCopyDecoder(model, unk_to_copy_vocab)
    out: list[CopyDecoded | None] = [None] * len(examples)
    n_src = [len(e.src_ids) - 1 for e in examples]  # without the source EOS
    for batch in plan_batches(n_src, settings):
        rows = [examples[i] for i in batch]
        src, lengths = pad_batch([e.src_ids for e in rows], PAD_ID)  # (B, S), (B,)
        src_ext, _ = pad_batch([e.src_ext for e in rows], PAD_ID)  # (B, S)
        src, src_ext = src.to(device), src_ext.to(device)  # (B, S)
        src_mask = padding_mask(lengths).to(device)  # (B, S)
        n_oov = max(len(e.oovs) for e in rows)
        extras = source_inputs(rows, device)  # n-gram ids (B, S, G), statistics (B, S, F)
        limit = batch_limits([n_src[i] for i in batch], settings).to(device)  # (B,)
        memory = model.encode(src, src_mask, src_ext, n_oov, **extras)
        state = model.init_state(memory, src_mask)
        B = len(batch)
        others: list[list[tuple[list[int], float, float]]] = [[] for _ in batch]
        if settings.beam == 1:
            res = greedy(decoder, state, B, BOS_ID, EOS_ID, max_len=limit, pad_id=PAD_ID)
            tokens, lens = res.tokens, res.lengths  # (B, T), (B,)
            scores, log_probs = res.scores, res.log_probs  # (B,), (B,)
        else:
            res = beam_search(
                decoder,
                state,
                B,
                BOS_ID,
                EOS_ID,
                max_len=limit,
                beam_size=settings.beam,
                n_best=settings.nbest,
                alpha=settings.length_penalty,
                pad_id=PAD_ID,
                coverage_penalty=coverage_penalty,
                coverage=coverage if coverage_penalty > 0.0 else None,
            )
            tokens, lens = res.tokens[:, 0], res.lengths[:, 0]  # (B, T), (B,)
            scores, log_probs = res.scores[:, 0], res.log_probs[:, 0]  # (B,), (B,)
            others = _other_hypotheses(res)  # B lists of N − 1
        ids = [row[:n] for row, n in zip(tokens.tolist(), lens.tolist())]
        p_gen, attention = _decoded_steps(model, src, src_mask, src_ext, n_oov, ids, extras)
        for b, (i, score, log_prob) in enumerate(zip(batch, scores.tolist(), log_probs.tolist())):
            row, steps, n_s = ids[b], len(ids[b]), len(examples[i].src_ids)
            if replace_unk:
                row = replace_unk_by_attention(row, attention[b], examples[i].src_ext)
            out[i] = CopyDecoded(
                row[:-1] if row and row[-1] == EOS_ID else row,
                score,
                log_prob,
                p_gen[b, :steps],
                attention[b, :steps, :n_s],
                others[b],
            )
    return out  # type: ignore[return-value]


def _other_hypotheses(res: Any) -> list[list[tuple[list[int], float, float]]]:
    """Hypotheses 2 … N of each row of a beam search result: (ids without EOS, score,
    log P).  res.tokens (B, N, T), res.lengths / scores / log_probs (B, N)."""
    rows, lens = res.tokens.tolist(), res.lengths.tolist()
    scores, logps = res.scores.float().tolist(), res.log_probs.float().tolist()
    out = []
    for b in range(len(rows)):
        hyps = []
        for n in range(1, len(rows[b])):
            ids = rows[b][n][: lens[b][n]]
            hyps.append((ids[:-1] if ids and ids[-1] == EOS_ID else ids, scores[b][n], logps[b][n]))
        out.append(hyps)
    return out


def _decoded_steps(
    model: nn.Module,
    src: Tensor,
    src_mask: Tensor,
    src_ext: Tensor,
    n_oov: int,
    ids: list,
    extras: dict | None = None,
) -> tuple[Tensor, Tensor]:
    """Teacher-forced on the decoded rows: p_gen and the attention a^t of every step (row t
    emitted ids[t]; the padded steps after a row's end are to be cut off by its length).

    ``extras``: the encoder's optional inputs (``source_inputs``: n-grams, statistics).
    Shapes: src, src_mask, src_ext (B, S) -> p_gen (B, T), attention (B, T, S)
    """
    y, n = pad_batch([[BOS_ID, *row[:-1]] if row else [BOS_ID] for row in ids], PAD_ID)  # (B, T)
    y, mask = y.to(src.device), padding_mask(n).to(src.device)  # (B, T)
    out = model(src, src_mask, y, mask, src_ext, n_oov, details=True, **(extras or {}))
    return out.p_gen.detach().cpu(), out.attention.cpu()  # (B, T), (B, T, S)
