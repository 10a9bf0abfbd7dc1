"""benchmarks/peers.py (issue 11) on tiny shapes: every installed implementation runs, the
FLOP counts are the hand counts, the nn.Transformer reference is seqlab's model (same
function with the same weights, same parameter count), seqlab's batched cached decode is
its unbatched uncached decode, and a missing peer gives a "not installed" row."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import peers, peers_decode, peers_onmt, peers_report, peers_rnn, peers_train
from benchmarks import peers_models as pm
from seqlab.nn import recurrent_fused

TINY0 = dataclasses.replace(pm.TINY, dropout=0.0)


def matmul_flops(shapes: list[tuple[int, int, int]]) -> int:
    """Σ 2·m·k·n over (m, k, n) products."""
    return sum(2 * m * k * n for m, k, n in shapes)


def test_train_flops_equal_a_hand_count_of_every_matmul():
    size = pm.Size("hand", d_model=4, n_heads=2, d_ff=8, layers=1, vocab=10)
    B, S, T, d, f, V = 2, 3, 5, 4, 8, 10
    forward = [
        *[(B * S, d, d)] * 4,  # encoder self-attention Q, K, V, O
        (B * S, d, f),  # encoder FFN W_1
        (B * S, f, d),  # encoder FFN W_2
        *[(B * T, d, d)] * 4,  # decoder self-attention Q, K, V, O
        (B * T, d, d),  # cross-attention Q
        *[(B * S, d, d)] * 2,  # cross-attention K, V on the memory
        (B * T, d, d),  # cross-attention O
        (B * T, d, f),  # decoder FFN W_1
        (B * T, f, d),  # decoder FFN W_2
        (B * T, d, V),  # tied output projection
        *[(S, d, S)] * B,  # encoder Q Kᵀ (all heads together: Σ_h d_k = d)
        *[(S, S, d)] * B,  # encoder A V
        *[(T, d, T)] * B,  # decoder self Q Kᵀ
        *[(T, T, d)] * B,  # decoder self A V
        *[(T, d, S)] * B,  # cross Q Kᵀ
        *[(T, S, d)] * B,  # cross A V
    ]
    assert pm.train_flops(size, B, S, T) == 3 * matmul_flops(forward)


def test_small_config_flops_are_peers_md_count():
    # PEERS.md: "Small = … (7.6 M params, 61.7 GFLOP/step)" at padded length 21.
    assert pm.train_flops(pm.SMALL, 64, 21, 21) / 1e9 == pytest.approx(61.69, abs=0.01)
    assert pm.parameter_count(pm.SMALL) == 7_577_600


def test_rnn_flops_hand_count():
    per_token = 2 * 4 * 512 * (256 + 512) + 2 * 4 * 512 * (512 + 512)  # LSTM layers 0 and 1
    assert peers_rnn.rnn_flops("lstm", peers_rnn.RNNShape()) == 3 * per_token * 35 * 64
    gru = peers_rnn.RNNShape(layers=1, input_size=3, hidden=5, seq=7, batch=2)
    assert peers_rnn.rnn_flops("gru", gru) == 3 * (2 * 3 * 5 * (3 + 5)) * 7 * 2


@pytest.mark.parametrize("size", [pm.TINY, pm.SMALL])
def test_parameter_count_formula_for_every_implementation(size):
    seqlab_model, _, _ = pm.build_seqlab(size)
    assert pm.trainable(seqlab_model) == pm.parameter_count(size)
    assert pm.trainable(pm.ReferenceTransformer(size)) == pm.parameter_count(size)
    assert pm.trainable(pm.build_marian(size)) == pm.parameter_count(size)
    # OpenNMT-py: no attention biases (4d per encoder layer, 8d per decoder layer), a final
    # LayerNorm in encoder and decoder (2d each) and an output bias (V)
    pytest.importorskip("onmt")  # not installable on Python >= 3.13 (pyproject.toml)
    d, L = size.d_model, size.layers
    onmt_count = pm.parameter_count(size) - 12 * d * L + 4 * d + size.vocab
    assert pm.trainable(peers_onmt.build_onmt(size)) == onmt_count
    if size == pm.SMALL:
        assert onmt_count == 7_577_408


def test_onmt_reads_the_same_batches_as_the_others():
    """OpenNMT-py sees y_in, causally: logits (B, T, V); changing the last target input
    changes only the last position, and the pad column appended for its layout is unread."""
    pytest.importorskip("onmt")
    torch.manual_seed(0)
    model = peers_onmt.build_onmt(TINY0).eval()
    batch = pm.make_batches(1, TINY0, batch_size=3)[0]
    logits = peers_onmt.onmt_logits(model, batch)
    B, T = batch.y_in.shape
    assert logits.shape == (B, T, TINY0.vocab)
    y_in = batch.y_in.clone()
    y_in[:, -1] = (y_in[:, -1] + 1) % TINY0.vocab
    other = peers_onmt.onmt_logits(model, dataclasses.replace(batch, y_in=y_in))
    torch.testing.assert_close(other[:, :-1], logits[:, :-1])
    assert not torch.allclose(other[:, -1], logits[:, -1])


def test_reference_computes_seqlab_function_with_copied_weights():
    torch.manual_seed(0)
    ours, _, task = pm.build_seqlab(TINY0)
    ref = pm.ReferenceTransformer(TINY0)
    pm.copy_seqlab_into_reference(ours, ref)
    ours.double().eval()
    ref.double().eval()
    b = pm.make_batches(1, TINY0, batch_size=5)[0]
    assert b.src_mask.sum() < b.src_mask.numel()  # the rows have padding
    a = ours(b.src, b.src_mask, b.y_in, b.tgt_mask)  # (B, T, V)
    r = ref(b.src, b.src_mask, b.y_in, b.tgt_mask)
    keep = b.tgt_mask[..., None]
    torch.testing.assert_close(a * keep, r * keep, atol=1e-10, rtol=0)


def test_seqlab_trainer_path_and_reference_loop_give_the_same_first_loss():
    torch.manual_seed(0)
    ours = peers_train.build_trainee("seqlab", TINY0)
    ref = peers_train.build_trainee("nn", TINY0)
    pm.copy_seqlab_into_reference(ours.model, ref.model)
    b = pm.make_batches(1, TINY0, batch_size=6)[0]
    loss_ours, loss_ref = ours.step(b, "fp32"), ref.step(b, "fp32")
    assert loss_ours == pytest.approx(loss_ref, rel=1e-5)
    # the seqlab trainee stepped its own optimizer: the Trainer's fused Adam
    assert loss_ours != pytest.approx(ours.step(b, "fp32"), rel=1e-7)


@pytest.mark.parametrize("beam", [1, 3])
def test_batched_cached_decode_equals_unbatched_uncached(beam):
    torch.manual_seed(0)
    model, _, _ = pm.build_seqlab(TINY0)
    model.double()
    sources = [s for s, _ in pm.make_pairs(5, TINY0, lo=2, hi=9, seed=3)]
    assert len({len(s) for s in sources}) > 1  # batches are padded
    assert peers_decode.check_cached_batched(model, sources, beam, 6, batch_size=3) == (5, 5)


def test_decoders_emit_exactly_n_new_tokens():
    torch.manual_seed(0)
    sources = [s for s, _ in pm.make_pairs(3, pm.TINY)]
    batches = peers_decode.source_batches(sources, 2)
    for impl, model in (("seqlab", pm.build_seqlab(pm.TINY)[0]), ("hf", pm.build_marian(pm.TINY))):
        for beam in (1, 4):
            for src, mask in batches:
                out = peers_decode.DECODERS[impl](model.eval(), src, mask, beam, 7)
                assert out.shape == (src.size(0), 7)
                assert not (out == 3).any()  # EOS (id 3) is blocked until the end


def run_tiny(tmp_path: Path, *extra: str) -> tuple[dict, Path, Path]:
    out, js = tmp_path / "results.md", tmp_path / "peers.json"
    if not out.exists():
        out.write_text("# Results\n\n## Other\n\nkept\n")
    record = peers.main(["--tiny", "--out", str(out), "--json", str(js), *extra])
    return record, out, js


def test_tiny_run_measures_every_installed_implementation(tmp_path):
    record, out, js = run_tiny(tmp_path)
    rows = record["rows"]
    # nn.LSTM itself fails under bf16 autocast where oneDNN has no bf16 (AVX2-only CPUs):
    # that one row says so; seqlab's LSTM runs there (seqlab.nn.recurrent_fused)
    torch_lstm_fails = recurrent_fused._onednn_lacks(torch.bfloat16)
    # OpenNMT-py is not installed where its pinned 3.0.4 has no wheels (Python >= 3.13)
    missing = {"onmt"} if importlib.util.find_spec("onmt") is None else set()
    assert {r["impl"] for r in rows if r["status"].startswith("not installed")} == missing
    failed = {
        (r["section"], r["what"], r["impl"], r["precision"])
        for r in rows
        if r["status"] != "ok" and r["impl"] not in missing
    }
    assert failed == ({("rnn", "lstm", "nn", "bf16")} if torch_lstm_fails else set())
    others = [r for r in rows if r["status"] != "ok" and r["impl"] not in missing]
    assert all(r["status"].startswith("failed: ") for r in others)
    got = {(r["section"], r["impl"], r["precision"]) for r in rows}
    for prec in ("fp32", "bf16"):
        assert {("train", i, prec) for i in ("seqlab", "nn", "hf", "onmt")} <= got
        assert {("decode", i, prec) for i in ("seqlab", "hf")} <= got
        assert {("rnn", i, prec) for i in ("seqlab", "nn")} <= got
    rows = [r for r in rows if r["status"] == "ok"]
    assert all(r["rate"] > 0 and r["ms"] > 0 for r in rows)
    assert all(r["mfu"] > 0 for r in rows if "mfu" in r)
    assert [(c["search"], c["same"], c["total"]) for c in record["checks"]] == [
        ("beam 5", 6, 6),
        ("greedy", 6, 6),
    ]
    # every seqlab / peer pair got a ratio; tiny shapes are not judged against the targets
    pairs = {(r["section"], r["what"], r["precision"], r["peer"]) for r in record["ratios"]}
    assert ("train", "tiny", "bf16", "fastest peer") in pairs
    assert ("decode", "beam 5", "bf16", "hf") in pairs and ("rnn", "gru", "fp32", "nn") in pairs
    assert all(r["target"] is None for r in record["ratios"])
    text = out.read_text()
    assert "## Other\n\nkept" in text and text.count(peers_report.HEADING) == 1
    assert "Command: `python benchmarks/peers.py --tiny" in text and "Machine: " in text
    assert f"Numbers: `{js}`." in text  # the record actually written
    assert json.loads(js.read_text())["peak"]["fp32"] > 0


def test_missing_peer_gives_not_installed_rows(tmp_path, monkeypatch):
    for name in list(sys.modules):
        if name == "transformers" or name.startswith("transformers."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    record, out, _ = run_tiny(tmp_path, "--sections", "train,decode", "--precisions", "bf16")
    hf = [r for r in record["rows"] if r["impl"] == "hf"]
    assert {r["section"] for r in hf} == {"train", "decode"}
    assert all(r["status"].startswith("not installed") for r in hf)
    assert all(r["status"] == "ok" for r in record["rows"] if r["impl"] != "hf")
    assert "| tiny | hf | bf16 | not installed" in out.read_text()
    assert not any(r["peer"] == "hf" for r in record["ratios"])


def test_ratios_and_targets():
    def row(section, what, impl, rate):
        return {"section": section, "what": what, "impl": impl, "precision": "bf16"} | {
            "status": "ok",
            "rate": rate,
        }

    rows = [
        row("train", "small", "seqlab", 300.0),
        row("train", "small", "nn", 200.0),
        row("train", "small", "hf", 100.0),
        row("decode", "beam 5", "seqlab", 90.0),
        row("decode", "beam 5", "hf", 50.0),
    ]
    got = {(r["section"], r["peer"]): (r["ratio"], r["met"]) for r in peers_report.ratios(rows)}
    assert got == {
        ("train", "nn"): (1.5, None),  # no target against nn alone
        ("train", "hf"): (3.0, True),  # ≥ 2.0× HF Marian
        ("train", "fastest peer"): (1.5, True),  # ≥ 1.5× the fastest peer (nn here)
        ("decode", "hf"): (1.8, False),  # beam 5 needs ≥ 2.0×
    }
    assert all(r["met"] is None for r in peers_report.ratios(rows, with_targets=False))


def test_quick_plan_is_small_bf16_training_and_beam_five():
    _, plan = peers.parse_args(["--quick"])
    assert [s.name for s in plan.sizes] == ["small"] and plan.precisions == ("bf16",)
    assert plan.sections == ("train", "decode") and plan.beams == (5,)
    assert plan.decode_precisions == ("bf16",)
    with pytest.raises(SystemExit):
        peers.parse_args(["--impls", "seqlab,fairseq"])


def test_device_option_is_checked_and_a_gpu_run_gets_its_own_section(monkeypatch):
    with pytest.raises(SystemExit):
        peers.parse_args(["--device", "tpu"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):  # no GPU here: said at once, nothing measured
        peers.parse_args(["--device", "cuda"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args, plan = peers.parse_args(["--device", "cuda:0", "--quick"])
    assert plan.device == "cuda:0" and plan.peak_n == 8192 and args.json.endswith("peers-cuda.json")
    assert plan.steps(peers.pm.SMALL) == 16 and plan.sizes == (peers.pm.SMALL,)
    args, plan = peers.parse_args([])
    assert plan.device == "cpu" and args.json == str(peers.ROOT / "docs/figures/peers.json")
    # a scratch --out keeps its record beside it: the docs' record is not overwritten
    args, _ = peers.parse_args(["--quick", "--out", "/tmp/scratch/quick.md"])
    assert args.json == "/tmp/scratch/peers.json"
    assert peers_report.heading("cpu") == peers_report.HEADING
    assert peers_report.heading("cuda:1") == peers_report.HEADING_GPU != peers_report.HEADING


def test_gpu_memory_column_only_where_measured():
    row = {"section": "train", "what": "small", "impl": "seqlab", "precision": "bf16"} | {
        "status": "ok", "rate": 1.0, "ms": 1.0, "gflop_s": 1.0, "mfu": 0.5, "cv": 0.0,
        "rss_mib": 100.0, "rss_delta_mib": 1.0,
    }  # fmt: skip
    assert "GPU" not in peers_report.rows_table([row], "train")
    table = peers_report.rows_table([row | {"gpu_mib": 512.0, "gpu_delta_mib": 64.0}], "train")
    assert "peak GPU MiB (Δ)" in table and "512 (+64)" in table


def test_profile_report_counts_operators_per_step(tmp_path):
    from benchmarks import profile_peers

    out = tmp_path / "profile.txt"
    report = profile_peers.main(
        ["--size", "tiny", "--impls", "seqlab,nn", "--precision", "fp32", "--steps", "2"]
        + ["--warmup", "1", "--rows", "5", "--out", str(out)]
    )
    heads = [line for line in report.splitlines() if line.startswith("== ")]
    assert [h.split()[1] for h in heads] == ["seqlab", "nn"]
    assert all("ms/step" in h and "operator calls/step" in h for h in heads)
    assert "aten::" in report and out.read_text() == report + "\n"
    with pytest.raises(SystemExit):
        profile_peers.main(["--impls", "fairseq"])


def test_machine_lines_name_a_gpu_only_where_there_is_one(monkeypatch):
    from seqlab.train import fingerprint

    monkeypatch.setattr(fingerprint, "_cuda", lambda: None)
    assert fingerprint.gpu_description() == ""
    info = {"cuda": "13.0", "cudnn": 1, "devices": [{"name": "NVIDIA H200", "capability": "9.0"}]}
    monkeypatch.setattr(fingerprint, "_cuda", lambda: info)
    line = ", 1 × NVIDIA H200 (sm 9.0), CUDA 13.0, cuDNN 1"
    assert fingerprint.gpu_description() == line


def test_training_reps_and_steps_from_the_command_line(monkeypatch):
    _, plan = peers.parse_args(["--train-reps", "2", "--train-steps", "3"])
    assert (plan.reps(pm.SMALL), plan.steps(pm.SMALL), plan.steps(pm.BASE)) == (2, 3, 3)
    _, plan = peers.parse_args([])
    assert (plan.reps(pm.SMALL), plan.steps(pm.SMALL), plan.steps(pm.BASE)) == (5, 4, 2)
    with pytest.raises(SystemExit):
        peers.parse_args(["--train-steps", "0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    _, plan = peers.parse_args(["--device", "cuda", "--train-steps", "5"])
    assert plan.steps(pm.SMALL) == 5 and plan.peak_n == 8192  # the option wins on a GPU too


def test_batch_from_the_command_line_and_targets_only_at_the_issues_shape():
    _, plan = peers.parse_args([])
    assert plan.batch == peers.ISSUE_BATCH == 64 and peers.issue_shapes(plan)
    _, plan = peers.parse_args(["--batch", "128"])
    assert plan.batch == 128 and not peers.issue_shapes(plan)  # lever 8: no targets there
    _, plan = peers.parse_args(["--tiny"])
    assert not peers.issue_shapes(plan)
    with pytest.raises(SystemExit):
        peers.parse_args(["--batch", "0"])
