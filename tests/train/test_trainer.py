"""The Trainer in-process: loss normalisation over accumulated microbatches, the run
directory, non-finite losses, early stopping, epochs, precision, and the Python API."""

import importlib.util
import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import seqlab
from seqlab.api import LoadedModel, Run
from seqlab.errors import SeqlabError
from seqlab.run_config import resolve_run
from seqlab.train.steps import NonFiniteLossError, accumulate_gradients
from seqlab.train.trainer import Trainer
from tests.train.tiny import tiny


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _grads(trainer, batches):
    trainer.model.zero_grad(set_to_none=True)
    loss_sum, _, N = accumulate_gradients(trainer.model, trainer.task, batches, trainer.dist)
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
    return grads, float(loss_sum) / N, N


def test_accumulated_microbatches_equal_one_batch_of_their_union():
    # dropout 0: the same forward pass whether the examples come split or together.
    trainer = Trainer(resolve_run(tiny(**{"model.dropout": 0.0})), None, quiet=True)
    it = iter(trainer.batcher)
    parts = [next(it) for _ in range(3)]
    micro = [trainer.task.collate(ix) for ix in parts]
    union = trainer.task.collate([i for ix in parts for i in ix])
    assert len({b.n_tokens for b in micro}) > 1, "microbatches must differ in token count"

    g_acc, loss_acc, n_acc = _grads(trainer, micro)
    g_one, loss_one, n_one = _grads(trainer, [union])
    assert n_acc == n_one == union.n_tokens
    assert loss_acc == pytest.approx(loss_one, rel=1e-6)
    for name in g_one:
        torch.testing.assert_close(g_acc[name], g_one[name], atol=1e-6, rtol=0, msg=name)

    # The classic bug — averaging per-microbatch means — gives a different gradient.
    naive = [_grads(trainer, [b])[0] for b in micro]
    worst = max(
        float((sum(g[name] for g in naive) / len(naive) - g_one[name]).abs().max())
        for name in g_one
    )
    assert worst > 1e-4


def test_fit_writes_the_run_directory(tmp_path, caplog):
    cfg = resolve_run(tiny(**{"train.keep_last": 1, "train.tensorboard": True}))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).fit()
    run = tmp_path / "run"
    assert resolve_run(run / "config.yaml") == cfg
    fingerprint = json.loads((run / "fingerprint.json").read_text())
    assert fingerprint["seed"] == 0 and fingerprint["precision"] == "fp32"
    assert fingerprint["versions"]["torch"] == torch.__version__
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "start" and events[0]["effective_batch_tokens"] == 96
    train = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train] == [5, 10, 15, 20]
    for key in ("epoch", "loss", "ppl", "lr", "grad_norm", "tokens_per_s", "elapsed"):
        assert all(math.isfinite(e[key]) for e in train), key
    assert train[-1]["ppl"] == pytest.approx(math.exp(train[-1]["loss"]), rel=1e-9)
    valid = [e for e in events if e["event"] == "valid"]
    assert [e["step"] for e in valid] == [10, 20]
    assert {"valid/loss", "valid/exact_match"} <= set(valid[0])
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best", "step-000020"]
    best = json.loads((run / "checkpoints/best/meta.json").read_text())
    assert best["step"] == summary["best"]["step"]
    assert summary["stopped"] == "max_steps" and summary["step"] == 20
    assert summary["valid"] == {k[6:]: v for k, v in valid[-1].items() if k.startswith("valid/")}
    if importlib.util.find_spec("tensorboard") is None:
        assert "pip install tensorboard" in caplog.text  # warned, not fatal
    else:
        assert any((run / "tensorboard").iterdir())


def test_a_non_empty_run_dir_is_refused_unless_overwrite(tmp_path):
    cfg = resolve_run(tiny(**{"train.max_steps": 2, "train.valid_every": 100}))
    Trainer(cfg, tmp_path / "run", quiet=True).fit()
    with pytest.raises(SeqlabError, match="--overwrite"):
        Trainer(cfg, tmp_path / "run", quiet=True)
    Trainer(cfg, tmp_path / "run", overwrite=True, quiet=True).fit()
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(SeqlabError, match="refusing"):
        Trainer(cfg, other, overwrite=True, quiet=True)
    assert (other / "keep.txt").read_text() == "mine"


def _poison(trainer, at_call):
    """Make the ``at_call``-th training loss NaN."""
    real, calls = trainer.task.loss, [0]

    def loss(model, batch, label_smoothing=0.0):
        out = real(model, batch, label_smoothing)
        calls[0] += 1
        if calls[0] == at_call:
            out.loss_sum = out.loss_sum * float("nan")
        return out

    trainer.task.loss = loss


def test_a_nan_loss_stops_with_the_step_and_a_hint(tmp_path):
    trainer = Trainer(resolve_run(tiny(**{"train.valid_every": 100})), None, quiet=True)
    _poison(trainer, at_call=3)
    with pytest.raises(NonFiniteLossError, match=r"step 3: .*train\.optim\.lr.*precision=fp32"):
        trainer.fit()


def test_a_nan_loss_is_skipped_when_configured(tmp_path):
    over = {"train.nonfinite": "skip", "train.save_every": 1, "train.keep_last": 10}
    over.update({"train.max_steps": 5, "train.valid_every": 100})
    trainer = Trainer(resolve_run(tiny(**over)), tmp_path / "run", quiet=True)
    _poison(trainer, at_call=3)
    trainer.fit()

    def weights(step):
        t = load_file(tmp_path / f"run/checkpoints/step-{step:06d}/tensors.safetensors")
        return {k: v for k, v in t.items() if k.startswith("model.")}

    w2, w3, w4 = weights(2), weights(3), weights(4)
    assert all(torch.equal(w2[k], w3[k]) for k in w2)  # step 3 changed nothing
    assert not all(torch.equal(w3[k], w4[k]) for k in w3)  # step 4 trained again
    events = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [e["skipped"] for e in events if e["event"] == "train"] == [1]


def test_early_stopping_after_patience_evaluations_without_improvement(tmp_path):
    over = {"train.optim.lr": 0.0, "train.valid_every": 2, "train.patience": 2}
    over.update({"train.early_stop_metric": "exact_match", "train.early_stop_mode": "max"})
    summary = Trainer(resolve_run(tiny(**over)), tmp_path / "run", quiet=True).fit()
    # lr 0: the metric never changes; a tie is no improvement. Best at 2, bad at 4 and 6.
    assert summary["stopped"] == "early_stop" and summary["step"] == 6
    assert summary["best"] == {"metric": "exact_match", "value": 0.0, "step": 2}
    assert (tmp_path / "run/checkpoints/step-000006").is_dir()

    bad = tiny(**{"train.valid_every": 2, "train.early_stop_metric": "bleu"})
    with pytest.raises(SeqlabError, match="bleu.*exact_match"):
        Trainer(resolve_run(bad), None, quiet=True).fit()


def test_max_epochs_counts_batches_across_accumulation(tmp_path):
    over = {"task.n_train": 60, "train.max_epochs": 2, "train.max_steps": 1000}
    over.update({"train.accum_steps": 2, "train.valid_every": 1000})
    trainer = Trainer(resolve_run(tiny(**over)), None, quiet=True)
    per_epoch = len(trainer.batcher)
    summary = trainer.fit()
    # Accumulation groups run on across the epoch boundary: 2 epochs of batches, 2 per step.
    assert summary["stopped"] == "max_epochs"
    assert summary["step"] == math.ceil(2 * per_epoch / 2)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_runs_in_the_requested_precision(precision):
    over = {"train.precision": precision, "train.max_steps": 3, "train.valid_every": 100}
    trainer = Trainer(resolve_run(tiny(**over)), None, quiet=True)
    # a linear that runs as a module (attention's W_q, W_k, W_v enter one stacked product)
    linear = next(
        m
        for name, m in trainer.model.named_modules()
        if isinstance(m, nn.Linear) and not name.endswith(("W_q", "W_k", "W_v"))
    )
    seen, losses = [], []
    linear.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    real = trainer.task.loss

    def loss(model, batch, label_smoothing=0.0):
        out = real(model, batch, label_smoothing)
        losses.append(out.loss_sum.dtype)
        return out

    trainer.task.loss = loss
    summary = trainer.fit()
    expected = torch.bfloat16 if precision == "bf16" else torch.float32
    assert seen and set(seen) == {expected}
    assert set(losses) == {torch.float32}  # the loss is computed in fp32 either way
    assert math.isfinite(summary["valid"]["loss"])


def test_python_api_trains_and_loads_from_the_checkpoint_alone(tmp_path):
    run = seqlab.train(tiny(), run_dir=tmp_path / "run", quiet=True, **{"model.d_model": 24})
    assert isinstance(run, Run) and run.config.model_cfg.d_model == 24
    assert run.run_dir == tmp_path / "run" and run.metrics["step"] == 20

    latest = seqlab.load(tmp_path / "run", prefer="latest")
    assert isinstance(latest, LoadedModel) and latest.step == 20
    assert latest.evaluate("valid") == run.metrics["valid"]  # same weights, same maths

    moved = tmp_path / "elsewhere"  # no run dir, no preset: the checkpoint rebuilds itself
    shutil.copytree(tmp_path / "run/checkpoints/step-000020", moved)
    alone = seqlab.load(moved)
    for (name, a), b in zip(alone.model.state_dict().items(), run.model.state_dict().values()):
        assert torch.equal(a, b), name

    out = alone.predict([[0, 1, 2], [5, 4]])
    assert len(out) == 2 and all(isinstance(s, int) and -1 <= s < 6 for s in out[0] + out[1])
    assert "predict" in dir(alone)
    with pytest.raises(AttributeError, match="offers: predict"):
        alone.translate
    with pytest.raises(SeqlabError, match=r"\[0, 6\)"):
        alone.predict([[9]])


def test_time_budget_stops_the_run_and_says_why():
    over = {"train.max_steps": 1000, "train.max_minutes": 1e-6, "train.valid_every": 1000}
    summary = Trainer(resolve_run(tiny(**over)), None, quiet=True).fit()
    assert summary["stopped"] == "max_minutes" and summary["step"] == 1
    with pytest.raises(Exception, match="max_minutes must be > 0"):
        resolve_run(tiny(**{"train.max_minutes": 0}))


def test_cosine_decay_fitted_to_the_time_budget(tmp_path):
    """schedule cosine with total_steps 0: at the end of the warmup the trainer fixes T
    from its measured speed and train.max_minutes (one "schedule" event), every later lr
    is cosine_lr with that T, and a resumed run keeps the saved T instead of refitting."""
    from seqlab.train.schedules import CosineConfig, cosine_lr

    over = {
        "schedule.name": "cosine", "schedule.warmup": 10, "schedule.total_steps": 0,
        "train.max_minutes": 30, "train.max_steps": 10, "train.log_every": 1,
    }  # fmt: skip
    cfg = resolve_run(tiny(**over))
    Trainer(cfg, tmp_path / "run", quiet=True).fit()
    Trainer.resume(tmp_path / "run", ["train.max_steps=20"], quiet=True).fit()
    events = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    fitted = [e for e in events if e["event"] == "schedule"]
    assert len(fitted) == 1 and fitted[0]["step"] == 9
    T = fitted[0]["total_steps"]
    s = fitted[0]["s_per_step"]  # T = 9 + (budget left) / s, and < 100 s were spent
    assert 9 + int((30 * 60 - 100) / s) <= T <= 9 + int(30 * 60 / s)
    curve = CosineConfig(warmup=10, total_steps=T)
    lrs = {e["step"]: e["lr"] for e in events if e["event"] == "train"}
    assert sorted(lrs) == list(range(1, 21))
    for step, lr in lrs.items():
        assert lr == pytest.approx(cosine_lr(step, 3.0e-3, curve), rel=1e-12), step

    with pytest.raises(SeqlabError, match="train.max_minutes"):
        Trainer(resolve_run(tiny(**{**over, "train.max_minutes": None})), None, quiet=True)


def test_train_steps_one_at_a_time_equal_fit():
    # fit() is train_step() in a loop plus logging, validation and saving: the weights after
    # n steps taken one by one equal those of fit(max_steps=n), dropout and batches alike.
    cfg = tiny(**{"train.max_steps": 7, "train.valid_every": 100, "train.save_every": 100})
    fitted = Trainer(resolve_run(cfg), None, quiet=True)
    fitted.fit()
    stepped = Trainer(resolve_run(cfg), None, quiet=True)
    losses = [stepped.train_step() for _ in range(7)]
    assert stepped.step == 7 and all(s.n_tokens > 0 for s in losses)
    assert stepped.window.steps == 7
    for (name, a), b in zip(fitted.model.named_parameters(), stepped.model.parameters()):
        assert torch.equal(a, b), name


def test_train_step_returns_none_when_the_epoch_limit_leaves_no_batch():
    trainer = Trainer(resolve_run(tiny(**{"train.max_epochs": 1})), None, quiet=True)
    n = len(trainer.batcher)
    assert all(trainer.train_step() is not None for _ in range(n))
    step = trainer.step
    assert trainer.train_step() is None and trainer.step == step
