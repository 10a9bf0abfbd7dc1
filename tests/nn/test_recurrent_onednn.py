"""The fused LSTM under CPU bf16 autocast where oneDNN has no bf16 RNN (AVX2-only CPUs).

torch picks its oneDNN LSTM from the input's dtype and then fails there ("could not
create a primitive descriptor for the LSTM forward propagation primitive"), nn.LSTM too.
seqlab switches oneDNN off for that call on such CPUs, so torch takes its native LSTM
(seqlab.nn.recurrent_fused, ``needs_native_lstm``). These tests force the
"oneDNN lacks bf16" answer, so they check the route on every machine, and check that
nothing changes where oneDNN has bf16.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from seqlab.nn import recurrent_fused
from seqlab.nn.recurrent import Recurrent

B, T, D, H = 3, 7, 4, 6


@pytest.fixture
def onednn_lacks_bf16(monkeypatch):
    monkeypatch.setattr(recurrent_fused, "_onednn_lacks", lambda dtype: True)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_under_autocast_runs_torchs_native_kernel(onednn_lacks_bf16, bidirectional):
    """Unpacked input (the call that fails in oneDNN): seqlab's LSTM runs and equals
    torch's own native LSTM under the same autocast (oneDNN switched off for the
    reference), values and input gradient; and it is a bf16 computation (differs from
    fp32 by more than fp32 rounding)."""
    torch.manual_seed(0)
    m = Recurrent("lstm", D, H, num_layers=2, bidirectional=bidirectional)
    ref = m.to_torch()
    x = torch.randn(B, T, D)
    outs = []
    for module, onednn in ((m, True), (ref, False)):
        xi = x.clone().requires_grad_()
        with contextlib.nullcontext() if onednn else recurrent_fused._onednn_off():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y, (h, c) = module(xi)
            (y.float().square().sum() + h.float().sum()).backward()
        outs.append((y.float(), h.float(), c.float(), xi.grad))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    with torch.no_grad():
        y32, _ = m(x)
    assert (outs[0][0] - y32).abs().max() > 1e-4  # the matmuls really ran in bf16


def test_packed_and_unpacked_agree(onednn_lacks_bf16):
    """Variable lengths (packed) and a full-length batch give the same rows under the route,
    to bf16 rounding: torch's packed and unpacked native LSTMs round differently under
    autocast (both differ from fp32 by ~2e-3 here; outputs are bounded by 1)."""
    torch.manual_seed(1)
    m = Recurrent("lstm", D, H, num_layers=1)
    x = torch.randn(B, T, D)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        full, _ = m(x)
        packed, _ = m(x, torch.full((B,), T))
    torch.testing.assert_close(full.float(), packed.float(), atol=1e-2, rtol=0)


def test_route_is_taken_only_where_needed(monkeypatch):
    """Only an LSTM, on CPU, under autocast, where oneDNN lacks the dtype; and the oneDNN
    switch is back on after the call (also after an error inside it)."""
    x = torch.randn(B, T, D)
    monkeypatch.setattr(recurrent_fused, "_onednn_lacks", lambda dtype: False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not recurrent_fused.needs_native_lstm("lstm", x)
    monkeypatch.setattr(recurrent_fused, "_onednn_lacks", lambda dtype: True)
    assert not recurrent_fused.needs_native_lstm("lstm", x)  # no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not recurrent_fused.needs_native_lstm("gru", x)
        assert recurrent_fused.needs_native_lstm("lstm", x)
    before = torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled()
    with pytest.raises(RuntimeError, match="boom"), recurrent_fused._onednn_off():
        assert not torch._C._get_mkldnn_enabled()
        raise RuntimeError("boom")
    assert torch._C._get_mkldnn_enabled() == before


def test_onednn_probe_answers_per_dtype():
    """fp32 is never "lacking"; the bf16 answer is torch's own probe (when it has one)."""
    assert recurrent_fused._onednn_lacks(torch.float32) is False
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if probe is not None and torch.backends.mkldnn.is_available():
        assert recurrent_fused._onednn_lacks(torch.bfloat16) is (not probe())
