"""benchmarks/decode_beam_step.py end to end on a tiny workload: the flat and the chunked
candidate selection decode the peers' model with the same 1-best in float32, and the
selection's own time is reported."""

import pytest

from benchmarks import decode_beam_step as bench


def test_flat_and_chunked_give_the_same_one_best(capsys, one_thread):  # restores threads
    argv = ["--sentences", "4", "--batch", "2", "--new-tokens", "3", "--reps", "1"]
    (row,) = bench.main([*argv, "--precisions", "fp32", "--threads", "1"])[2:]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[:2] == ["beam 5", "fp32"]
    assert float(cells[3]) > 0 and float(cells[5]) > 0  # ms inside select_candidates
    assert cells[7] == "yes"
    assert "4 sentences in batches of 2" in capsys.readouterr().out


def test_an_unknown_variant_is_named():
    with pytest.raises(SystemExit):
        bench.main(["--variants", "flat,fused"])
