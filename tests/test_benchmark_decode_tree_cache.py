"""benchmarks/decode_tree_cache.py end to end on a tiny workload: the three caches decode
the peers' model with the same 1-best in float32, one row per search."""

import torch

from benchmarks import decode_tree_cache as bench


def test_concat_tree_and_auto_give_the_same_one_best(capsys):
    threads = torch.get_num_threads()  # the benchmark sets --threads
    argv = ["--sentences", "4", "--batch", "2", "--new-tokens", "3", "--reps", "1"]
    try:
        rows = bench.main([*argv, "--precisions", "fp32", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    body = rows[2:]
    assert [r.split("|")[1:3] for r in body] == [[" greedy ", " fp32 "], [" beam 5 ", " fp32 "]]
    for row in body:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[5] == "yes" and cells[8] == "yes"  # tree, auto: concat's 1-best
    assert "4 sentences in batches of 2" in capsys.readouterr().out
