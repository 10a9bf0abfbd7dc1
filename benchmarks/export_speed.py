"""Decoding through the exported files (``seqlab export``) against eager decoding.

    python benchmarks/export_speed.py [--models luong,bahdanau,transformer] [--searches 1,5]
        [--threads 1] [--reps 7] [--out docs/results.md]

The workload of ``benchmarks/peers.py``'s decoding section (100 random sources of 14–20
tokens in padded batches of 32, exactly 30 new tokens, α 0.6), on random-weight models
of the presets' shapes: the peers' small Transformer (d 256, 3 + 3 layers) and the RNN
seq2seq presets (``configs/multi30k-<model>.yaml``, ``decode_int8.rnn_preset``), source
and target vocabulary 8,000. Each model is decoded by the same search
(``seqlab.decode`` greedy or beam) four ways, back to back in every repetition (order
rotating): eager fp32, eager int8 (``--precision int8``: the searches' linear layers in
int8), and the model exported by ``seqlab.serve.export.export_model`` as TorchScript and
as ONNX (run by onnxruntime with ``--threads`` intra-op threads), both driven through
``ExportedDecoder``. Printed per model and search: ms per decoder step (median), the
paired speed-up over eager fp32 (median over repetitions of its time / the variant's),
and the share of sentences whose 1-best equals eager fp32's (exported files compute the
same function, so 100 % up to float ties; int8 changes the numbers).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import peers_decode as pdec  # noqa: E402
from benchmarks import peers_models as pm  # noqa: E402
from benchmarks.decode_int8 import rnn_preset, same_share  # noqa: E402
from benchmarks.paired_variants import decode_workload, round_robin  # noqa: E402
from benchmarks.results_doc import DOCS_RESULTS, machine_description, write_section  # noqa: E402
from seqlab.decode.precision import decoding_context  # noqa: E402
from seqlab.serve.export import ExportedDecoder, export_model, load_exported  # noqa: E402

HEADING = "## Exported decoding (TorchScript, ONNX Runtime) vs eager"
VARIANTS = ("eager fp32", "eager int8", "torchscript", "onnx")


def exported_decoder(model: torch.nn.Module, name: str, fmt: str, folder: Path, threads: int):
    """``model`` written by ``export_model`` to ``folder`` and loaded back, as a decoder."""
    export_model(model, name, folder, fmt)
    return ExportedDecoder(*load_exported(folder, threads=threads))


def decode_with(decoder, batches, beam: int, n_new: int) -> list[torch.Tensor]:
    """1-best tokens (B, n_new) of every batch through an ``ExportedDecoder``."""
    with torch.no_grad():
        return [
            pdec.search(decoder, decoder.init_state(s, m), s.size(0), beam, n_new)
            for s, m in batches
        ]


def runs_of(model, exported: dict, batches, beam: int, n_new: int):
    """{variant: one repetition (decode every batch, return the 1-best list)};
    ``exported``: {format: ``ExportedDecoder``}, written once per model."""

    def eager(precision: str) -> Callable[[], list]:
        def run() -> list:
            with torch.no_grad(), decoding_context(precision, torch.device("cpu")):
                return [pdec.seqlab_decode(model, s, m, beam, n_new) for s, m in batches]

        return run

    runs = {"eager fp32": eager("fp32"), "eager int8": eager("int8")}
    for fmt, decoder in exported.items():
        runs[fmt] = lambda d=decoder: decode_with(d, batches, beam, n_new)
    return runs


def measure(name: str, args: argparse.Namespace, folder: Path) -> list[str]:
    size = pm.TINY if args.tiny else pm.SMALL
    model, batches = decode_workload(size, args.sentences, 32, args.threads)
    if name != "transformer":
        model = rnn_preset(name, size.vocab)
    exported = {  # one export per model, decoded by every search
        fmt: exported_decoder(model, name, fmt, folder / f"{name}-{fmt}", args.threads)
        for fmt in ("torchscript", "onnx")
    }
    rows = []
    for beam in (int(b) for b in args.searches.split(",")):
        runs = runs_of(model, exported, batches, beam, args.new_tokens)
        best = {v: run() for v, run in runs.items()}
        times = round_robin(runs, args.reps)
        steps = len(batches) * args.new_tokens
        ms = {v: 1000 * sorted(t)[len(t) // 2] / steps for v, t in times.items()}
        cells = []
        for v in VARIANTS:
            ratios = sorted(a / b for a, b in zip(times["eager fp32"], times[v], strict=True))
            same = same_share(best[v], best["eager fp32"])
            cells.append(f"{ms[v]:.2f} | {ratios[len(ratios) // 2]:.2f}× | {same:.0%}")
        search = "greedy" if beam == 1 else f"beam {beam}"
        rows.append(f"| {name} | {search} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="luong,bahdanau,transformer")
    p.add_argument("--searches", default="1,5", help="beam widths; 1 = greedy")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--new-tokens", type=int, default=30)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a smoke test)")
    p.add_argument("--out", default=str(DOCS_RESULTS), help="results file ('' = print only)")
    args = p.parse_args(argv)
    cols = " | ".join(f"{v} ms / step | vs eager | same 1-best" for v in VARIANTS)
    head = [f"| model | search | {cols} |", "|---|---" + "|---:" * 3 * len(VARIANTS) + "|"]
    print("\n".join(head), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            rows += measure(name.strip(), args, Path(tmp))
    if args.out:
        command = "python benchmarks/export_speed.py " + " ".join(argv or sys.argv[1:])
        body = [
            "",
            f"Command: `{command.strip()}`",
            "",
            f"Machine: {machine_description()}. onnxruntime intra-op threads: "
            f"{args.threads}. {args.sentences} sources in batches of 32, exactly "
            f"{args.new_tokens} new tokens, {args.reps} repetitions; random weights "
            "(seed 0), vocabulary 8,000.",
            "",
            *head,
            *rows,
            "",
            "How to read it: benchmarks/export_speed.py's docstring; the export itself: "
            'docs/serving.md, "Export".',
            "",
        ]
        write_section(Path(args.out), "\n".join([HEADING, *body]), HEADING)
    return rows


if __name__ == "__main__":
    main()
