"""The copy_translation task: word tokenisation, small target vocabulary, the eq. 13
loss, the copy / repetition metrics, and training → evaluate → translate end to end on
generated parallel files whose names can only be produced by copying."""

from __future__ import annotations

import random

import pytest
import torch

from seqlab import api
from seqlab.data.vocab import UNK, Vocab
from seqlab.errors import SeqlabError
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.tasks.copy_translation import (
    CopyTranslationConfig,
    CopyTranslationTask,
    detokenize,
    oov_copy_counts,
    repeated_ngrams,
    tokenize,
)

LEXICON = {"ein": "a", "mann": "man", "eine": "a", "frau": "woman", "kind": "child"}
VERBS = {"läuft": "runs", "schläft": "sleeps", "springt": "jumps"}
NAMES = [f"{a}{b}" for a in ("kar", "bo", "lin", "mes", "tu", "ra") for b in "aeiou"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """ "Ein Mann namens Boa läuft." → "A man named Boa runs." (names: 30 invented words)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        subj = rng.choice(list(LEXICON))
        verb = rng.choice(list(VERBS))
        name = rng.choice(NAMES).capitalize()
        de = f"{subj.capitalize()} {rng.choice(['mann', 'frau', 'kind'])} namens {name} {verb}."
        en_noun = LEXICON[de.split()[1].lower()]
        out.append((de, f"A {en_noun} named {name} {VERBS[verb]}."))
    return out


def _write(tmp_path, split: str, pairs: list[tuple[str, str]]) -> dict[str, str]:
    src, tgt = tmp_path / f"{split}.de", tmp_path / f"{split}.en"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return {f"{split}_src": str(src), f"{split}_tgt": str(tgt)}


@pytest.fixture
def files(tmp_path):
    return {
        **_write(tmp_path, "train", _pairs(400, 0)),
        **_write(tmp_path, "valid", _pairs(30, 1)),
        **_write(tmp_path, "test", _pairs(30, 2)),
    }


def _task(files, **kw) -> CopyTranslationTask:
    cfg = CopyTranslationConfig(data="files", tgt_vocab_size=13, src_min_freq=1, **files, **kw)
    task = CopyTranslationTask(cfg, None, 0)
    task.prepare()
    return task


def run_config(files, steps: int, **task) -> dict:
    """A small pointer-generator on the generated files, ``steps`` updates of Adam 1e-2."""
    return {
        "task": {"name": "copy_translation", "data": "files", **files, "tgt_vocab_size": 13,
                 "src_min_freq": 1, "valid_bleu_sentences": 0, "test_beam": 2, **task},
        "model": {"name": "pointer_generator", "emb_dim": 24, "hidden_size": 32,
                  "attn_dim": 24, "out_dim": 24, "dropout": 0.0},
        "schedule": {"name": "constant"},
        "train": {"max_steps": steps, "optim": {"name": "adam", "lr": 1.0e-2},
                  "batch": {"max_tokens": 256}, "label_smoothing": 0.0, "clip_norm": 2.0,
                  "valid_every": 1000, "save_every": 1000, "log_every": 1000,
                  "progress": False, "threads": 1},
    }  # fmt: skip


# ----------------------------------------------------------------- text and metrics


def test_tokenize_and_detokenize():
    assert tokenize("A man's T-shirt, (red) 1,5 m.") == [
        "a", "man's", "t-shirt", ",", "(", "red", ")", "1", ",", "5", "m", ".",
    ]  # fmt: skip
    assert detokenize(["a", "man", ",", "(", "red", ")", "runs", "."]) == "a man, (red) runs."


def test_oov_copy_counts_hand_example():
    """Reference OOVs found in the source: boston ×2, 1984 (zürich is not in the reference;
    unicorn is not in the source). The output has boston once and 1984: 2 of 3."""
    vocab = Vocab(["a", "man", "in", "."])
    src = ["ein", "mann", "in", "boston", "zürich", "boston", "1984"]
    ref = ["a", "man", "in", "boston", "boston", "1984", "unicorn", "."]
    hyp = ["a", "man", "in", "boston", "1984", "1984", "."]
    assert oov_copy_counts(src, ref, hyp, vocab) == (2, 3)


def test_repeated_trigrams_hand_example():
    """a b c a b c a: trigrams abc bca cab abc bca → 2 repeats of 5."""
    assert repeated_ngrams(list("abcabca")) == (2, 5)
    assert repeated_ngrams(["x", "y"]) == (0, 0)


def test_config_is_validated():
    with pytest.raises(ValueError, match="cov_lambda"):
        CopyTranslationConfig(cov_lambda=-1.0)
    with pytest.raises(ValueError, match="data: files"):
        CopyTranslationConfig(data="files")
    with pytest.raises(ValueError, match="tgt_vocab_size"):
        CopyTranslationConfig(tgt_vocab_size=3)


# ----------------------------------------------------------------- data and loss


def test_prepare_builds_a_small_target_vocabulary_and_restores_it(files):
    task = _task(files)
    assert len(task.tgt_vocab) == 13 and "named" in task.tgt_vocab
    assert not any(n in task.tgt_vocab for n in NAMES)  # names must be copied
    ex = task.examples["train"][0]
    name = task.words["train"][1][0][3]
    V = len(task.tgt_vocab)
    assert ex.tgt_ext[3] == V + ex.oovs.index(name)  # the name is a copied OOV id
    again = CopyTranslationTask(task.cfg, None, 0)
    again.prepare(task.tokenizer_state())
    assert again.tgt_vocab == task.tgt_vocab and again.src_vocab == task.src_vocab
    assert again.examples["valid"] == task.examples["valid"]


def test_loss_is_nll_plus_lambda_coverage(files):
    """loss_sum = Σ −log P(y_t) + λ Σ covloss_t over non-pad targets (atol 1e-4, float32),
    nll_sum the first term alone; label smoothing is refused."""
    task = _task(files, cov_lambda=0.5)
    torch.manual_seed(0)
    cfg = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)
    model = PointerGenerator(cfg, **task.model_kwargs())
    b = task.collate([0, 1, 2, 3])
    out = task.loss(model, b)
    det = model(b.src, b.src_mask, b.y_in, b.tgt_mask, b.src_ext, b.n_oov, details=True)
    nll = -det.log_probs.gather(-1, b.y_out[..., None]).squeeze(-1)[b.tgt_mask].sum()
    cov = det.cov_loss[b.tgt_mask].sum()
    torch.testing.assert_close(out.nll_sum, nll.detach(), atol=1e-4, rtol=0)
    torch.testing.assert_close(out.loss_sum, nll + 0.5 * cov, atol=1e-4, rtol=0)
    assert out.n_tokens == int(b.tgt_mask.sum()) and float(cov.detach()) > 0
    with pytest.raises(SeqlabError, match="label_smoothing"):
        task.loss(model, b, label_smoothing=0.1)


def test_train_evaluate_translate_end_to_end(files, tmp_path):
    """The Trainer on the generated data (names never in the target vocabulary): after 150
    updates the greedy output copies ≥ 90% of the reference names; the checkpoint reloads
    and translates an unseen name by copying it."""
    run = api.train(run_config(files, 150), run_dir=tmp_path / "run", quiet=True)
    valid = run.metrics["valid"]
    assert valid["oov_copyable"] == 30
    assert valid["oov_copy"] >= 90.0, valid
    assert valid["bleu_lc"] > 50.0 and 0.0 <= valid["repeat_trigram"] <= 100.0
    loaded = api.load(tmp_path / "run", prefer="latest")
    test = loaded.evaluate("test")
    assert test["oov_copy"] >= 90.0 and 0.0 < test["p_gen"] < 1.0
    (text,) = loaded.translate(["Ein Mann namens Zyxwq läuft."], beam=2)
    assert "zyxwq" in text.split() and UNK not in text
    info = loaded.explain("Ein Mann namens Zyxwq läuft.")
    T, S = info["attention"].shape
    assert len(info["output"]) == T and S == len(info["source"]) == 7
    assert info["p_gen"].shape == (T,) and float(info["cov_loss"][0]) == 0.0


def test_search_flags_left_out_are_the_configs(files):
    """``seqlab translate`` passes every search flag, None where none was given: None means
    the run's own setting (it used to reach SearchSettings as None and fail)."""
    task = _task(files, max_len_a=1.5, max_len_b=7, length_penalty=0.8)
    unset = dict(max_len_a=None, max_len_b=None, length_penalty=None, coverage_penalty=None)
    assert task._settings(4, **unset, test_compile=None) == task._settings(4)
    assert task._settings(4).max_len_a == 1.5 and task._settings(4).max_len_b == 7
    assert task._settings(4, length_penalty=0.3).length_penalty == 0.3
