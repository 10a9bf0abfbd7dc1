"""precision=auto per device, forced precisions, autocast dtypes, GradScaler, and no CUDA
calls on a CPU device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.train import precision as P
from seqlab.train.precision import (
    PrecisionError,
    autocast_context,
    cpu_has_fast_bf16,
    make_grad_scaler,
    parse_cpu_flags,
    resolve_precision,
)

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile
processor\t: 1
flags\t\t: fpu
"""


def test_cpu_flags_are_parsed_and_decide_fast_bf16():
    flags = parse_cpu_flags(CPUINFO)
    assert {"avx512_bf16", "amx_bf16", "avx2"} <= flags and "fpu" in flags
    assert parse_cpu_flags("processor : 0\n") == frozenset()
    assert cpu_has_fast_bf16({"avx2", "amx_bf16"})
    assert cpu_has_fast_bf16({"avx512_bf16"})
    assert not cpu_has_fast_bf16({"avx2", "avx512f", "fma"})
    assert not cpu_has_fast_bf16(set())


def test_auto_on_cpu_follows_the_flags_and_forced_values_pass():
    assert resolve_precision("auto", "cpu", cpu_flags={"avx512_bf16"}) == "bf16"
    assert resolve_precision("auto", "cpu", cpu_flags={"amx_bf16"}) == "bf16"
    assert resolve_precision("auto", "cpu", cpu_flags={"avx2"}) == "fp32"
    expected = "bf16" if cpu_has_fast_bf16(P.read_cpu_flags()) else "fp32"
    assert resolve_precision("auto", torch.device("cpu")) == expected
    assert resolve_precision("bf16", "cpu", cpu_flags=set()) == "bf16"
    assert resolve_precision("fp32", "cpu", cpu_flags={"amx_bf16"}) == "fp32"
    assert resolve_precision("auto", "meta") == "fp32"


def test_fp16_on_cpu_and_unknown_values_are_clear_errors():
    with pytest.raises(PrecisionError, match="fp16 is not supported on CPU.*bf16"):
        resolve_precision("fp16", "cpu")
    with pytest.raises(PrecisionError, match="must be one of auto, fp32, bf16, fp16"):
        resolve_precision("half", "cpu")  # type: ignore[arg-type]
    with pytest.raises(PrecisionError, match="unknown device"):
        resolve_precision("auto", "gpu0")


def _forbid_cuda(monkeypatch):
    def touched(*args, **kwargs):
        raise AssertionError("torch.cuda was called on a CPU device")

    for name in [
        "is_available",
        "is_bf16_supported",
        "device_count",
        "current_device",
        "init",
        "get_device_name",
        "get_device_capability",
        "get_rng_state_all",
    ]:
        monkeypatch.setattr(torch.cuda, name, touched)


def test_cpu_device_never_calls_into_torch_cuda(monkeypatch):
    _forbid_cuda(monkeypatch)
    assert resolve_precision("auto", "cpu") in ("bf16", "fp32")
    for prec in ["auto", "fp32", "bf16"]:
        with autocast_context(prec, "cpu"):
            nn.Linear(4, 4)(torch.randn(2, 4))
        scaler = make_grad_scaler(prec, "cpu")
        assert not scaler.is_enabled()


def test_cuda_device_asks_is_available_first(monkeypatch):
    asked = []

    def bf16_supported(*args, **kwargs):
        asked.append("is_bf16_supported")
        return True

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", bf16_supported)
    with pytest.raises(PrecisionError, match="torch.cuda.is_available\\(\\) is False"):
        resolve_precision("auto", "cuda")
    assert asked == []  # never asked without a GPU (karpathy/nanoGPT#293)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_precision("auto", "cuda:0") == "bf16"
    assert make_grad_scaler("fp16", "cuda").is_enabled()  # fp16 needs loss scaling
    assert not make_grad_scaler("bf16", "cuda").is_enabled()
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_precision("auto", "cuda") == "fp32"
    assert resolve_precision("fp16", "cuda") == "fp16"
    with pytest.raises(PrecisionError, match="bf16 support"):
        resolve_precision("bf16", "cuda")


def test_bf16_autocast_on_cpu_gives_bf16_matmuls_and_fp32_loss():
    torch.manual_seed(0)
    lin = nn.Linear(16, 10)
    x = torch.randn(8, 16)  # (B, D)
    y = torch.randint(10, (8,))  # (B,)
    with autocast_context("bf16", "cpu"):
        logits = lin(x)  # (B, V)
        # the caller's contract: log-softmax and loss in fp32
        logp = logits.float().log_softmax(-1)  # (B, V)
        loss = F.nll_loss(logp, y)
    assert logits.dtype == torch.bfloat16
    assert logp.dtype == torch.float32 and loss.dtype == torch.float32
    reference = lin(x)
    # bf16 keeps 8 significant bits: relative error ≤ 2^-8 per rounding, K=16 terms.
    torch.testing.assert_close(logits.float(), reference, rtol=2e-2, atol=2e-2)
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32  # parameters and grads stay fp32
    with autocast_context("fp32", "cpu"):
        assert lin(x).dtype == torch.float32


def test_disabled_grad_scaler_is_a_pass_through():
    lin = nn.Linear(3, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = make_grad_scaler("fp32", "cpu")
    loss = lin(torch.ones(2, 3)).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    before = lin.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(lin.weight, before - 0.1 * lin.weight.grad, rtol=0, atol=0)
    assert scaler.state_dict() == {}
