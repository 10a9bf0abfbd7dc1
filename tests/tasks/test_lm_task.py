"""The lm task: metrics formulae, corpora and splits, stream batches, truncated BPTT with the
state carried across chunks (and across a checkpoint/resume, bitwise), sampling, scoring."""

import gzip
import logging
import math

import pytest
import torch
from safetensors.torch import load_file

from seqlab.data.lm_corpus import (
    StreamBatcher,
    batchify,
    chunk,
    fraction_bounds,
    read_ptb,
    read_text_corpus,
)
from seqlab.data.vocab import EOS_ID, UNK_ID
from seqlab.decode.scoring import sequence_log_prob
from seqlab.errors import DataError, SeqlabError
from seqlab.eval.perplexity import bits_per_char, lm_metrics, nats_per_char, perplexity
from seqlab.models.rnn_lm import RNNLM, RNNLMConfig
from seqlab.run_config import resolve_run
from seqlab.tasks.lm import LMTask, LMTaskConfig
from seqlab.train.checkpoint import step_name
from seqlab.train.trainer import Trainer

LN2 = math.log(2.0)
LINES = ["the cat sat on the mat", "a dog ran to the cat", "the mat was red and the dog sat"]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES[i % 3] for i in range(120)) + "\n", encoding="utf-8")
    return path


def make_task(path, **kw):
    cfg = LMTaskConfig(data="text", path=str(path), **kw)
    task = LMTask(cfg, None, 0)
    task.prepare()
    return task


def make_model(task, cell="lstm"):
    cfg = RNNLMConfig(cell=cell, emb_dim=10, hidden=10, layers=2, dropout=0.0)
    return RNNLM(cfg, **task.model_kwargs())


# ----------------------------------------------------------------------------- metrics


def test_perplexity_and_per_character_formulae_on_hand_computed_numbers():
    # NLL = 4 ln 2 nats over 2 words: loss 2 ln 2, perplexity e^{2 ln 2} = 4.
    assert perplexity(4 * LN2, 2) == pytest.approx(4.0, rel=1e-12)
    # The same NLL over 4 characters: 1 bit (ln 2 nats) per character.
    assert bits_per_char(4 * LN2, 4) == pytest.approx(1.0, rel=1e-12)
    assert nats_per_char(4 * LN2, 4) == pytest.approx(LN2, rel=1e-12)
    # A uniform model over V = 10 words has perplexity V: NLL = N ln 10.
    assert perplexity(7 * math.log(10.0), 7) == pytest.approx(10.0, rel=1e-12)
    word = lm_metrics(3.0, 2, "word")
    assert word == {"loss": 1.5, "ppl": pytest.approx(math.exp(1.5), rel=1e-12)}
    char = lm_metrics(3.0, 2, "char")
    assert char["loss"] == char["nats_per_char"] == 1.5
    assert char["bpc"] == pytest.approx(1.5 / LN2, rel=1e-12)
    assert perplexity(1e6, 1) == math.inf
    with pytest.raises(ValueError):
        perplexity(1.0, 0)


# ----------------------------------------------------------------------------- corpora


def test_fraction_splits_are_nanogpt_90_10_and_char_rnn_90_5_5():
    assert fraction_bounds(1000, 0.1, 0.0) == (int(1000 * 0.9), 1000)
    assert fraction_bounds(1_115_394, 0.1, 0.0) == (1_003_854, 1_115_394)  # nanoGPT's n
    assert fraction_bounds(1000, 0.05, 0.05) == (900, 950)
    with pytest.raises(ValueError):
        fraction_bounds(10, 0.6, 0.5)


def test_text_corpus_split_by_characters_and_by_lines(text_file):
    text = text_file.read_text()
    char = read_text_corpus(text_file, "char", 0.1, 0.1)
    a, b = fraction_bounds(len(text), 0.1, 0.1)
    assert char.splits == {"train": text[:a], "valid": text[a:b], "test": text[b:]}
    word = read_text_corpus(text_file, "word", 0.1)
    assert set(word.splits) == {"train", "valid"}
    assert word.splits["train"][:7] == ["the", "cat", "sat", "on", "the", "mat", "</s>"]


def test_ptb_reader_appends_eos_keeps_unk_and_checks_files(tmp_path, caplog):
    folder = tmp_path / "ptb"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        with gzip.open(folder / f"ptb.{split}.txt.gz", "wt") as f:
            f.write(" the <unk> cat\n a N dog\n")
    with caplog.at_level(logging.WARNING, logger="seqlab.data"):
        corpus = read_ptb(tmp_path)
    assert "sha256" in caplog.text  # not the shipped file: logged, not fatal
    assert corpus.splits["valid"] == ["the", "<unk>", "cat", "</s>", "a", "N", "dog", "</s>"]
    task = LMTask(LMTaskConfig(data="ptb"), tmp_path, 0)
    task.prepare()
    ids = task.ids("train").tolist()
    assert ids[1] == UNK_ID and ids[3] == EOS_ID and task.tokenizer.vocab_size == 4 + 5
    with pytest.raises(DataError, match="Penn Treebank folder not found"):
        read_ptb(tmp_path / "elsewhere")
    (folder / "ptb.test.txt.gz").unlink()
    with pytest.raises(DataError, match="ptb.test.txt.gz: file not found"):
        read_ptb(tmp_path)


# ----------------------------------------------------------------------------- batches


def test_rows_are_contiguous_and_each_chunk_continues_the_last():
    ids = torch.arange(23)
    grid = batchify(ids, 2)  # n = 11, the last token dropped
    assert grid.tolist() == [list(range(11)), list(range(11, 22))]
    x0, y0 = chunk(grid, 0, 4)
    x2, y2 = chunk(grid, 2, 4)  # the last chunk is shorter: 10 predictions per row
    assert x0.tolist() == [[0, 1, 2, 3], [11, 12, 13, 14]] and torch.equal(y0, x0 + 1)
    assert x2.tolist() == [[8, 9], [19, 20]] and torch.equal(y2, x2 + 1)


def test_stream_batcher_order_epochs_state_and_ranks():
    b = StreamBatcher(n_tokens=50, batch_size=2, bptt=4)
    assert len(b) == 6 and b.num_examples == 2 * 24  # rows of 25 tokens: 24 predictions
    it = iter(b)
    assert [next(it) for _ in range(3)] == [[0, 0], [1, 0], [2, 0]]  # [chunk, offset]
    saved = b.state_dict()
    other = StreamBatcher(n_tokens=50, batch_size=2, bptt=4)
    other.load_state_dict(saved)
    assert [i for i, _ in other] == [3, 4, 5] and other.epoch == 1 and other.position == 0
    with pytest.raises(ValueError, match="bptt=4 in the checkpoint, 5 here"):
        StreamBatcher(n_tokens=50, batch_size=2, bptt=5).load_state_dict(saved)
    r1 = StreamBatcher(n_tokens=50, batch_size=2, bptt=4, rank=1, world_size=2)
    assert r1.rows == 4 and r1.row_slice() == slice(2, 4)


def test_random_offsets_move_the_chunks_per_epoch_reproducibly():
    def offsets(seed):
        b = StreamBatcher(1000, 2, 8, seed=seed, random_offset=True)
        out = []
        for _ in range(6):
            out.append({o for _, o in b})
        return out

    first = offsets(1)
    assert all(len(o) == 1 for o in first)  # one offset per epoch, in [0, bptt)
    values = [o.pop() for o in first]
    assert all(0 <= v < 8 for v in values) and len(set(values)) > 1
    assert [o.pop() for o in offsets(1)] == values
    b = StreamBatcher(1000, 2, 8, seed=1, random_offset=True)
    assert len(b) == -(-((1000 - values[0]) // 2 - 1) // 8)


# ----------------------------------------------------------------------------- TBPTT


def test_the_state_is_carried_across_chunks_and_reset_at_the_epoch_start(text_file):
    task = make_task(text_file, level="char", batch_size=3, bptt=5)
    model = make_model(task)
    model.eval()
    task.make_batcher(None, 0, 0, 1)
    batches = [task.collate([i, 0]) for i in range(3)]
    with torch.no_grad():
        carried = [task.loss(model, b).loss_sum for b in batches]
        x = torch.cat([b.x for b in batches], 1)
        y = torch.cat([b.y for b in batches], 1)
        logits = model(x).logits  # one forward over the three chunks
        per_chunk = [
            torch.nn.functional.cross_entropy(
                logits[:, 5 * i : 5 * i + 5].reshape(-1, logits.size(-1)),
                y[:, 5 * i : 5 * i + 5].reshape(-1),
                reduction="sum",
            )
            for i in range(3)
        ]
        again = task.loss(model, batches[0]).loss_sum  # chunk 0: the state restarts
    torch.testing.assert_close(torch.stack(carried), torch.stack(per_chunk), atol=1e-4, rtol=0)
    torch.testing.assert_close(again, carried[0], atol=0, rtol=0)
    assert sorted(task.state_tensors()) == ["c", "h"]
    assert not task.state_tensors()["h"].requires_grad

    fresh = make_task(text_file, level="char", batch_size=3, bptt=5, carry_state=False)
    fresh.make_batcher(None, 0, 0, 1)
    with torch.no_grad():
        alone = [fresh.loss(model, b).loss_sum for b in batches]
    torch.testing.assert_close(alone[0], carried[0], atol=0, rtol=0)
    assert abs(float(alone[1] - carried[1])) > 1e-3  # without the state chunk 1 differs


def _run_cfg(path, steps, **task):
    return resolve_run(
        {
            "task": {
                "name": "lm",
                "data": "text",
                "path": str(path),
                "level": "char",
                "batch_size": 4,
                "bptt": 8,
                "eval_batch_size": 2,
                **task,
            },
            "model": {"name": "rnn_lm", "emb_dim": 12, "hidden": 12, "layers": 2, "dropout": 0.2},
            "train": {
                "max_steps": steps,
                "precision": "fp32",
                "threads": 1,
                "progress": False,
                "log_every": 3,
                "valid_every": 5,
                "save_every": 5,
                "optim": {"name": "adam", "lr": 3.0e-3},
            },
        }
    )


def test_resumed_training_equals_uninterrupted_bitwise(text_file, tmp_path, monkeypatch):
    Trainer(_run_cfg(text_file, 10), tmp_path / "full", quiet=True).fit()
    Trainer(_run_cfg(text_file, 5), tmp_path / "half", quiet=True).fit()
    saved = load_file(tmp_path / "half/checkpoints" / step_name(5) / "tensors.safetensors")
    assert saved["extra.task_state.h"].abs().sum() > 0  # a real mid-epoch state was stored
    Trainer.resume(tmp_path / "half", ["train.max_steps=10"], quiet=True).fit()

    def tensors(run):
        t = load_file(tmp_path / run / "checkpoints" / step_name(10) / "tensors.safetensors")
        return {k: v for k, v in t.items() if k.startswith(("model.", "optim.", "extra.task"))}

    full, half = tensors("full"), tensors("half")
    assert full.keys() == half.keys() and "extra.task_state.c" in full
    for key in full:
        assert torch.equal(full[key], half[key]), key  # bitwise: atol = rtol = 0

    # The test can fail: resuming without the stored state gives other weights.
    monkeypatch.setattr(LMTask, "load_state_tensors", lambda self, tensors: None)
    Trainer(_run_cfg(text_file, 5), tmp_path / "lost", quiet=True).fit()
    Trainer.resume(tmp_path / "lost", ["train.max_steps=10"], quiet=True).fit()
    lost = tensors("lost")
    assert any(not torch.equal(full[k], lost[k]) for k in full if k.startswith("model."))


def test_resume_across_an_epoch_with_moving_chunks_is_exact(text_file, tmp_path):
    # 200 tokens in 4 rows: 6–7 chunks an epoch, so steps 6–10 cross into epoch 1, whose
    # stream starts at another random offset and whose first chunk resets the state.
    task = {"random_offset": True, "max_train_tokens": 200}
    Trainer(_run_cfg(text_file, 10, **task), tmp_path / "full", quiet=True).fit()
    Trainer(_run_cfg(text_file, 5, **task), tmp_path / "half", quiet=True).fit()
    summary = Trainer.resume(tmp_path / "half", ["train.max_steps=10"], quiet=True).fit()
    assert summary["epoch"] >= 1
    a = load_file(tmp_path / "full/checkpoints" / step_name(10) / "tensors.safetensors")
    b = load_file(tmp_path / "half/checkpoints" / step_name(10) / "tensors.safetensors")
    for key in a:
        if key.startswith(("model.", "optim.", "extra.task")):
            assert torch.equal(a[key], b[key]), key  # bitwise: atol = rtol = 0


def test_evaluate_carries_the_state_through_the_split(text_file):
    task = make_task(text_file, level="char", eval_batch_size=2, bptt=7)
    model = make_model(task)
    metrics = task.evaluate(model, "valid")
    grid = batchify(task.ids("valid"), 2)
    with torch.no_grad():
        logits = model.eval()(grid[:, :-1]).logits  # one forward over the whole split
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), grid[:, 1:].reshape(-1), reduction="sum"
        )
    n = grid[:, 1:].numel()
    assert metrics["loss"] == pytest.approx(float(nll) / n, abs=1e-5)
    assert metrics["bpc"] == pytest.approx(metrics["loss"] / LN2, rel=1e-12)
    word = make_task(text_file, level="word")
    assert set(word.evaluate(make_model(word), "valid")) == {"loss", "ppl"}
    with pytest.raises(DataError, match="no 'test' split"):
        task.evaluate(model, "test")


# ----------------------------------------------------------------------------- generate, score


def test_sampling_with_a_fixed_seed_is_reproducible(text_file):
    task = make_task(text_file, level="char")
    model = make_model(task)
    a = task.generate(model, "the ", max_tokens=40, seed=3)
    assert a == task.generate(model, "the ", max_tokens=40, seed=3)
    assert a != task.generate(model, "the ", max_tokens=40, seed=4)
    assert len(a) == 40
    # τ = 0 is greedy: the argmax continuation, checked with a step loop.
    greedy = task.generate(model, "the ", max_tokens=6, temperature=0.0)
    ids = task.tokenizer.encode("the ")
    with torch.no_grad():
        state, out = None, []
        for i in ids[:-1]:
            _, state = model.step(torch.tensor([i]), state)
        y = ids[-1]
        for _ in range(6):
            logits, state = model.step(torch.tensor([y]), state)
            y = int(logits.argmax(-1))
            out.append(y)
    assert greedy == task.tokenizer.decode(out)
    with pytest.raises(SeqlabError, match="prompt is empty"):
        task.generate(model, "")
    with pytest.raises(SeqlabError, match="never saw: 'é'"):
        task.generate(model, "thé")


@pytest.mark.parametrize("level", ["word", "char"])
def test_score_log_prob_is_the_sum_of_token_log_probs(text_file, level):
    task = make_task(text_file, level=level)
    model = make_model(task, "gru")
    result = task.score(model, "the cat sat")
    total = sum(t.log_p for t in result.tokens)
    assert result.log_prob == pytest.approx(total, abs=1e-9)
    assert all(t.p == pytest.approx(math.exp(t.log_p), rel=1e-12) for t in result.tokens)
    if level == "word":
        assert [t.token for t in result.tokens] == ["the", "cat", "sat", "</s>"]
    # An independent path: log P(Y) by feeding the tokens one step at a time.
    ids = task.tokenizer.encode("the cat sat") + ([EOS_ID] if level == "word" else [])
    y = torch.tensor([ids])
    step_total = sequence_log_prob(
        model.eval(),
        None,
        y,
        eos_id=-1,
        bos_id=task.boundary_id(),
        lengths=torch.tensor([y.size(1)]),
    )
    assert result.log_prob == pytest.approx(float(step_total), abs=1e-4)


def test_a_restored_tokenizer_needs_no_data(text_file, tmp_path):
    task = make_task(text_file, level="char")
    state = task.tokenizer_state()
    moved = tmp_path / "gone.txt"
    text_file.rename(moved)
    again = LMTask(LMTaskConfig(data="text", path=str(text_file), level="char"), None, 0)
    again.prepare(state)
    assert again.tokenizer == task.tokenizer
    assert again.generate(make_model(again), "cat", max_tokens=5, seed=0)
    with pytest.raises(DataError, match="file not found"):
        again.evaluate(make_model(again), "valid")
