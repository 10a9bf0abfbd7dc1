"""Translation decoding: one search per group of equal length limits vs per-row limits.

    OMP_NUM_THREADS=1 python benchmarks/decode_row_limits.py [--sentences 200] [--beam 5]
        [--train-seconds 60] [--d-model 64] [--layers 2] [--reps 5] [--vocab-size 8000]
        [--cache-dir DIR] [--checkpoint RUN]

Builds the translation task on the shipped Multi30k (joint BPE tokenizer trained on the
shipped train split), trains a tiny Transformer (``--d-model``, ``--layers`` + ``--layers``,
tied embeddings) for ``--train-seconds`` so that hypotheses end with EOS at plausible
lengths — or, with ``--checkpoint``, loads a trained run and its tokenizer instead — then
times ``TranslationTask.translate`` (beam 5, GNMT α = 0.6, max_len(x) = ⌊1.2·|x| + 10⌋)
on the first ``--sentences`` test2016 sentences:

- ``grouped``: the planner seqlab used before per-row limits, kept only here
  (``grouped_plan``): sorted by source length, then one search per group of sentences
  with the same limit, each group cut to the token budget;
- ``per-row``: the library's ``plan_batches``: sorted, cut to the token budget only, each
  row with its own limit (the searches' (B,) ``max_len``).

Both run in this one process, interleaved (the order alternates every repetition), on one
thread; the median sentences/s of ``--reps`` repetitions is printed, per CPU second of
this process (``time.process_time``: on a shared, busy machine the wall clock mostly
measures the other processes) and per wall-clock second, with the number of searches and
decoder calls each path makes. The translations of the two paths are checked to be
identical.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from itertools import groupby

import torch

from seqlab import api
from seqlab.models.transformer import TransformerConfig, TransformerSeq2Seq
from seqlab.tasks import translation_eval
from seqlab.tasks.translation import TranslationConfig, TranslationTask
from seqlab.tasks.translation_eval import SearchSettings, length_limit


def grouped_plan(src_lengths: Sequence[int], settings: SearchSettings) -> list[list[int]]:
    """The old planner: longest first, one length limit per batch, within the budget."""
    a, b, K = settings.max_len_a, settings.max_len_b, settings.beam
    order = sorted(range(len(src_lengths)), key=lambda i: (-src_lengths[i], i))
    batches: list[list[int]] = []
    for limit, members in groupby(order, key=lambda i: length_limit(src_lengths[i], a, b)):
        group = list(members)
        width = max(src_lengths[group[0]] + 1, limit)  # +1: the source EOS
        per_batch = max(1, settings.batch_tokens // (K * width))
        batches.extend(group[s : s + per_batch] for s in range(0, len(group), per_batch))
    return batches


@contextlib.contextmanager
def planner(name: str, searches: list[int]) -> Iterator[None]:
    """Make ``decode_ids`` plan with ``name``'s planner; count its batches (= searches)."""
    library = translation_eval.plan_batches
    chosen = grouped_plan if name == "grouped" else library

    def counted(src_lengths: Sequence[int], settings: SearchSettings) -> list[list[int]]:
        batches = chosen(src_lengths, settings)
        searches.append(len(batches))
        return batches

    translation_eval.plan_batches = counted
    try:
        yield
    finally:
        translation_eval.plan_batches = library


def count_steps(model: torch.nn.Module) -> list[int]:
    """Count ``model.step`` calls (decoder calls of the searches) in the returned cell."""
    calls, step = [0], model.step

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return step(*args, **kwargs)

    model.step = counted  # an instance attribute: the searches call decoder.step
    return calls


def train_briefly(
    task: TranslationTask, seconds: float, d_model: int, layers: int, seed: int = 0
) -> TransformerSeq2Seq:
    """A tiny Transformer (4 heads, d_ff = 4·d), Adam 3e-3, batches of 64 pairs."""
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        d_model=d_model, n_heads=4, d_ff=4 * d_model, encoder_layers=layers,
        decoder_layers=layers, dropout=0.0, share_embeddings=True,
    )  # fmt: skip
    model = TransformerSeq2Seq(cfg, **task.model_kwargs())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    rng = random.Random(seed)
    n = len(task.ids["train"][0])  # encodes the split before the clock starts
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        out = task.loss(model, task.collate(rng.sample(range(n), 64)), label_smoothing=0.1)
        (out.loss_sum / out.n_tokens).backward()
        opt.step()
        opt.zero_grad()
        steps += 1
    loss = float(out.nll_sum) / out.n_tokens
    print(f"trained {steps} steps in {seconds:g} s, last loss {loss:.2f}")
    return model.eval()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/decode_row_limits.py")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--train-seconds", type=float, default=60.0)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--checkpoint", default=None, help="a trained translation run instead")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--cache-dir", default=None, help="tokenizer cache (default: a temp dir)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.checkpoint:
        loaded = api.load(args.checkpoint)
        print(f"loaded {args.checkpoint}")
        return measure(loaded.task, loaded.model, args)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TranslationConfig(vocab_size=args.vocab_size, cache_dir=args.cache_dir or tmp)
        task = TranslationTask(cfg)
        task.prepare()
        model = train_briefly(task, args.train_seconds, args.d_model, args.layers)
        return measure(task, model, args)


def measure(task: TranslationTask, model: torch.nn.Module, args: argparse.Namespace) -> int:
    """Time ``translate`` under both planners, interleaved; print the table."""
    sources = task.texts["test"][0][: args.sentences]
    n_src = [len(task.src_tok.encode(s)) for s in sources]
    limits = [length_limit(n, 1.2, 10) for n in n_src]
    print(
        f"{len(sources)} test2016 sentences, {min(n_src)}–{max(n_src)} source subwords, "
        f"{len(set(limits))} distinct limits"
    )

    names = ("grouped", "per-row")
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    searches: dict[str, list[int]] = {name: [] for name in names}
    calls = count_steps(model)
    steps: dict[str, int] = {}
    outputs: dict[str, list[str]] = {}
    for rep in range(args.reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            with planner(name, searches[name]):
                calls[0] = 0
                start, start_cpu = time.perf_counter(), time.process_time()
                outputs[name] = task.translate(
                    model, sources, beam=args.beam, length_penalty=0.6, max_len_a=1.2, max_len_b=10
                )  # the settings the docstring states, whatever the run's task says
                cpu[name].append(time.process_time() - start_cpu)
                wall[name].append(time.perf_counter() - start)
                steps[name] = calls[0]
        if outputs["grouped"] != outputs["per-row"]:
            raise AssertionError("the two planners gave different translations")
    records = task.translate_detailed(model, sources, beam=args.beam)
    out_len = [len(r.hypotheses[0].ids) + 1 for r in records]  # + EOS, when it ended
    cut = sum(n > L for n, L in zip(out_len, limits))  # no EOS: |Y| = L, ids = L
    print(f"outputs: mean {statistics.mean(out_len):.1f} tokens (EOS counted), {cut} at the limit")
    print("identical translations: yes")
    print(
        "| planner | searches | decoder calls | sentences / CPU s | sentences / wall s "
        "| CPU s per run |"
    )
    print("|---|---:|---:|---:|---:|---|")
    rate, rate_wall = {}, {}
    for name in names:
        rate[name] = len(sources) / statistics.median(cpu[name])
        rate_wall[name] = len(sources) / statistics.median(wall[name])
        runs = ", ".join(f"{t:.2f}" for t in cpu[name])
        print(
            f"| {name} | {searches[name][0]} | {steps[name]} | {rate[name]:.1f} "
            f"| {rate_wall[name]:.1f} | {runs} |"
        )
    print(
        f"speed-up: {rate['per-row'] / rate['grouped']:.2f}x per CPU second, "
        f"{rate_wall['per-row'] / rate_wall['grouped']:.2f}x per wall second"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
