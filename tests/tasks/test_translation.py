"""The translation task: Multi30k files and checksums, download, preparation, batches,
training, decoding-based evaluation, order restoration, tokenizer restore, CLI."""

from __future__ import annotations

import copy
import io
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from seqlab.data import multi30k
from seqlab.data.spm import SentencePieceTokenizer
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.errors import DataError
from seqlab.models.transformer import TransformerConfig, TransformerSeq2Seq
from seqlab.tasks.translation import TranslationConfig, TranslationTask
from seqlab.tasks.translation_eval import (
    SearchSettings,
    batch_limits,
    decode_ids,
    length_limit,
    plan_batches,
)

LEXICON = {
    "ein": "a",
    "der": "the",
    "hund": "dog",
    "katze": "cat",
    "mann": "man",
    "frau": "woman",
    "kind": "child",
    "läuft": "runs",
    "schläft": "sleeps",
    "springt": "jumps",
    "sitzt": "sits",
    "groß": "big",
    "klein": "small",
    "rot": "red",
    "blau": "blue",
    "und": "and",
}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny tensors: one thread avoids OpenMP spin-waiting on a shared 2-core machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = list(LEXICON)
    out = []
    for _ in range(n):
        de = [rng.choice(words) for _ in range(rng.randint(2, 9))]
        out.append((" ".join(de) + ".", " ".join(LEXICON[w] for w in de) + "."))
    return out


def _write(tmp_path, name, pairs):
    (tmp_path / f"{name}.de").write_text("".join(s + "  \n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / f"{name}.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return str(tmp_path / f"{name}.de"), str(tmp_path / f"{name}.en")


def _config(tmp_path, **kw) -> TranslationConfig:
    tr, va, te = (_write(tmp_path, n, _pairs(k, s)) for n, k, s in [("train", 400, 0),
                  ("valid", 40, 1), ("test", 30, 2)])  # fmt: skip
    base = dict(
        data="files",
        train_src=tr[0],
        train_tgt=tr[1],
        valid_src=va[0],
        valid_tgt=va[1],
        test_src=te[0],
        test_tgt=te[1],
        vocab_size=60,
        cache_dir=str(tmp_path / "spm"),
        valid_bleu_sentences=20,
        test_beam=3,
    )
    return TranslationConfig(**(base | kw))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    task = TranslationTask(_config(tmp_path_factory.mktemp("mt")))
    task.prepare()
    return task


def _tiny_model(task: TranslationTask) -> TransformerSeq2Seq:
    cfg = TransformerConfig(
        d_model=32, n_heads=4, d_ff=64, encoder_layers=1, decoder_layers=1, dropout=0.0,
        share_embeddings=True,
    )  # fmt: skip
    return TransformerSeq2Seq(cfg, **task.model_kwargs())


@pytest.fixture(scope="module")
def trained(prepared):
    """A tiny Transformer trained 60 steps with the task's loss; the loss curve."""
    torch.manual_seed(0)
    model = _tiny_model(prepared)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    n = len(prepared.ids["train"][0])
    losses = []
    for _ in range(60):
        batch = prepared.collate(rng.sample(range(n), 32))
        out = prepared.loss(model, batch, label_smoothing=0.1)
        (out.loss_sum / out.n_tokens).backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out.nll_sum) / out.n_tokens)
    model.eval()
    return model, losses


# ----------------------------------------------------------------- Multi30k files


def test_shipped_multi30k_matches_checksums():
    folder = multi30k.locate_multi30k()
    assert folder == multi30k.SHIPPED_DIR
    for split in multi30k.SPLITS:
        for lang in ("de", "en"):
            multi30k.verify(folder / multi30k.file_name(split, lang))
    assert multi30k.url("val.de.gz").endswith(f"{multi30k.COMMIT}/data/task1/raw/val.de.gz")


def test_locate_prefers_explicit_dir_and_rejects_damaged_files(tmp_path):
    raw = tmp_path / "multi30k" / "task1" / "raw"
    raw.mkdir(parents=True)
    for p in multi30k.SHIPPED_DIR.glob("*.gz"):
        shutil.copy(p, raw / p.name)
    assert multi30k.locate_multi30k(tmp_path) == raw  # the shared-data layout
    assert multi30k.locate_multi30k(raw) == raw  # the folder itself
    assert multi30k.locate_multi30k(tmp_path / "empty") == multi30k.SHIPPED_DIR  # fallback
    (raw / "val.en.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="sha256 mismatch"):
        multi30k.locate_multi30k(tmp_path)
    with pytest.raises(DataError, match="no file"):
        multi30k.file_name("val", "xx")


def _serve(monkeypatch, corrupt: bool = False):
    requested = []

    def fake_urlopen(url, timeout=None):
        name = url.rsplit("/", 1)[1]
        requested.append(url)
        data = (multi30k.SHIPPED_DIR / name).read_bytes()
        if corrupt:
            data = data[:-1] + bytes([data[-1] ^ 1])
        return io.BytesIO(data)

    monkeypatch.setattr(multi30k, "urlopen", fake_urlopen)
    return requested


def test_download_writes_verified_files(monkeypatch, tmp_path):
    requested = _serve(monkeypatch)
    dest = multi30k.download(tmp_path / "m30k", splits=("val", "test_2016_flickr"))
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted(
        ["val.de.gz", "val.en.gz", "test_2016_flickr.de.gz", "test_2016_flickr.en.gz"]
    )
    for n in names:
        assert (dest / n).read_bytes() == (multi30k.SHIPPED_DIR / n).read_bytes()
    assert requested[0] == multi30k.BASE_URL + "val.de.gz"
    multi30k.download(dest, splits=("val",))  # already there and valid: not fetched again
    assert len(requested) == 4


def test_corrupted_download_is_rejected_and_not_kept(monkeypatch, tmp_path):
    _serve(monkeypatch, corrupt=True)
    with pytest.raises(DataError, match="sha256"):
        multi30k.download(tmp_path, splits=("val",))
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary part


# ----------------------------------------------------------------- task preparation


def test_config_checks(tmp_path):
    with pytest.raises(ValueError, match="data: files needs"):
        TranslationConfig(data="files", train_src="a")
    with pytest.raises(ValueError, match="set data: files"):
        TranslationConfig(train_src="a")
    with pytest.raises(ValueError, match="both 'de'"):
        TranslationConfig(tgt_lang="de")


def test_prepare_and_batches(prepared):
    task = prepared
    assert task.model_kwargs() == {"src_vocab": 60, "tgt_vocab": 60, "pad_id": PAD_ID}
    assert {k: len(v[0]) for k, v in task.ids.items()} == {"train": 400, "valid": 40, "test": 30}
    src_txt, tgt_txt = task.texts["train"]
    assert not src_txt[0].endswith(" ")  # trailing spaces were stripped by the reader
    src, tgt = task.ids["train"]
    lengths = task.train_lengths()
    assert lengths.tolist() == [max(len(s), len(t) + 1) for s, t in zip(src, tgt)]
    b = task.collate([3, 0, 7])
    for row, i in enumerate([3, 0, 7]):
        n, m = len(src[i]), len(tgt[i])
        assert b.src[row, :n].tolist() == src[i] and src[i][-1] == EOS_ID
        assert task.src_tok.decode(src[i]) == src_txt[i]
        assert b.src_mask[row].sum() == n and not b.src_mask[row, n:].any()
        assert b.y_in[row, : m + 1].tolist() == [BOS_ID, *tgt[i]]
        assert b.y_out[row, : m + 1].tolist() == [*tgt[i], EOS_ID]
        assert (b.y_out[row, m + 1 :] == PAD_ID).all()
        assert task.tgt_tok.decode(tgt[i]) == tgt_txt[i]
    assert b.n_tokens == sum(len(tgt[i]) + 1 for i in [3, 0, 7])
    assert task.collate([1], "val").src.tolist()[0] == task.ids["valid"][0][1]


def test_tokenizer_restored_from_state_without_training(tmp_path, monkeypatch, prepared):
    state = json.loads(json.dumps(prepared.tokenizer_state()))  # JSON round trip
    cfg = prepared.cfg

    def no_training(*a, **k):
        raise AssertionError("the tokenizer was retrained")

    monkeypatch.setattr(SentencePieceTokenizer, "train", no_training)
    again = TranslationTask(cfg)
    again.prepare(state)
    assert again.ids == prepared.ids
    monkeypatch.undo()
    cached = TranslationTask(cfg)
    cached.prepare()  # same text and settings: loaded from the cache, same ids
    assert cached.src_tok.from_cache and cached.ids == prepared.ids
    separate = TranslationTask(_config(tmp_path, joint=False, vocab_size=40))
    separate.prepare()
    with pytest.raises(DataError, match="joint"):
        TranslationTask(cfg).prepare(separate.tokenizer_state())


def test_max_len_drops_long_training_pairs(tmp_path):
    task = TranslationTask(_config(tmp_path, max_len=12))
    task.prepare()
    src, tgt = task.ids["train"]
    assert 0 < len(src) < 400
    assert all(len(s) <= 12 and len(t) + 1 <= 12 for s, t in zip(src, tgt))
    assert len(task.ids["valid"][0]) == 40  # evaluation never drops


# ----------------------------------------------------------------- training + evaluation


def test_loss_decreases_when_training(trained):
    _, losses = trained
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.6 * first, (first, last)


def test_evaluate_decodes_and_reports_signatures(prepared, trained):
    model, _ = trained
    model.train()
    result = prepared.evaluate(model, "valid")
    assert model.training  # the mode is restored
    for key in ("loss", "ppl", "bleu", "bleu_lc", "chrf"):
        assert isinstance(result[key], float) and result[key] >= 0.0
    assert all(isinstance(v, float) for v in result.values())  # the Trainer logs floats
    assert result.settings["bleu_sentences"] == 20 and len(result.hypotheses) == 20
    assert "case:lc" in result.signatures["bleu_lc"] and "tok:13a" in result.signatures["bleu"]
    assert result["bleu_lc"] >= result["bleu"] - 1e-9
    test = prepared.evaluate(model, "test")
    assert test.settings["beam"] == 3 and test.settings["bleu_sentences"] == 30
    model.eval()


def test_translate_returns_text_nbest_and_attention(prepared, trained):
    model, _ = trained
    out = prepared.translate(model, ["der hund läuft.", "ein kind"], beam=3)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)
    nb = prepared.translate(model, ["der hund läuft."], beam=3, nbest=3)
    assert len(nb[0]) == 3 and nb[0][0][0] == out[0]
    assert [s for _, s in nb[0]] == sorted((s for _, s in nb[0]), reverse=True)
    [rec] = prepared.translate(model, ["der hund läuft."], beam=3, return_attention=True)
    cross = rec.attention["cross"]  # (L, H, T, S)
    S, T = len(rec.source_pieces), len(rec.target_pieces)
    assert rec.source_pieces[-1] == "</s>" and rec.target_pieces[-1] == "</s>"
    assert cross.shape == (1, 4, T, S)
    torch.testing.assert_close(cross.sum(-1), torch.ones(1, 4, T), atol=1e-5, rtol=0)
    assert prepared.translate(model, []) == []


def test_decoding_does_not_depend_on_batching(prepared, trained):
    """All at once (length-sorted batches) == one sentence at a time, in input order."""
    model, _ = trained
    sources = prepared.texts["test"][0][:12]
    together = prepared.translate(model, sources, beam=3)
    alone = [prepared.translate(model, [s], beam=3)[0] for s in sources]
    assert together == alone
    assert len(set(together)) > 3  # distinct outputs, so a permutation would be caught


def test_batches_mix_length_limits_and_equal_each_sentence_alone(prepared, trained):
    """decode_ids batches sentences of different limits ⌊a·|x| + b⌋ together; with the
    per-row max_len every sentence still gets exactly its own decode (float64 model:
    ids exact, scores to 1e-6, the float32 precision decode_ids reports). A small limit
    (a = 0.5, b = 1) cuts most hypotheses, so the limits really bite."""
    model = copy.deepcopy(trained[0]).double()
    sources = prepared.ids["test"][0][:16]
    n_src = [len(s) - 1 for s in sources]
    for beam, nbest in ((1, 1), (3, 1), (3, 3)):
        settings = SearchSettings(beam=beam, nbest=nbest, max_len_a=0.5, max_len_b=1)
        [batch] = plan_batches(n_src, settings)  # one batch of 16 ...
        assert len(set(batch_limits(n_src, settings).tolist())) > 3  # ... with many limits
        together = decode_ids(model, sources, settings)
        for src, got in zip(sources, together):
            [alone] = decode_ids(model, [src], settings)
            assert [ids for ids, _, _ in got] == [ids for ids, _, _ in alone]
            assert [s for _, s, _ in got] == pytest.approx([s for _, s, _ in alone], abs=1e-6)
        room = [length_limit(n, 0.5, 1) - len(nb[0][0]) for n, nb in zip(n_src, together)]
        assert min(room) == 0 and max(room) > 0  # cut at the limit, and ended by EOS before


@dataclass
class CopyState:
    src: Tensor  # (B, S)
    t: Tensor  # (B,)


class CopyModel(nn.Module):
    """A scripted decoder that emits its source, token by token (then EOS)."""

    def __init__(self, V: int) -> None:
        super().__init__()
        self.V = V
        self.unused = nn.Parameter(torch.zeros(1))

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        return src.masked_fill(~src_mask, EOS_ID)  # (B, S)

    def init_state(self, memory: Tensor, src_mask: Tensor) -> CopyState:
        return CopyState(memory, torch.zeros(memory.size(0), dtype=torch.long))

    def step(self, y_prev: Tensor, state: CopyState) -> tuple[Tensor, CopyState]:
        t = state.t.clamp(max=state.src.size(1) - 1)  # (B,)
        token = state.src.gather(1, t[:, None])  # (B, 1)
        logits = torch.full((y_prev.size(0), self.V), -10.0).scatter(1, token, 10.0)  # (B, V)
        return logits, CopyState(state.src, state.t + 1)


def test_order_restored_after_length_sorting(prepared):
    copy = CopyModel(prepared.tgt_tok.vocab_size)
    sources = [s for s, _ in _pairs(25, seed=7)]
    random.Random(3).shuffle(sources)
    for beam in (1, 4):
        assert prepared.translate(copy, sources, beam=beam) == sources
    settings = SearchSettings(beam=2, max_len_a=1.0, max_len_b=2, batch_tokens=40)
    lengths = [3, 9, 3, 5, 9, 1, 5]
    batches = plan_batches(lengths, settings)
    assert [i for b in batches for i in b] == [1, 4, 3, 6, 0, 2, 5]  # longest first, stable
    for b in batches:
        assert len(b) * 2 * max(lengths[b[0]] + 1, length_limit(lengths[b[0]], 1.0, 2)) <= 40
    # rows per batch = 40 // (K · max(S, max_len) of its longest) = 40 // 22, 40 // 14, 40 // 10
    assert batches == [[1], [4], [3, 6], [0, 2, 5]]
    assert batch_limits([lengths[i] for i in batches[3]], settings).tolist() == [5, 5, 3]
    [rec] = prepared.translate(copy, sources[:1], beam=1, return_attention=True)
    assert rec.attention is None and rec.text == sources[0]


def test_evaluate_files_scores_buckets_and_plot(tmp_path, prepared):
    copy = CopyModel(prepared.tgt_tok.vocab_size)
    pairs = _pairs(30, seed=11)
    src = tmp_path / "x.de"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    result = prepared.evaluate_files(
        copy, src, src, beam=2, plot_path=tmp_path / "b.png", hyp_path=tmp_path / "hyp.txt"
    )
    assert result["bleu"] == pytest.approx(100.0, abs=1e-9)  # the copy model is exact
    assert "case:lc" in result["bleu_lc_signature"]
    assert sum(b["n"] for b in result["buckets"]) == 30
    assert "| 1-10 |" in result["bucket_table"]
    assert (tmp_path / "b.png").stat().st_size > 1000
    assert (tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines() == [s for s, _ in pairs]


def test_smoke_on_shipped_multi30k(tmp_path):
    cfg = TranslationConfig(vocab_size=500, max_train_examples=2000, cache_dir=str(tmp_path))
    task = TranslationTask(cfg)
    task.prepare()
    assert {k: len(v[0]) for k, v in task.ids.items()} == {
        "train": 2000,
        "valid": 1014,
        "test": 1000,
    }
    assert task.model_kwargs()["src_vocab"] == 500
    assert task.texts["valid"][0][0].startswith("Eine Gruppe von Männern")
    assert task.texts["test"][1][0].startswith("A man in an orange hat")
    assert all(s[-1] == EOS_ID for s in task.ids["test"][0])
    lengths = task.train_lengths()
    assert 5 < lengths.mean() < 40  # subwords per sentence with a 500-piece vocabulary


# ----------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, prepared, trained):
    from seqlab.config import to_dict
    from seqlab.run_config import resolve_run
    from seqlab.train.checkpoint import save_checkpoint

    model, _ = trained
    run = resolve_run(
        {
            "task": {"name": "translation", **to_dict(prepared.cfg)},
            "model": {"name": "transformer", **to_dict(model.cfg)},
        }
    )
    path = tmp_path_factory.mktemp("run") / "step-000060"
    return save_checkpoint(
        path, model=model, step=60, config=run.to_dict(), tokenizer_state=prepared.tokenizer_state()
    )


def test_cli_translate_args_stdin_nbest_json(checkpoint, prepared, trained, capsys, monkeypatch):
    from seqlab.cli.main import main

    model, _ = trained
    sentences = ["der hund läuft.", "ein kind und eine katze."]
    expected = prepared.translate(model, sentences, beam=2)
    assert main(["translate", str(checkpoint), "--beam", "2", *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == expected

    monkeypatch.setattr("sys.stdin", io.StringIO("".join(s + "\n" for s in sentences)))
    assert main(["translate", str(checkpoint), "--beam", "2", "--nbest", "2"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [int(i) for i, _, _ in lines] == [0, 0, 1, 1]
    assert [lines[0][2], lines[2][2]] == expected

    assert main(["translate", str(checkpoint), "--json", "--beam", "2", sentences[0]]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["source"] == sentences[0] and record["hypotheses"] == expected[:1]
    assert len(record["scores"]) == 1 and record["source_pieces"][-1] == "</s>"
    cross = torch.tensor(record["attention"]["cross"])  # (L, H, T, S)
    assert cross.shape[2:] == (len(record["target_pieces"]), len(record["source_pieces"]))

    assert main(["translate", str(checkpoint), "--beam", "1", "--nbest", "2", "x"]) == 2
    assert "--nbest" in capsys.readouterr().err


def test_cli_ensemble_of_a_checkpoint_with_itself_translates_and_scores_as_it(
    checkpoint, prepared, trained, capsys
):
    """``--ensemble``: the pool of two equal distributions is the distribution, so the same
    translations and BLEU; the pool's attention is its members' mean alignment, here the
    run's last decoder layer averaged over heads (seqlab.models.ensemble)."""
    from seqlab.cli.main import main

    sentences = ["der hund läuft.", "ein kind und eine katze."]
    expected = prepared.translate(trained[0], sentences, beam=2)
    pooled = ["translate", str(checkpoint), "--ensemble", str(checkpoint), "--beam", "2"]
    assert main([*pooled, *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    assert main([*pooled, "--json", sentences[0]]) == 0
    pool_attention = json.loads(capsys.readouterr().out)["attention"]
    assert main(["translate", str(checkpoint), "--beam", "2", "--json", sentences[0]]) == 0
    cross = torch.tensor(json.loads(capsys.readouterr().out)["attention"]["cross"])  # (L,H,T,S)
    assert set(pool_attention) == {"cross"}
    got = torch.tensor(pool_attention["cross"])  # (T, S)
    torch.testing.assert_close(got, cross[-1].mean(0), rtol=0, atol=2e-4)  # JSON: 4 decimals
    assert main(["evaluate", str(checkpoint), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(["evaluate", str(checkpoint), "--ensemble", str(checkpoint), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["bleu"] == alone["bleu"] and both["loss"] == pytest.approx(alone["loss"], abs=1e-5)


def test_cli_translate_plot_writes_one_heatmap_per_attention_record(checkpoint, tmp_path, capsys):
    from seqlab.cli.main import main

    out = tmp_path / "maps"
    assert main(["translate", str(checkpoint), "--plot", str(out), "der hund.", "ein kind."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # the translations still go to stdout
    pngs = sorted(p.name for p in out.iterdir())
    # the test model is a Transformer: cross, decoder and encoder self-attention per sentence
    names = ["cross", "decoder_self", "encoder_self"]
    assert pngs == [f"{i}-{n}.png" for i in range(2) for n in names]
    assert all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_cli_prints_file_scores(tmp_path, prepared, capsys):
    from seqlab.cli.translate_cmd import print_file_scores

    src = tmp_path / "x.de"
    src.write_text("der hund.\nein mann und eine frau sitzt.\n", encoding="utf-8")
    result = prepared.evaluate_files(CopyModel(prepared.tgt_tok.vocab_size), src, src, beam=1)
    print_file_scores(result)
    out = capsys.readouterr().out
    assert "bleu_lc  100.00  nrefs:1|case:lc" in out and "| source words |" in out
    print_file_scores(result, as_json=True)
    assert json.loads(capsys.readouterr().out)["bleu"] == pytest.approx(100.0, abs=1e-9)


def test_cli_evaluate_src_ref(checkpoint, prepared, trained, tmp_path, capsys):
    from seqlab.cli.main import main

    model, _ = trained
    src, ref = tmp_path / "t.de", tmp_path / "t.en"
    src.write_text("der hund läuft.\nein kind und eine katze.\n", encoding="utf-8")
    ref.write_text("the dog runs.\na child and a cat.\n", encoding="utf-8")
    expected = prepared.evaluate_files(model, src, ref, beam=2)
    argv = ["evaluate", str(checkpoint), "--src", str(src), "--ref", str(ref), "--beam", "2"]
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    for key in ("bleu", "bleu_lc", "chrf", "bleu_signature"):
        assert got[key] == expected[key], key
    assert main(argv[:4]) == 2  # --src without --ref
    assert "--ref" in capsys.readouterr().err


def test_checkpoint_translates_without_its_corpus(tmp_path, prepared, trained):
    """A checkpoint is self-contained: with its corpus gone, ``seqlab.load`` and
    ``translate`` still work (same output as with the data); ``evaluate("test")`` reads
    only the test files, and names the missing one when they are gone."""
    from seqlab import api
    from seqlab.config import to_dict
    from seqlab.run_config import resolve_run
    from seqlab.train.checkpoint import save_checkpoint

    model, _ = trained
    data = tmp_path / "corpus"
    data.mkdir()
    task_cfg = dict(to_dict(prepared.cfg))
    for field in [f"{k}_{side}" for k in ("train", "valid", "test") for side in ("src", "tgt")]:
        copy = data / Path(task_cfg[field]).name
        shutil.copy(task_cfg[field], copy)
        task_cfg[field] = str(copy)
    model_cfg = {"name": "transformer", **to_dict(model.cfg)}
    run = resolve_run({"task": {"name": "translation", **task_cfg}, "model": model_cfg})
    ckpt = save_checkpoint(
        tmp_path / "ckpt", model=model, step=60, config=run.to_dict(),
        tokenizer_state=prepared.tokenizer_state(),
    )  # fmt: skip
    expected = prepared.evaluate(model, "test")
    for name in ("train.de", "train.en", "valid.de", "valid.en"):
        (data / name).unlink()
    loaded = api.load(ckpt)
    assert loaded.evaluate("test")["bleu"] == expected["bleu"]
    shutil.rmtree(data)
    loaded = api.load(ckpt)
    sentences = ["der hund läuft.", "ein kind und eine katze."]
    assert loaded.translate(sentences, beam=2) == prepared.translate(model, sentences, beam=2)
    with pytest.raises(DataError, match=r"test\.de: file not found"):
        loaded.evaluate("test")
