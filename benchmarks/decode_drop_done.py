"""Translation decoding: beam / greedy search with and without dropping the inputs that
are done.

    OMP_NUM_THREADS=1 python benchmarks/decode_drop_done.py [--sentences 400] [--beam 5]
        [--train-seconds 60] [--d-model 64] [--layers 2] [--reps 3] [--checkpoint RUN]

The model is built as ``benchmarks/decode_row_limits.py`` builds it (a tiny Transformer
trained for ``--train-seconds`` on the shipped Multi30k so that hypotheses end with EOS at
plausible lengths, or a trained run with ``--checkpoint``); ``TranslationTask.translate``
(beam ``--beam``, GNMT α = 0.6, max_len(x) = ⌊1.2·|x| + 10⌋, length-sorted batches within
the token budget) then decodes the first ``--sentences`` test2016 sentences two ways:

- ``keep``: ``beam_search`` / ``greedy`` with ``compact_done=False``: every input keeps
  its rows (K, or 1 for ``--beam 1``) in the decoder's batch until the last input of the
  batch stops (seqlab before 2026-11-25);
- ``drop``: the library's default: the rows of inputs that are done are removed once they
  are an eighth of the batch (``seqlab.decode.state.drop_done_inputs``, called by beam
  search and by ``seqlab.decode.greedy.decode_one_per_row``).

Both run in this one process, interleaved (the order alternates every repetition), on
one thread; printed: decoder calls and decoder rows (Σ over calls of the rows decoded),
median sentences per CPU second and per wall second, and whether the translations are
identical.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.decode_row_limits import train_briefly  # noqa: E402
from seqlab import api  # noqa: E402
from seqlab.decode.beam import beam_search  # noqa: E402
from seqlab.decode.greedy import greedy  # noqa: E402
from seqlab.tasks import translation_eval  # noqa: E402
from seqlab.tasks.translation import TranslationConfig, TranslationTask  # noqa: E402

NAMES = ("keep", "drop")


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """Make the translation task's searches keep done inputs (``keep``) or not."""
    library = translation_eval.beam_search, translation_eval.greedy
    if name == "keep":
        translation_eval.beam_search = functools.partial(beam_search, compact_done=False)
        translation_eval.greedy = functools.partial(greedy, compact_done=False)
    try:
        yield
    finally:
        translation_eval.beam_search, translation_eval.greedy = library


def count_rows(model: torch.nn.Module) -> list[int]:
    """[decoder calls, decoder rows] of ``model.step``, in the returned cell."""
    cell, step = [0, 0], model.step

    def counted(y_prev: torch.Tensor, state: object) -> object:
        cell[0] += 1
        cell[1] += y_prev.size(0)
        return step(y_prev, state)

    model.step = counted  # an instance attribute: the searches call decoder.step
    return cell


def measure(task: TranslationTask, model: torch.nn.Module, args: argparse.Namespace) -> list[str]:
    """Time ``translate`` both ways, interleaved; print and return the table."""
    sources = task.texts["test"][0][: args.sentences]
    cell = count_rows(model)
    cpu: dict[str, list[float]] = {n: [] for n in NAMES}
    wall: dict[str, list[float]] = {n: [] for n in NAMES}
    work: dict[str, tuple[int, int]] = {}
    outputs: dict[str, list[str]] = {}
    for rep in range(args.reps):
        for name in NAMES if rep % 2 == 0 else NAMES[::-1]:
            with variant(name):
                cell[0] = cell[1] = 0
                start, start_cpu = time.perf_counter(), time.process_time()
                outputs[name] = task.translate(
                    model, sources, beam=args.beam, length_penalty=0.6, max_len_a=1.2, max_len_b=10
                )  # the settings the docstring states, whatever the run's task says
                cpu[name].append(time.process_time() - start_cpu)
                wall[name].append(time.perf_counter() - start)
                work[name] = (cell[0], cell[1])
    same = sum(a == b for a, b in zip(outputs["keep"], outputs["drop"], strict=True))
    rows = [
        f"{len(sources)} test2016 sentences, beam {args.beam}, one thread, {args.reps} reps; "
        f"identical translations: {same} / {len(sources)}",
        "",
        "| done inputs | decoder calls | decoder rows | sentences / CPU s | sentences / wall s |",
        "|---|---:|---:|---:|---:|",
    ]
    rate = {}
    for name in NAMES:
        rate[name] = len(sources) / statistics.median(cpu[name])
        rate_wall = len(sources) / statistics.median(wall[name])
        calls, n_rows = work[name]
        rows.append(f"| {name} | {calls} | {n_rows:,} | {rate[name]:.1f} | {rate_wall:.1f} |")
    rows.append("")
    rows.append(f"speed-up (CPU s): {rate['drop'] / rate['keep']:.2f}x")
    print("\n".join(rows))
    return rows


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(prog="benchmarks/decode_drop_done.py")
    p.add_argument("--sentences", type=int, default=400)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--train-seconds", type=float, default=60.0)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--checkpoint", default=None, help="a trained translation run instead")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--vocab-size", type=int, default=8000)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.checkpoint:
        loaded = api.load(args.checkpoint)
        print(f"loaded {args.checkpoint}")
        return measure(loaded.task, loaded.model.eval(), args)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TranslationConfig(vocab_size=args.vocab_size, cache_dir=tmp)
        task = TranslationTask(cfg)
        task.prepare()
        model = train_briefly(task, args.train_seconds, args.d_model, args.layers)
        return measure(task, model, args)


if __name__ == "__main__":
    main()
