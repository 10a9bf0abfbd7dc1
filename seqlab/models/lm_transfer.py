"""Start a sentence classifier from a trained language model (pretrain, then fine-tune).

Dai & Le 2015, "Semi-supervised Sequence Learning", §2 ("LM-LSTM"): train a recurrent
language model on unlabelled text, then use its weights to initialise the classifier's
LSTM and embedding, and fine-tune everything on the labelled task. The classifier is the
notes' many-to-one RNN (``seqlab.models.classifiers.RNNClassifier``); the LM is
``seqlab.models.rnn_lm.RNNLM``. Both read e⟨t⟩ = E[x⟨t⟩] into the same stacked
:class:`~seqlab.nn.recurrent.Recurrent`, so the transfer is a copy:

    E_clf[i]  ← E_lm[j(i)]   for every classifier token i whose string the LM knows (j)
    cell_clf(l, →) ← cell_lm(l)   for every layer l (a bidirectional classifier: layer 0's
                                   forward direction only; its backward direction and the
                                   layers above read [→ ; ←] and keep their initialisation)

The output layer W (the classifier's softmax over classes) is new. Tokens the LM does not
know keep their random rows; the coverage is reported. A classifier without recurrent
layers (averaged embeddings, Kim's CNN, the Transformer encoder) takes the embedding table
only (its width must equal the LM's ``emb_dim``).

Deviations: Dai & Le also pretrain a sequence autoencoder (SA-LSTM); seqlab has the LM
variant only. The copy is exact (no rescaling of the LM's vectors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from seqlab.config import ConfigError
from seqlab.data.vocab import UNK_ID
from seqlab.data.word_vectors_io import WordVectors, init_embedding

__all__ = ["LMTransfer", "transfer_lm"]


@dataclass(frozen=True)
class LMTransfer:
    """What :func:`transfer_lm` copied: ``coverage`` = classifier tokens found in the LM's
    vocabulary / regular classifier tokens; ``cells`` = recurrent cells copied."""

    coverage: float
    cells: int
    total_cells: int


def _d_embed(classifier: nn.Module) -> int:
    return int(classifier.embed.weight.shape[1])


def _check_compatible(classifier: nn.Module, lm: nn.Module) -> bool:
    """Whether the recurrent layers transfer too; raises when nothing can be copied.

    The classifier and the LM must share the embedding width, and for the recurrent layers
    the cell, hidden width and (forward) depth."""
    lcfg = getattr(lm, "cfg", None)
    if lcfg is None or not hasattr(lcfg, "emb_dim") or not hasattr(lm, "rnn"):
        raise ConfigError(
            f"task.init_lm: the checkpoint holds a {type(lm).__name__}, not a recurrent LM"
            " — train one with model: rnn_lm (e.g. configs/ptb-lstm.yaml)"
        )
    if not hasattr(classifier, "embed"):
        raise ConfigError(f"task.init_lm: {type(classifier).__name__} has no embedding table")
    wants = {"d_embed / emb_dim": (_d_embed(classifier), lcfg.emb_dim)}
    ccfg = getattr(classifier, "cfg", None)
    recurrent = hasattr(classifier, "rnn") and hasattr(ccfg, "cell")
    if recurrent:
        wants["cell"] = (ccfg.cell, lcfg.cell)
        wants["hidden"] = (ccfg.hidden, lcfg.hidden)
        if not ccfg.bidirectional:  # bidirectional: only layer 0's forward cell is copied
            wants["num_layers / layers"] = (ccfg.num_layers, lcfg.layers)
    bad = [f"{k}: classifier {a} vs LM {b}" for k, (a, b) in wants.items() if a != b]
    if recurrent and classifier.rnn.nonlinearity != lm.rnn.nonlinearity:
        bad.append(f"nonlinearity: {classifier.rnn.nonlinearity} vs {lm.rnn.nonlinearity}")
    if bad:
        raise ConfigError(
            "task.init_lm: the classifier does not match the language model ("
            + "; ".join(bad)
            + ") — set the classifier's model.* to the LM's sizes"
        )
    return recurrent


@torch.no_grad()
def transfer_lm(
    classifier: nn.Module,
    classifier_tokens: Sequence[str],
    lm: nn.Module,
    lm_tokens: Sequence[str],
) -> LMTransfer:
    """Copy the LM's embedding rows (matched by token string) and, into a recurrent
    classifier, its recurrent cells, in place (Dai & Le 2015's LM-LSTM initialisation).

    The ``<unk>`` row is copied too (the LM's unknown-word vector); ``<pad>`` stays zero.

    Shapes:
        classifier.embed.weight (V_c, D) ← lm.embed.weight (V_lm, D) rows
    """
    recurrent = _check_compatible(classifier, lm)
    # the rows by token string, as for word-vector files (specials skipped, pad stays zero)
    vectors = WordVectors(list(lm_tokens), lm.embed.weight.detach())  # (V_lm, D)
    coverage = init_embedding(
        classifier.embed, classifier_tokens, vectors, lowercase_fallback=False
    )
    classifier.embed.weight[UNK_ID] = lm.embed.weight[UNK_ID]  # the LM's unknown-word vector
    if not recurrent:
        return LMTransfer(coverage, cells=0, total_cells=0)
    rnn_c, rnn_lm = classifier.rnn, lm.rnn
    layers = 1 if rnn_c.bidirectional else rnn_c.num_layers
    for layer in range(layers):
        rnn_c.cell_at(layer, 0).load_state_dict(rnn_lm.cell_at(layer, 0).state_dict())
    return LMTransfer(coverage, cells=layers, total_cells=len(rnn_c.cells))
