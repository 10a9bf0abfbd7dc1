"""benchmarks/export_lm_speed.py: one tiny run writes its table (eager, TorchScript, ONNX
Runtime; sampling and scoring) into a results file, with the same sampled tokens and
scoring logits within float rounding of eager for both exported files."""

import torch

from benchmarks import export_lm_speed as bench


def test_a_tiny_run_writes_the_table(tmp_path):
    threads = torch.get_num_threads()  # the benchmark sets --threads
    out = tmp_path / "results.md"
    try:
        args = ["--presets", "shakespeare-char-lstm", "--tokens", "4", "--rows", "2", "--bptt",
                "5", "--chunks", "2", "--reps", "1", "--out", str(out)]  # fmt: skip
        rows = bench.main(args)
    finally:
        torch.set_num_threads(threads)
    sample, score = rows
    assert sample.startswith("| shakespeare-char-lstm | sample |") and sample.count("same") == 3
    deltas = [float(c.split("max Δ ")[1]) for c in score.split("|") if "max Δ" in c]
    assert len(deltas) == 3 and max(deltas) < 1e-5
    text = out.read_text()
    assert bench.HEADING in text.splitlines() and sample in text and "--presets" in text
