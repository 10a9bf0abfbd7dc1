"""Per-sentence source OOVs and the extended vocabulary of a pointer-generator batch.

See, Liu & Manning 2017 (§2.2): the model copies a source word by pointing at it, so a
word that is not in the (fixed, size V) target vocabulary can still be produced. Each
source sentence gets its own list of such words, ``oovs``; word ``oovs[k]`` has the
*extended* id V + k in that sentence only. Over a batch the extended vocabulary has
V + n_oov ids, n_oov = max_b |oovs_b| (a row simply never puts mass on ids beyond its own
list).

    source word w_i   → tgt_vocab[w_i]                 if w_i is a target word
                      → V + k, oovs[k] = w_i           otherwise (first-seen order)
    target word y_t   → tgt_vocab[y_t]                 if y_t is a target word
                      → V + k                          if y_t = oovs[k] (copyable)
                      → UNK                            otherwise
    extended id j     → tgt_vocab.id_to_token(j)       j < V
                      → oovs[j − V]                    V ≤ j < V + |oovs|

Source and target words are compared as strings: a German token equal to the English
reference word (a name, a number, "in", "bmx") can be copied. The encoder still reads the
source through its own vocabulary (``src_ids``); only the copy distribution uses the
extended ids (``src_ext``). With a ``GramSpec`` each source position also carries the
hashed character n-grams of its word (``src_grams``, seqlab.data.char_ngrams), so the
encoder can tell a name or a number it has never seen from a rare German word. With
``WordStats`` each source position carries its corpus statistics f(w) (``src_stats``,
seqlab.data.word_stats): how often the word occurs on the target and on the source side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from seqlab.data.char_ngrams import gram_ids, pad_gram_ids
from seqlab.data.collate import Seq2SeqBatch, collate_seq2seq, pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from seqlab.data.word_stats import N_WORD_STATS, WordStats

__all__ = [
    "CopyBatch",
    "CopyExample",
    "GramSpec",
    "collate_copy",
    "extended_to_words",
    "make_copy_example",
    "source_grams",
    "source_inputs",
    "source_stats",
    "source_to_extended",
    "target_to_extended",
]


def source_to_extended(words: Sequence[str], tgt_vocab: Vocab) -> tuple[list[int], list[str]]:
    """Source words → ids in the extended target vocabulary, and the sentence's OOV list.

    Returns ``(ext_ids, oovs)``: ``ext_ids[i]`` is the target id of ``words[i]`` when it is
    a target word, else V + k with ``oovs[k] == words[i]`` (repeats share one k).
    """
    V = len(tgt_vocab)
    oovs: list[str] = []
    slot: dict[str, int] = {}
    ext_ids = []
    for w in words:
        if w in tgt_vocab:
            ext_ids.append(tgt_vocab.token_to_id(w))
            continue
        if w not in slot:
            slot[w] = len(oovs)
            oovs.append(w)
        ext_ids.append(V + slot[w])
    return ext_ids, oovs


def target_to_extended(words: Sequence[str], tgt_vocab: Vocab, oovs: Sequence[str]) -> list[int]:
    """Target words → extended ids: vocabulary id, else V + k for a source OOV, else UNK."""
    V = len(tgt_vocab)
    slot = {w: k for k, w in enumerate(oovs)}
    out = []
    for w in words:
        if w in tgt_vocab:
            out.append(tgt_vocab.token_to_id(w))
        else:
            out.append(V + slot[w] if w in slot else UNK_ID)
    return out


def extended_to_words(ids: Sequence[int], tgt_vocab: Vocab, oovs: Sequence[str]) -> list[str]:
    """Extended ids → words (the back-mapping). Specials decode to their names; an id
    beyond this sentence's OOVs raises IndexError (it cannot be produced by its copy
    distribution)."""
    V = len(tgt_vocab)
    out = []
    for j in ids:
        j = int(j)
        if j < V:
            out.append(tgt_vocab.id_to_token(j))
        elif j - V < len(oovs):
            out.append(oovs[j - V])
        else:
            raise IndexError(f"extended id {j} but the sentence has {len(oovs)} OOVs (V={V})")
    return out


@dataclass(frozen=True)
class GramSpec:
    """Character n-grams n_min ≤ n ≤ n_max hashed into ``buckets`` ids (1 … buckets)."""

    n_min: int = 3
    n_max: int = 5
    buckets: int = 32768

    def ids(self, word: str) -> tuple[int, ...]:
        return gram_ids(word, self.n_min, self.n_max, self.buckets)


@dataclass(frozen=True)
class CopyExample:
    """One sentence pair ready for a pointer-generator.

    ``src_ids``: source-vocabulary ids (the encoder's input), ``src_ext``: the same
    positions in the extended target vocabulary, both ending in ``</s>``; ``tgt_ext``:
    target ids in the extended vocabulary (no BOS/EOS); ``oovs``: the source OOV words;
    ``src_grams``: per source position its n-gram ids (``()`` for ``</s>``), or ``()``
    for the whole sentence when there is no ``GramSpec``; ``src_stats``: per source word
    its F corpus statistics (``</s>`` has none), or ``()`` without ``WordStats``.
    """

    src_ids: tuple[int, ...]
    src_ext: tuple[int, ...]
    tgt_ext: tuple[int, ...]
    oovs: tuple[str, ...]
    src_grams: tuple[tuple[int, ...], ...] = ()
    src_stats: tuple[tuple[float, ...], ...] = ()


def make_copy_example(
    src_words: Sequence[str],
    tgt_words: Sequence[str],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    grams: GramSpec | None = None,
    stats: WordStats | None = None,
    training_pair: bool = False,
) -> CopyExample:
    """Word lists → ``CopyExample`` (``</s>`` appended to the source, mapped to EOS in both
    id spaces, so pointing at it also votes for ending the sentence; it has no n-grams).
    ``training_pair``: the pair is part of the text ``stats`` counted, so its own
    occurrences are left out of the word statistics (seqlab.data.word_stats)."""
    src_ext, oovs = source_to_extended(src_words, tgt_vocab)
    word_stats: tuple[tuple[float, ...], ...] = ()
    if stats is not None:
        own = (src_words, tgt_words) if training_pair else (None, None)
        word_stats = stats.features(src_words, *own)
    return CopyExample(
        src_ids=tuple(src_vocab.encode(src_words, add_eos=True)),
        src_ext=(*src_ext, EOS_ID),
        tgt_ext=tuple(target_to_extended(tgt_words, tgt_vocab, oovs)),
        oovs=tuple(oovs),
        src_grams=() if grams is None else (*(grams.ids(w) for w in src_words), ()),
        src_stats=word_stats,
    )


@dataclass(frozen=True)
class CopyBatch(Seq2SeqBatch):
    """A ``Seq2SeqBatch`` whose targets are extended ids, plus the copy fields.

    Shapes:
        src:      (B, S) long, source-vocabulary ids (encoder input)
        src_ext:  (B, S) long, the same positions as extended target ids (pad at padding)
        y_in:     (B, T) long, ⟨s⟩ y₁ … y_m (extended ids; the model reads ids ≥ V as UNK)
        y_out:    (B, T) long, y₁ … y_m ⟨/s⟩ (extended ids: copied OOVs are V + k)
        n_oov:    int, max_b |oovs_b|: the batch's extended vocabulary is V + n_oov
        oovs:     B tuples of words, ``oovs[b][k]`` is extended id V + k in row b
        src_grams: (B, S, G) long, the character n-gram ids of each source word, 0-padded
                  (None when the examples carry none)
        src_stats: (B, S, F) float, the corpus statistics of each source word, 0 at ``</s>``
                  and padding (None when the examples carry none)
    (the other fields as in ``Seq2SeqBatch``)
    """

    src_ext: Tensor
    n_oov: int
    oovs: tuple[tuple[str, ...], ...]
    src_grams: Tensor | None = None
    src_stats: Tensor | None = None


def source_grams(examples: Sequence[CopyExample]) -> Tensor | None:
    """The examples' ``src_grams`` as a (B, S, G) tensor (S = the longest source), or None
    when they carry none (no ``GramSpec``)."""
    if not any(e.src_grams for e in examples):
        return None
    return pad_gram_ids([e.src_grams for e in examples], max(len(e.src_ids) for e in examples))


def source_stats(examples: Sequence[CopyExample]) -> Tensor | None:
    """The examples' ``src_stats`` as a (B, S, F) float32 tensor (S = the longest source;
    ``</s>`` and padding are 0), or None when they carry none (no ``WordStats``)."""
    if not any(e.src_stats for e in examples):
        return None
    S = max(len(e.src_ids) for e in examples)
    out = torch.zeros(len(examples), S, N_WORD_STATS)  # (B, S, F)
    for b, e in enumerate(examples):
        if e.src_stats:
            out[b, : len(e.src_stats)] = torch.tensor(e.src_stats, dtype=torch.float32)
    return out


def source_inputs(examples: Sequence[CopyExample], device: torch.device | str = "cpu") -> dict:
    """The encoder's optional per-word inputs of a batch, as keyword arguments of the
    pointer-generator: ``{"src_grams": (B, S, G) or None, "src_stats": (B, S, F) or None}``."""
    grams, stats = source_grams(examples), source_stats(examples)
    return {
        "src_grams": None if grams is None else grams.to(device),
        "src_stats": None if stats is None else stats.to(device),
    }


def collate_copy(examples: Sequence[CopyExample]) -> CopyBatch:
    """Pad B ``CopyExample``s into a ``CopyBatch`` (teacher forcing as ``collate_seq2seq``)."""
    if not examples:
        raise ValueError("collate_copy needs at least one example")
    base = collate_seq2seq(
        [(e.src_ids, e.tgt_ext) for e in examples], bos=BOS_ID, eos=EOS_ID, pad=PAD_ID
    )
    src_ext, _ = pad_batch([e.src_ext for e in examples], PAD_ID)  # (B, S)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return CopyBatch(
        **fields,
        src_ext=src_ext,
        n_oov=max(len(e.oovs) for e in examples),
        oovs=tuple(e.oovs for e in examples),
        src_grams=source_grams(examples),
        src_stats=source_stats(examples),
    )
