"""Load several trained runs as one ensemble (``api.load_ensemble``).

Each run is rebuilt with ``api.load``; the ensemble keeps the first run's task and config
(its data, vocabularies and decode settings) and pools the members' distributions
(seqlab.decode.ensemble). The runs must agree on what the pool needs: the same task, the
same vocabularies (``task.tokenizer_state()``) and the same model inputs
(``task.model_kwargs()``); a run that differs is refused with its path and what differs.
Ensembles exist for the model types in ``ENSEMBLES``; a pool's members are of one type,
except language models, which pool across types (an LSTM LM with a Transformer LM).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from seqlab.config import ConfigError
from seqlab.models.bahdanau import Bahdanau
from seqlab.models.cho import Cho
from seqlab.models.convs2s import ConvS2S
from seqlab.models.ensemble import Seq2SeqEnsemble
from seqlab.models.lm_ensemble import LMEnsemble
from seqlab.models.luong import Luong
from seqlab.models.nplm import NPLM
from seqlab.models.pointer_generator import PointerGenerator
from seqlab.models.pointer_generator_ensemble import PointerGeneratorEnsemble
from seqlab.models.pointer_sentinel import PointerSentinelLSTM
from seqlab.models.rnn_lm import RNNLM
from seqlab.models.sutskever import Sutskever
from seqlab.models.transformer import TransformerSeq2Seq
from seqlab.models.transformer_lm import TransformerLM

__all__ = ["ENSEMBLES", "ensemble_of", "check_members"]

# model class -> the class that pools a list of its instances
ENSEMBLES: dict[type, Callable[[list[Any]], nn.Module]] = {
    PointerGenerator: PointerGeneratorEnsemble,
    **{
        cls: Seq2SeqEnsemble
        for cls in (Sutskever, Cho, Bahdanau, Luong, TransformerSeq2Seq, ConvS2S)
    },
    # language models: the pool of next-token distributions (seqlab.models.lm_ensemble)
    **{cls: LMEnsemble for cls in (RNNLM, TransformerLM, NPLM, PointerSentinelLSTM)},
}


def _language_models(*loaded: Any) -> bool:
    """Whether every model is a language model: each keeps its own state in the pool
    (``LMEnsemble``), so an LSTM LM pools with a Transformer LM; seq2seq pools need one type."""
    return all(ENSEMBLES.get(type(m.model)) is LMEnsemble for m in loaded)


def check_members(paths: Sequence[Path | str], loaded: Sequence[Any]) -> None:
    """Refuse members that cannot be pooled with the first (``ConfigError`` naming the run
    and what differs)."""
    first, where = loaded[0], paths[0]
    for path, m in zip(paths[1:], loaded[1:]):
        if type(m.task) is not type(first.task):
            raise ConfigError(
                f"{path}: its task is {type(m.task).__name__}, {where}'s "
                f"{type(first.task).__name__}: ensemble runs of one task"
            )
        if type(m.model) is not type(first.model) and not _language_models(first, m):
            raise ConfigError(
                f"{path}: its model is a {type(m.model).__name__}, {where}'s a "
                f"{type(first.model).__name__}: ensemble models of one type"
            )
        if m.task.tokenizer_state() != first.task.tokenizer_state():
            raise ConfigError(
                f"{path}: its vocabularies differ from {where}'s; an ensemble averages "
                "probabilities over one vocabulary: train the members on the same data with "
                "the same vocabulary settings"
            )
        if m.task.model_kwargs() != first.task.model_kwargs():
            raise ConfigError(
                f"{path}: its model reads other inputs than {where}'s "
                f"({m.task.model_kwargs()} against {first.task.model_kwargs()}); "
                "ensemble runs trained with the same task.src_char_ngrams / task.src_word_stats"
            )


def ensemble_of(paths: Sequence[Path | str], loaded: Sequence[Any]) -> nn.Module:
    """The pooled model of the members ``loaded`` (``LoadedModel``s of ``paths``)."""
    if not loaded:
        raise ConfigError("an ensemble needs at least one run")
    check_members(paths, loaded)
    make = ENSEMBLES.get(type(loaded[0].model))
    if make is None:
        kinds = ", ".join(sorted(c.__name__ for c in ENSEMBLES))
        raise ConfigError(
            f"{paths[0]}: no ensemble for a {type(loaded[0].model).__name__}; "
            f"ensembles exist for: {kinds}"
        )
    return make([m.model for m in loaded]).eval()
