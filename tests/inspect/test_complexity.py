"""Complexity measurements: the exponent fit on synthetic power laws; the byte counters on
hand-countable cases; every measurement function on tiny sizes (no timed assertions)."""

import pytest
import torch
from torch import nn

from benchmarks.complexity import main as benchmark_main
from seqlab.inspect import complexity as cx
from seqlab.inspect.complexity_table import exponent_table, plot_against_t, points_table


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 2.5])
def test_fit_recovers_the_exponent_of_an_exact_power_law(p):
    xs = [16, 32, 64, 128, 256]
    fit = cx.fit_exponent(xs, [3.5 * x**p for x in xs])
    assert fit.exponent == pytest.approx(p, abs=1e-12)
    assert pytest.approx(3.5, rel=1e-9) == fit.C and fit.r2 == pytest.approx(1.0)


def test_fit_of_a_sum_of_powers_sits_between_them_and_noise_lowers_r2():
    xs = [8, 16, 32, 64, 128]
    # t·k² + t²·k with k = 64: the t² term takes over past t = k
    fit = cx.fit_exponent(xs, [x * 64**2 + x**2 * 64 for x in xs])
    assert 1.0 < fit.exponent < 2.0
    noisy = cx.fit_exponent(xs, [x**2 * (1.3 if i % 2 else 0.7) for i, x in enumerate(xs)])
    assert noisy.r2 < 1.0 and noisy.exponent == pytest.approx(2.0, abs=0.3)


def test_fit_rejects_what_it_cannot_fit():
    with pytest.raises(ValueError, match="positive"):
        cx.fit_exponent([1, 2], [0.0, 1.0])
    with pytest.raises(ValueError, match="distinct"):
        cx.fit_exponent([4, 4], [1.0, 2.0])
    with pytest.raises(ValueError, match=">= 2"):
        cx.fit_exponent([4], [1.0])


def test_activation_bytes_counts_each_saved_tensor_once_and_no_parameters():
    class TanhStack(nn.Module):
        """logits = W tanh^n(E[src]): each tanh saves its (B, S, D) output; the linear layer
        saves the last one again (the same storage, counted once) and its weight (excluded)."""

        def __init__(self, n):
            super().__init__()
            self.n, self.E, self.W = n, nn.Embedding(12, 8), nn.Linear(8, 12, bias=False)

        def forward(self, src, src_mask, y_in, tgt_mask):
            e = self.E(src)  # (B, S, 8)
            for _ in range(self.n):
                e = torch.tanh(e)  # (B, S, 8)
            return self.W(e)  # (B, S, 12)

    batch = cx.random_batch(2, 5, 12)
    one, three = (cx.activation_bytes(TanhStack(n), batch) for n in (1, 3))
    assert three - one == 2 * (2 * 5 * 8) * 4  # two more float32 (B, S, D) tensors


def test_tensor_bytes_walks_nested_states_and_counts_shared_storage_once():
    a = torch.zeros(4, 8)  # 128 bytes
    state = {"h": (a, a[1:]), "cache": [torch.zeros(2, dtype=torch.float64)]}  # 16 bytes
    assert cx.tensor_bytes(state) == 128 + 16


@pytest.mark.parametrize("family", cx.FAMILIES)
def test_measure_runs_every_family_on_tiny_sizes(family):
    p = cx.measure(family, t=3, k=8, d=1, batch=2, vocab=12, repeats=1)
    assert p.params > 0 and p.train_s > 0 and p.decode_s > 0
    assert p.activation_bytes > 0 and p.state_bytes > 0 and p.peak_bytes is None


def test_decoder_state_grows_with_t_only_where_the_notes_say():
    # notes: test memory k·d (RNN) vs t·k·d (RNN + attention, Transformer)
    sizes = {}
    for family in cx.FAMILIES:
        torch.manual_seed(0)
        model = cx.build_model(family, 8, 1, 12)
        sizes[family] = [
            cx.decode_state_bytes(model, cx.random_batch(2, t, 12), t) for t in (3, 6, 12)
        ]
    assert len(set(sizes["rnn"])) == 1
    for family in ("rnn_attention", "transformer"):
        s = sizes[family]
        assert s[0] < s[1] < s[2]


def test_transformer_activation_memory_grows_with_t_and_rnn_with_d():
    def act(family, t, d):
        torch.manual_seed(0)
        return cx.activation_bytes(cx.build_model(family, 8, d, 12), cx.random_batch(2, t, 12))

    assert act("transformer", 4, 1) < act("transformer", 16, 1)
    assert act("rnn", 4, 1) < act("rnn", 4, 2)


def test_build_model_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown family"):
        cx.build_model("cnn", 8, 1, 12)
    with pytest.raises(ValueError, match="multiple of 4"):
        cx.build_model("transformer", 10, 1, 12)


def test_quick_sweep_record_tables_figure_and_section(tmp_path):
    out = tmp_path / "results.md"
    out.write_text("# Results\n\n## Other\n\nkept\n", encoding="utf-8")
    record = benchmark_main(
        ["--quick", "--families", "rnn,transformer", "--out", str(out), "--figures", str(tmp_path)]
    )
    assert set(record["fits"]) == {"rnn", "transformer"}
    assert set(record["fits"]["rnn"]["state_bytes"]) == {"t", "k", "d"}
    # exact counts: the RNN's decoder state does not depend on t
    assert record["fits"]["rnn"]["state_bytes"]["t"]["exponent"] == pytest.approx(0.0, abs=1e-9)
    text = out.read_text(encoding="utf-8")
    assert "## Other\n\nkept" in text and "## Complexity" in text
    assert "| RNN (sutskever) | t·k²·d (1 / 2 / 1) |" in exponent_table(record)
    assert points_table(record).count("| Transformer |") == 4  # base point shown once
    png = plot_against_t(record, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "complexity.json").is_file()
