"""benchmarks/decode_levers.py end to end with a few calls per lever: every lever's old
and new forms run (the fused selection asserts it picks the same candidates as the
library's), and the table has one row per lever with positive times."""

import torch

from benchmarks import decode_levers as bench


def test_every_lever_runs_and_is_tabled(tmp_path):
    threads = torch.get_num_threads()  # the benchmark sets --threads
    out = tmp_path / "levers.md"
    try:
        rows = bench.main(["--reps", "1", "--scale", "0.01", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    body = [r for r in rows if r.startswith("| ") and not r.startswith("| lever")]
    assert len(body) == len(bench.LEVERS) == 7
    for row in body:
        old_ms, new_ms, ratio = (float(c) for c in row.split("|")[4:7])
        assert old_ms > 0 and new_ms > 0 and ratio > 0
    assert out.read_text(encoding="utf-8").count("\n| ") == 1 + 7  # header and rows


def test_fused_selection_picks_the_librarys_candidates():
    library, fused = bench.fused_selection()
    (top_a, flat), (top_b, token_b) = library(), fused()
    torch.testing.assert_close(top_a, top_b, atol=1e-4, rtol=0)
    assert torch.equal(flat % bench.V, token_b)  # same tokens, best first
