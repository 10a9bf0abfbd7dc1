"""Claim experiments: the sinusoidal encoding's linear-offset record and the dot vs
additive attention benchmark (values and shapes only; no timed assertions)."""

import pytest
import torch

from seqlab.inspect import attention_speed as sp
from seqlab.inspect import positional_offset as po
from seqlab.nn.positional import offset_rotation, sinusoidal_table


def test_fitted_offset_map_predicts_like_the_rotation():
    PE = sinusoidal_table(200, 16, dtype=torch.float64)  # (P, D)
    M = po.fitted_offset_map(PE, 7)  # (D, D)
    torch.testing.assert_close(PE[:-7] @ M.T, PE[7:], atol=1e-9, rtol=0)
    # with every frequency moving fast enough over the table the fit is the rotation
    PE_fast = sinusoidal_table(400, 4, dtype=torch.float64)
    torch.testing.assert_close(po.fitted_offset_map(PE_fast, 3), offset_rotation(3, 4))


def test_offset_record_shows_the_property_to_rounding(tmp_path):
    rec = po.offset_record(d_model=16, positions=128, offsets=(1, 9))
    for row in rec["offsets"]:
        assert row["max_error_float64"] < 1e-12 and row["max_error_float32_table"] < 1e-6
        assert row["max_error_fitted_map"] < 1e-8 and row["orthogonality_error"] < 1e-12
        assert row["dot_spread_over_pos"] < 1e-12  # PE(pos)·PE(pos+k) depends on k only
    assert rec["offsets"][0]["dot_expected"] == pytest.approx(
        sum(torch.cos(torch.tensor([10000.0 ** (-2 * i / 16) for i in range(8)])).tolist())
    )
    assert "| 9 |" in po.offset_table(rec)
    png = po.plot_offsets(rec, tmp_path / "pe.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="even"):
        po.offset_record(d_model=15)
    with pytest.raises(ValueError, match="positions"):
        po.offset_record(d_model=16, positions=20, offsets=(10,))


def test_attention_speed_record_has_every_score_and_positive_ratios(tmp_path):
    rec = sp.speed_record(lengths=(4, 8), D=8, B=2, repeats=1)
    assert [r["S"] for r in rec["rows"]] == [4, 8]
    for r in rec["rows"]:
        for key in ("dot_forward_s", "additive_forward_s", "dot_forward_backward_s"):
            assert r[key] > 0
        assert r["ratio_forward"] == pytest.approx(r["additive_forward_s"] / r["dot_forward_s"])
    assert sp.speed_table(rec).count("\n") == 3
    assert sp.plot_speed(rec, tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_benchmarked_layers_are_equal_size_and_differ_only_in_score():
    times = sp.attention_times("additive", 1, 2, 3, 8, repeats=1)
    assert set(times) == {"forward_s", "forward_backward_s"}
    from seqlab.nn.attention import Attention

    dot, add = Attention(8, 8, "dot"), Attention(8, 8, "additive", attn_dim=8)
    assert sum(p.numel() for p in dot.parameters()) == 0  # e = qᵀk: nothing to learn
    assert sum(p.numel() for p in add.parameters()) == 8 * 8 * 2 + 8  # W_a, U_a, v_a


def test_claims_sections_render_from_saved_records(tmp_path):
    from benchmarks.inspect_claims import main
    from seqlab.data.agreement import random_task
    from seqlab.inspect import gradient_flow as gf
    from seqlab.inspect.figures import write_json

    gf.run(tmp_path, random_task(10), distance=3, steps=1, hidden=4, depths=(8,))
    write_json(tmp_path / "positional-offset.json", po.offset_record(8, 64, (1, 3)))
    write_json(tmp_path / "attention-speed.json", sp.speed_record((4,), D=8, B=1, repeats=1))
    out = tmp_path / "results.md"
    main(["--from-json", "--out", str(out), "--figures", str(tmp_path)])
    text = out.read_text(encoding="utf-8")
    for heading in (
        "## Gradient flow",
        "## Sinusoidal encoding: linear offsets",
        "## Dot-product vs additive attention",
    ):
        assert text.count(heading) == 1
    assert "`seqlab inspect gradflow --out docs/figures`" in text and "| resnet-8 | 3 |" in text
