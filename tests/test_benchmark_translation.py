"""benchmarks/translation.py end to end on a tiny Transformer (seconds, not minutes).

Tiny parallel files cut from the shipped Multi30k copy (300 train, 20 valid, 20 test
pairs), BPE 200, a 1-layer d 16 model and a 0.02-minute budget: the point is the
pipeline (train → pick checkpoint → beam and greedy test BLEU → table → results.md
section), not the scores.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from benchmarks import translation as bench

DATA = Path(__file__).resolve().parent.parent / "data" / "multi30k"
NUM = r"[0-9][0-9,.]*"


def _cut(tmp: Path) -> list[str]:
    """Small parallel files and the task overrides that point at them."""
    sizes = {"train": ("train", 300), "valid": ("val", 20), "test": ("test_2016_flickr", 20)}
    overrides = ["task.data=files"]
    for split, (name, n) in sizes.items():
        for side, lang in (("src", "de"), ("tgt", "en")):
            with gzip.open(DATA / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(n)]
            path = tmp / f"{split}.{lang}"
            path.write_text("".join(lines), encoding="utf-8")
            overrides.append(f"task.{split}_{side}={path}")
    return overrides


def _tiny_model(tmp: Path) -> list[str]:
    """The cut data, BPE 200 and a 1-layer d 16 Transformer."""
    return [
        *_cut(tmp),
        "task.vocab_size=200",
        f"task.cache_dir={tmp / 'spm'}",
        "model.d_model=16",
        "model.n_heads=2",
        "model.d_ff=32",
        "model.encoder_layers=1",
        "model.decoder_layers=1",
    ]


def test_benchmark_writes_and_replaces_its_section(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Results\n\n## Language models\n\nkept text\n", encoding="utf-8")
    argv = [
        "--models",
        "transformer",
        "--minutes",
        "0.02",
        "--out",
        str(out),
        "--runs-dir",
        str(tmp_path / "runs"),
        *_tiny_model(tmp_path),
        "train.valid_every=1000000",
        "train.progress=false",
    ]
    rows = bench.main(argv)
    assert [r.model for r in rows] == ["transformer"]
    r = rows[0]
    assert r.params > 0 and r.updates >= 1 and r.tokens_per_s > 0 and r.peak_rss_mib > 0
    assert r.beam == 5
    for value in (r.bleu_lc_greedy, r.bleu_lc_beam, r.bleu_beam, r.chrf_beam):
        assert 0.0 <= value <= 100.0
    assert (r.published, r.target, r.met) == (36.5, 42.0, False)
    assert "nrefs:1" in r.signatures["bleu_lc"] and "case:lc" in r.signatures["bleu_lc"]
    assert (tmp_path / "runs" / "bench-transformer" / "metrics.jsonl").is_file()

    text = out.read_text(encoding="utf-8")
    assert text.count(bench.HEADING) == 1
    assert "## Language models\n\nkept text" in text  # other sections survive
    row = next(line for line in text.splitlines() if "(`transformer`)" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 15
    # params, minutes, updates, tok/s, RSS, greedy, beam, K, cased, chrF: numbers
    for cell in [cells[1].rstrip("M"), *cells[2:10]]:
        assert re.fullmatch(NUM, cell), row
    assert cells[12:] == ["36.5", "≥ 42.0", "**no**"]
    assert "Command: `python benchmarks/translation.py --models transformer" in text
    assert "torch " in text and "cores" in text

    # a second run replaces the section: one heading, one row, the other section kept, and
    # the row of a model run earlier in another invocation (here: `cho`) kept
    cho = "| Cho GRU (`cho`) | 1.00M | 45.0 | 9 | 1 | 1 | 1.0 | 1.0 | 5 | 1.0 | 1.0 | x "
    cho += "| 20.6 | ≥ 24.0 | **no** |"
    text = text.replace(row, cho + "\n" + row)
    out.write_text(text + "\n## Later benchmark\n\nmore\n", encoding="utf-8")
    bench.main(argv)
    again = out.read_text(encoding="utf-8")
    assert again.count(bench.HEADING) == 1
    assert again.count("(`transformer`)") == 1 and again.count(cho) == 1
    assert "kept text" in again and again.rstrip().endswith("## Later benchmark\n\nmore")


def test_average_scores_the_mean_of_the_last_checkpoints(tmp_path: Path) -> None:
    overrides = [
        *_tiny_model(tmp_path),
        "train.max_steps=4",
        "train.save_every=2",
        "train.keep_last=2",
        "train.valid_every=1000000",
        "train.progress=false",
    ]
    row = bench.run_model("transformer", 5.0, overrides, None, tmp_path / "runs", average=2)
    assert row.checkpoint == "average-last2 (step 4)"
    ckpts = tmp_path / "runs" / "bench-transformer" / "checkpoints"
    assert (ckpts / "average-last2" / "meta.json").is_file()
    assert 0.0 <= row.bleu_lc_beam <= 100.0


def _row(model: str, bleu_lc: float, bleu_cased: float) -> bench.Row:
    return bench.Row(model, 1, 45.0, 1, 1.0, 1.0, 5, bleu_lc, bleu_lc, bleu_cased, 50.0, "x", {})


def test_en_de_row_is_judged_on_cased_bleu_and_de_en_rows_on_lowercase():
    assert bench.preset_path("transformer-en-de").is_file()
    assert _row("transformer-en-de", bleu_lc=36.0, bleu_cased=34.9).met is False
    assert _row("transformer-en-de", bleu_lc=35.5, bleu_cased=35.0).met is True
    assert _row("transformer", bleu_lc=42.0, bleu_cased=41.0).met is True
    assert _row("transformer", bleu_lc=41.9, bleu_cased=43.0).met is False
    table = bench.format_table([_row("transformer-en-de", 36.0, 35.1)])
    assert "en→de" in table and "| 35.8 | ≥ 35.0 | yes |" in table
    # the judged column shows two decimals: just below the target never reads as the target
    table = bench.format_table([_row("transformer", bleu_lc=41.96, bleu_cased=41.0)])
    assert "| 41.96 | 5 | 41.00 |" in table and "| ≥ 42.0 | **no** |" in table


def test_a_rerun_models_old_command_line_is_dropped(tmp_path: Path) -> None:
    assert bench.models_of_command("Command: `python benchmarks/translation.py`") == set(
        bench.MODELS
    )
    line = "Command: `python benchmarks/translation.py --models cho,luong --minutes 30`"
    assert bench.models_of_command(line) == {"cho", "luong"}
    assert bench.models_of_command(line.replace("--models ", "--models=")) == {"cho", "luong"}
    out = tmp_path / "results.md"
    cho = "| Cho GRU (`cho`) | x |"
    sections = [
        bench.HEADING, "",
        "Command: `python benchmarks/translation.py --models transformer --minutes 45`", "",
        "Machine: old transformer run", "",
        "Command: `python benchmarks/translation.py --models cho,transformer`", "",
        "Machine: cho run", "", cho, "| Transformer (`transformer`) | y |",
    ]  # fmt: skip
    out.write_text("\n".join(sections) + "\n", encoding="utf-8")
    kept = bench.earlier_lines(out, ["transformer"])
    assert kept["rows"] == [cho]
    assert kept["runs"] == [
        "Command: `python benchmarks/translation.py --models cho,transformer`",
        "Machine: cho run",
    ]
