"""Copy dropout: training pairs where a rarer target-vocabulary word must be copied.

Not in See et al. 2017. With a 2,000-word target vocabulary only 0.43 % of Multi30k's
training targets are words that only a copy can produce (extended ids ≥ V, 1,609 of
377,128 tokens), so the copy route gets few examples, and always of the same few
names and numbers. About as many target tokens again (1,714 of rank ≥ 500, 2,910 of rank
≥ 250) are vocabulary words that the German source spells the same way ("bowling",
"snowboarder", "3"): either route gives them. Copy dropout relabels some of those as if
they were outside the vocabulary, the way word dropout hides words from a model:

    for each training pair and each word type w with  min_id ≤ id(w) < V
    that occurs in both the source and the target, with probability ``rate``:
        every occurrence of w in src_ext and tgt_ext → V + k,  oovs[k] = w

so the only way to produce w in that pair is (1 − p_gen) Σ_{i: w_i = w} a_i (eq. 9), as
for a real OOV. The decoder then reads w as UNK when it is fed back (ids ≥ V are UNK in
its embedding), as it reads a copied OOV. The encoder's input (``src_ids``, n-grams,
statistics) is unchanged: a source word can be known to the encoder and still be outside
the target vocabulary, as many real OOVs are.

The draw is made once, from ``seed``, when the task prepares its data (a static relabelling
of the training set; the valid and test pairs are never touched), so a resumed run sees
the same pairs. Ids are frequency ranks (``Vocab.build``): ``min_id`` keeps the frequent
words ("in", ".", "person") away from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from seqlab.data.oov import CopyExample
from seqlab.data.vocab import Vocab

__all__ = ["copy_dropout", "relabel_as_copies"]


def relabel_as_copies(example: CopyExample, ids: Sequence[int], tgt_vocab: Vocab) -> CopyExample:
    """``example`` with every occurrence of the vocabulary ids ``ids`` (words found in both
    its source and its target) in ``src_ext`` and ``tgt_ext`` replaced by new OOV ids
    V + k, k counting on from the example's own OOVs; ``oovs`` gains their words.

    Shapes: src_ext (S,), tgt_ext (T,) tuples of extended ids -> the same lengths
    """
    if not ids:
        return example
    V = len(tgt_vocab)
    new = {j: V + len(example.oovs) + k for k, j in enumerate(ids)}
    return dataclasses.replace(
        example,
        src_ext=tuple(new.get(j, j) for j in example.src_ext),
        tgt_ext=tuple(new.get(j, j) for j in example.tgt_ext),
        oovs=(*example.oovs, *(tgt_vocab.id_to_token(j) for j in ids)),
    )


def copy_dropout(
    examples: Sequence[CopyExample], tgt_vocab: Vocab, rate: float, min_id: int, seed: int
) -> list[CopyExample]:
    """The training examples after copy dropout (module docstring): each word type with
    ``min_id`` ≤ id < V shared by a pair's source and target is relabelled as an OOV of
    that pair with probability ``rate`` (one uniform draw per candidate, in example order,
    from ``np.random.default_rng(seed)``).
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"copy dropout rate must be in [0, 1], got {rate}")
    V = len(tgt_vocab)
    if rate == 0.0 or min_id >= V:
        return list(examples)
    rng = np.random.default_rng(seed)
    out = []
    for ex in examples:
        shared = sorted({j for j in ex.src_ext if min_id <= j < V} & set(ex.tgt_ext))
        if not shared:
            out.append(ex)
            continue
        chosen = [j for j, u in zip(shared, rng.random(len(shared))) if u < rate]
        out.append(relabel_as_copies(ex, chosen, tgt_vocab))
    return out
