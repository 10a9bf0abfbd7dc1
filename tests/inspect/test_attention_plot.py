"""Attention heatmaps: shapes accepted, labels checked, a real PNG written atomically."""

import pytest
import torch

from seqlab.inspect.attention import as_grid, head_average, plot_attention, sharpness


def _weights(*shape):
    return torch.softmax(torch.randn(*shape), dim=-1)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (2, 2, 3, 4)])
def test_png_written_for_every_layout(tmp_path, shape):
    path = plot_attention(_weights(*shape), list("abcd"), list("xyz"), tmp_path / "a.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    assert not (tmp_path / "a.png.tmp").exists()
    assert as_grid(_weights(*shape)).dim() == 4


def test_label_mismatch_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="3×4 .* 2 target and 4 source"):
        plot_attention(_weights(3, 4), list("abcd"), list("xy"), tmp_path / "a.png")


def test_head_average_rows_sum_to_one_and_sharpness_bounds():
    w = _weights(2, 4, 5, 6)
    torch.testing.assert_close(head_average(w).sum(-1), torch.ones(5), atol=1e-6, rtol=0)
    s = sharpness(w)
    assert s.shape == (2, 4) and (s >= 1 / 6 - 1e-6).all() and (s <= 1).all()
    one_hot = torch.eye(6)[:5]  # (T, S) one-hot rows
    assert sharpness(one_hot).item() == pytest.approx(1.0)
    assert sharpness(torch.full((5, 6), 1 / 6)).item() == pytest.approx(1 / 6)
