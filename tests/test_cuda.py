"""On a CUDA device, the invariants the CPU tests prove elsewhere (``pytest -m gpu``; skipped
where there is no GPU, i.e. in CI — benchmarks/gpu_session.sh runs them on a lent one):

* fused paths == readable paths on the GPU's kernels (cuDNN RNNs, SDPA), values and
  gradients, with TF32 off (cuDNN RNNs default to TF32 matmuls; the readable paths would
  then differ by ~1e-3 for reasons that are not bugs);
* batched, K/V-cached decoding == unbatched, uncached decoding (beam 5 and greedy);
* a run trained on the GPU saves a checkpoint that loads on the CPU and computes the same
  logits;
* benchmarks/peers.py runs every section on the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
import torch

from benchmarks import peers, peers_decode
from benchmarks import peers_models as pm
from seqlab import api
from seqlab.nn.masks import padding_mask
from seqlab.nn.multihead import MultiHeadAttention
from seqlab.nn.recurrent import Recurrent

pytestmark = pytest.mark.gpu
CUDA = "cuda"
TOL = dict(atol=1e-5, rtol=1e-5)


@contextlib.contextmanager
def no_tf32() -> Iterator[None]:
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _values_and_grads(module, fn, leaves):
    module.zero_grad()
    for t in leaves:
        t.grad = None
    out = fn()
    g = torch.Generator().manual_seed(1)
    loss = (out * torch.randn(out.shape, generator=g).to(out.device)).sum()
    loss.backward()
    grads = [t.grad.clone() for t in leaves] + [p.grad.clone() for p in module.parameters()]
    return out.detach(), grads


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_cudnn_path_equals_readable_path(kind):
    torch.manual_seed(0)
    m = Recurrent(kind, 3, 5, num_layers=2, bidirectional=True).to(CUDA)
    x = torch.randn(4, 6, 3, device=CUDA, requires_grad=True)  # (B, T, D)
    lengths = torch.tensor([6, 2, 5, 1])
    with no_tf32():
        fast = _values_and_grads(m, lambda: m(x, lengths=lengths, fused=True)[0], [x])
        slow = _values_and_grads(m, lambda: m(x, lengths=lengths, fused=False)[0], [x])
    torch.testing.assert_close(fast[0], slow[0], **TOL)
    for a, b in zip(fast[1], slow[1]):
        torch.testing.assert_close(a, b, **TOL)


@contextlib.contextmanager
def cudnn_deterministic() -> Iterator[None]:
    saved = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic = saved


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_recurrent_packed_weights_equal_assembled_bit_for_bit(kind, autocast):
    """recurrent_packed.py: the buffer in cuDNN's layout computes exactly what the assembled
    list computes (values, gradients of input and cells), fp32 and under bf16 autocast
    (where torch's cuDNN RNN runs fp16 either way), and cuDNN takes it as its flat buffer."""
    torch.manual_seed(0)
    m = Recurrent(kind, 16, 32, num_layers=2, bidirectional=True).to(CUDA)
    x = torch.randn(4, 7, 16, device=CUDA, requires_grad=True)  # (B, T, D)
    lengths = torch.tensor([7, 3, 5, 1])

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            return m(x, lengths=lengths)[0]  # (B, T, 2·H)

    runs = []
    for pack in (True, False):
        m.pack_weights = pack
        with no_tf32(), cudnn_deterministic():
            runs.append(_values_and_grads(m, forward, [x]))
    m.pack_weights = True
    assert runs[0][0].dtype == runs[1][0].dtype == (torch.float16 if autocast else torch.float32)
    assert torch.equal(runs[0][0], runs[1][0])
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        assert torch.equal(a, b)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        weights = m._kernel_inputs(x, m._initial_state(x, None))[0]
    reference = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind](
        16, 32, 2, batch_first=True, bidirectional=True, device=CUDA, dtype=weights[0].dtype
    )  # torch's own flattening of the same shapes
    base_m, base_r = weights[0].data_ptr(), reference._flat_weights[0].data_ptr()
    assert [w.data_ptr() - base_m for w in weights] == [
        w.data_ptr() - base_r for w in reference._flat_weights
    ]
    assert len({w.untyped_storage().data_ptr() for w in weights}) == 1


def test_attention_sdpa_path_equals_readable_path():
    torch.manual_seed(0)
    B, T, S, D, H = 3, 4, 5, 16, 4
    mha = MultiHeadAttention(D, H).to(CUDA)
    mask = padding_mask(torch.tensor([5, 2, 1]), max_len=S)[:, None, None, :].to(CUDA)
    q = torch.randn(B, T, D, device=CUDA, requires_grad=True)
    kv = torch.randn(B, S, D, device=CUDA, requires_grad=True)
    with no_tf32():
        runs = [
            _values_and_grads(
                mha, lambda w=w: mha(q, kv, kv, mask=mask, need_weights=w)[0], [q, kv]
            )
            for w in (False, True)  # False: SDPA (flash / efficient); True: the readable path
        ]
    torch.testing.assert_close(runs[0][0], runs[1][0], **TOL)
    for a, b in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("beam", [5, 1])
def test_batched_cached_decode_equals_unbatched_uncached(beam):
    torch.manual_seed(0)
    size = dataclasses.replace(pm.TINY, dropout=0.0)
    model = pm.build_seqlab(size)[0].to(CUDA)
    sources = [s for s, _ in pm.make_pairs(8, size, seed=1)]
    with no_tf32():
        same, total = peers_decode.check_cached_batched(model, sources, beam, 6, batch_size=4)
    assert (same, total) == (8, 8)


def test_run_trained_on_gpu_loads_on_cpu_with_the_same_logits(tmp_path):
    steps = {"train.max_steps": 30, "train.valid_every": 30, "train.save_every": 30}
    run = api.train(
        "configs/reverse-transformer.yaml",
        run_dir=tmp_path / "run",
        quiet=True,
        **{"train.device": CUDA, **steps},
    )
    assert next(run.model.parameters()).device.type == "cuda"
    on_cpu = api.load(tmp_path / "run", device="cpu", prefer="latest")
    on_gpu = api.load(tmp_path / "run", device=CUDA, prefer="latest")
    batch = on_cpu.task.collate(list(range(16)), "valid")
    args = (batch.src, batch.src_mask, batch.y_in, batch.tgt_mask)
    with torch.no_grad(), no_tf32():
        cpu_logits = on_cpu.model(*args)
        gpu_logits = on_gpu.model(*(a.to(CUDA) for a in args)).cpu()
    torch.testing.assert_close(gpu_logits, cpu_logits, atol=1e-4, rtol=1e-4)


def test_peer_benchmark_runs_every_section_on_the_device(tmp_path):
    files = ["--out", str(tmp_path / "r.md"), "--json", str(tmp_path / "p.json")]
    record = peers.main(["--tiny", "--device", CUDA, *files])
    assert record["device"] == CUDA and ", CUDA " in record["machine"]  # the GPU named
    assert all(r["status"] == "ok" for r in record["rows"] if r["impl"] != "onmt")
    assert all(r.get("gpu_mib", 0) > 0 for r in record["rows"] if r["status"] == "ok")
    assert all(c["same"] == c["total"] for c in record["checks"])
    assert "## Performance vs peers on a GPU" in (tmp_path / "r.md").read_text()


def test_auto_cache_stays_concatenating_on_the_gpu():
    """perf-notes-gpu.md §30: beam search's expansion keeps the KVCache on a GPU (on a CPU
    "auto" becomes a TreeKVCache, tests/nn/test_tree_kv_cache.py)."""
    from seqlab.decode import beam_search
    from seqlab.nn.multihead import KVCache
    from tests.nn.test_tree_kv_cache import FirstLayerCacheSpy

    torch.manual_seed(0)
    model = pm.build_seqlab(dataclasses.replace(pm.TINY, dropout=0.0))[0].to(CUDA).eval()
    src, src_mask = peers_decode.source_batches(
        [s for s, _ in pm.make_pairs(2, pm.TINY, seed=1)], 2, device=CUDA
    )[0]
    caches: list = []
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
        spy = FirstLayerCacheSpy(model, caches)
        beam_search(spy, state, 2, 1, 2, 5, beam_size=3, min_len=5, pad_id=0)
    assert len(caches) == 5 and all(type(c) is KVCache for c in caches)


@pytest.mark.parametrize("autocast", [False, True])
def test_softmax_once_loss_on_the_gpu_equals_float64_cross_entropy(autocast):
    from seqlab.nn.smoothed_cross_entropy import SmoothedCrossEntropy

    torch.manual_seed(0)
    N, V = 300, 2000
    y = torch.randint(1, V, (N,))
    y[::10] = 0
    x = (3 * torch.randn(N, V)).to(CUDA).requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        x_in = x.bfloat16() if autocast else x
        loss, nll = SmoothedCrossEntropy.apply(x_in, y.to(CUDA), 0, 0.1)
    assert loss.dtype == nll.dtype == torch.float32
    x64 = x_in.detach().double().cpu().requires_grad_()
    ref = torch.nn.functional.cross_entropy(x64, y, ignore_index=0, label_smoothing=0.1,
                                            reduction="none")  # fmt: skip
    ref_nll = torch.nn.functional.cross_entropy(x64, y, ignore_index=0, reduction="none")
    atol = 2**-8 if autocast else 1e-5
    torch.testing.assert_close(loss.double().cpu(), ref.detach(), atol=atol, rtol=0)
    torch.testing.assert_close(nll.double().cpu(), ref_nll.detach(), atol=atol, rtol=0)
    (g,) = torch.autograd.grad(loss.sum(), x)
    (g64,) = torch.autograd.grad(ref.sum(), x64)
    err = (g.double().cpu() - g64).norm() / g64.norm()
    if autocast:  # as close as bf16 holds the float64 gradient (the CPU test's bound)
        rounding = (g64.bfloat16().double() - g64).norm() / g64.norm()
        assert err < 1.25 * rounding, (float(err), float(rounding))
    else:
        assert err < 1e-6, float(err)
