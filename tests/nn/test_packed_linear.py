"""seqlab.nn.packed_linear: a packed bf16 weight gives exactly autocast's F.linear; the
searches pack only on a CPU under bf16 autocast without grad; decodes are unchanged."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqlab.decode import beam_search, greedy, sample
from seqlab.nn import packed_linear as pl
from tests.nn.test_shared_kv import tiny_transformer

needs_bf16 = pytest.mark.skipif(
    not pl._bf16_packing_available(), reason="oneDNN has no bf16 on this CPU"
)


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def test_outside_the_context_linear_is_f_linear():
    x, w, b = torch.randn(3, 5), torch.randn(4, 5), torch.randn(4)
    assert torch.equal(pl.linear(x, w, b), F.linear(x, w, b))


@needs_bf16
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(32, 24), (4, 7, 24)])
def test_packed_linear_equals_autocast_linear_bit_for_bit(bias, shape):
    torch.manual_seed(0)
    layer = nn.Linear(24, 40, bias=bias)
    x = torch.randn(*shape)
    with torch.no_grad(), bf16_autocast():
        ref = layer(x)
        with pl.packed_linears(layer) as on:
            assert on
            got = layer(x)
            assert (id(layer.weight), "bf16") in pl._CACHE  # the weight was packed
    assert got.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(got, ref)
    assert "forward" not in vars(layer)  # the class's forward is back


def test_does_nothing_with_grad_without_autocast_or_in_fp32():
    layer = nn.Linear(4, 3)
    with bf16_autocast(), pl.packed_linears(layer) as on:  # grad enabled
        assert not on and "forward" not in vars(layer)
    with torch.no_grad(), pl.packed_linears(layer) as on:  # no autocast
        assert not on
    with (
        torch.no_grad(),
        torch.autocast("cpu", dtype=torch.float16),
        pl.packed_linears(layer) as on,
    ):
        assert not on
    with torch.no_grad(), bf16_autocast(), pl.packed_linears(object()) as on:  # no module
        assert not on


@needs_bf16
def test_restored_after_an_error_and_not_reentrant():
    layer = nn.Linear(4, 3)
    with torch.no_grad(), bf16_autocast():
        with pytest.raises(RuntimeError, match="boom"), pl.packed_linears(layer):
            raise RuntimeError("boom")
        assert "forward" not in vars(layer) and not pl._ACTIVE.get()
        with pl.packed_linears(layer) as outer:
            with pl.packed_linears(layer) as inner:
                assert outer and not inner
            assert "forward" in vars(layer)  # the inner exit left the outer's packing
        assert "forward" not in vars(layer)


@needs_bf16
@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_decodes_are_the_same_with_and_without_packing(search, monkeypatch):
    model = tiny_transformer()
    torch.manual_seed(1)
    src = torch.randint(4, 40, (5, 7))
    src_mask = torch.ones(5, 7, dtype=torch.bool)
    src_mask[2, 4:] = False
    calls = []
    real = pl._packed_product

    def run():
        with torch.no_grad(), bf16_autocast():
            state = model.init_state(model.encode(src, src_mask), src_mask)
            if search == "greedy":
                return greedy(model, state, 5, 1, 2, max_len=9, pad_id=0)
            if search == "sample":
                g = torch.Generator().manual_seed(5)
                return sample(model, state, 5, 1, 2, max_len=9, top_k=5, generator=g, pad_id=0)
            return beam_search(model, state, 5, 1, 2, max_len=9, beam_size=3, pad_id=0)

    monkeypatch.setattr(pl, "_packed_product", lambda *a: calls.append(1) or real(*a))
    packed = run()
    assert calls  # the search packed the decoder's linear layers and the output layer
    monkeypatch.setattr(pl, "packing_applies", lambda module: False)
    n = len(calls)
    plain = run()
    assert len(calls) == n
    assert torch.equal(packed.tokens, plain.tokens)
    assert torch.equal(packed.scores, plain.scores)


@needs_bf16
def test_packed_weights_are_kept_until_the_weight_changes_or_dies(monkeypatch):
    torch.manual_seed(0)
    layer = nn.Linear(8, 6)
    x = torch.randn(3, 8)
    packs = []
    real = torch.ops.mkldnn._reorder_linear_weight

    def run(lay=layer):
        with torch.no_grad(), bf16_autocast(), pl.packed_linears(lay):
            return lay(x)

    with monkeypatch.context() as m:
        m.setattr(
            pl.torch.ops.mkldnn, "_reorder_linear_weight", lambda w: packs.append(1) or real(w)
        )
        first, again = run(), run()
        assert len(packs) == 1 and torch.equal(first, again)  # packed once for two searches
        with torch.no_grad():
            layer.weight.add_(1.0)  # an in-place update, as an optimizer step makes
        with torch.no_grad(), bf16_autocast():
            expect = F.linear(x, layer.weight, layer.bias)
        assert torch.equal(run(), expect) and len(packs) == 2  # packed again
        with torch.no_grad():
            layer.bias.mul_(2.0)  # the bias alone changes
        assert len(packs) == 2 and not torch.equal(run(), expect) and len(packs) == 3
    key = (id(layer.weight), "bf16")
    del layer, run
    gc.collect()
    assert key not in pl._CACHE  # forgotten with its weight


@needs_bf16
def test_searches_in_two_threads_share_a_model():
    import threading

    model = tiny_transformer()
    torch.manual_seed(2)
    src = torch.randint(4, 40, (3, 6))
    src_mask = torch.ones(3, 6, dtype=torch.bool)

    def decode():
        with torch.no_grad(), bf16_autocast():
            state = model.init_state(model.encode(src, src_mask), src_mask)
            return beam_search(model, state, 3, 1, 2, max_len=8, beam_size=3, pad_id=0).tokens

    alone = decode()
    barrier, out, errors = threading.Barrier(2), [], []

    def worker():
        try:
            barrier.wait()
            for _ in range(5):  # the two threads' searches overlap, start and end apart
                out.append(decode())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(out) == 10 and all(torch.equal(o, alone) for o in out)
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    assert not any("forward" in vars(m) for m in linears) and not pl._USERS
