"""Positional encodings: golden values, the relative-position property, offsets, growth."""

import pytest
import torch

from seqlab.nn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    offset_rotation,
    sinusoidal_table,
)


def test_sinusoidal_golden_values_by_hand():
    # d_model = 4: ω_0 = 1, ω_1 = 10000^{-2/4} = 1/100.  pos = 0 is [0, 1, 0, 1].
    PE = sinusoidal_table(4, 4, dtype=torch.float64)
    expected_pos0 = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    expected_pos1 = torch.tensor(
        [0.8414709848, 0.5403023059, 0.0099998333, 0.9999500004], dtype=torch.float64
    )  # sin 1, cos 1, sin 0.01, cos 0.01
    torch.testing.assert_close(PE[0], expected_pos0, atol=1e-10, rtol=0)
    torch.testing.assert_close(PE[1], expected_pos1, atol=1e-10, rtol=0)

    # d_model = 6, pos = 3: ω_1 = 10000^{-1/3} = 0.0464158883, ω_2 = 10000^{-2/3}.
    PE6 = sinusoidal_table(4, 6, dtype=torch.float64)
    expected_pos3 = torch.tensor(
        [0.1411200081, -0.9899924966, 0.1387981011, 0.9903206991, 0.0064632591, 0.9999791129],
        dtype=torch.float64,
    )
    torch.testing.assert_close(PE6[3], expected_pos3, atol=1e-10, rtol=0)


def test_sinusoidal_odd_width_keeps_sine_in_last_column():
    PE = sinusoidal_table(5, 5, dtype=torch.float64)  # (5, 5)
    assert PE.shape == (5, 5)
    omega_2 = 10000 ** (-4 / 5)
    torch.testing.assert_close(
        PE[:, 4], torch.sin(torch.arange(5.0, dtype=torch.float64) * omega_2), atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("d_model", [8, 16])
@pytest.mark.parametrize("k", [1, 5, 37, 100])
def test_pe_pos_plus_k_is_linear_map_of_pe_pos(k, d_model):
    # Vaswani 2017 §3.5: for any fixed k, PE(pos+k) is a linear function of PE(pos).
    n = 300
    PE = sinusoidal_table(n + k, d_model)  # float32 table, (n+k, D)
    M_k = offset_rotation(k, d_model)  # (D, D), independent of pos
    predicted = PE[:n].double() @ M_k.T  # (n, D): row pos is M_k · PE(pos)
    torch.testing.assert_close(predicted, PE[k:].double(), atol=1e-5, rtol=0)
    # M_k is a rotation: orthogonal, so the map loses nothing.
    torch.testing.assert_close(M_k @ M_k.T, torch.eye(d_model, dtype=torch.float64))


def test_offset_equals_slice_of_full_encoding():
    pe = SinusoidalPositionalEncoding(d_model=8, max_len=64)
    x = torch.randn(2, 20, 8)  # (B, T, D)
    full = pe(x)  # (B, T, D)
    for offset, T in [(0, 1), (3, 5), (19, 1)]:
        part = pe(x[:, offset : offset + T], offset=offset)
        torch.testing.assert_close(part, full[:, offset : offset + T], atol=0, rtol=0)
    torch.testing.assert_close(full - x, sinusoidal_table(20, 8).expand(2, 20, 8))


def test_buffer_grows_past_max_len_and_is_not_in_state_dict():
    pe = SinusoidalPositionalEncoding(d_model=6, max_len=4)
    x = torch.zeros(1, 10, 6)
    out = pe(x, offset=3)  # needs positions 3..12, beyond max_len = 4
    torch.testing.assert_close(out[0], sinusoidal_table(13, 6)[3:], atol=0, rtol=0)
    assert pe.PE.size(0) >= 13
    assert "PE" not in pe.state_dict()
    fresh = SinusoidalPositionalEncoding(d_model=6, max_len=4)
    fresh.load_state_dict(pe.state_dict())  # nothing to carry, strict load still works


def test_sinusoidal_follows_input_dtype_and_dropout_train_only():
    pe = SinusoidalPositionalEncoding(d_model=4, max_len=8, dropout=0.5)
    x = torch.zeros(3, 5, 4, dtype=torch.float64)
    pe.eval()
    y = pe(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y[0], sinusoidal_table(5, 4, torch.float64), atol=1e-7, rtol=0)
    pe.train()
    assert (pe(x) == 0).any()  # dropout applies to the sum (§5.4)


def test_learned_adds_its_table_and_trains_only_used_rows():
    pos = LearnedPositionalEmbedding(max_len=10, d_model=4)
    x = torch.randn(2, 3, 4)
    out = pos(x, offset=2)  # (B, T, D)
    torch.testing.assert_close(out, x + pos.P[2:5], atol=0, rtol=0)
    out.sum().backward()
    used = torch.zeros(10, dtype=torch.bool)
    used[2:5] = True
    assert (pos.P.grad[used] == 2.0).all()  # B = 2 copies of each used row
    assert (pos.P.grad[~used] == 0).all()


def test_learned_raises_past_max_len():
    pos = LearnedPositionalEmbedding(max_len=5, d_model=4)
    pos(torch.zeros(1, 5, 4))  # exactly max_len positions is fine
    with pytest.raises(IndexError, match="max_len=5"):
        pos(torch.zeros(1, 6, 4))
    with pytest.raises(IndexError, match="max_len=5"):
        pos(torch.zeros(1, 1, 4), offset=5)
