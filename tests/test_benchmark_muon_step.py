"""benchmarks/muon_step.py end to end on a tiny run: one row per model, and the batched
Newton–Schulz iteration lands within bf16 rounding of torch.optim.Muon's weights."""

import torch

from benchmarks import muon_step as bench


def test_rows_and_the_two_optimizers_agree(capsys):
    threads = torch.get_num_threads()  # the benchmark sets --threads
    try:
        rows = bench.main(["--models", "nanogpt", "--reps", "2", "--steps", "1", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    cells = [c.strip() for c in rows[2].split("|")[1:-1]]
    assert cells[:3] == ["nanogpt", "24", "3"]  # 4 layers × (W_q, W_k, W_v, W_o, W_1, W_2)
    assert float(cells[-1]) < 0.1  # less than a tenth of one update apart
    assert "nanogpt rep 2" in capsys.readouterr().out
