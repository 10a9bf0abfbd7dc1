"""Tiny trained runs for the serving tests, one per servable task, each in a few seconds:
a Transformer de→en on a 16-word lexicon, a pointer-generator that copies invented names,
a character GRU language model, an averaged-embedding sentiment classifier and a BiLSTM
tagger (data made by the task tests' helpers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from seqlab import api
from tests.cli.test_lm_cli import TEXT
from tests.cli.test_predict_cli import NEG, POS
from tests.tasks.test_copy_translation import _pairs as _named_pairs
from tests.tasks.test_copy_translation import run_config as _pointer_generator_config
from tests.tasks.test_tagging_task import sentences, write_conll
from tests.tasks.test_translation import _pairs

TRAIN: dict[str, Any] = {
    "precision": "fp32",
    "threads": 1,
    "progress": False,
    "log_every": 1000,
    "optim": {"name": "adam", "lr": 5e-3},
}


def keeping_threads(make: Any, *args: Any, **kwargs: Any) -> Path:
    """``make(*args, **kwargs)`` (one of the runs below), with torch's thread count given
    back afterwards: the trainer sets ``train.threads``."""
    before = torch.get_num_threads()
    try:
        return make(*args, **kwargs)
    finally:
        torch.set_num_threads(before)


def _train(cfg: dict[str, Any], root: Path, steps: int) -> Path:
    cfg["train"] = {**TRAIN, **cfg.get("train", {}), "max_steps": steps,
                    "valid_every": steps, "save_every": steps}  # fmt: skip
    api.train(cfg, run_dir=root / "run", quiet=True)
    return root / "run"


def _write_pairs(root: Path, make_pairs: Any, n_valid: int) -> dict[str, str]:
    """``root/{train,valid}.{de,en}`` from ``make_pairs(n, seed)`` (400 training pairs of
    seed 0, ``n_valid`` of seed 1) → the task's ``train_src`` … ``valid_tgt`` paths."""
    files = {}
    for split, n, seed in [("train", 400, 0), ("valid", n_valid, 1)]:
        pairs = make_pairs(n, seed)
        for side, lang, i in (("src", "de", 0), ("tgt", "en", 1)):
            path = root / f"{split}.{lang}"
            path.write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    return files


def translation_run(root: Path, steps: int = 150) -> Path:
    """Transformer (d 32, 1 + 1 layers) on lexicon pairs ``der hund läuft.`` → ``the dog
    runs.``; the data files stay in ``root`` (loading a translation run reads them)."""
    files = _write_pairs(root, _pairs, n_valid=20)
    cfg = {
        "task": {"name": "translation", "data": "files", **files, "vocab_size": 60,
                 "cache_dir": str(root / "spm"), "valid_bleu_sentences": 10},
        "model": {"name": "transformer", "d_model": 32, "n_heads": 4, "d_ff": 64,
                  "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0,
                  "share_embeddings": True},
        "train": {"batch": {"max_tokens": 512}},
    }  # fmt: skip
    return _train(cfg, root, steps)


RNN_MODELS: dict[str, dict[str, Any]] = {
    # small, and each with the state its family can have: Luong's 2 layers, bidirectional
    # encoder and input feeding; Bahdanau's static annotations and keys; Sutskever's
    # reversed source; Cho's static summary c (dropout 0: the exported step is eval mode)
    "luong": {"emb_dim": 16, "hidden_size": 24, "layers": 2, "bidirectional_encoder": True},
    "bahdanau": {"emb_dim": 16, "hidden_size": 20, "attn_dim": 12, "readout_dim": 10},
    "sutskever": {"emb_dim": 16, "hidden_size": 24, "layers": 2, "reverse_source": True},
    "cho": {"emb_dim": 16, "hidden_size": 20, "readout_dim": 10},
    # not an RNN, but its state is named tensors too: buffers of past inputs, a position
    "convs2s": {"emb_dim": 16, "channels": 16, "encoder_layers": 2, "decoder_layers": 2},
}


def rnn_translation_run(root: Path, model: str, steps: int = 60) -> Path:
    """An RNN encoder–decoder (``RNN_MODELS[model]``) on ``translation_run``'s lexicon pairs."""
    files = _write_pairs(root, _pairs, n_valid=20)
    cfg = {
        "task": {"name": "translation", "data": "files", **files, "vocab_size": 60,
                 "cache_dir": str(root / "spm"), "valid_bleu_sentences": 10},
        "model": {"name": model, **RNN_MODELS[model], "dropout": 0.0},
        "train": {"batch": {"max_tokens": 512}},
    }  # fmt: skip
    return _train(cfg, root, steps)


def pointer_generator_run(root: Path, steps: int = 150, **task: Any) -> Path:
    """Pointer-generator (copy_translation) on ``Ein Mann namens Boa läuft.`` → ``A man named
    Boa runs.``: 30 invented names, none in the 13-word target vocabulary, so each name is
    produced by copying it (tests/tasks/test_copy_translation.py's data and model)."""
    files = _write_pairs(root, _named_pairs, n_valid=30)
    return _train(_pointer_generator_config(files, steps, **task), root, steps)


def lm_run(
    root: Path, steps: int = 30, cell: str = "gru", layers: int = 1, model: dict | None = None
) -> Path:
    """Character GRU (or ``cell``, ``layers``; or the ``model`` section given) language
    model on three repeated lines."""
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT + "\n", encoding="utf-8")
    cfg = {
        "task": {"name": "lm", "data": "text", "path": str(corpus), "level": "char",
                 "batch_size": 4, "bptt": 16, "eval_batch_size": 2},
        "model": model or {"name": "rnn_lm", "cell": cell, "emb_dim": 16, "hidden": 16,
                           "layers": layers, "dropout": 0.0},
    }  # fmt: skip
    return _train(cfg, root, steps)


def classify_run(root: Path, steps: int = 40) -> Path:
    """Averaged embeddings on ten short positive / negative reviews."""
    data = root / "reviews.tsv"
    lines = [f"pos\t{t} {i}" for i in range(4) for t in POS]
    lines += [f"neg\t{t} {i}" for i in range(4) for t in NEG]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = {
        "task": {"name": "classify", "data": "tsv", "path": str(data), "min_freq": 1},
        "model": {"name": "avg_embedding", "d_embed": 8},
        "train": {"batch": {"max_tokens": 64}, "optim": {"name": "adam", "lr": 0.05}},
    }
    return _train(cfg, root, steps)


def tag_run(root: Path, steps: int = 40) -> Path:
    """BiLSTM-CRF tagger on lexicon sentences (a word's identity gives its entity type)."""
    paths = {
        f"{split}_path": write_conll(root / f"{split}.txt", sentences(n, seed))
        for split, n, seed in [("train", 200, 0), ("valid", 20, 1)]
    }
    cfg = {
        "task": {"name": "tag", "data": "files", **paths},
        "model": {"name": "bilstm_tagger", "word_dim": 16, "char": "cnn", "char_dim": 8,
                  "char_filters": 8, "hidden": 16, "dropout": 0.0, "decoder": "crf"},
        "train": {"batch": {"max_tokens": 256}, "optim": {"name": "adam", "lr": 0.02}},
    }  # fmt: skip
    return _train(cfg, root, steps)


def algorithmic_run(root: Path, steps: int = 60) -> Path:
    """A small Transformer on the reverse task (the README's first run, shrunk)."""
    cfg = {
        "task": {"name": "algorithmic", "kind": "reverse", "n_symbols": 8, "min_len": 3,
                 "max_len": 6, "n_train": 2000, "n_valid": 40},
        "model": {"name": "transformer", "d_model": 32, "n_heads": 4, "d_ff": 64,
                  "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0},
        "train": {"batch": {"max_tokens": 512}},
    }  # fmt: skip
    return _train(cfg, root, steps)
