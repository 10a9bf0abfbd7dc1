"""benchmarks/pointer_generator.py --reuse: no training, the runs already in the runs folder
are scored again with evaluation overrides (e.g. task.block_unk=true) applied; the table
records the command and the decode setting. One tiny run on generated files (3 updates)."""

import json

import pytest

from benchmarks import pointer_generator as bench
from seqlab import api

pytestmark = pytest.mark.usefixtures("one_thread")


def test_reuse_accepts_evaluation_overrides_only():
    args = bench.parse_args(["--reuse", "task.block_unk=true", "coverage:task.test_beam=2"])
    assert args.reuse and args.overrides == ["task.block_unk=true", "coverage:task.test_beam=2"]
    for bad in ("model.dropout=0.3", "task.cov_lambda=0.5", "plain:train.max_minutes=1"):
        with pytest.raises(SystemExit):
            bench.parse_args(["--reuse", bad])
    assert not bench.parse_args(["model.dropout=0.3"]).reuse  # training runs take anything
    mixed = ["task.replace_unk=true", "train.init_from=x", "train.threads=1", "model.coverage=1"]
    assert bench.evaluation_overrides(mixed) == ["task.replace_unk=true", "train.threads=1"]


@pytest.fixture
def trained_run(tmp_path):
    """A 3-update copy_translation run in RUNS/bench-<plain preset>, decoded as the paper."""
    names = ["boa", "kiwu", "tom", "ann", "bob", "lin"]
    files = {}
    for split, n in (("train", 30), ("valid", 6), ("test", 6)):
        for side, text in (("src", "ein mann namens {} läuft ."), ("tgt", "a man named {} runs .")):
            path = tmp_path / f"{split}.{side}"
            path.write_text("".join(text.format(names[i % 6]) + "\n" for i in range(n)))
            files[f"{split}_{side}"] = str(path)
    config = {
        "task": {"name": "copy_translation", "data": "files", **files, "tgt_vocab_size": 8,
                 "src_min_freq": 1, "valid_bleu_sentences": 2, "test_beam": 2},
        "model": {"name": "pointer_generator", "emb_dim": 8, "hidden_size": 8,
                  "attn_dim": 8, "out_dim": 8, "dropout": 0.0},
        "schedule": {"name": "constant"},
        "train": {"max_steps": 3, "batch": {"max_tokens": 128}, "label_smoothing": 0.0,
                  "valid_every": 1000, "save_every": 1000, "log_every": 1000,
                  "progress": False, "threads": 1},
    }  # fmt: skip
    runs = tmp_path / "runs"
    api.train(config, run_dir=runs / f"bench-{bench.PRESETS['plain']}", quiet=True)
    return runs


def test_reuse_scores_the_saved_run_with_the_overrides(trained_run, tmp_path):
    out = tmp_path / "docs" / "results.md"
    common = ["--reuse", "--variants", "plain", "--runs-dir", str(trained_run), "--out", str(out)]
    (plain,) = bench.main(common)
    assert not plain.block_unk and plain.unk_decoding == "allowed"
    (row,) = bench.main([*common, "task.unk_to_copy=false", "task.block_unk=true"])
    assert row.block_unk and row.unk_decoding == "blocked" and row.metrics["unk"] == 0.0
    assert row.updates == plain.updates == 3  # nothing trained again
    text = out.read_text()
    assert f"Command: `python benchmarks/pointer_generator.py {' '.join(common)} " in text
    assert "task.block_unk=true`" in text and "Runs reused (`--reuse`)" in text
    assert "| <unk> at decode |" in text and "| 2 | blocked |" in text
    sidecar = json.loads((tmp_path / "docs" / "figures" / "pointer-generator.json").read_text())
    assert sidecar["reuse"] is True and sidecar["rows"][0]["block_unk"] is True
    saved = api.load(trained_run / f"bench-{bench.PRESETS['plain']}")
    assert saved.config.task_cfg.block_unk is False  # the run's own config is untouched
    (moved,) = bench.main([*common, "task.unk_to_copy=true"])
    assert moved.unk_to_copy and moved.unk_decoding == "to copies" and moved.metrics["unk"] == 0.0
    assert "| 2 | to copies |" in out.read_text()
    (covered,) = bench.main([*common, "task.coverage_penalty=0.2"])
    assert covered.coverage_penalty == 0.2 and covered.beam_cell == "2, cp β 0.2"
    assert covered.updates == 3 and "| 2, cp β 0.2 |" in out.read_text()
    assert "task.coverage_penalty" in bench.EVALUATION_KEYS  # --reuse accepts it
