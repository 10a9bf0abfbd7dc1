"""benchmarks/vision.py's depth-experiment bookkeeping (no training): curves read from
metrics.jsonl, values at equal updates, the verdict on He 2016's claim, the figure."""

import json
import math

import pytest
import torch

from benchmarks import vision as bench

torch.set_num_threads(1)


def write_metrics(path, losses, errors, log_every=10, valid_every=50):
    rows = [
        {"event": "train", "step": log_every * (i + 1), "epoch": 0, "loss": v, "elapsed": 1.0}
        for i, v in enumerate(losses)
    ]
    rows += [
        {
            "event": "valid",
            "step": valid_every * (i + 1),
            "epoch": 1,
            "valid/error": e,
            "elapsed": 60.0 * (i + 1),
        }
        for i, e in enumerate(errors)
    ]
    last = valid_every * len(errors)
    rows.append({"event": "final", "step": last, "epoch": 1, "valid/error": errors[-1]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_read_curve_and_values_at_a_step(tmp_path):
    path = write_metrics(tmp_path / "m.jsonl", [2.0, 1.0, 0.5, 0.4, 0.3, 0.2], [0.5, 0.1, 0.05])
    c = bench.read_curve("plain20", path)
    assert c.steps == [10, 20, 30, 40, 50, 60] and c.eval_steps == [50, 100, 150]  # final deduped
    assert c.updates == 150 and c.epochs == 1 and c.minutes == pytest.approx(3.0)
    loss, err = bench.at_step(c, 50)  # losses at 30, 40, 50 (3 records); errors ≤ 50
    assert loss == pytest.approx((0.5 + 0.4 + 0.3) / 3, abs=1e-12)
    assert err == pytest.approx(0.5, abs=1e-12)
    assert bench.at_step(c, 150)[1] == pytest.approx((0.5 + 0.1 + 0.05) / 3, abs=1e-12)
    other = bench.read_curve("x", write_metrics(tmp_path / "o.jsonl", [1.0], [0.3, 0.2]))
    assert bench.common_step({"a": c, "b": other}) == 100


def test_noise_margin():
    # 2 · √(2 · 0.01 · 0.99 / 2000) = 0.00629…
    assert bench.noise_margin(0.01, 0.01, 2000) == pytest.approx(2 * math.sqrt(2 * 0.0099 / 2000))


def test_verdict_follows_the_numbers():
    he = {  # (training loss, test error): the paper's pattern
        "plain20": (0.05, 0.010),
        "plain56": (0.09, 0.014),
        "resnet20": (0.04, 0.009),
        "resnet56": (0.02, 0.008),
    }
    v = bench.depth_verdict(he, 2000, "at 100 updates each")
    assert v.plain_degrades and v.resnet_keeps_up and v.reproduced
    assert "**yes**" in v.lines[0] and "**yes**" in v.lines[1]
    flipped = dict(he, plain56=(0.03, 0.008))  # deeper plain net trains better: not He's
    v = bench.depth_verdict(flipped, 2000, "x")
    assert not v.plain_degrades and not v.reproduced and "**no**" in v.lines[0]
    worse = dict(he, resnet56=(0.02, 0.0095))  # ResNet-56 above ResNet-20
    v = bench.depth_verdict(worse, 2000, "x")
    assert not v.resnet_keeps_up and "within noise" in v.lines[1]


def test_depth_figure(tmp_path):
    curves = {
        n: bench.read_curve(n, write_metrics(tmp_path / f"{n}.jsonl", [2.0, 1.0, 0.5], [0.3, 0.2]))
        for n in bench.DEPTH_NETS
    }
    path = bench.plot_depth(curves, tmp_path / "fig" / "depth.png", mark=100)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_depth_only_run_keeps_the_convnet_section(tmp_path):
    """``--parts depth`` replaces the depth section and leaves the ConvNet numbers of an
    earlier run (each section carries its own command line)."""
    from benchmarks.results_doc import write_section

    args = bench.parse_args(["--out", str(tmp_path / "results.md"), "--minutes", "3"])
    digits = {"digits": {"accuracy": [98.0, 99.0], "updates": 10.0, "minutes": 1.0}}
    first = bench.render_sections(digits, "python benchmarks/vision.py --parts digits", args)
    assert list(first) == [bench.HEADING]
    out = tmp_path / "results.md"
    for heading, text in first.items():
        write_section(out, text, heading)
    curves = {
        n: bench.read_curve(n, write_metrics(tmp_path / f"{n}.jsonl", [2.0, 1.0, 0.5], [0.3, 0.2]))
        for n in bench.DEPTH_NETS
    }
    depth = {"depth": (curves, 2000, tmp_path / "depth.png")}
    second = bench.render_sections(depth, "python benchmarks/vision.py --parts depth", args)
    assert list(second) == [bench.DEPTH_HEADING]
    for heading, text in second.items():
        write_section(out, text, heading)
    text = out.read_text()
    assert "| digits 8×8, 2 folds of 5" in text and "--parts digits" in text
    assert bench.DEPTH_HEADING in text and "--parts depth" in text


def test_the_depth_text_is_read_from_the_four_presets():
    assert bench.depth_training_text() == (
        "SGD momentum 0.9, η = 0.1 (constant) after a 200-update linear warmup, "
        "weight decay 0.0001, batches of 128"
    )
