"""Subword sampling in training (BPE-dropout, Provilkov et al. 2020): reproducible from a
seed, lossless, only on training batches, and exact across a stop and resume."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.run_config import resolve_run
from seqlab.tasks.translation import TranslationConfig, TranslationTask
from seqlab.train.checkpoint import step_name
from seqlab.train.trainer import Trainer
from tests.tasks.test_translation import _config, _tiny_model
from tests.train.tiny import tiny


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    t = TranslationTask(_config(tmp_path_factory.mktemp("mt"), subword_sampling=0.3))
    t.prepare()
    return t


def test_sampled_segmentation_is_seeded_lossless_and_finer(task):
    tok = task.src_tok
    texts = task.texts["train"][0][:50]
    a = tok.encode_sampled(texts, 0.3, seed=7)
    tok.encode_sampled(texts, 0.3, seed=8)  # a draw in between changes nothing
    assert tok.encode_sampled(texts, 0.3, seed=7) == a
    assert tok.encode_sampled(texts, 0.3, seed=9) != a
    fixed = [tok.encode(t) for t in texts]
    assert [tok.decode(ids) for ids in a] == texts  # every segmentation spells the text
    assert sum(map(len, a)) > sum(map(len, fixed))  # skipped merges: more, shorter pieces
    assert tok.encode_sampled(texts, 0.0, seed=7) == fixed  # alpha 0: the fixed segmentation
    with pytest.raises(ValueError, match="alpha"):
        tok.encode_sampled(texts, 1.5, seed=7)


def _rows(batch, side: str) -> list[list[int]]:
    """Unpadded rows of a batch: source ids (with </s>) or target ids (no <s>/</s>)."""
    if side == "src":
        return [r[r != PAD_ID].tolist() for r in batch.src]
    rows = [r[r != PAD_ID].tolist() for r in batch.y_in]
    assert all(r[0] == BOS_ID for r in rows)
    return [r[1:] for r in rows]


def test_training_batches_are_resampled_and_evaluation_is_not(task):
    idx = list(range(40))
    src_txt, tgt_txt = task.texts["train"]
    torch.manual_seed(0)
    b1 = task.collate(idx)
    b2 = task.collate(idx)
    torch.manual_seed(0)
    assert torch.equal(task.collate(idx).src, b1.src)  # the seed comes from torch's RNG
    assert not torch.equal(b1.src, b2.src)  # a new segmentation each time
    src, tgt = _rows(b1, "src"), _rows(b1, "tgt")
    assert all(s[-1] == EOS_ID for s in src)
    assert [task.src_tok.decode(s) for s in src] == [src_txt[i] for i in idx]
    assert [task.tgt_tok.decode(t) for t in tgt] == [tgt_txt[i] for i in idx]
    assert b1.y_out[b1.y_out != PAD_ID].numel() == b1.n_tokens == sum(len(t) + 1 for t in tgt)
    fixed_src, fixed_tgt = task.ids["train"]
    assert src != [fixed_src[i] for i in idx] and tgt != [fixed_tgt[i] for i in idx]
    valid = task.collate(idx[:10], "valid")  # evaluation: the fixed segmentation
    assert _rows(valid, "src") == task.ids["valid"][0][:10]


def test_evaluating_the_train_split_uses_the_fixed_segmentation(task):
    torch.manual_seed(0)
    model = _tiny_model(task).eval()
    first = task._teacher_forced(model, "train")
    assert task._teacher_forced(model, "train") == first  # no sampling: same value again
    n_tokens = sum(len(t) + 1 for t in task.ids["train"][1])
    assert first[1] == n_tokens  # the fixed target lengths


def test_one_side_only(tmp_path, task):
    one = TranslationTask(_config(tmp_path, subword_sampling=0.3, sampling_sides="source"))
    one.prepare(task.tokenizer_state())
    idx = list(range(40))
    b = one.collate(idx)
    assert _rows(b, "tgt") == [one.ids["train"][1][i] for i in idx]
    assert _rows(b, "src") != [one.ids["train"][0][i] for i in idx]


def test_a_sample_longer_than_max_len_keeps_the_fixed_segmentation(tmp_path):
    t = TranslationTask(_config(tmp_path, subword_sampling=0.99, max_len=14))
    t.prepare()
    src, tgt = t.ids["train"]
    idx = list(range(len(src)))
    b = t.collate(idx)
    assert all(len(s) <= 14 for s in _rows(b, "src"))
    assert all(len(x) + 1 <= 14 for x in _rows(b, "tgt"))
    assert any(s == src[i] for s, i in zip(_rows(b, "src"), idx))  # fell back


def test_config_checks():
    with pytest.raises(ValueError, match="subword_sampling must be in"):
        TranslationConfig(subword_sampling=1.0)
    with pytest.raises(ValueError, match="sampling_sides"):
        TranslationConfig(sampling_sides="left")


def _run_cfg(tmp_path, max_steps: int) -> dict:
    """The trainer tests' tiny Transformer run (tests/train/tiny.py) on the toy corpus."""
    c = _config(tmp_path, subword_sampling=0.2)
    names = ["data", "vocab_size", "cache_dir", "subword_sampling", "train_src", "train_tgt"]
    task = {k: getattr(c, k) for k in [*names, "valid_src", "valid_tgt"]}
    return tiny(
        task={"name": "translation", **task, "valid_bleu_sentences": 4},
        **{"train.max_steps": max_steps, "train.valid_every": 6, "train.save_every": 6},
        **{"train.batch.max_tokens": 200, "train.batch.max_len": 64},
    )


def test_resumed_run_draws_the_same_segmentations(tmp_path):
    n = torch.get_num_threads()
    try:
        Trainer(resolve_run(_run_cfg(tmp_path, 12)), tmp_path / "full", quiet=True).fit()
        Trainer(resolve_run(_run_cfg(tmp_path, 6)), tmp_path / "half", quiet=True).fit()
        Trainer.resume(tmp_path / "half", ["train.max_steps=12"], quiet=True).fit()
    finally:
        torch.set_num_threads(n)
    name = step_name(12)
    a = load_file(tmp_path / "full" / "checkpoints" / name / "tensors.safetensors")
    b = load_file(tmp_path / "half" / "checkpoints" / name / "tensors.safetensors")
    keys = [k for k in a if k.startswith(("model.", "optim."))]
    assert keys and all(torch.equal(a[k], b[k]) for k in keys)  # bitwise
