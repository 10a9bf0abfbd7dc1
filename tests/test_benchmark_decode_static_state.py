"""benchmarks/decode_static_state.py end to end on a tiny workload: the three variants
decode with the preset models, give the same 1-best, and beam search's reorder is
restored."""

import torch

import seqlab.decode.beam as beam_module
from benchmarks import decode_static_state as bench
from seqlab.decode.state import reorder_state


def test_full_skip_and_share_give_the_same_one_best(capsys):
    threads = torch.get_num_threads()  # the benchmark sets 1
    argv = ["--sentences", "4", "--batch", "2", "--new-tokens", "2", "--beam", "3", "--reps", "1"]
    try:
        rows = bench.main(argv)
    finally:
        torch.set_num_threads(threads)
    body = rows[2:]
    assert [r.split("|")[1:3] for r in body] == [
        [" transformer ", " full "],
        [" transformer ", " skip "],
        [" transformer ", " share "],
        [" bahdanau ", " full "],
        [" bahdanau ", " skip "],
        [" bahdanau ", " share "],
    ]
    assert all(r.split("|")[-2].strip() == "yes" for r in body)
    assert beam_module.reorder_state is reorder_state
    assert "transformer rep 1" in capsys.readouterr().out
