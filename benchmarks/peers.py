"""Issue 11: seqlab against its peers on this machine, in one process, round-robin.

    python benchmarks/peers.py            # everything (~10–15 min on 2 idle cores)
    python benchmarks/peers.py --quick    # small-config bf16 training + beam-5 ratios (< 3 min)
    python benchmarks/peers.py --impls seqlab,hf --sizes base --sections train
    python benchmarks/peers.py --tiny --out /tmp/r.md --json /tmp/p.json   # smoke test
    python benchmarks/peers.py --device cuda   # the same on a GPU (its own section + JSON)

Sections (each: every variant round-robin, median of repetitions after warm-up):

* matmul peak: fp32 and bf16 ``torch.matmul`` (the MFU denominators), measured first;
* ``train``: training step of seqlab's ``transformer`` (its Trainer's step path) vs a plain
  ``nn.Transformer`` vs HF ``MarianMTModel`` vs OpenNMT-py 3.0.4 (when installed), small
  (d 256, 3+3) and base (d 512, 6+6),
  fp32 and bf16 autocast: target tokens/s, GFLOP/s, MFU, peak RSS (benchmarks/peers_train.py);
* ``decode``: 100 sentences in batches of 32, exactly 30 new tokens, beam 5 and greedy,
  seqlab.decode vs HF ``generate``: sentences/s, ms per step; plus the check that seqlab's
  batched cached decode equals its unbatched uncached decode (benchmarks/peers_decode.py);
* ``rnn``: ``seqlab.nn.Recurrent`` vs ``nn.LSTM`` / ``nn.GRU`` (benchmarks/peers_rnn.py).

A peer whose library is missing gets a row saying "not installed" (``pip install -e
'.[bench]'`` installs them). Writes the section ``## Performance vs peers`` of ``--out``
(docs/results.md) and the record ``--json`` (docs/figures/peers.json; beside ``--out`` when
``--out`` is another file). Nothing else may
run on the machine meanwhile (PEERS.md: a pip install halved the GEMM rate).

``--device cuda`` runs every section on the GPU (models, batches, autocast and the matmul
peak there, 8192² by default; each timed repetition synchronised) and writes its own
section, ``## Performance vs peers on a GPU``, and ``docs/figures/peers-cuda.json``, so the
CPU numbers stay beside it. Peak memory is then also the GPU's (allocated, MiB).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import math
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks import peers_report as report  # noqa: E402
from benchmarks import peers_rnn as prnn  # noqa: E402
from benchmarks import peers_train as ptrain  # noqa: E402
from benchmarks.peers_timing import Timing, matmul_peak, round_robin  # noqa: E402
from benchmarks.results_doc import beside_out, machine_description, write_section  # noqa: E402
from seqlab.inspect.figures import write_json  # noqa: E402
from seqlab.train.allocator import keep_freed_memory  # noqa: E402
from seqlab.train.precision import read_cpu_flags  # noqa: E402

SECTIONS = ("train", "decode", "rnn")


ISSUE_BATCH = 64  # issue 11's training shape: 64 pairs of 14–20 tokens


@dataclass(frozen=True)
class Plan:
    """What to measure and how often (``--quick`` and ``--tiny`` shrink it)."""

    sizes: tuple[pm.Size, ...] = (pm.SMALL, pm.BASE)
    precisions: tuple[str, ...] = ("fp32", "bf16")
    impls: tuple[str, ...] = ptrain.IMPLEMENTATIONS
    sections: tuple[str, ...] = SECTIONS
    batch: int = ISSUE_BATCH
    train_steps: dict[str, int] | None = None  # batches per repetition, per size name
    train_reps: dict[str, int] | None = None
    beams: tuple[int, ...] = (5, 1)
    decode_precisions: tuple[str, ...] = ("fp32", "bf16")
    sentences: int = 100
    decode_batch: int = 32
    new_tokens: int = 30
    decode_reps: int = 3
    compiled_decode: bool = False  # seqlab decodes through its compiled step (--compiled-decode)
    check_sentences: int = 100
    rnn: prnn.RNNShape = prnn.RNNShape()
    rnn_steps: int = 4
    rnn_reps: int = 7
    peak_n: int = 2048
    peak_reps: int = 5
    device: str = "cpu"

    def steps(self, size: pm.Size) -> int:
        return (self.train_steps or {}).get(size.name, 4 if size.name != "base" else 2)

    def reps(self, size: pm.Size) -> int:
        return (self.train_reps or {}).get(size.name, 5 if size.name != "base" else 3)


QUICK = Plan(
    sizes=(pm.SMALL,),
    precisions=("bf16",),
    sections=("train", "decode"),
    train_reps={"small": 3},
    beams=(5,),
    decode_precisions=("bf16",),
    check_sentences=8,
    peak_reps=3,
)
# Tiny shapes: seconds, for tests and smoke runs; the numbers mean nothing.
TINY = Plan(
    sizes=(pm.TINY,),
    batch=8,
    train_steps={"tiny": 2},
    train_reps={"tiny": 2},
    sentences=6,
    decode_batch=4,
    new_tokens=5,
    decode_reps=2,
    check_sentences=6,
    rnn=prnn.RNNShape(2, 8, 16, 5, 4),
    rnn_steps=2,
    rnn_reps=2,
    peak_n=64,
    peak_reps=2,
)


def _rss(t: Timing) -> dict[str, float]:
    out = {"rss_mib": t.rss_mib, "rss_delta_mib": t.rss_delta_mib, "cv": t.cv}
    if math.isfinite(t.gpu_mib):  # measured (CUDA)
        out |= {"gpu_mib": t.gpu_mib, "gpu_delta_mib": t.gpu_delta_mib}
    return out


def missing_row(section: str, what: str, impl: str, precision: str, why: str) -> dict[str, Any]:
    return {"section": section, "what": what, "impl": impl, "precision": precision, "status": why}


def _fails(run: Callable[[], Any]) -> str:
    """ "" when one call of ``run`` works, else "failed: <torch's error, first line>"."""
    try:
        run()
    except RuntimeError as exc:
        return "failed: " + (str(exc).splitlines() or ["RuntimeError"])[0][:160]
    return ""


def _build(impl: str, build: Callable[[], Any]) -> tuple[Any, str]:
    """(object, "ok") or (None, "not installed: …") when the peer's library is missing."""
    try:
        return build(), "ok"
    except ImportError as exc:
        return None, f"not installed ({exc.name or exc}; pip install -e '.[bench]')"


def measure_train(plan: Plan, peak: dict[str, float], log: Callable) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size in plan.sizes:
        log(f"[train {size.name}] building {', '.join(plan.impls)}")
        torch.manual_seed(0)
        batches = pm.make_batches(plan.steps(size), size, plan.batch)
        flops = sum(pm.batch_flops(size, b) for b in batches)
        batches = [b.to(plan.device) for b in batches]
        variants, built = {}, {}
        for impl in plan.impls:
            trainee, status = _build(
                impl, lambda i=impl, s=size: ptrain.build_trainee(i, s, plan.device)
            )
            for prec in plan.precisions:
                if trainee is None:
                    rows.append(missing_row("train", size.name, impl, prec, status))
                else:
                    built[(impl, prec)] = trainee
                    variants[f"{impl} {prec}"] = ptrain.train_rep(trainee, batches, prec)
        timings = round_robin(variants, plan.reps(size), warmup=1, log=log, device=plan.device)
        for (impl, prec), _ in built.items():
            t = timings[f"{impl} {prec}"]
            gflop_s = flops / t.median_s / 1e9
            rows.append(
                {
                    "section": "train",
                    "what": size.name,
                    "impl": impl,
                    "precision": prec,
                    "status": "ok",
                    "rate": t.rate,
                    "unit": "target tokens/s",
                    "ms": 1000 * t.median_s / len(batches),
                    "gflop_s": gflop_s,
                    "mfu": gflop_s / peak[prec],
                    **_rss(t),
                }
            )
        del built, variants, timings
        gc.collect()
    return rows


def measure_decode(plan: Plan, log: Callable) -> tuple[list[dict[str, Any]], list[dict]]:
    size = plan.sizes[0] if plan.sizes[0].name == "tiny" else pm.SMALL
    torch.manual_seed(0)
    sources = [s for s, _ in pm.make_pairs(plan.sentences, size, seed=1)]
    batches = pdec.source_batches(sources, plan.decode_batch, plan.device)
    builders = {
        "seqlab": lambda: pm.build_seqlab(size)[0].to(plan.device),
        "hf": lambda: pm.build_marian(size).to(plan.device),
    }
    rows: list[dict[str, Any]] = []
    variants, models = {}, {}
    for impl in (i for i in plan.impls if i in builders):
        model, status = _build(impl, builders[impl])
        for beam in plan.beams:
            for prec in plan.decode_precisions:
                what = "greedy" if beam == 1 else f"beam {beam}"
                if model is None:
                    rows.append(missing_row("decode", what, impl, prec, status))
                    continue
                models[(impl, what, prec)] = model
                how = "seqlab-compiled" if impl == "seqlab" and plan.compiled_decode else impl
                variants[f"{impl} {what} {prec}"] = pdec.decode_rep(
                    how, model, batches, beam, plan.new_tokens, prec
                )
    log(f"[decode] {len(variants)} variants, {plan.sentences} sentences")
    timings = round_robin(variants, plan.decode_reps, warmup=1, log=log, device=plan.device)
    steps = len(batches) * plan.new_tokens
    for impl, what, prec in models:
        t = timings[f"{impl} {what} {prec}"]
        ms = 1000 * t.median_s / steps
        rows.append(
            {
                "section": "decode",
                "what": what,
                "impl": impl,
                "precision": prec,
                "status": "ok",
                **(
                    {"label": "seqlab (compiled step)"}
                    if impl == "seqlab" and plan.compiled_decode
                    else {}
                ),
                "rate": t.rate,
                "unit": "sentences/s",
                "ms": ms,
                **_rss(t),
            }
        )
    checks = []
    seqlab_model = next((m for (i, _, _), m in models.items() if i == "seqlab"), None)
    if seqlab_model is not None and plan.check_sentences:
        for beam in plan.beams:
            same, total = pdec.check_cached_batched(
                seqlab_model, sources[: plan.check_sentences], beam, plan.new_tokens,
                plan.decode_batch,
            )  # fmt: skip
            name = "greedy" if beam == 1 else f"beam {beam}"
            checks.append({"search": name, "same": same, "total": total, "n_new": plan.new_tokens})
            log(f"[decode] check {name}: {same}/{total} identical")
    return rows, checks


def measure_rnn(plan: Plan, peak: dict[str, float], log: Callable) -> list[dict[str, Any]]:
    s = plan.rnn
    variants, keys, rows = {}, [], []
    for kind in ("lstm", "gru"):
        for impl in ("seqlab", "nn"):
            torch.manual_seed(0)
            module = prnn.build_rnn(impl, kind, s)
            for prec in plan.precisions:
                run = prnn.rnn_rep(module, s, prec, plan.rnn_steps, device=plan.device)
                failure = _fails(run)
                if failure:  # e.g. nn.LSTM under bf16 autocast where oneDNN lacks bf16
                    log(f"[rnn] {impl} {kind} {prec}: {failure}")
                    rows.append(missing_row("rnn", kind, impl, prec, failure))
                    continue
                keys.append((kind, impl, prec))
                variants[f"{impl} {kind} {prec}"] = run
    log(f"[rnn] {len(variants)} variants")
    timings = round_robin(variants, plan.rnn_reps, warmup=1, log=log, device=plan.device)
    for kind, impl, prec in keys:
        t = timings[f"{impl} {kind} {prec}"]
        gflop_s = prnn.rnn_flops(kind, s) * plan.rnn_steps / t.median_s / 1e9
        rows.append(
            {
                "section": "rnn",
                "what": kind,
                "impl": impl,
                "label": "seqlab Recurrent" if impl == "seqlab" else f"nn.{kind.upper()}",
                "precision": prec,
                "status": "ok",
                "rate": t.rate,
                "unit": "tokens/s",
                "ms": 1000 * t.median_s / plan.rnn_steps,
                "gflop_s": gflop_s,
                "mfu": gflop_s / peak[prec],
                **_rss(t),
            }
        )
    return rows


def versions() -> str:
    out = [f"torch {torch.__version__}"]
    for dist in ("transformers", "OpenNMT-py"):
        try:
            out.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{dist} not installed")
    return ", ".join(out)


def machine() -> str:
    """CPU, cores, torch, threads, Python (and the GPUs where any is visible), CPU flags."""
    flags = sorted(read_cpu_flags() & {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{machine_description()}; CPU flags {', '.join(flags) or 'none'}; ATen {capability}"


def run(plan: Plan, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure everything in ``plan``; returns the JSON record (rows, ratios, checks)."""
    # The MFU denominators: only the precisions that training / the RNN rows use.
    mfu_precisions = plan.precisions if {"train", "rnn"} & set(plan.sections) else ()
    log(f"[peak] matmul {' / '.join(mfu_precisions) or '(not needed)'}")
    peak_t = (
        matmul_peak(
            plan.peak_n, plan.peak_reps, log=log, precisions=mfu_precisions, device=plan.device
        )
        if mfu_precisions
        else {}
    )
    peak = {k: t.rate / 1e9 for k, t in peak_t.items()}
    record: dict[str, Any] = {"peak": {**peak, "n": plan.peak_n}, "rows": [], "checks": []}
    if "train" in plan.sections:
        record["rows"] += measure_train(plan, peak, log)
    if "decode" in plan.sections:
        rows, checks = measure_decode(plan, log)
        record["rows"] += rows
        record["checks"] = checks
    if "rnn" in plan.sections:
        record["rows"] += measure_rnn(plan, peak, log)
    record["ratios"] = report.ratios(record["rows"], with_targets=issue_shapes(plan))
    record["versions"] = versions()
    sizes = ", ".join(f"{s.name} {plan.reps(s)} reps × {plan.steps(s)} steps" for s in plan.sizes)
    said = {
        "train": f"training {sizes} of {plan.batch} pairs",
        "decode": f"decoding {plan.decode_reps} reps of {plan.sentences} sentences",
        "rnn": f"RNN {plan.rnn_reps} reps × {plan.rnn_steps} steps",
    }
    record["settings"] = "; ".join(said[k] for k in SECTIONS if k in plan.sections)
    return record


def issue_shapes(plan: Plan) -> bool:
    """Whether issue 11's targets apply: real sizes (not ``--tiny``) and its 64 pairs."""
    return plan.batch == ISSUE_BATCH and not any(s.name == "tiny" for s in plan.sizes)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, Plan]:
    p = argparse.ArgumentParser(prog="benchmarks/peers.py", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small bf16 training + beam-5 only")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (seconds; smoke test)")
    p.add_argument("--impls", help="comma-separated, from seqlab,nn,hf,onmt (default all)")
    p.add_argument("--sizes", help="comma-separated, from small,base")
    p.add_argument("--precisions", help="comma-separated, from fp32,bf16")
    p.add_argument("--sections", help=f"comma-separated, from {','.join(SECTIONS)}")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--train-reps", type=int, help="timed training repetitions (every size)")
    p.add_argument("--train-steps", type=int, help="training steps per repetition (every size)")
    p.add_argument(
        "--batch",
        type=int,
        help="sentence pairs per training step, the same for every implementation (default "
        f"{ISSUE_BATCH}, issue 11's; another size prints no targets: perf-notes.md lever 8)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu (default) or cuda[:N]: every section on that device (module doc)",
    )
    p.add_argument(
        "--allocator",
        choices=("keep", "default"),
        default="keep",
        help="keep: seqlab's keep_freed_memory() as its Trainer does (for every "
        "implementation: one process); default: glibc as is",
    )
    p.add_argument(
        "--compiled-decode",
        action="store_true",
        help="seqlab decodes through its compiled, weight-frozen step (seqlab.decode.compiled); "
        "the compile falls in the warm-up repetition, timed apart in the log",
    )
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"), help="markdown file")
    p.add_argument(
        "--json",
        help="the record (default docs/figures/peers[-cuda].json with the default --out, "
        "else peers[-cuda].json beside --out, so that a scratch run leaves the docs' alone)",
    )
    args = p.parse_args(argv)
    plan = TINY if args.tiny else QUICK if args.quick else Plan()
    kind = args.device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        p.error(f"--device {args.device!r}: choose cpu or cuda[:N]")
    if kind == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False on this machine (no GPU "
                "or a CPU-only torch build); run without --device")  # fmt: skip
    if args.json is None:  # the docs' record only with the docs' table; else beside --out
        name = "peers.json" if kind == "cpu" else "peers-cuda.json"
        args.json = str(beside_out(args.out, name))

    def pick(text: str | None, known: tuple[str, ...], what: str) -> tuple[str, ...] | None:
        if text is None:
            return None
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = sorted(set(items) - set(known))
        if bad or not items:
            p.error(f"--{what}: unknown {bad}; choose from {', '.join(known)}")
        return items

    changes: dict[str, Any] = {}
    if impls := pick(args.impls, ptrain.IMPLEMENTATIONS, "impls"):
        changes["impls"] = impls
    if sizes := pick(args.sizes, ("small", "base"), "sizes"):
        changes["sizes"] = tuple(pm.SMALL if s == "small" else pm.BASE for s in sizes)
    if precisions := pick(args.precisions, ptrain.PRECISIONS, "precisions"):
        changes["precisions"] = changes["decode_precisions"] = precisions
    if sections := pick(args.sections, SECTIONS, "sections"):
        changes["sections"] = sections
    for name, value in (("train_reps", args.train_reps), ("train_steps", args.train_steps)):
        if value is not None:
            if value < 1:
                p.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
            changes[name] = {size.name: value for size in (pm.TINY, pm.SMALL, pm.BASE)}
    if args.batch is not None:
        if args.batch < 1:
            p.error(f"--batch must be at least 1, got {args.batch}")
        changes["batch"] = args.batch
    if args.compiled_decode:
        changes["compiled_decode"] = True
    if kind == "cuda":  # a GPU's peak needs large products (2048² is launch-bound there),
        # and a step takes milliseconds there: more of them per timed repetition
        changes["device"] = args.device
        if not args.tiny:
            changes.setdefault("train_steps", {"small": 16, "base": 8})
            changes |= {"peak_n": 8192, "rnn_steps": 16}
    return args, replace(plan, **changes)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run, print the tables and ratios, write the section and the JSON; return the record."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, plan = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.allocator == "keep":
        keep_freed_memory()
    record = run(plan, log=lambda line: print(line, flush=True))
    command = shlex.join(["python", "benchmarks/peers.py", *argv])
    record["command"] = command
    record["machine"] = machine()
    record["device"] = plan.device
    heading = report.heading(plan.device)
    json_path = Path(args.json).resolve()
    shown = json_path.relative_to(ROOT) if json_path.is_relative_to(ROOT) else json_path
    section = report.render(record, command, record["machine"], heading, str(shown))
    print()
    print(section)
    write_section(Path(args.out), section, heading)
    write_json(args.json, record)
    print(f"\nwrote the section '{heading}' of {args.out} and {args.json}")
    return record


if __name__ == "__main__":
    main()
