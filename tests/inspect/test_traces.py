"""Trace records (seqlab.inspect.trace_format, seqlab.inspect.traces, ``seqlab inspect
trace``) on tiny checkpoints trained here in seconds: every record round-trips exactly;
the arrays have their documented shapes and the invariants of their equations (attention
rows sum to 1 over the real source, batched == alone, coverage = sum of the earlier
attention, p_gen and gates in [0, 1], pointer + sentinel = 1, NTM weightings sum to 1 and
memory changes only where a head writes); broken files name the file and the field; the
command writes the files and refuses bad input in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from seqlab import api
from seqlab.cli.main import main
from seqlab.errors import SeqlabError
from seqlab.inspect.trace_format import Trace, TraceError, read_trace, write_trace
from seqlab.inspect.traces import plot_trace, save, trace
from tests.cli.test_lm_cli import TEXT
from tests.serve.runs import keeping_threads, lm_run, translation_run
from tests.tasks import test_captioning_task as caption_tests
from tests.tasks.test_copy_translation import _pairs as copy_pairs
from tests.tasks.test_copy_translation import _write as copy_write

PNG = b"\x89PNG\r\n\x1a\n"
QUIET = {"precision": "fp32", "threads": 1, "progress": False, "log_every": 1000}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _train(cfg: dict, root, steps: int):
    cfg["train"] = {**QUIET, **cfg.get("train", {}), "max_steps": steps,
                    "valid_every": steps, "save_every": steps}  # fmt: skip
    api.train(cfg, run_dir=root / "run", quiet=True)
    torch.set_num_threads(1)  # the trainer sets train.threads
    return root / "run"


@pytest.fixture(scope="module")
def translation_dir(tmp_path_factory):
    run = translation_run(tmp_path_factory.mktemp("tr"), steps=20)
    torch.set_num_threads(1)
    return run


@pytest.fixture(scope="module")
def copy_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pg")
    files = {**copy_write(root, "train", copy_pairs(100, 0)),
             **copy_write(root, "valid", copy_pairs(4, 1))}  # fmt: skip
    cfg = {
        "task": {"name": "copy_translation", "data": "files", **files, "tgt_vocab_size": 13,
                 "src_min_freq": 1, "valid_bleu_sentences": 2},
        "model": {"name": "pointer_generator", "emb_dim": 8, "hidden_size": 8, "attn_dim": 8,
                  "out_dim": 8, "dropout": 0.0},
        "train": {"batch": {"max_tokens": 256}, "label_smoothing": 0.0,
                  "optim": {"name": "adam", "lr": 1e-2}},
    }  # fmt: skip
    return _train(cfg, root, 5)


@pytest.fixture(scope="module")
def ntm_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ntm")
    overrides = ["task.width=3", "task.max_len=3", "task.test_lengths=[4]", "task.n_eval=2",
                 "task.batch_size=4", "model.controller_size=8", "model.memory_n=8",
                 "model.memory_w=4", "model.n_read_heads=2", "train.max_steps=3",
                 "train.valid_every=3", "train.save_every=3", "train.max_minutes=null"]  # fmt: skip
    api.train("ntm-copy", run_dir=root / "run", overrides=overrides, quiet=True)
    torch.set_num_threads(1)
    return root / "run"


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT + "\n", encoding="utf-8")
    cfg = {
        "task": {"name": "lm", "data": "text", "path": str(corpus), "level": "word",
                 "batch_size": 4, "bptt": 8, "eval_batch_size": 2},
        "model": {"name": "pointer_sentinel", "emb_dim": 8, "hidden": 8, "layers": 1,
                  "window": 4, "dropout": 0.0},
    }  # fmt: skip
    return _train(cfg, root, 3)


@pytest.fixture(scope="module")
def gru_lm_dir(tmp_path_factory):
    run = lm_run(tmp_path_factory.mktemp("gru"), steps=2)
    torch.set_num_threads(1)
    return run


def _round_trip(record: Trace, stem) -> Trace:
    """Write, read back, and check the copy equals the original exactly."""
    js, npz = write_trace(record, stem)
    assert not list(js.parent.glob("*.tmp"))  # written by rename
    back = read_trace(js)
    assert back.index() == record.index() == json.loads(js.read_text())
    assert back.arrays.keys() == record.arrays.keys()
    for name, value in record.arrays.items():
        assert back.arrays[name].dtype == value.dtype
        np.testing.assert_array_equal(back.arrays[name], value)
    assert read_trace(npz).index() == back.index()  # either file (or the stem) names it
    return back


def _rows_sum_to(a: np.ndarray, total, atol=1e-5) -> None:
    np.testing.assert_allclose(a.sum(-1), total, rtol=0, atol=atol)


# ------------------------------------------------------------------ translation


def test_translation_attention_records(translation_dir, tmp_path):
    """Transformer: cross (L, H, T, S), decoder self (L, H, T, T), encoder self (L, H, S, S),
    every row a distribution over the real positions; a short sentence traced beside a long
    one (padded in the batch) gives the same maps as traced alone."""
    loaded = api.load(translation_dir)
    short, long = "der hund läuft.", "ein groß rot hund und eine klein katze schläft."
    pair = trace(loaded, [short, long])
    (alone,) = trace(loaded, [short])
    for record in pair:
        S, T = len(record.tokens["source"]), len(record.tokens["target"])
        assert record.tokens["source"][-1] == "</s>" == record.tokens["target"][-1]
        assert record.arrays["cross"].shape == (1, 4, T, S)
        assert record.axes["cross"] == ("layer", "head", "target", "source")
        assert record.arrays["decoder_self"].shape == (1, 4, T, T)
        assert record.arrays["encoder_self"].shape == (1, 4, S, S)
        for name in ("cross", "decoder_self", "encoder_self"):
            _rows_sum_to(record.arrays[name], 1.0)
        causal = np.triu(np.ones((T, T), dtype=bool), k=1)
        assert (record.arrays["decoder_self"][..., causal] == 0).all()
        assert (record.model, record.task, record.step) == ("transformer", "translation", 20)
    assert len(pair[1].tokens["source"]) > len(pair[0].tokens["source"])
    assert alone.tokens == pair[0].tokens
    for name, value in alone.arrays.items():
        np.testing.assert_allclose(pair[0].arrays[name], value, rtol=0, atol=1e-5)
    back = _round_trip(pair[1], tmp_path / "tr" / "trace-1")
    (png,) = plot_trace(back, tmp_path / "tr" / "trace-1")
    assert png.read_bytes()[:8] == PNG


# ------------------------------------------------------------------ pointer-generator


def test_pointer_generator_gate_and_coverage(copy_dir, tmp_path):
    """c^0 = 0 and c^t = Σ_{t'<t} a^{t'} (eq. 10); covloss_t = Σ_i min(a_i^t, c_i^t);
    0 <= p_gen <= 1; attention rows sum to 1."""
    loaded = api.load(copy_dir)
    (record,) = trace(loaded, ["Ein Mann namens Zyxwq läuft."])
    a, c = record.arrays["attention"], record.arrays["coverage"]
    T, S = a.shape
    assert S == len(record.tokens["source"]) == 7 and len(record.tokens["target"]) == T
    assert c.shape == (T, S) and record.arrays["p_gen"].shape == (T,)
    _rows_sum_to(a, 1.0)
    earlier = np.concatenate([np.zeros((1, S), np.float32), np.cumsum(a, 0)[:-1]])  # (T, S)
    np.testing.assert_allclose(c, earlier, rtol=0, atol=1e-5)
    np.testing.assert_allclose(record.arrays["cov_loss"], np.minimum(a, c).sum(1), atol=1e-5)
    p_gen = record.arrays["p_gen"]
    assert ((p_gen >= 0) & (p_gen <= 1)).all()
    back = _round_trip(record, tmp_path / "pg")
    files = plot_trace(back, tmp_path / "pg")
    assert [f.name for f in files] == ["pg.png", "pg-coverage.png"]
    assert all(f.read_bytes()[:8] == PNG for f in files)


# ------------------------------------------------------------------ NTM


def test_ntm_weightings_and_memory(ntm_dir, tmp_path):
    """Each head's w_t sums to 1 over locations; M_t has one snapshot per step; a location
    changes by at most w_t(i)·(|M_{t−1}(i)| + 1) (erase e ∈ (0, 1), add a ∈ (−1, 1))."""
    loaded = api.load(ntm_dir)
    (record,) = trace(loaded, [4], seed=1)
    T = 2 * 4 + 1  # input, delimiter, output phase
    r, w, M = (record.arrays[n] for n in ("read_weights", "write_weights", "memory"))
    assert r.shape == (T, 2, 8) and w.shape == (T, 1, 8) and M.shape == (T, 8, 4)
    assert record.axes["memory"] == ("time", "location", "width")
    _rows_sum_to(r, 1.0)
    _rows_sum_to(w, 1.0)
    M0 = loaded.model.initial_memory().detach().numpy()[None]  # (1, N, W)
    before = np.concatenate([M0, M[:-1]])  # (T, N, W) M_{t−1}
    bound = w[:, 0, :, None] * (np.abs(before) + 1.0)  # (T, N, W)
    assert (np.abs(M - before) <= bound + 1e-6).all()
    assert record.info["summary"]["output_steps"] == 4 and record.info["length"] == 4
    back = _round_trip(record, tmp_path / "ntm")
    (png,) = plot_trace(back, tmp_path / "ntm")
    assert png.read_bytes()[:8] == PNG
    with pytest.raises(SeqlabError, match="sequence lengths must be >= 1"):
        trace(loaded, [0])


# ------------------------------------------------------------------ pointer sentinel LM


def test_pointer_sentinel_gate_and_pointer(lm_dir, tmp_path):
    """Σ_i a_ti + g_t = 1 with a_ti = 0 for inputs after t or outside the window (L = 4);
    log_p equals ``score``'s per-token log-probabilities."""
    loaded = api.load(lm_dir)
    text = "to be or not to be that is"
    (record,) = trace(loaded, [text])
    g, a = record.arrays["gate"], record.arrays["pointer"]
    T = len(text.split()) + 1  # + </s>
    assert g.shape == (T,) and a.shape == (T, T) and record.tokens["input"][0] == "</s>"
    assert ((g >= 0) & (g <= 1)).all()
    np.testing.assert_allclose(a.sum(1) + g, 1.0, rtol=0, atol=1e-5)
    t, i = np.indices((T, T))
    assert (a[(i > t) | (i < t - 3)] == 0).all()
    scored = [s.log_p for s in loaded.score(text).tokens]
    np.testing.assert_allclose(record.arrays["log_p"], scored, rtol=0, atol=1e-5)
    back = _round_trip(record, tmp_path / "lm")
    assert plot_trace(back, tmp_path / "lm")[0].read_bytes()[:8] == PNG


def test_transformer_lm_self_attention_of_every_layer_and_head(tmp_path):
    """A Transformer LM's record holds α (L, H, T, T): causal, rows summing to 1, equal to
    the model's ``attention_maps``; log_p equals ``score``; the heatmap is drawn from the
    saved files alone. No gate or pointer for a model without one."""
    model = {"name": "transformer_lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "layers": 2,
             "context": 16, "dropout": 0.0}  # fmt: skip
    run = keeping_threads(lm_run, tmp_path, steps=3, model=model)
    loaded = api.load(run)
    text = "to be or not"
    (record,) = trace(loaded, [text])
    att = record.arrays["self_attention"]
    T = len(text)  # one target per character; the inputs are the boundary and 11 of them
    assert att.shape == (2, 2, T, T) and "gate" not in record.arrays
    assert record.axes["self_attention"] == ("layer", "head", "target", "input")
    np.testing.assert_allclose(att.sum(-1), 1.0, rtol=0, atol=1e-5)
    assert (np.triu(att, 1) == 0).all()
    x = torch.tensor([[loaded.task.boundary_id(), *loaded.task.sentence_ids(text)[0][:-1]]])
    np.testing.assert_allclose(att, loaded.model.attention_maps(x)[:, 0].numpy(), atol=1e-6)
    scored = [s.log_p for s in loaded.score(text).tokens]
    np.testing.assert_allclose(record.arrays["log_p"], scored, rtol=0, atol=1e-5)
    back = _round_trip(record, tmp_path / "tlm")
    assert plot_trace(back, tmp_path / "tlm")[0].read_bytes()[:8] == PNG


# ------------------------------------------------------------------ captioning


def test_caption_attention_record(tmp_path):
    """α rows sum to 1 over the regions of the grid; β in [0, 1]; the image travels with
    the record, so the overlay is drawn from the saved files alone."""
    cfg = {
        "task": {"name": "caption", **caption_tests.SMALL},
        "model": {"name": "show_attend_tell", **caption_tests.TINY_MODEL, "attn_dim": 8},
    }
    loaded = api.load(_train(cfg, tmp_path, 2))
    records = trace(loaded, [0, 2], split="valid")
    assert [r.info["index"] for r in records] == [0, 2]
    for record in records:
        alpha = record.arrays["alpha"]
        h, w = record.info["grid"]
        assert alpha.shape == (len(record.tokens["target"]), h * w)
        _rows_sum_to(alpha, 1.0)
        beta = record.arrays["beta"]
        assert beta.shape == alpha.shape[:1] and ((beta >= 0) & (beta <= 1)).all()
        assert record.arrays["image"].dtype == np.uint8 and record.arrays["image"].shape[2] == 3
    files = save(records[0], tmp_path / "cap" / "trace-0", png=True)
    assert [f.suffix for f in files] == [".json", ".npz", ".png"]
    _round_trip(read_trace(files[0]), tmp_path / "cap2")
    with pytest.raises(SeqlabError, match=r"split 'valid' must be >= 0 and < 6, got \[6\]"):
        trace(loaded, [6], split="valid")


# ------------------------------------------------------------------ broken files


def _record() -> Trace:
    record = Trace("translation", model="m", task="translation", checkpoint="c", step=3,
                   tokens={"source": ["a", "</s>"], "target": ["b", "</s>"]})  # fmt: skip
    record.add("cross", np.full((2, 2), 0.5, np.float32), ("target", "source"), "α")
    record.add("p_gen", np.array([0.1, 0.9], np.float32), ("target",), "gate")
    return record


def _drop_array(js, npz):
    with np.load(npz) as z:
        np.savez(npz, cross=z["cross"])  # p_gen missing


def _edit(key_path, value):
    def edit(js, npz):
        data = json.loads(js.read_text())
        node = data
        for key in key_path[:-1]:
            node = node[key]
        node[key_path[-1]] = value
        js.write_text(json.dumps(data))

    return edit


@pytest.mark.parametrize(
    "damage, file, field",
    [
        (lambda js, npz: js.unlink(), "json", "(file)"),
        (lambda js, npz: npz.unlink(), "npz", "(file)"),
        (lambda js, npz: js.write_text('{"format": '), "json", "(file)"),
        (lambda js, npz: npz.write_bytes(b"PK\x03\x04 not a zip"), "npz", "(file)"),
        (_edit(["format"], "other"), "json", "format"),
        (_edit(["version"], 99), "json", "version"),
        (_edit(["step"], "three"), "json", "step"),
        (_edit(["tokens", "source"], ["a"]), "json", "arrays.cross.shape"),
        (_edit(["arrays", "cross", "axes"], ["target"]), "json", "arrays.cross.axes"),
        (_edit(["arrays", "cross", "shape"], [2, 3]), "npz", "cross"),
        (_edit(["arrays", "p_gen", "dtype"], "<f8"), "npz", "p_gen"),
        (_edit(["arrays", "p_gen"], "x"), "json", "arrays.p_gen"),
        (_drop_array, "npz", "p_gen"),
    ],
)
def test_broken_files_name_the_file_and_field(tmp_path, damage, file, field):
    js, npz = write_trace(_record(), tmp_path / "t")
    damage(js, npz)
    with pytest.raises(TraceError) as info:
        read_trace(tmp_path / "t")
    message = str(info.value)
    path = js if file == "json" else npz
    assert message.startswith(f"{path}: field {field!r}: ") and "\n" not in message
    assert info.value.field == field and info.value.path == path


def test_an_extra_array_and_labels_that_do_not_fit_are_refused(tmp_path):
    js, npz = write_trace(_record(), tmp_path / "t")
    np.savez(npz, cross=np.zeros((2, 2), np.float32), p_gen=np.zeros(2, np.float32), x=[1])
    with pytest.raises(TraceError, match=r"t\.npz: field 'x': array not listed in t\.json"):
        read_trace(js)
    bad = _record()
    bad.tokens["target"] = ["b"]
    with pytest.raises(TraceError, match="tokens.target has 1 labels"):
        write_trace(bad, tmp_path / "bad")
    with pytest.raises(ValueError, match="2 dimensions but axes"):
        bad.add("z", np.zeros((2, 2)), ("target",), "")


# ------------------------------------------------------------------ command line


def _main(capsys, *argv):
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_writes_records_and_heatmaps(copy_dir, ntm_dir, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, out, err = _main(capsys, "inspect", "trace", copy_dir, "Ein Kind namens Boa springt.",
                           "Eine Frau schläft.", "--out", out_dir, "--png")  # fmt: skip
    assert code == 0, err
    names = {p.name for p in out_dir.iterdir()}
    for i in (0, 1):
        assert {f"trace-{i}.json", f"trace-{i}.npz", f"trace-{i}.png"} <= names
        assert f"trace-{i}:" in out
    record = read_trace(out_dir / "trace-0.json")
    assert record.kind == "copy_translation" and record.info["text"].startswith("Ein Kind")
    assert "arrays: attention (" in out and f"wrote {out_dir / 'trace-0.json'}" in out
    code, out, err = _main(capsys, "inspect", "trace", ntm_dir, "3", "--out", out_dir / "n")
    assert code == 0, err
    assert read_trace(out_dir / "n" / "trace-0").arrays["write_weights"].shape == (7, 1, 8)
    assert not (out_dir / "n" / "trace-0.png").exists()


@pytest.mark.parametrize(
    "which, argv, message",
    [
        ("ntm", ["x"], "sequence lengths must be integers"),
        ("ntm", ["2", "--beam", "0"], "--beam must be >= 1"),
        ("copy", [], "give at least one non-empty text"),
        ("copy", [""], "give at least one non-empty text"),
        ("gru_lm", ["to be"], "RNNLM has no pointer gate or attention to explain"),
        ("none", ["a"], "no such run directory or checkpoint"),
    ],
)
def test_cli_bad_input_is_one_line(request, tmp_path, capsys, which, argv, message):
    target = tmp_path / "missing" if which == "none" else request.getfixturevalue(f"{which}_dir")
    code, out, err = _main(capsys, "inspect", "trace", target, *argv, "--out", tmp_path)
    assert code == 2 and message in err and err.count("\n") == 1 and not out
    assert not list(tmp_path.glob("trace-*"))


# ------------------------------------------------------------------ pointer network


@pytest.mark.parametrize("problem", ["sort", "hull"])
def test_pointer_network_distribution_along_its_own_output(tmp_path, problem):
    """p(C_t = j | C_<t, P) per decoded step: rows sum to 1; greedy decoding picked each
    row's argmax (the distribution is the one the search read); a point chosen before has
    probability 0 (mask_chosen); the record re-plots from the files."""
    config = {
        "task": {"name": "pointer", "problem": problem, "n": 6, "test_n": [6], "n_train": 64,
                 "n_valid": 8, "n_test": 8},
        "model": {"name": "pointer_net", "hidden_size": 16, "attn_dim": 16, "dropout": 0.0,
                  "mask_chosen": True},
        "train": {"max_steps": 3, "precision": "fp32", "batch": {"max_tokens": 200},
                  "valid_every": 3, "save_every": 3, "progress": False, "threads": 1},
    }  # fmt: skip
    keeping_threads(api.train, config, run_dir=tmp_path / "run", quiet=True)
    loaded = api.load(tmp_path / "run")
    records = trace(loaded, [0, 3])
    for record in records:
        p, out = record.arrays["p_position"], record.info["output"]
        assert p.shape == (len(out) + 1, 7) and record.arrays["points"].shape[0] == 6
        np.testing.assert_allclose(p.sum(1), 1.0, rtol=0, atol=1e-5)
        assert [int(j) for j in p.argmax(1)] == [j + 1 for j in out] + [0]  # greedy = argmax
        for t in range(len(out)):
            assert (p[t, [j + 1 for j in out[:t]]] == 0).all()  # chosen before: masked
        assert record.tokens["target"] == [*map(str, out), "END"]
    back = _round_trip(records[0], tmp_path / "ptr")
    assert plot_trace(back, tmp_path / "ptr")[0].read_bytes()[:8] == PNG
    with pytest.raises(SeqlabError, match=r"example indices of split 'test_n6'"):
        trace(loaded, [8])
