"""benchmarks/step_levers.py: each variant runs the lever it names (the torch variant really
calls F.cross_entropy, the seqlab one the softmax-once function), a tiny paired run, and the
loss alone (--micro)."""

from __future__ import annotations

import pytest
import torch

import seqlab.tasks.base as base
from benchmarks import step_levers
from seqlab.nn import smoothed_cross_entropy as sce


def test_variants_call_the_loss_they_name(monkeypatch):
    seen = []
    monkeypatch.setattr(sce, "SOFTMAX_ONCE_MIN_LOGITS", 1)  # tiny logits take the new path
    monkeypatch.setattr(sce.SmoothedCrossEntropy, "apply", lambda *a: seen.append("once") or (
        torch.zeros(3), torch.zeros(3)))  # fmt: skip

    def run():
        return base.smoothed_cross_entropy(torch.randn(3, 4), torch.tensor([1, 2, 3]), 0, 0.1)

    step_levers.variant("seqlab", "loss", run)()
    assert seen == ["once"]
    loss, nll = step_levers.variant("before", "loss", run)()
    assert seen == ["once"] and loss.shape == nll.shape == (3,)


def test_rows_variants_pack_and_do_not():
    from seqlab.nn.row_packing import PaddedRows

    keep = torch.tensor([[True, True], [True, False]])
    assert step_levers.variant("seqlab", "rows", lambda: PaddedRows.of(keep))() is not None
    assert step_levers.variant("before", "rows", lambda: PaddedRows.of(keep))() is None


def test_buckets_variants_bucket_and_do_not():
    from seqlab.nn.row_packing import PaddedRows

    keep = torch.arange(9)[None, :] < torch.tensor([[9], [2], [3], [1]])  # 15 real tokens
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert step_levers.variant("seqlab", "buckets", lambda: PaddedRows.of(keep).n)() == 16
        assert step_levers.variant("before", "buckets", lambda: PaddedRows.of(keep).n)() == 15


def test_fresh_batches_are_new_for_every_call_and_equal_between_variants(monkeypatch):
    from benchmarks import peers_models as pm
    from benchmarks import peers_train as ptrain

    seen = {"first": [], "second": []}
    trainees = iter(["first", "second"])
    monkeypatch.setattr(ptrain, "seqlab_trainee", lambda size: next(trainees))
    monkeypatch.setattr(
        ptrain, "train_rep", lambda who, batches, precision: lambda: seen[who].append(batches)
    )
    runs = step_levers.fresh_workload(pm.TINY, steps=2, reps=2, precision="fp32", threads=1)
    for _ in range(3):
        runs["before"](), runs["seqlab"]()
    assert len(seen["first"]) == len(seen["second"]) == 3
    ids = [torch.cat([b.y_out.reshape(-1) for b in bs]) for bs in seen["first"]]
    assert not torch.equal(ids[0], ids[1]) and not torch.equal(ids[1], ids[2])
    for a, b in zip(seen["first"], seen["second"]):
        assert a is b


@pytest.mark.parametrize("lever", ["loss", "rows", "attention", "buckets"])
def test_tiny_paired_run(lever):
    argv = ["--lever", lever, "--tiny", "--reps", "1", "--steps", "1", "--threads", "1"]
    out = step_levers.main(argv)
    assert set(out["ms"]) == {"before", "seqlab"} and out["speed"] > 0


def test_fresh_refuses_another_device():
    with pytest.raises(SystemExit):
        step_levers.main(["--lever", "buckets", "--fresh", "--device", "cuda"])


def test_tiny_fresh_run():
    argv = ["--lever", "buckets", "--fresh", "--tiny", "--reps", "1", "--steps", "1"]
    out = step_levers.main([*argv, "--threads", "1"])
    assert set(out["ms"]) == {"before", "seqlab"} and out["speed"] > 0


def test_micro_times_both_losses():
    """--micro runs on any device now (the GPU lease of perf-notes-gpu.md §35 used it); on
    the CPU it times both variants of the loss alone."""
    ms = step_levers.main(["--micro", "--reps", "1", "--threads", "1"])
    assert set(ms) == {"before", "seqlab"} and min(ms.values()) > 0


def test_pack_on_gpu_lets_cuda_pack(monkeypatch):
    from seqlab.nn import row_packing

    monkeypatch.setattr(row_packing, "PACK_DEVICES", {"cpu"})
    argv = ["--lever", "rows", "--tiny", "--reps", "1", "--steps", "1", "--threads", "1"]
    step_levers.main([*argv, "--pack-on-gpu"])
    assert {"cpu", "cuda"} == row_packing.PACK_DEVICES
