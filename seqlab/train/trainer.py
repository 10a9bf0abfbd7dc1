"""One Trainer for every task (DESIGN §7): build, train, validate, checkpoint, resume, DDP.

    trainer = Trainer(resolve_run("configs/reverse-transformer.yaml"), Path("runs/rev"))
    summary = trainer.fit()                 # to train.max_steps / max_epochs / early stop
    trainer = Trainer.resume(Path("runs/rev"), ["train.max_steps=600"])
    trainer.fit()                           # bitwise the same as one 600-step run (CPU fp32)

The update rule (loss normalisation over the accumulated, distributed batch) is in
``seqlab.train.steps``; the run directory in ``seqlab.train.run_dir``; DDP in
``seqlab.train.distributed``. docs/training.md shows the commands and what they print.

A step checkpoint holds everything the next update depends on: model, optimizer, schedule,
grad scaler, every RNG (of every rank), the batcher's epoch and position (batches this rank
has consumed; a global step consumes W·k global batches, k on each rank), the step, the
early-stopping counters and the log window, the resolved config, and the task's own state
when it has one (``task.state_tensors()`` / ``task.load_state_tensors(d)``: e.g. the lm
task's hidden state carried across BPTT chunks, per rank).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqlab.config import ConfigError
from seqlab.data.batching import TokenBudgetBatcher
from seqlab.errors import SeqlabError
from seqlab.run_config import RunConfig, resolve_run
from seqlab.train import trainer_io
from seqlab.train.allocator import keep_freed_memory
from seqlab.train.budget import BudgetFit
from seqlab.train.build import build_model, build_task
from seqlab.train.checkpoint import decode, load_checkpoint, read_checkpoint
from seqlab.train.distributed import init_distributed, resolve_device
from seqlab.train.kernel_cache import enlarge_kernel_cache
from seqlab.train.late_dropout import LateDropout
from seqlab.train.optim import build_optimizer
from seqlab.train.precision import autocast_context, make_grad_scaler, resolve_precision
from seqlab.train.progress import Progress
from seqlab.train.rng import seed_everything
from seqlab.train.run_dir import RunDir, find_checkpoint
from seqlab.train.schedules import build_schedule
from seqlab.train.steps import StepStats, accumulate_gradients, apply_update
from seqlab.train.trainer_io import LogWindow
from seqlab.train.validation import EarlyStopping, prefixed


def _create(path: Path, overwrite: bool) -> None:
    RunDir.create(path, overwrite)


def _rank_seed(seed: int, rank: int) -> int:
    """Distinct, reproducible dropout stream per rank (independent of the init stream)."""
    return int(np.random.SeedSequence([seed, rank, 0x5EC1AB]).generate_state(1)[0])


class Trainer:
    """Trains ``cfg`` and writes ``run_dir`` (None: nothing is written).

    Args:
        cfg: the resolved run (``seqlab.run_config.resolve_run``).
        run_dir: where rank 0 writes config, metrics and checkpoints; None keeps it in memory.
        data_dir: the task's data folder (tasks with files), or None.
        overwrite: replace a non-empty previous run in ``run_dir``.
        resume: continue ``run_dir`` from its latest step checkpoint (see :meth:`resume`).
        quiet: print nothing (the metrics file is still written).
    """

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path | None,
        data_dir: Path | None = None,
        *,
        overwrite: bool = False,
        resume: bool = False,
        quiet: bool = False,
    ) -> None:
        self.cfg = cfg
        t = cfg.train
        keep_freed_memory()  # reuse big temporaries' pages step after step (allocator.py)
        enlarge_kernel_cache()  # more distinct bf16 GEMM shapes than 1,024 (kernel_cache.py)
        self.dist = init_distributed(t.device, getattr(t, "dist_timeout", None))
        try:
            self._setup(run_dir, data_dir, overwrite, resume, quiet)
        except BaseException:
            self.dist.shutdown()
            raise

    @classmethod
    def resume(
        cls,
        run_dir: str | Path,
        overrides: list[str] | tuple[str, ...] = (),
        data_dir: Path | None = None,
        quiet: bool = False,
    ) -> Trainer:
        """Continue ``run_dir`` from its newest step checkpoint, with the config stored in it.

        Only ``train.*`` may be overridden (e.g. ``train.max_steps=2000``); the model, task
        and schedule are those the checkpoint was trained with.
        """
        for text in overrides:
            if not text.startswith("train."):
                raise SeqlabError(
                    f"override '{text}': a resumed run keeps its task, model and schedule; "
                    "only train.* settings (max_steps, valid_every, patience, …) can change"
                )
        latest = RunDir.open(run_dir).latest()
        meta = load_checkpoint(latest)
        if not isinstance(meta.config, dict):
            raise SeqlabError(f"{latest}: the checkpoint holds no run config; cannot resume")
        cfg = resolve_run(meta.config, list(overrides))
        return cls(cfg, Path(run_dir), data_dir, resume=True, quiet=quiet)

    # -- construction ----------------------------------------------------------------------

    def _setup(
        self,
        run_dir: Path | None,
        data_dir: Path | None,
        overwrite: bool,
        resume: bool,
        quiet: bool,
    ) -> None:
        cfg, t, dist = self.cfg, self.cfg.train, self.dist
        if t.threads is not None:
            torch.set_num_threads(t.threads)
        self.device = resolve_device(t.device, dist.local_rank)
        self.precision = resolve_precision(t.precision, self.device)
        seed_everything(t.seed, deterministic=t.deterministic)

        self.run: RunDir | None = None
        ckpt: Path | None = None
        if run_dir is not None:
            path = Path(dist.broadcast_object(str(run_dir)))  # rank 0's name wins
            if resume:
                ckpt = Path(dist.on_main(lambda: str(RunDir.open(path).latest())))
                self.run = RunDir(path)
            else:
                dist.on_main(lambda: _create(path, overwrite))
                self.run = RunDir(path)
        elif resume:
            raise SeqlabError("resume needs a run directory")
        meta = load_checkpoint(ckpt) if ckpt is not None else None
        saved_tok = meta.tokenizer_state if meta is not None else None
        warm = None  # train.init_from: weights and tokenizer of another run, nothing else
        if meta is None and t.init_from is not None:
            warm_path = find_checkpoint(t.init_from, "best")
            warm_meta, warm_tensors = read_checkpoint(warm_path, self.device)  # read once
            saved_tok = decode(warm_meta.get("tokenizer_state"), warm_tensors)
            warm = (warm_path, warm_tensors)

        # Rank 0 prepares the task first (it may train a tokenizer); the others reuse its state.

        def prepare_main() -> Any:
            self.task = build_task(cfg, data_dir, saved_tok)
            return self.task.tokenizer_state()

        tok_state = dist.on_main(prepare_main)
        if not dist.is_main:
            self.task = build_task(cfg, data_dir, tok_state)

        self.model = build_model(cfg, self.task).to(self.device)
        self.warm_started = [] if warm is None else trainer_io.warm_start(self.model, *warm)
        seed_everything(_rank_seed(t.seed, dist.rank), deterministic=t.deterministic)
        self.optimizer = build_optimizer(self.model, t.optim)
        self.schedule = build_schedule(self.optimizer, cfg.schedule, cfg.schedule_cfg)
        if self.schedule.fits_budget and (t.max_minutes is None or self.schedule.cfg.warmup < 10):
            raise ConfigError(
                f"schedule '{cfg.schedule}' with total_steps 0 fits its decay to the time "
                "budget train.max_minutes, measuring the speed over the warmup: set "
                "train.max_minutes and schedule.warmup >= 10, or give schedule.total_steps"
            )
        self.scaler = make_grad_scaler(self.precision, self.device)
        b = t.batch
        # A task may order its own batches (the lm task: contiguous BPTT chunks) with an
        # object of TokenBudgetBatcher's interface (epoch, position, len, iter, state_dict).
        make_batcher = getattr(self.task, "make_batcher", None)
        try:
            if make_batcher is not None:
                self.batcher = make_batcher(b, t.seed, dist.rank, dist.world_size)
            else:
                self.batcher = TokenBudgetBatcher(
                    self.task.train_lengths(),
                    b.max_tokens,
                    max_len=b.max_len,
                    max_sentences=b.max_sentences,
                    seed=t.seed,
                    sort_window=b.sort_window,
                    rank=dist.rank,
                    world_size=dist.world_size,
                )
        except ValueError as exc:
            raise SeqlabError(f"train.batch: {exc}") from None
        self.early = EarlyStopping.from_train_config(t)
        self.budget_fit: BudgetFit | None = None  # set by fit() when the schedule fits the time
        self.step, self.elapsed_before, self.window = 0, 0.0, LogWindow()
        self.last_valid: tuple[int, dict[str, float]] | None = None
        self._iter = None
        self.accum_steps = t.accum_steps

        if meta is not None:
            trainer_io.restore(self, meta)
        self.ddp_model = dist.wrap(self.model, self.device)
        start = t.dropout_from_step
        self.late_dropout = None if start is None else LateDropout(self.model, start)
        trainer_io.write_run_files(self, meta)
        writes = self.run is not None and dist.is_main
        self.progress = Progress(
            t.max_steps,
            self.step,
            show=dist.is_main and t.progress,
            quiet=quiet or not dist.is_main,
            metrics_path=self.run.metrics if writes else None,
            tensorboard_dir=self.run.root / "tensorboard" if writes and t.tensorboard else None,
        )
        if self.schedule.budget_end is not None:  # resumed: the budget fit's plan so far
            self.progress.set_total(self.schedule.budget_end)
        if meta is not None:  # last: nothing above may draw random numbers after this
            trainer_io.restore_rng(self, meta)

    # -- training ----------------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Train to ``max_steps`` (or ``max_epochs``, or early stop); return a summary dict:
        step, epoch, stopped, elapsed, valid (last validation metrics), best, run_dir."""
        clean = False
        try:
            with self.dist.guard("a training step"):
                summary = self._fit()
            clean = True
            return summary
        finally:
            self.progress.close()
            self.ddp_model = self.model  # drop DDP's hold on the process group before it goes
            self.dist.shutdown(clean=clean)

    def _fit(self) -> dict[str, Any]:
        t = self.cfg.train
        self._started = time.perf_counter()
        first_step = self.step
        trainer_io.announce(self)
        self.budget_fit = None  # a cosine fitted to train.max_minutes (seqlab.train.budget)
        fitted = self.schedule.fits_budget or self.schedule.fitted_total_steps is not None
        if fitted and t.max_minutes is not None:
            self.budget_fit = BudgetFit(
                self.schedule, 60.0 * float(t.max_minutes), t.valid_every, self.step,
                self.elapsed, self.dist.broadcast_object, self.progress.record,
            )  # fmt: skip
        stopped = "max_steps" if self.step >= t.max_steps else None
        if stopped is None and self._at_epoch_limit():
            stopped = "max_epochs"
        while stopped is None:
            if self.train_step() is None:
                stopped = "max_epochs"
                break
            self.progress.advance(self._window_summary())
            if self.step % t.log_every == 0:
                self._log()
            if self.step % t.valid_every == 0 and self._validate():
                stopped = "early_stop"
            if stopped is None and self._at_epoch_limit():
                stopped = "max_epochs"
            if stopped is None and self.step >= t.max_steps:
                stopped = "max_steps"
            if stopped is None and self._out_of_time():
                stopped = "max_minutes"
            if stopped is not None:  # before the save, so that its state holds this validation
                self._validate_final()
            if self.step % t.save_every == 0 or stopped is not None:
                trainer_io.save_step(self)
        if self.window.steps and self.step > first_step:
            self._log()
        self._validate_final()  # a resumed run that had nothing left to do
        return trainer_io.finish(self, stopped)

    def train_step(self) -> StepStats | None:
        """One update: the next k micro-batches forward and backward, the optimizer and the
        schedule, counted in the log window. None, and nothing done, when the epoch limit
        leaves no batch. ``fit`` loops over it (with logging, validation and saving);
        ``benchmarks/precision_presets.py`` times it."""
        t = self.cfg.train
        t0 = time.perf_counter()
        micro = self._next_microbatches()
        if not micro:
            return None
        batches = [self.task.collate(ix, "train").to(self.device) for ix in micro]
        self.ddp_model.train()
        if self.late_dropout is not None:
            self.late_dropout.apply(self.step + 1)
        lr = float(self.optimizer.param_groups[0]["lr"])
        loss_sum, nll_sum, N = accumulate_gradients(
            self.ddp_model,
            self.task,
            batches,
            self.dist,
            label_smoothing=t.label_smoothing,
            autocast=self._autocast,
            scaler=self.scaler if self.scaler.is_enabled() else None,
            step=self.step + 1,
        )
        if self.budget_fit is not None:  # before lr(step + 2) is set
            self.budget_fit.check(self.step, self.elapsed)
        stats = apply_update(
            self.model,
            self.optimizer,
            self.schedule,
            loss_sum,
            nll_sum,
            N,
            self.dist,
            step=self.step + 1,
            clip_norm=t.clip_norm,
            nonfinite=t.nonfinite,
            scaler=self.scaler,
        )
        self.step += 1
        w = self.window
        w.steps += 1
        w.loss_sum += stats.loss_sum
        w.nll_sum += stats.nll_sum
        w.tokens += stats.n_tokens
        w.grad_norm_sum += stats.grad_norm if math.isfinite(stats.grad_norm) else 0.0
        w.train_time += time.perf_counter() - t0
        w.skipped += int(stats.skipped)
        w.lr = lr
        return stats

    def _autocast(self) -> Any:
        return autocast_context(self.precision, self.device)

    def _next_microbatches(self) -> list[list[int]]:
        """Up to k index lists; fewer only when the last allowed epoch ends."""
        out: list[list[int]] = []
        while len(out) < self.accum_steps:
            if self._iter is None:
                if self._at_epoch_limit():
                    break
                self._iter = iter(self.batcher)
            try:
                out.append(next(self._iter))
            except StopIteration:
                self._iter = None
        return out

    def _out_of_time(self) -> bool:
        """The wall-clock budget ``train.max_minutes`` (counted across resumes) is spent.

        Rank 0's clock decides and every rank follows, so DDP ranks stop at the same step.
        A time budget makes the stopping step depend on the machine's speed: runs that
        must be reproducible bitwise should stop on max_steps instead.
        """
        budget = self.cfg.train.max_minutes
        if budget is None:
            return False
        return bool(self.dist.broadcast_object(self.elapsed >= 60.0 * budget))

    def _at_epoch_limit(self) -> bool:
        limit = self.cfg.train.max_epochs
        if limit is None:
            return False
        b = self.batcher
        return b.epoch >= limit or (b.epoch == limit - 1 and b.position >= len(b))

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self._started

    def _window_summary(self) -> dict[str, float]:
        w = self.window
        return {
            "loss": w.loss_sum / max(w.tokens, 1),
            "lr": w.lr,
            "tokens_per_s": w.tokens / max(w.train_time, 1e-9),
        }

    def _log(self) -> None:
        w = self.window
        mean_nll = w.nll_sum / max(w.tokens, 1)
        record = {
            "event": "train",
            "step": self.step,
            "epoch": self.batcher.epoch,
            **self._window_summary(),
            "ppl": math.exp(mean_nll) if mean_nll < 700 else math.inf,
            "grad_norm": w.grad_norm_sum / max(w.steps - w.skipped, 1),
            "elapsed": self.elapsed,
            "skipped": w.skipped,
        }
        if self.dist.is_main:
            self.progress.record(record)
        self.window = LogWindow()

    # -- validation and checkpoints --------------------------------------------------------

    def _evaluate(self, split: str) -> dict[str, float]:
        """Rank 0 evaluates the plain (unwrapped) model; every rank gets the metrics."""

        def run() -> dict[str, float]:
            with self._autocast():
                return {k: float(v) for k, v in self.task.evaluate(self.model, split).items()}

        return self.dist.on_main(run)

    def _validate(self) -> bool:
        """Validate, track the best (saving ``checkpoints/best``); True: stop early."""
        metrics = self._evaluate("valid")
        improved = self.early.update(metrics, self.step)
        self.last_valid = (self.step, metrics)
        if self.dist.is_main:
            self._record_valid("valid", metrics, improved)
            if improved:
                trainer_io.save_best(self, metrics)
        return self.early.should_stop

    def _validate_final(self) -> None:
        """Validate the last step when the schedule did not (a stop on ``max_minutes``,
        ``max_epochs``, or ``max_steps`` off ``valid_every``). It competes for
        ``checkpoints/best`` but not for patience (``seqlab.train.validation``)."""
        if self.last_valid is not None and self.last_valid[0] == self.step:
            return
        metrics = self._evaluate("valid")
        try:
            improved = self.early.update(metrics, self.step, scheduled=False)
        except SeqlabError as exc:  # a misnamed metric and no scheduled validation before:
            improved = False  # say so, but keep the last step (it is saved after this)
            self.progress.echo(f"seqlab: warning: {exc}; checkpoints/best not written", True)
        self.last_valid = (self.step, metrics)
        if self.dist.is_main:
            self._record_valid("final", metrics, improved)
            if improved:
                trainer_io.save_best(self, metrics)

    def _record_valid(self, event: str, metrics: dict[str, float], improved: bool) -> None:
        record = {
            "event": event,
            "step": self.step,
            "epoch": self.batcher.epoch,
            "elapsed": self.elapsed,
            "split": "valid",
            **prefixed(metrics, "valid"),
            "best": improved,
        }
        self.progress.record(record)
