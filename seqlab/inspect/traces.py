"""Traces: what a trained model computed for given inputs, as records and heatmaps.

``trace(loaded, inputs)`` runs the checkpoint's task's own inspection method on each input
and returns one :class:`~seqlab.inspect.trace_format.Trace` per input; ``save`` writes it
(``<stem>.json`` + ``<stem>.npz``) and, with ``png``, its heatmaps (``plot_trace``, which
reads only the record, so a saved trace can be re-plotted).

    loaded = seqlab.load("runs/pg")
    (record,) = trace(loaded, ["Ein Mann namens Zyxwq läuft."])
    save(record, "runs/pg/traces/trace-0", png=True)

Per task (inputs → the task's method → arrays and their axes):

* translation: sentences → ``translate_detailed(return_attention=True)`` → ``cross`` and,
  per model, ``encoder_self`` / ``decoder_self``: (layer, head, rows, cols) for the
  Transformer, (layer, rows, cols) for ConvS2S, (rows, cols) for Bahdanau / Luong.
* copy_translation: sentences → ``explain`` → ``attention``, ``coverage`` (target,
  source); ``p_gen``, ``cov_loss`` (target).
* lm: texts → ``explain`` → ``log_p`` (target); pointer_sentinel also ``gate`` (target),
  ``pointer`` (target, input); transformer_lm ``self_attention`` (layer, head, target,
  input).
* pointer (pointer_net): example indices of ``split`` → ``decode``, then
  ``attention_maps`` on the decoded output → ``p_position`` (target, input), ``points``.
* ntm: sequence lengths → ``trace(memory=True)`` → ``read_weights``, ``write_weights``
  (time, head, location); ``memory`` (time, location, width); ``x``, ``y``, ``mask``,
  ``outputs`` (time, …).
* caption: scene indices of ``split`` → ``describe`` → ``alpha`` (target, region);
  ``beta`` (target); ``image`` (y, x, rgb).

Weights are what the model used, not explanations of its output (Jain & Wallace 2019).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqlab.errors import SeqlabError
from seqlab.inspect.trace_format import Trace, stem_of, write_trace

__all__ = ["TRACED_TASKS", "plot_trace", "save", "trace"]

# decoder-side maps of translation models: name → (row axis, column axis, meaning)
_MAPS = {
    "cross": ("target", "source", "α: weight of source j when emitting target i; rows sum to 1"),
    "encoder_self": ("source", "source", "encoder self-attention over the source; rows sum to 1"),
    "decoder_self": (
        "target",
        "target",
        "decoder self-attention (causal) over the inputs ⟨s⟩ y_1 … y_i; rows sum to 1",
    ),
    "coverage": ("target", "source", "coverage c^t = Σ_{t'<t} a^{t'}"),
}


AXES = {
    "attention": ("target", "source"),
    "p_gen": ("target",),
    "coverage": ("target", "source"),
    "cov_loss": ("target",),
    "gate": ("target",),
    "pointer": ("target", "input"),
    "log_p": ("target",),
    "self_attention": ("layer", "head", "target", "input"),
    "p_position": ("target", "input"),
    "points": ("point", "coordinate"),
    "alpha": ("target", "region"),
    "beta": ("target",),
    "image": ("y", "x", "rgb"),
}
MEANING = {
    "attention": "a^t (See et al. 2017, eq. 2): rows sum to 1",
    "p_gen": "p_gen_t in [0, 1] (eq. 8): share of P_vocab; 1 − p_gen copies by a^t",
    "coverage": "c^t = Σ_{t'<t} a^{t'} (eq. 10): what step t had attended before; c^0 = 0",
    "cov_loss": "covloss_t = Σ_i min(a_i^t, c_i^t) (eq. 12)",
    "gate": "g_t (Merity et al. 2016, eq. 5): the sentinel's share; p = g·p_vocab + Σ a_i",
    "pointer": "a_ti: pointer weight on input i (i <= t, in the window); Σ_i a_ti = 1 − g_t",
    "log_p": "ln p(target_t | inputs 0 … t)",
    "self_attention": "α^l_h[t, i] (Vaswani et al. 2017, §3.2.3): weight of input i when "
    "layer l, head h computes position t; 0 for i > t; rows sum to 1",
    "p_position": "p(C_t = j | C_<t, P) (Vinyals et al. 2015, eq. 3) along the decoded "
    "output: column 0 is END, column j the input point j − 1; rows sum to 1; 0 where "
    "task.mask_chosen masks a point already chosen",
    "points": "the input points P_j (sort: one number, hull: x and y)",
    "alpha": "α_ti (Xu et al. 2015): weight of region i = cell (i // w, i % w) of info.grid "
    "when emitting word t; rows sum to 1",
    "beta": "gate β_t = σ(f_β(h_{t−1})) in [0, 1] scaling the context",
    "image": "the scene's pixels (uint8)",
}


def _texts(inputs: Sequence[Any]) -> list[str]:
    texts = [str(x) for x in inputs]
    if not texts or any(not t.strip() for t in texts):
        raise SeqlabError("give at least one non-empty text to trace")
    return texts


def _ints(inputs: Sequence[Any], what: str, low: int, high: int | None = None) -> list[int]:
    """``inputs`` as integers in [low, high); ``what`` names them in the error (plural)."""
    try:
        values = [int(x) for x in inputs]
    except ValueError:
        raise SeqlabError(f"{what} must be integers, got {list(inputs)}") from None
    bad = [v for v in values if v < low or (high is not None and v >= high)]
    if bad:
        upper = f" and < {high}" if high is not None else ""
        raise SeqlabError(f"{what} must be >= {low}{upper}, got {bad}")
    return values


def _translation(loaded: Any, inputs: Sequence[Any], base: dict, beam: int, **_: Any) -> list:
    done = loaded.task.translate_detailed(
        loaded.model, _texts(inputs), beam=beam, return_attention=True
    )
    records = []
    for t in done:
        if not t.attention:
            raise SeqlabError(f"model {loaded.config.model} exposes no attention maps to trace")
        tokens = {"source": t.source_pieces, "target": t.target_pieces}
        info = {"text": t.source, "output": t.text, "beam": beam, "score": t.hypotheses[0].score}
        record = Trace("translation", tokens=tokens, info=info, **base)
        for name, weights in t.attention.items():
            rows, cols, meaning = _MAPS.get(name, ("row", "column", name))
            lead = {2: (), 3: ("layer",), 4: ("layer", "head")}[weights.dim()]
            record.add(name, weights, (*lead, rows, cols), meaning)  # 3-D: per-layer, one head
        records.append(record)
    return records


def _copy_translation(loaded: Any, inputs: Sequence[Any], base: dict, beam: int, **_: Any):
    from seqlab.tasks.copy_translation import detokenize

    records = []
    for text in _texts(inputs):
        out = loaded.task.explain(loaded.model, text, beam=beam)
        tokens = {"source": out["source"], "target": out["output"]}
        info = {"text": text, "output": detokenize(out["output"][:-1]), "beam": beam}
        record = Trace("copy_translation", tokens=tokens, info=info, **base)
        for name in ("attention", "p_gen", "coverage", "cov_loss"):
            record.add(name, out[name], AXES[name], MEANING[name])
        records.append(record)
    return records


def _lm(loaded: Any, inputs: Sequence[Any], base: dict, **_: Any) -> list[Trace]:
    records = []
    for text in _texts(inputs):
        out = loaded.task.explain(loaded.model, text)
        tokens = {"input": out["input"], "target": out["target"]}
        info = {"text": text, "log_prob": float(out["log_p"].double().sum())}
        record = Trace("lm", tokens=tokens, info=info, **base)
        for name in ("gate", "pointer", "log_p", "self_attention"):
            if name in out:
                record.add(name, out[name], AXES[name], MEANING[name])
        records.append(record)
    return records


def _ntm(loaded: Any, inputs: Sequence[Any], base: dict, seed: int, **_: Any) -> list[Trace]:
    from seqlab.inspect.memory import ntm_record

    task = loaded.task
    lengths = _ints(inputs or [task.cfg.max_len], "sequence lengths", task.bits.min_length())
    records = []
    for n in lengths:
        arrays = task.trace(loaded.model, n, seed=seed, memory=True)
        info = {"problem": task.cfg.problem, "length": n, "seed": seed}
        records.append(ntm_record(arrays, info=info, **base))
    return records


def _caption(loaded: Any, inputs: Sequence[Any], base: dict, beam: int, split: str, **_: Any):
    from seqlab.data.scenes import render

    task = loaded.task
    n = len(task.scenes(split))
    indices = _ints(inputs or [0], f"scene indices of split {split!r}", 0, n)
    records = []
    for i, d in zip(indices, task.describe(loaded.model, split, indices, beam)):
        rows, image = d.alpha.shape[0], render(d.scene)  # (T, L), (H, W, 3)
        info = {
            "split": split,
            "index": i,
            "output": " ".join(d.words),
            "reference": d.scene.caption(),
            "grid": list(loaded.model.grid),
            "boxes": [list(o.box) for o in d.scene.objects],
            "beam": beam,
        }
        record = Trace("caption", tokens={"target": [*d.words, "</s>"][:rows]}, info=info, **base)
        for name, value in (("alpha", d.alpha), ("beta", d.beta[:rows]), ("image", image)):
            record.add(name, value, AXES[name], MEANING[name])
        records.append(record)
    return records


def _pointer(loaded: Any, inputs: Sequence[Any], base: dict, beam: int, split: str, **_: Any):
    """Pointer network: decode examples of ``split`` (``test``: the training n's test set)
    with ``beam``, then teacher-force the model on its own output for the pointer
    distribution of every step (``PointerNet.attention_maps``)."""
    from seqlab.models.pointer_net import END

    task, model = loaded.task, loaded.model
    if task.cfg.input != "vectors":
        raise SeqlabError(
            f"{loaded.checkpoint}: a seq2seq baseline ({loaded.config.model}) has no pointer "
            "distribution; trace a pointer_net run"
        )
    name = f"test_n{task.cfg.n}" if split == "test" else split
    examples = task.examples(name)
    indices = _ints(inputs or [0], f"example indices of split {name!r}", 0, len(examples))
    chosen = [examples[i] for i in indices]
    decoded = task.decode(model, chosen, beam)
    cfg = task.cfg
    device = next(model.parameters()).device
    records = []
    for i, (points, canonical), out in zip(indices, chosen, decoded):
        src = torch.as_tensor(points, dtype=torch.float32, device=device)[None]  # (1, n, D)
        mask = torch.ones(src.shape[:2], dtype=torch.bool, device=device)  # (1, n)
        y_in = torch.tensor([[END, *(int(j) + 1 for j in out)]], device=device)  # (1, T)
        dist = model.attention_maps(src, mask, y_in, torch.ones_like(y_in, dtype=torch.bool))
        info = {"problem": cfg.problem, "split": name, "index": i, "beam": beam,
                "output": out.tolist(), "reference": canonical.tolist(),
                "exact": bool(np.array_equal(out, canonical))}  # fmt: skip
        n = len(points)
        tokens = {"input": ["END", *map(str, range(n))], "target": [*map(str, out), "END"]}
        record = Trace("pointer", tokens=tokens, info=info, **base)
        record.add("p_position", dist["pointer"][0], AXES["p_position"], MEANING["p_position"])
        record.add("points", torch.as_tensor(points), AXES["points"], MEANING["points"])
        records.append(record)
    return records


_BUILDERS: dict[str, Callable[..., list[Trace]]] = {
    "translation": _translation,
    "copy_translation": _copy_translation,
    "lm": _lm,
    "ntm": _ntm,
    "caption": _caption,
    "pointer": _pointer,
}
TRACED_TASKS = tuple(_BUILDERS)


def trace(
    loaded: Any,
    inputs: Sequence[Any] = (),
    *,
    beam: int = 1,
    split: str = "test",
    seed: int = 0,
) -> list[Trace]:
    """One record per input of ``loaded`` (a ``seqlab.load`` result): sentences or texts
    for translation, copy_translation and lm; sequence lengths for ntm (default: the
    task's max_len; ``seed`` picks the example); scene indices of ``split`` for caption
    (default 0). ``beam`` 1 decodes greedily. Raises SeqlabError for other tasks and bad
    inputs."""
    builder = _BUILDERS.get(loaded.config.task)
    if builder is None:
        raise SeqlabError(
            f"no traces for task {loaded.config.task!r} ({loaded.checkpoint}); traces exist "
            f"for {', '.join(TRACED_TASKS)}"
        )
    if beam < 1:
        raise SeqlabError(f"--beam must be >= 1, got {beam}")
    base = {
        "model": loaded.config.model,
        "task": loaded.config.task,
        "checkpoint": str(loaded.checkpoint),
        "step": int(loaded.step),
    }
    with torch.no_grad():
        return builder(loaded, list(inputs), base, beam=beam, split=split, seed=seed)


def _png(stem: Path, suffix: str = "") -> Path:
    return stem.with_name(f"{stem.name}{suffix}.png")


def plot_trace(record: Trace, stem: str | Path) -> list[Path]:
    """Heatmaps of a record, read from the record alone: ``<stem>.png`` (attention, pointer,
    memory weightings or caption maps) and for copy_translation ``<stem>-coverage.png``."""
    from seqlab.inspect.attention import plot_attention

    stem, a, tok = stem_of(stem), record.arrays, record.tokens
    title = f"{record.model or record.kind}, step {record.step}"
    if record.kind == "translation":
        name = "cross" if "cross" in a else next(iter(a))
        weights = torch.from_numpy(a[name])
        if record.axes[name][0] == "layer" and weights.dim() == 3:
            weights = weights[:, None]  # (L, 1, rows, cols): one head per layer
        rows, cols = record.axes[name][-2:]
        return [plot_attention(weights, tok[cols], tok[rows], _png(stem), f"{title}, {name}")]
    if record.kind == "copy_translation":
        rows = [f"{w} ({p:.2f})" for w, p in zip(tok["target"], a["p_gen"])]
        att = plot_attention(
            torch.from_numpy(a["attention"]), tok["source"], rows, _png(stem), title,
            caption="a^t (rows sum to 1); row label: word (p_gen)",
        )  # fmt: skip
        cov = plot_attention(
            torch.from_numpy(a["coverage"]), tok["source"], rows, _png(stem, "-coverage"), title,
            caption="coverage c^t = Σ_{t'<t} a^{t'}, scaled to its maximum", vmax=None,
        )  # fmt: skip
        return [att, cov]

    def one_map(name: str, rows: list[str], caption: str, heading: str = title) -> list[Path]:
        weights = torch.from_numpy(a[name])
        return [plot_attention(weights, tok["input"], rows, _png(stem), heading, caption=caption)]

    if record.kind == "lm" and "self_attention" in a:
        caption = "masked self-attention α (rows sum to 1); row: the token predicted"
        return one_map("self_attention", tok["target"], caption)
    if record.kind == "lm":
        rows = [f"{w} (g {g:.2f})" for w, g in zip(tok["target"], a["gate"])]
        caption = "pointer weights a_i (row sum = 1 − g); row label: word (sentinel g)"
        return one_map("pointer", rows, caption)
    if record.kind == "pointer":
        info = record.info
        heading = f"{title}, {info['problem']} {info['split']} #{info['index']}"
        caption = "p(C_t = j | C_<t, P): rows sum to 1; row label: the index chosen"
        return one_map("p_position", tok["target"], caption, heading)
    if record.kind == "ntm":
        from seqlab.inspect.memory import plot_memory

        return [plot_memory(a, _png(stem), title=title)]
    if record.kind == "caption":
        from seqlab.inspect.captions import CaptionPanel, plot_caption_attention

        info = record.info
        panel = CaptionPanel(
            image=a["image"],
            words=info["output"].split(),
            alpha=torch.from_numpy(a["alpha"]),
            grid=tuple(info["grid"]),
            boxes=[tuple(b) for b in info["boxes"]],
            beta=torch.from_numpy(a["beta"]),
            reference=info["reference"],
        )
        return [plot_caption_attention([panel], _png(stem), title=title)]
    raise SeqlabError(f"no heatmap for trace kind {record.kind!r}")


def save(record: Trace, stem: str | Path, png: bool = False) -> list[Path]:
    """Write ``<stem>.json`` + ``<stem>.npz`` and, with ``png``, the heatmaps."""
    files = list(write_trace(record, stem))
    return files + (plot_trace(record, stem) if png else [])
