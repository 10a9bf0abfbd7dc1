"""seqlab.decode.compiled: decoding through the Transformer's compiled, weight-frozen step
gives what the eager step gives (float32: the same ids, scores to 1e-4), through the same
greedy and beam searches; the compiled step is kept per model and compiled again when the
weights change in place; where inductor's SDPA rewrite is off it projects q, k, v by one
product (two GEMMs fewer per layer); other model families are refused with a clear error."""

import argparse
import contextlib

import pytest
import torch
from torch._dynamo.utils import counters

from seqlab.cli.translate_cmd import add_search_arguments, search_overrides
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam as beam_module
from seqlab.decode import compiled
from seqlab.decode.compiled import compiled_decoder, sdpa_rewrite_for
from seqlab.decode.scoring import next_log_probs, step_log_probs
from seqlab.errors import SeqlabError
from seqlab.models.transformer import TransformerConfig, TransformerSeq2Seq
from seqlab.tasks.translation_eval import SearchSettings, decode_ids

V = 40


def _model(tgt_vocab: int = V, layers: int = 2) -> TransformerSeq2Seq:
    """Two layers where a test could miss a mix-up between layers' caches or weights; one
    where the property is the same in every layer (two layers take ~1.5× the seconds of one
    to compile: 13 against 9 s a graph on the 2-core test machine)."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=32, n_heads=4, d_ff=64, encoder_layers=layers, decoder_layers=layers, dropout=0.0
    )
    return TransformerSeq2Seq(cfg, src_vocab=V, tgt_vocab=tgt_vocab, pad_id=PAD_ID).eval()


def _sources(n: int = 10) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 12, (n,), generator=g).tolist()
    return [torch.randint(4, V, (n_i,), generator=g).tolist() + [EOS_ID] for n_i in lengths]


@pytest.mark.slow
@pytest.mark.compiles
def test_compiled_decoding_equals_eager():
    # §56: greedy and beam search (batches of 10 and, as inputs finish, of one) compile
    # four graphs: greedy's and beam's, each also for one row (one input) left. Before,
    # eight: dynamo's recompile limit, past which the step silently ran eagerly.
    model, sources = _model(), _sources()
    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    try:
        for beam in (1, 4):
            eager = decode_ids(model, sources, SearchSettings(beam=beam, max_len_b=8))
            fast = decode_ids(model, sources, SearchSettings(beam=beam, max_len_b=8, compiled=True))
            assert [[ids for ids, _, _ in nb] for nb in fast] == [
                [ids for ids, _, _ in nb] for nb in eager
            ]
            for got, want in zip(fast, eager):
                assert [s for _, s, _ in got] == pytest.approx([s for _, s, _ in want], abs=1e-4)
            assert len({tuple(nb[0][0]) for nb in eager}) > 3  # distinct outputs
        assert counters["stats"]["unique_graphs"] - graphs <= 4
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.compiles
def test_log_prob_step_is_the_log_softmax_of_the_step():
    # The searches take log p from the compiled graph (``log_prob_step``, log_softmax fused
    # there; perf-notes-amx.md §50): it must be step_log_probs of the compiled logits, and
    # the eager form (log_probs_in_graph False) the same values exactly. The log_softmax
    # follows the last layer only: one layer. At t = 1: the step at t = 0 runs eagerly
    # (§56; test_the_first_step_runs_eagerly).
    model = _model(layers=1)
    src = torch.tensor(_sources(4)[0])[None].repeat(3, 1)  # (3, S)
    mask = torch.ones_like(src, dtype=torch.bool)
    torch._dynamo.reset()
    try:
        step = compiled_decoder(model)
        y = torch.tensor([1, 5, 7])  # (3,)
        with torch.no_grad():
            memory = model.encode(src, mask)
            _, at_1 = step.step(y, step.init_state(memory, mask))  # t = 0, eagerly
            logits, _ = step.step(y, at_1)  # (3, V)
            log_p, state = step.log_prob_step(y, at_1)  # (3, V)
            step.log_probs_in_graph = False
            eager_log_p, _ = step.log_prob_step(y, at_1)
        want = step_log_probs(logits)
        assert log_p.dtype == torch.float32 and log_p.shape == (3, V)
        torch.testing.assert_close(log_p, want, rtol=0, atol=1e-5)
        assert torch.equal(eager_log_p, want)
        assert torch.allclose(log_p.exp().sum(-1), torch.ones(3), atol=1e-5)
        assert hasattr(state, "resolved")  # the state stays a PendingReorder
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.compiles
def test_the_first_step_runs_eagerly_and_a_new_batch_reuses_the_graph():
    # §56: the step at t = 0 (empty cache) runs eagerly, t = 1 on share one graph, and a
    # second batch (other rows, other source length) compiles nothing. Each step's log p
    # equal the eager model's. (The initial state's layout, ``canonical_state``, matters
    # where greedy and beam search share the step: test_compiled_decoding_equals_eager.)
    model = _model(layers=1)
    torch._dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    try:
        step = compiled_decoder(model)
        for n, rows in ((4, 3), (6, 5)):
            src = torch.tensor(_sources(n)[n - 1])[None].repeat(rows, 1)  # (rows, S)
            mask = torch.ones_like(src, dtype=torch.bool)
            y = torch.arange(rows) + 4  # (rows,)
            with torch.no_grad():
                memory = model.encode(src, mask)
                state, eager = step.init_state(memory, mask), model.init_state(memory, mask)
                for t in range(3):
                    log_p, state = step.log_prob_step(y, state)  # (rows, V)
                    logits, eager = model.step(y, eager)
                    torch.testing.assert_close(log_p, step_log_probs(logits), rtol=0, atol=1e-5)
                    compiled_so_far = counters["stats"]["unique_graphs"] - graphs
                    assert compiled_so_far == (0 if (n, t) == (4, 0) else 1)
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.compiles
def test_beam_search_selects_inside_the_compiled_graph(monkeypatch):
    # §54: from t = 2 on the compiled step returns the 2K best extensions, not log p, with
    # EOS banned in the graph for t <= min_len; the same results as selecting eagerly on
    # the compiled step's log p. A 300-token target vocabulary, so that the chunk-maxima
    # path of top_extensions runs in the graph (K·V = 1,200 >= 4·2K·32). Both searches
    # run the one compiled model step, so one layer (the layers' plumbing is
    # test_compiled_decoding_equals_eager's).
    model = _model(tgt_vocab=300, layers=1)
    with torch.no_grad():  # EOS likelier, so that banning it (min_len) changes the search
        model.tgt_embed.weight[EOS_ID].mul_(6.0)
    sources = _sources(6)
    width = max(map(len, sources))
    src = torch.tensor([ids + [PAD_ID] * (width - len(ids)) for ids in sources])  # (6, S)
    mask = src != PAD_ID
    calls = []
    counted = lambda *a: calls.append(1) or next_log_probs(*a)  # noqa: E731
    monkeypatch.setattr(beam_module, "next_log_probs", counted)
    min_len, results = 3, {}  # t = 2, 3 banned in the graph, then not
    torch._dynamo.reset()
    try:
        step = compiled_decoder(model, 4)
        for in_graph in (True, False):
            step.select_in_graph, calls[:] = in_graph, []
            with torch.no_grad():
                state = step.init_state(model.encode(src, mask), mask)
                got = beam_module.beam_search(
                    step, state, 6, BOS_ID, EOS_ID, 9, 4, n_best=2, alpha=0.6, min_len=min_len
                )
            assert len(calls) == (1 if in_graph else got.meta["steps"])  # eager: only t = 1
            results[in_graph] = got
    finally:
        step.select_in_graph = False  # the default (§54)
        torch._dynamo.reset()
    fused, eager = results[True], results[False]
    assert torch.equal(fused.tokens, eager.tokens)
    assert torch.equal(fused.lengths, eager.lengths)
    torch.testing.assert_close(fused.scores, eager.scores, rtol=0, atol=1e-5)
    # With the EOS row weighed 6×, the uncompiled model's beam search with min_len 1 ends
    # some 1-bests at t = 2 (two of the six); banned up to t = 3 (in the graph for
    # t = 2, 3), none ends so soon.
    with torch.no_grad():
        state = model.init_state(model.encode(src, mask), mask)
        unbanned = beam_module.beam_search(
            model, state, 6, BOS_ID, EOS_ID, 9, 4, n_best=2, alpha=0.6, min_len=1
        )
    assert bool((unbanned.lengths[:, 0] <= min_len).any())
    assert not bool((fused.lengths <= min_len).any())
    assert len({tuple(row) for row in fused.tokens[:, 0].tolist()}) >= 3


def _amx(monkeypatch, has_amx: bool) -> None:
    """Pretend the CPU has (or lacks) amx_bf16, for the rewrite policy."""
    flags = frozenset({"avx512_bf16", *(("amx_bf16",) if has_amx else ())})
    monkeypatch.setattr(compiled, "_cpu_flags", lambda: flags)


def test_sdpa_rewrite_policy():
    # docs/perf-notes-compiled-beam.md §49, §51, §52: on a CPU beam search compiles without
    # inductor's SDPA rewrite, greedy with it only where the CPU has AMX; off the CPU
    # (nothing measured) inductor keeps its rewrite.
    amx, zen = frozenset({"amx_bf16", "avx512_bf16"}), frozenset({"avx512_bf16", "avx2"})
    assert sdpa_rewrite_for("cpu", 1, amx) is True
    assert sdpa_rewrite_for("cpu", 1, zen) is False
    assert sdpa_rewrite_for("cpu", 5, amx) is False
    assert sdpa_rewrite_for("cpu", 5, zen) is False
    assert sdpa_rewrite_for("cuda", 1, zen) is True
    assert sdpa_rewrite_for("cuda", 5, amx) is True


@pytest.mark.slow
@pytest.mark.compiles
def test_sdpa_rewrite_off_keeps_the_steps_matmuls(monkeypatch):
    # inductor rewrites the step's attention into SDPA's flash kernel unless compiled
    # inside attention_pattern_off() (CompiledStep.sdpa_rewrite False; perf-notes-amx.md
    # §49): then the only SDPA calls left are the eager encoder's (one per layer). The
    # greedy step rewrites, the beam step does not (§51), though both are of one model and
    # the greedy one is compiled first: the beam step must not reuse its graph.
    from torch.profiler import profile

    src = torch.tensor(_sources(2)[0])[None].repeat(2, 1)  # (2, S)
    mask = torch.ones_like(src, dtype=torch.bool)
    counts = {}
    _amx(monkeypatch, True)  # greedy rewrites (§49), beam does not (§51)
    torch._dynamo.reset()
    model = _model()
    for rewrite, beam in ((True, 1), (False, 4)):
        step = compiled_decoder(model, beam)
        assert step.sdpa_rewrite is rewrite
        with torch.no_grad():
            y, state = torch.tensor([1, 5]), step.init_state(model.encode(src, mask), mask)
            for _ in range(2):  # t = 0 runs eagerly (§56), t = 1 compiles
                _, state = step.log_prob_step(y, state)
            with profile() as prof:
                model.encode(src, mask)
                for _ in range(3):
                    _, state = step.log_prob_step(y, state)
        counts[rewrite] = sum(
            e.count for e in prof.key_averages() if e.key.startswith("aten::_scaled_dot_product")
        )
    torch._dynamo.reset()
    assert compiled_decoder(model, 4) is not compiled_decoder(model, 1)
    encoder_layers = 2
    assert counts[False] == encoder_layers
    assert counts[True] > counts[False]


@pytest.mark.slow
@pytest.mark.compiles
def test_the_step_projects_q_k_v_by_one_product_where_the_rewrite_is_off(monkeypatch):
    # docs/perf-notes-compiled-beam.md §53: without the SDPA rewrite the compiled step's
    # self-attention runs one GEMM by the stacked [W_q; W_k; W_v] instead of three, so a
    # step makes 2 GEMMs fewer per decoder layer than the same step traced inside
    # separate_projections(); the log-probabilities agree.
    from torch.profiler import profile

    from seqlab.decode.compiled import CompiledStep
    from seqlab.nn.multihead import separate_projections

    src = torch.tensor(_sources(2)[0])[None].repeat(2, 1)  # (2, S)
    mask = torch.ones_like(src, dtype=torch.bool)
    _amx(monkeypatch, False)
    torch._dynamo.reset()
    model = _model()
    gemms, log_ps = {}, {}
    for stacked in (True, False):
        step = compiled_decoder(model, 4) if stacked else CompiledStep(model, sdpa_rewrite=False)
        assert not step.sdpa_rewrite
        with torch.no_grad(), contextlib.ExitStack() as stack:
            if not stacked:
                stack.enter_context(separate_projections())
            y, state = torch.tensor([1, 5]), step.init_state(model.encode(src, mask), mask)
            for _ in range(2):  # t = 0 eagerly, t = 1 compiles the graph of every t ≥ 1 (§56)
                _, state = step.log_prob_step(y, state)
            with profile() as prof:
                for _ in range(3):
                    log_p, state = step.log_prob_step(y, state)
        log_ps[stacked] = log_p
        gemms[stacked] = sum(
            e.count
            for e in prof.key_averages()
            if e.key in ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm")
        )
    torch._dynamo.reset()
    decoder_layers = 2
    assert gemms[False] - gemms[True] == 3 * 2 * decoder_layers, gemms
    torch.testing.assert_close(log_ps[True], log_ps[False], atol=1e-5, rtol=0)


@pytest.mark.compiles  # builds a CompiledStep, which checks for a compiler
def test_compiled_step_is_kept_until_the_weights_change(monkeypatch):
    _amx(monkeypatch, True)
    model = _model()
    first = compiled_decoder(model)
    assert compiled_decoder(model) is first  # nothing compiled twice
    beam_step = compiled_decoder(model, 5)
    assert beam_step is compiled_decoder(model, 2) and beam_step is not first
    assert first.sdpa_rewrite and not beam_step.sdpa_rewrite  # §51
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # what an optimizer step does
    again = compiled_decoder(model)
    assert again is not first  # frozen weights would be stale: compiled anew
    assert compiled_decoder(model, 5) is not beam_step
    model.load_state_dict(model.state_dict())  # copy_ into every parameter
    assert compiled_decoder(model) is not again
    with pytest.raises(SeqlabError, match="beam must be >= 1"):
        compiled_decoder(model, 0)
    _amx(monkeypatch, False)  # §52: without AMX greedy and beam share one step, no rewrite
    other = _model()
    assert compiled_decoder(other, 1) is compiled_decoder(other, 5)
    assert not compiled_decoder(other, 1).sdpa_rewrite


def test_other_families_are_refused():
    with pytest.raises(SeqlabError, match="Transformer only"):
        compiled_decoder(torch.nn.GRU(4, 4))


def test_cli_flag():
    p = argparse.ArgumentParser()
    add_search_arguments(p)
    assert search_overrides(p.parse_args(["--compile"]))["test_compile"] is True
    assert search_overrides(p.parse_args([]))["test_compile"] is None  # the run's own


def test_a_missing_cpp_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SeqlabError, match="needs a C\\+\\+ compiler"):
        compiled_decoder(_model())
