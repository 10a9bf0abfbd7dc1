"""A recurrent language model through its exported files (``seqlab export``,
``seqlab.serve.export_lm``) against the eager model.

    python benchmarks/export_lm_speed.py
        [--presets ptb-lstm,shakespeare-char-lstm,shakespeare-char-transformer]
        [--tokens 200] [--rows 10] [--bptt 35] [--chunks 10] [--threads 1] [--reps 7]
        [--out docs/results.md]

Random-weight models of the presets' shapes (``configs/<preset>.yaml``'s model; PTB's
vocabulary 10,000, Tiny Shakespeare's 65 characters; the recurrent LMs and the
Transformer LM, whose sampling past its context re-encodes a sliding window in both),
eval mode, each run three ways back to back in every repetition (order rotating): eager
fp32, the TorchScript file and the ONNX file (onnxruntime with ``--threads`` intra-op
threads, torch on the same number), on two workloads:

- **sample**: ``seqlab generate``'s loop, ``seqlab.decode.sample`` at batch 1 for
  ``--tokens`` tokens (temperature 1, the same seeded generator for every variant),
  feeding one token per call: ms per token, and whether the sampled tokens equal eager's;
- **score**: ``evaluate``'s stream, ``--chunks`` chunks of ``--rows`` × ``--bptt`` tokens
  with the state carried: target tokens per second, and the largest |Δ logit| against
  eager.

The paired speed-up is the median over repetitions of eager's time / the variant's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.paired_variants import round_robin  # noqa: E402
from benchmarks.results_doc import DOCS_RESULTS, machine_description, write_section  # noqa: E402
from seqlab.catalog import load_all  # noqa: E402
from seqlab.decode.sampling import sample  # noqa: E402
from seqlab.registry import MODELS  # noqa: E402
from seqlab.serve.export import export_model  # noqa: E402
from seqlab.serve.export_lm import load_exported_lm, read_meta  # noqa: E402

HEADING = "## Exported language models (TorchScript, ONNX Runtime) vs eager"
VARIANTS = ("eager fp32", "torchscript", "onnx")
VOCAB = {"ptb-lstm": 10_000, "ptb-lstm-large": 10_000, "shakespeare-char-lstm": 65,
         "shakespeare-char-transformer": 65}  # fmt: skip
ROOT = Path(__file__).resolve().parent.parent


def preset_model(preset: str) -> torch.nn.Module:
    """A random-weight (seed 0) model of ``configs/<preset>.yaml``'s shape, eval mode."""
    load_all()
    cfg = yaml.safe_load((ROOT / "configs" / f"{preset}.yaml").read_text())["model"]
    entry = MODELS.get(cfg.pop("name"))
    torch.manual_seed(0)
    return entry.target(entry.config_cls(**cfg), vocab=VOCAB[preset], pad_id=0).eval()


def sampler(model: torch.nn.Module, tokens: int):
    """One repetition of ``generate``'s loop: its sampled ids (1, tokens)."""

    def run() -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            state = model.init_state(1, "cpu")
            return sample(model, state, 1, bos_id=4, eos_id=-1, max_len=tokens,
                          generator=g).tokens  # fmt: skip

    return run


def scorer(model: torch.nn.Module, stream: torch.Tensor, bptt: int):
    """One repetition of ``evaluate``'s stream: every chunk's logits, state carried (a
    Transformer LM reads each chunk from nothing: its context is a window, not a state
    to carry)."""
    windowed = getattr(getattr(model, "cfg", None), "context", None) is not None

    def run() -> list[torch.Tensor]:
        state, out = None, []
        with torch.no_grad():
            for i in range(0, stream.size(1), bptt):
                o = model(stream[:, i : i + bptt], state)
                state = None if windowed else o.state
                out.append(o.logits)
        return out

    return run


def measure(preset: str, args: argparse.Namespace, folder: Path) -> list[str]:
    model = preset_model(preset)
    variants = {"eager fp32": model}
    name = "transformer_lm" if "transformer" in preset else "rnn_lm"
    for fmt in ("torchscript", "onnx"):
        export_model(model, name, folder / f"{preset}-{fmt}", fmt, task="lm")
        meta = read_meta(folder / f"{preset}-{fmt}")
        variants[fmt] = load_exported_lm(folder / f"{preset}-{fmt}", meta, args.threads)
    g = torch.Generator().manual_seed(1)
    stream = torch.randint(4, VOCAB[preset], (args.rows, args.bptt * args.chunks), generator=g)
    rows = []
    for work in ("sample", "score"):
        if work == "sample":
            runs = {v: sampler(m, args.tokens) for v, m in variants.items()}
        else:
            runs = {v: scorer(m, stream, args.bptt) for v, m in variants.items()}
        results = {v: run() for v, run in runs.items()}
        times = round_robin(runs, args.reps)
        cells = []
        for v in VARIANTS:
            t = sorted(times[v])[len(times[v]) // 2]
            ratios = sorted(a / b for a, b in zip(times["eager fp32"], times[v], strict=True))
            if work == "sample":
                rate = f"{1000 * t / args.tokens:.3f} ms/token"
                same = "same" if torch.equal(results[v], results["eager fp32"]) else "differ"
            else:
                rate = f"{stream.numel() / t:,.0f} tok/s"
                d = max(
                    float((a - b).abs().max()) for a, b in zip(results[v], results["eager fp32"])
                )
                same = f"max Δ {d:.1e}"
            cells.append(f"{rate} | {ratios[len(ratios) // 2]:.2f}× | {same}")
        rows.append(f"| {preset} | {work} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--presets", default="ptb-lstm,shakespeare-char-lstm,shakespeare-char-transformer"
    )
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--rows", type=int, default=10)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--chunks", type=int, default=10)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(DOCS_RESULTS), help="results file ('' = print only)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cols = " | ".join(f"{v} | vs eager | output" for v in VARIANTS)
    head = [f"| preset | work | {cols} |", "|---|---" + "|---:|---:|---" * len(VARIANTS) + "|"]
    print("\n".join(head), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            rows += measure(preset.strip(), args, Path(tmp))
    if args.out:
        command = "python benchmarks/export_lm_speed.py " + " ".join(argv or sys.argv[1:])
        body = [
            "",
            f"Command: `{command.strip()}`",
            "",
            f"Machine: {machine_description()}. onnxruntime intra-op threads: {args.threads}. "
            f"sample: {args.tokens} tokens at batch 1; score: {args.chunks} chunks of "
            f"{args.rows} × {args.bptt} tokens, state carried; {args.reps} repetitions; "
            "random weights (seed 0).",
            "",
            *head,
            *rows,
            "",
            "How to read it: benchmarks/export_lm_speed.py's docstring; the export itself: "
            'docs/serving.md, "Language models".',
            "",
        ]
        write_section(Path(args.out), "\n".join([HEADING, *body]), HEADING)
    return rows


if __name__ == "__main__":
    main()
