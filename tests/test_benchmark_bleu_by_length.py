"""benchmarks/bleu_by_length.py on fake runs over the shipped test2016 data: the table,
the PNG, the section in results.md and a verdict computed from the numbers."""

import gzip
from pathlib import Path

from benchmarks import bleu_by_length as bbl
from seqlab.data.multi30k import SHIPPED_DIR
from seqlab.eval.bleu import LengthBucket


def _refs() -> list[str]:
    with gzip.open(SHIPPED_DIR / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _srcs() -> list[str]:
    with gzip.open(SHIPPED_DIR / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def test_attention_lead_growing_with_length_is_reported_as_reproduced(tmp_path: Path):
    refs, srcs = _refs(), _srcs()
    runs = tmp_path / "runs"
    # "bahdanau": perfect output; "sutskever": perfect on short sources, garbage on long ones
    worse = [r if len(s.split()) <= 15 else "a dog ." for r, s in zip(refs, srcs)]
    for model, hyps in (("bahdanau", refs), ("sutskever", worse)):
        (runs / f"bench-{model}").mkdir(parents=True)
        (runs / f"bench-{model}" / "test-beam.hyp").write_text("\n".join(hyps) + "\n")
    out, png = tmp_path / "results.md", tmp_path / "fig" / "len.png"
    out.write_text("# Results\n\n## Other\n\nkept\n")
    said = bbl.main(
        [
            "--runs-dir",
            str(runs),
            "--out",
            str(out),
            "--png",
            str(png),
            "--data-dir",
            str(tmp_path / "nothing"),
            "--bootstrap",
            "50",
        ]
    )
    assert said.startswith("reproduced here") and "bootstrap 95 % interval" in said
    text = out.read_text()
    assert "## Other\n\nkept" in text and bbl.HEADING in text
    assert "| sutskever bleu_lc | bahdanau bleu_lc |" in text
    assert png.stat().st_size > 1000


def _b(x):
    return LengthBucket(label="", lo=1, hi=None, n=1, bleu=x, bleu_lc=x, chrf=x)


def test_gap_and_verdict_from_numbers():
    table = {"cho": [_b(30.0), _b(20.0)], "luong": [_b(35.0), _b(22.0)]}
    assert bbl.gaps(table) == [5.0, 2.0]
    assert bbl.verdict(bbl.gaps(table)).startswith("partly here")  # lead 5 → 2, still > 0
    behind = {"cho": [_b(30.0), _b(25.0)], "luong": [_b(35.0), _b(22.0)]}
    assert bbl.gaps(behind) == [5.0, -3.0]
    assert bbl.verdict(bbl.gaps(behind)).startswith("not reproduced here")
    assert bbl.gaps({"luong": [_b(1.0)]}) is None
    assert bbl.verdict(None).startswith("not decided")


def test_a_lead_that_grows_by_noise_only_is_not_reproduced(tmp_path: Path):
    """The no-attention model garbles every 3rd sentence whatever its length: the attention
    lead is the same on short and long sources up to sampling noise, so the bootstrap
    interval of its growth straddles 0 and the verdict is at most "partly" — the plain
    "last gap > first gap" rule would call noise a reproduction about half of the time."""
    refs, srcs = _refs(), _srcs()
    noisy = [r if i % 3 else "a dog ." for i, r in enumerate(refs)]
    edges = bbl.merge_sparse_tail(srcs, bbl.LENGTH_EDGES, 30)
    hyps = {"bahdanau": refs, "cho": noisy}
    lo, hi = bbl.growth_interval(srcs, hyps, refs, edges, n_boot=60)
    assert lo < 0 < hi
    table = {m: bbl.bleu_by_length(srcs, h, refs, edges) for m, h in hyps.items()}
    assert bbl.verdict(bbl.gaps(table), (lo, hi)).startswith("partly here")
    assert bbl.growth_interval(srcs, {"bahdanau": refs}, refs, edges) is None
