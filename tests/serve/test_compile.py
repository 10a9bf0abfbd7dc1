"""``seqlab serve --compile``: ``compile_decoding`` switches a loaded Transformer translation
run to the compiled decoder step and compiles it before the first request; what it
translates afterwards equals the eager translation; other tasks are refused."""

import pytest
import torch
from torch._dynamo.utils import counters

from seqlab import api
from seqlab.cli.serve_cmd import compile_decoding
from seqlab.errors import SeqlabError

SENTENCES = ["ein hund", "eine katze läuft", "der mann sieht den hund", "ein kind"]


@pytest.mark.slow
@pytest.mark.compiles
def test_compiled_server_translates_what_eager_does(translation_dir):
    eager, fast = api.load(translation_dir), api.load(translation_dir)  # fresh: it is mutated
    try:
        seconds = compile_decoding(fast, beams=(2, 1))
        assert seconds > 0 and fast.task.cfg.test_compile
        graphs = counters["stats"]["unique_graphs"]
        for beam in (1, 2):
            want = eager.task.translate(eager.model, SENTENCES, beam=beam)
            assert fast.task.translate(fast.model, SENTENCES, beam=beam) == want
            one = [SENTENCES[1]]  # a request of one sentence: the one-row graphs
            assert fast.task.translate(fast.model, one, beam=beam) == want[1:2]
        # the warm-up compiled every graph the requests need (docs/perf-notes-compiled-
        # beam.md §56): no request waits for a compile
        assert counters["stats"]["unique_graphs"] == graphs
    finally:
        torch._dynamo.reset()


def test_other_tasks_are_refused(lm_dir):
    with pytest.raises(SeqlabError, match="no compiled decoding"):
        compile_decoding(api.load(lm_dir))
