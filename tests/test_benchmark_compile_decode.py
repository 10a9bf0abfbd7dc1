"""benchmarks/compile_decode_probe.py: the Transformer's decoder step compiles to one graph
(no graph break, so nothing of the step falls back to Python), and the compiled step decodes
exactly the eager step's tokens in float32."""

import pytest
import torch

from benchmarks import compile_decode_probe as probe
from benchmarks import peers_decode as pdec
from benchmarks import peers_models as pm


@pytest.mark.parametrize("cache", ["concat", "tree"])
def test_decoder_step_is_one_graph(cache):
    torch.manual_seed(0)
    model = pm.build_seqlab(pm.TINY)[0].eval()
    sources = [s for s, _ in pm.make_pairs(4, pm.TINY, seed=1)]
    ((src, mask),) = pdec.source_batches(sources, 4)
    with torch.no_grad():
        state = model.init_state(model.encode(src, mask), mask, cache=cache)
        y = torch.ones(4, dtype=torch.long)
        _, state = model.step(y, state)  # a non-empty self-attention cache
        if cache == "tree":
            state = state.ready()  # as CompiledStep.step does before its graph
        explained = torch._dynamo.explain(model.step)(y, state)
    torch._dynamo.reset()
    assert explained.graph_count == 1
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.slow
@pytest.mark.compiles
def test_compiled_greedy_decodes_the_eager_tokens(capsys):
    threads = torch.get_num_threads()  # the probe sets --threads
    try:
        (row,) = probe.main(
            [
                "--size",
                "tiny",
                "--precision",
                "fp32",
                "--beams",
                "1",
                "--sentences",
                "8",
                "--reps",
                "1",
                "--threads",
                "1",
            ]
        )
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
    assert row["same"] == 1.0
    assert row["eager"] > 0 and row["compiled"] > 0 and row["first_s"] > 0
    assert "| greedy |" in capsys.readouterr().out
