"""benchmarks/decode_single_query.py end to end on a tiny workload: both variants decode
the preset Transformer, fp32 gives the same 1-best, and the SDPA switch is restored."""

import torch

import seqlab.nn.multihead as multihead
from benchmarks import decode_single_query as bench


def test_sdpa_and_matmul_rows_and_fp32_same_one_best(capsys):
    threads = torch.get_num_threads()  # the benchmark sets --threads
    argv = ["--sentences", "4", "--batch", "2", "--new-tokens", "2", "--reps", "1"]
    try:
        rows = bench.main([*argv, "--beams", "1,3", "--precisions", "fp32", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    body = rows[2:]
    assert [[c.strip() for c in r.split("|")[1:4]] for r in body] == [
        ["greedy", "fp32", "sdpa"],
        ["greedy", "fp32", "matmul"],
        ["beam 3", "fp32", "sdpa"],
        ["beam 3", "fp32", "matmul"],
    ]
    assert all(r.split("|")[-2].strip() == "yes" for r in body)  # fp32: identical 1-best
    assert multihead._CPU_MATMUL is True  # always_sdpa() restored the default
    assert "beam 3 fp32 rep 1" in capsys.readouterr().out
