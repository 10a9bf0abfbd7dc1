"""benchmarks/decode_choose.py and benchmarks/compiled_step_levers.py end to end on tiny
shapes: both forms of each lever run, decode the same tokens, and are tabled
(docs/perf-notes-amx.md §48–§50, perf-notes-compiled-beam.md §53)."""

import pytest
import torch

from benchmarks import compiled_step_levers, decode_choose

TINY = ["--tiny", "--reps", "1", "--threads", "1", "--sentences", "6", "--new-tokens", "4"]


def _body(rows: list[str]) -> list[list[str]]:
    return [[c.strip() for c in r.split("|")[1:-1]] for r in rows[2:]]


def test_the_two_choosers_agree_and_are_tabled(tmp_path):
    x = torch.randn(5, 300)
    x[0, 7] = x[0, 9] = 10.0  # a tie: both take the lower id
    assert torch.equal(decode_choose.by_argmax(x), decode_choose.by_max(x))
    threads = torch.get_num_threads()
    try:
        rows = decode_choose.main([*TINY, "--out", str(tmp_path / "t.md")])
    finally:
        torch.set_num_threads(threads)
    body = _body(rows)
    assert [r[0] for r in body] == [
        "(32, 50) alone",
        "seqlab, greedy, fp32",
        "seqlab, greedy, bf16",
    ]
    assert all(r[-1] == "yes" for r in body)  # the same tokens
    assert all(float(r[3].rstrip("×")) > 0 for r in body)
    assert (tmp_path / "t.md").read_text(encoding="utf-8").count("\n| ") == 1 + 3  # header and rows


@pytest.mark.slow
@pytest.mark.compiles
@pytest.mark.parametrize("lever", ["attention", "stacked-qkv"])  # log-probs: test_compiled.py
def test_compiled_step_levers_run_both_forms(lever):
    threads = torch.get_num_threads()
    torch._dynamo.reset()
    try:
        rows = compiled_step_levers.main(
            ["--lever", lever, *TINY, "--searches", "1", "--precisions", "fp32"]
        )
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
    (row,) = _body(rows)
    assert row[:2] == ["greedy", "fp32"]
    assert float(row[2]) > 0 and float(row[3]) > 0
    assert row[-1] == "yes"  # float32: the same tokens with either form
