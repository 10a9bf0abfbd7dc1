"""What the Trainer reads and writes: step checkpoints and their restoration, the run
directory's files, and the start / done messages (kept apart from the training loop)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from seqlab.errors import SeqlabError
from seqlab.train.build import count_parameters
from seqlab.train.checkpoint import (
    CheckpointMeta,
    keep_checkpoints,
    load_checkpoint,
    save_checkpoint,
    step_name,
)
from seqlab.train.fingerprint import environment_fingerprint
from seqlab.train.rng import RngState, capture_rng_state, restore_rng_state
from seqlab.train.run_dir import TOKENIZER

if TYPE_CHECKING:
    from seqlab.train.trainer import Trainer


@dataclass
class LogWindow:
    """Sums over the optimizer steps since the last ``train`` log line."""

    steps: int = 0
    loss_sum: float = 0.0
    nll_sum: float = 0.0
    tokens: int = 0
    grad_norm_sum: float = 0.0
    train_time: float = 0.0
    skipped: int = 0
    lr: float = 0.0


def save_best(tr: Trainer, metrics: dict[str, float]) -> None:
    """Rank 0: the model (no optimizer) of the best validation so far, ``checkpoints/best``."""
    if tr.run is None or not tr.dist.is_main:
        return
    save_checkpoint(
        tr.run.best,
        model=tr.model,
        step=tr.step,
        epoch=tr.batcher.epoch,
        config=tr.cfg.to_dict(),
        tokenizer_state=tr.task.tokenizer_state(),
        extra={"metrics": metrics, "metric": tr.early.metric},
    )


def restore(tr: Trainer, meta: CheckpointMeta) -> None:
    """Load model, optimizer, schedule, scaler, data position and counters from ``meta``."""
    load_checkpoint(
        meta.path,
        model=tr.model,
        optimizer=tr.optimizer,
        scheduler=tr.schedule,
        grad_scaler=tr.scaler,
        map_location=tr.device,
    )
    state = meta.extra.get("trainer", {})
    if state.get("world_size", 1) != tr.dist.world_size:
        raise SeqlabError(
            f"{meta.path} was trained on {state.get('world_size')} process(es), this is "
            f"{tr.dist.world_size}: resume with the same torchrun --nproc_per_node"
        )
    try:
        tr.batcher.load_state_dict(meta.sampler_state)
    except ValueError as exc:
        raise SeqlabError(f"{meta.path}: cannot resume the data order: {exc}") from None
    load_task_state = getattr(tr.task, "load_state_tensors", None)
    if load_task_state is not None:  # per rank: rank 0's in task_state, rank r's at r − 1
        rank = tr.dist.rank
        ranks = meta.extra.get("rank_task_state") or []
        load_task_state(meta.extra.get("task_state") if rank == 0 else ranks[rank - 1])
    tr.step = meta.step
    tr.early.load_state_dict(state.get("early_stop", {}))
    tr.window = LogWindow(**state.get("window", {}))
    tr.elapsed_before = float(state.get("elapsed", 0.0))
    if state.get("last_valid") is not None:
        tr.last_valid = (state["last_valid"][0], dict(state["last_valid"][1]))


def restore_rng(tr: Trainer, meta: CheckpointMeta) -> None:
    """Every rank gets back its own RNG streams (rank 0's are the checkpoint's own)."""
    if tr.dist.is_main:
        restore_rng_state(meta.rng)
    else:
        ranks = meta.extra.get("rank_rng") or []
        saved = ranks[tr.dist.rank - 1]
        restore_rng_state(RngState(json=saved["json"], tensors=saved["tensors"]))


def write_run_files(tr: Trainer, meta: CheckpointMeta | None) -> None:
    """Rank 0: config.yaml, fingerprint.json, tokenizer.json; on resume, trim metrics.jsonl
    to the checkpoint's step and append a ``resume`` event."""
    if tr.run is None or not tr.dist.is_main:
        return
    run = tr.run
    run.write_config(tr.cfg.to_dict())
    fingerprint = environment_fingerprint(tr.cfg.train.seed)
    fingerprint.update(
        device=str(tr.device),
        precision=tr.precision,
        world_size=tr.dist.world_size,
        accum_steps=tr.accum_steps,
    )
    tok = tr.task.tokenizer_state()
    if tok is not None:
        run.write_json(TOKENIZER, tok)
    if meta is None:
        run.write_json("fingerprint.json", fingerprint)
        return
    run.clean_partial_saves()
    dropped = run.truncate_metrics(meta.step)
    with open(run.metrics, "a", encoding="utf-8") as f:
        record = {
            "event": "resume",
            "step": meta.step,
            "checkpoint": str(meta.path),
            "dropped_records": dropped,
            "fingerprint": fingerprint,
        }
        f.write(json.dumps(record) + "\n")


def save_step(tr: Trainer) -> Path | None:
    """Write ``checkpoints/step-N`` (rank 0) and prune to ``keep_last``; every rank joins."""
    """Write ``checkpoints/step-N`` (rank 0) and prune to ``keep_last``; every rank joins."""
    rngs = tr.dist.all_gather_object(capture_rng_state()) if tr.dist.enabled else []
    task_state = getattr(tr.task, "state_tensors", None)  # e.g. the lm task's carried state
    task_states = [] if task_state is None else [task_state()]
    if task_states and tr.dist.enabled:
        task_states = tr.dist.all_gather_object(task_states[0])
    if tr.run is None or not tr.dist.is_main:
        return None
    trainer_state = {
        "early_stop": tr.early.state_dict(),
        "window": asdict(tr.window),
        "elapsed": tr.elapsed,
        "world_size": tr.dist.world_size,
        "accum_steps": tr.accum_steps,
        "last_valid": list(tr.last_valid) if tr.last_valid else None,
    }
    path = save_checkpoint(
        tr.run.checkpoints / step_name(tr.step),
        model=tr.model,
        optimizer=tr.optimizer,
        scheduler=tr.schedule,
        step=tr.step,
        epoch=tr.batcher.epoch,
        config=tr.cfg.to_dict(),
        sampler_state=tr.batcher.state_dict(),
        tokenizer_state=tr.task.tokenizer_state(),
        extra={
            "trainer": trainer_state,
            "rank_rng": [{"json": s.json, "tensors": s.tensors} for s in rngs[1:]],
            **(
                {"task_state": task_states[0], "rank_task_state": task_states[1:]}
                if task_states
                else {}
            ),
        },
        grad_scaler=tr.scaler,
    )
    keep_checkpoints(tr.run.checkpoints, max(1, tr.cfg.train.keep_last))
    return path


def warm_start(model: torch.nn.Module, path: Path, tensors: dict[str, torch.Tensor]) -> list[str]:
    """``train.init_from``: copy the model weights among ``tensors`` (those of the
    checkpoint at ``path``) into ``model`` (fairseq's ``--restore-file`` with
    ``--reset-optimizer``): optimizer, schedule, step and data order start afresh.
    Parameters the checkpoint lacks keep their initialisation (e.g. See et al. 2017's
    coverage weight w_c, added for a last training phase) and are returned; a checkpoint
    parameter the model lacks, or one of another shape, is an error.
    """
    state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    own = model.state_dict()
    extra = sorted(set(state) - set(own))
    wrong = [
        f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and v.shape != own[k].shape
    ]
    if extra or wrong:
        raise SeqlabError(
            f"train.init_from={path}: the checkpoint does not fit this model — not in the "
            f"model: {extra[:5]}; other shapes: {wrong[:5]}. Warm-start only from a run "
            "of the same architecture (new parameters may be added, none removed or resized)"
        )
    missing, _ = model.load_state_dict(state, strict=False)
    return sorted(missing)


def announce(tr: Trainer) -> None:
    """The start lines (run dir, data, model, device, effective batch) and ``start`` event."""
    t, d = tr.cfg.train, tr.dist
    per_rank = getattr(tr.batcher, "tokens_per_batch", t.batch.max_tokens)
    total = per_rank * d.world_size * tr.accum_steps
    n_params = count_parameters(tr.model)
    echo = tr.progress.echo
    where = f"run dir {tr.run.root}" if tr.run else "no run dir (nothing is saved)"
    resumed = f", resumed at step {tr.step}" if tr.step else ""
    echo(f"seqlab: {where}{resumed}", always=True)
    if t.init_from is not None and not tr.step:
        new = tr.warm_started
        echo(
            f"seqlab: weights and tokenizer from {t.init_from} (optimizer, schedule and step "
            f"start afresh); new parameters: {', '.join(new) if new else 'none'}",
            always=True,
        )
    describe = getattr(tr.batcher, "describe", None)  # a task's own batcher says what it reads
    data = (
        describe()
        if describe is not None
        else f"{tr.batcher.num_examples:,} training examples "
        f"({tr.batcher.dropped.count:,} dropped > max_len {t.batch.max_len})"
    )
    echo(
        f"seqlab: task {tr.cfg.task}: {data}; model {tr.cfg.model}: {n_params:,} parameters",
        always=True,
    )
    echo(
        f"seqlab: device {tr.device}, precision {tr.precision} ({t.precision}), "
        f"threads {torch.get_num_threads()}, world size {d.world_size}, seed {t.seed}",
        always=True,
    )
    echo(
        f"seqlab: effective batch = {per_rank:,} tokens/rank × {d.world_size} rank(s) × "
        f"{tr.accum_steps} accum = {total:,} padded tokens per update (budget)",
        always=True,
    )
    if d.is_main and not tr.step:
        tr.progress.record(
            {
                "event": "start",
                "step": 0,
                "parameters": n_params,
                "effective_batch_tokens": total,
                "max_tokens_per_rank": per_rank,
                "world_size": d.world_size,
                "accum_steps": tr.accum_steps,
                "precision": tr.precision,
                "device": str(tr.device),
            },
            echo=False,
        )


def finish(tr: Trainer, stopped: str) -> dict[str, Any]:
    """The ``done`` line and the summary ``fit`` returns."""
    best = {"metric": tr.early.metric, "value": tr.early.best, "step": tr.early.best_step}
    valid = tr.last_valid[1] if tr.last_valid else {}
    minutes, seconds = divmod(int(tr.elapsed), 60)
    shown = ", ".join(f"{k} {v:.4g}" for k, v in valid.items())
    if best["step"] is None:
        best_text = "no validation on the schedule (train.valid_every)"
    else:
        best_text = f"best {best['metric']} {best['value']:.4g} at step {best['step']}"
    tr.progress.echo(
        f"seqlab: done — step {tr.step} ({stopped}) in {minutes}:{seconds:02d}; "
        f"valid {shown}; {best_text}",
        always=True,
    )
    return {
        "step": tr.step,
        "epoch": tr.batcher.epoch,
        "stopped": stopped,
        "elapsed": tr.elapsed,
        "valid": valid,
        "best": best,
        "run_dir": str(tr.run.root) if tr.run else None,
    }
