"""Character n-grams on the pointer-generator's encoder input (``task.src_char_ngrams``):
the input is E[w] + mean of the word's n-gram vectors, padding and batching change nothing,
and end to end the model learns to copy names that the encoder reads as ``<unk>``.

The tests of batching and of every path passing the input on run for both optional
encoder inputs: the n-grams and the corpus word statistics (``task.src_word_stats``,
tests/tasks/test_copy_translation_stats.py)."""

from __future__ import annotations

import pytest
import torch

from seqlab import api
from seqlab.data.vocab import UNK, UNK_ID
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.tasks.copy_translation_decode import decode_copy
from tests.tasks.test_copy_translation import _task, files, run_config  # noqa: F401

SMALL = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)
# optional encoder input: (task options, the module that reads it, its error's wording)
EXTRAS = {
    "grams": ({"src_char_ngrams": 64}, "src_gram_embed", "character n-grams"),
    "stats": ({"src_word_stats": True}, "src_stat_proj", "word statistics"),
}


def _model(task, seed: int = 0) -> PointerGenerator:
    torch.manual_seed(seed)
    return PointerGenerator(SMALL, **task.model_kwargs()).double().eval()


def test_encoder_input_is_word_embedding_plus_mean_of_its_ngram_vectors(files):  # noqa: F811
    task = _task(files, src_char_ngrams=64)
    model = _model(task)
    b = task.collate([0, 1, 2])
    x = model.source_input(b.src, b.src_grams)  # (B, S, E)
    E, Z = model.src_embed.weight, model.src_gram_embed.weight
    for row in range(3):
        for i in range(b.src.shape[1]):
            ids = [g for g in b.src_grams[row, i].tolist() if g]
            want = E[b.src[row, i]] + (Z[ids].mean(0) if ids else 0.0)
            torch.testing.assert_close(x[row, i], want, atol=1e-12, rtol=0)
    name = task.words["train"][0][0][3]  # "namens <Name>": a word the encoder may read as <unk>
    assert any(task.examples["train"][0].src_grams[3])
    assert task.examples["train"][0].src_grams[3] == task.grams.ids(name)
    with pytest.raises(ValueError, match="character n-grams"):
        model.source_input(b.src, None)


@pytest.mark.parametrize("extra", EXTRAS)
def test_loss_of_a_batch_is_the_sum_of_its_rows_padding_changes_nothing(files, extra):  # noqa: F811
    task = _task(files, **EXTRAS[extra][0], cov_lambda=0.5)
    model = _model(task, seed=1)
    rows = [0, 5, 9, 17]
    together = task.loss(model, task.collate(rows))
    alone = [task.loss(model, task.collate([i])) for i in rows]
    torch.testing.assert_close(
        together.loss_sum, sum(a.loss_sum for a in alone), atol=1e-10, rtol=0
    )
    assert together.n_tokens == sum(a.n_tokens for a in alone)


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("beam", [1, 3])
def test_batched_decoding_equals_one_sentence_at_a_time(files, beam, extra):  # noqa: F811
    task = _task(files, **EXTRAS[extra][0])
    model = _model(task, seed=2)
    examples = task.examples["valid"][:6]
    settings = task._settings(beam)
    together = decode_copy(model, examples, settings)
    alone = [decode_copy(model, [e], settings)[0] for e in examples]
    assert [ids for ids, _ in together] == [ids for ids, _ in alone]
    for (_, p), (_, q) in zip(together, alone):
        assert p == pytest.approx(q, abs=1e-10)


@pytest.mark.parametrize("extra", EXTRAS)
def test_extra_input_reaches_the_model_everywhere_it_reads_the_source(files, extra):  # noqa: F811
    """Changing only the n-gram table (the statistics' W_f, which starts at 0) changes the
    loss, the decoded steps' p_gen and explain()'s attention: every path passes
    ``src_grams`` (``src_stats``) on (a path that dropped them would also fail loudly: the
    model refuses a source without them)."""
    options, module, wording = EXTRAS[extra]
    task = _task(files, **options)
    model = _model(task, seed=3)
    b = task.collate([0, 1])
    ex = task.examples["valid"][:4]
    sentence = "Ein Mann namens Zyx läuft."

    def seen() -> tuple[float, list[float], torch.Tensor]:
        decoded = decode_copy(model, ex, task._settings(1))
        attention = task.explain(model, sentence)["attention"]
        return float(task.loss(model, b).loss_sum.detach()), [p for _, p in decoded], attention

    before = seen()
    with torch.no_grad():
        table = getattr(model, module).weight
        table.copy_(torch.randn(table.shape, generator=torch.Generator().manual_seed(0)))
    after = seen()
    assert before[0] != after[0] and before[1] != after[1]
    assert not torch.equal(before[2], after[2])
    with pytest.raises(ValueError, match=wording):
        model(b.src, b.src_mask, b.y_in, b.tgt_mask, b.src_ext, b.n_oov)


def test_end_to_end_copies_names_the_encoder_reads_as_unk(files, tmp_path):  # noqa: F811
    """src_min_freq 1000: every name (and every word) reaches the encoder as <unk>, so only
    the n-grams tell the names apart; after 200 updates the model still copies ≥ 90 % of
    them, and the reloaded checkpoint translates an unseen name."""
    config = run_config(files, 200, src_min_freq=1000, src_char_ngrams=512)
    run = api.train(config, run_dir=tmp_path / "run", quiet=True)
    assert set(run.task.examples["train"][0].src_ids[:-1]) == {UNK_ID}
    valid = run.metrics["valid"]
    assert valid["oov_copyable"] == 30 and valid["oov_copy"] >= 90.0, valid
    loaded = api.load(tmp_path / "run", prefer="latest")
    assert loaded.model.src_gram_embed.num_embeddings == 513
    (text,) = loaded.translate(["Ein Mann namens Zyxwq läuft."], beam=2)
    assert "zyxwq" in text.split() and UNK not in text
