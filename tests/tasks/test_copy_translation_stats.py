"""Corpus word statistics on the pointer-generator's encoder input
(``task.src_word_stats``): the input is E[w] + W_f f(w), a training pair leaves itself out
of the counts, and a saved run translates with the counts it was trained with. Batching
and every path passing the statistics on: tests/tasks/test_copy_translation_grams.py
(parametrised over both optional encoder inputs)."""

from __future__ import annotations

import math

import pytest
import torch

from seqlab import api
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from tests.tasks.test_copy_translation import _task, files, run_config  # noqa: F401

SMALL = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)


def _model(task, seed: int = 0) -> PointerGenerator:
    torch.manual_seed(seed)
    return PointerGenerator(SMALL, **task.model_kwargs()).double().eval()


def test_encoder_input_is_word_embedding_plus_projected_statistics(files):  # noqa: F811
    task = _task(files, src_word_stats=True, src_char_ngrams=64)
    model = _model(task)
    assert not model.src_stat_proj.weight.any()  # W_f starts at 0: the model without them
    with torch.no_grad():
        model.src_stat_proj.weight.normal_()
    b = task.collate([0, 1, 2])
    x = model.source_input(b.src, b.src_grams, b.src_stats)  # (B, S, E)
    E, Z, W = model.src_embed.weight, model.src_gram_embed.weight, model.src_stat_proj.weight
    for row in range(3):
        for i in range(b.src.shape[1]):
            ids = [g for g in b.src_grams[row, i].tolist() if g]
            want = E[b.src[row, i]] + (Z[ids].mean(0) if ids else 0.0)
            want = want + W @ b.src_stats[row, i].double()
            torch.testing.assert_close(x[row, i], want, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="word statistics"):
        model.source_input(b.src, b.src_grams, None)
    with pytest.raises(ValueError, match="word statistics"):
        model.source_input(b.src, b.src_grams, b.src_stats[:, :-1])


def test_training_pairs_leave_themselves_out_other_splits_do_not(files):  # noqa: F811
    """In "Ein Mann namens Boa läuft." → "A man named Boa runs." a name occurs once per
    pair on each side: its training-pair statistics are log(1 + n − 1), a valid sentence
    sees log(1 + n)."""
    task = _task(files, src_word_stats=True)
    src, tgt = task.words["train"]
    name = src[0][3]
    n_src = sum(s.count(name) for s in src)
    n_tgt = sum(t.count(name) for t in tgt)
    assert n_src > 1 and n_tgt == n_src
    assert task.examples["train"][0].src_stats[3] == (
        math.log1p(n_tgt - 1),
        math.log1p(n_src - 1),
        0.0,
    )
    v = next(i for i, s in enumerate(task.words["valid"][0]) if s[3] == name)
    assert task.examples["valid"][v].src_stats[3] == (math.log1p(n_tgt), math.log1p(n_src), 0.0)
    # the German-only noun "namens" never occurs on the target side
    assert task.examples["valid"][v].src_stats[2][0] == 0.0
    again = _task(files, src_word_stats=True)
    again.prepare(task.tokenizer_state())  # from the saved state: the same examples
    assert again.examples == task.examples


def test_saved_run_translates_with_its_training_counts(files, tmp_path):  # noqa: F811
    """Train briefly, reload: the counts come from the saved tokenizer state and the
    reloaded model translates exactly as the trained one (a task that recounted on other
    text, or dropped the statistics, would not)."""
    run = api.train(run_config(files, 30, src_word_stats=True), run_dir=tmp_path / "r", quiet=True)
    loaded = api.load(tmp_path / "r", prefer="latest")
    assert loaded.model.src_stat_proj.weight.shape == (24, 3)
    assert loaded.task.stats.to_dict() == run.task.stats.to_dict()
    sentences = ["Ein Mann namens Boa läuft.", "Eine Frau namens Zyxwq schläft."]
    run.model.eval()
    want = run.task.translate(run.model, sentences, beam=2)
    assert loaded.translate(sentences, beam=2) == want
    assert loaded.task.examples["valid"] == run.task.examples["valid"]
    with pytest.raises(ValueError, match="src_word_stats must be true or false"):
        _task(files, src_word_stats="yes")
