"""Does attention help most on long sentences? BLEU by source-length bucket, per model.

Reads the test2016 beam hypotheses that ``benchmarks/translation.py`` keeps in
``<runs-dir>/bench-<model>/test-beam.hyp`` and scores them per source-length bucket
(words of the German source: 1–10, 11–15, 16–20, 21–25, 26+; an open-ended top bucket
with fewer than ``--min-bucket`` sentences, default 30, is merged into the one below: on
test2016 26+ holds 2 sentences, so the buckets are 1–10 … 21+) with sacreBLEU. It prints
the table, writes the PNG ``docs/figures/bleu-by-length.png`` and the section "BLEU by
source length" of docs/results.md with a verdict computed from the numbers:

    gap(bucket) = mean lc BLEU of the attention models − mean of the models without
                  (Sutskever, Cho); the notes' claim (Bahdanau 2015, Fig. 2) holds here
                  when the gap on the longest bucket is > 0 and grows: the paired
                  bootstrap 95 % interval of gap(longest) − gap(shortest) lies above 0.

    python benchmarks/bleu_by_length.py                 # every bench-* run that has hyps
    python benchmarks/bleu_by_length.py --models sutskever,bahdanau
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import random
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script
    sys.path.insert(0, str(ROOT))

from benchmarks.results_doc import beside_out, write_section  # noqa: E402
from seqlab import api  # noqa: E402
from seqlab.data.multi30k import locate_multi30k  # noqa: E402
from seqlab.data.readers import read_parallel  # noqa: E402
from seqlab.eval.bleu import (  # noqa: E402
    LENGTH_EDGES,
    LengthBucket,
    bleu_by_length,
    bucket_index,
    bucket_table,
    corpus_bleu,
    merge_sparse_tail,
    plot_bleu_by_length,
)
from seqlab.inspect.claim_rules import attention_gap_verdict  # noqa: E402
from seqlab.inspect.claims import PARTLY, REPRODUCED  # noqa: E402
from seqlab.inspect.figures import write_json  # noqa: E402

HEADING = "## BLEU by source length (Multi30k de→en, test2016)"
NO_ATTENTION = ("sutskever", "cho")  # the fixed-vector encoder–decoders
ORDER = ("sutskever", "cho", "bahdanau", "luong", "convs2s", "transformer")


def read_hyps(path: Path, n: int) -> list[str]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != n:
        raise SystemExit(
            f"{path}: {len(lines)} hypotheses for {n} test sentences; rerun "
            "benchmarks/translation.py for this model"
        )
    return lines


def gaps(table: dict[str, list[LengthBucket]]) -> list[float | None] | None:
    """Per bucket: mean lc BLEU of attention models − mean of no-attention models."""
    with_att = [m for m in table if m not in NO_ATTENTION]
    without = [m for m in table if m in NO_ATTENTION]
    if not with_att or not without:
        return None
    out: list[float | None] = []
    for i in range(len(next(iter(table.values())))):
        a = [table[m][i].bleu_lc for m in with_att if table[m][i].bleu_lc is not None]
        b = [table[m][i].bleu_lc for m in without if table[m][i].bleu_lc is not None]
        out.append(sum(a) / len(a) - sum(b) / len(b) if a and b else None)
    return out


def growth_interval(
    sources: list[str],
    hyps: dict[str, list[str]],
    refs: list[str],
    edges: tuple[int, ...],
    n_boot: int = 200,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Paired bootstrap 95 % interval of gap(longest bucket) − gap(shortest bucket).

    Each of ``n_boot`` replicates redraws, with replacement, the sentences of the shortest
    and of the longest bucket (the same draw for every model, so the models stay paired),
    rescores each model's lc BLEU on both (sacreBLEU) and takes the growth of the
    attention models' lead; the interval is the 2.5 and 97.5 percentiles. None when a
    side has no model or an end bucket is empty."""
    with_att = [m for m in hyps if m not in NO_ATTENTION]
    without = [m for m in hyps if m in NO_ATTENTION]
    idx = [bucket_index(len(s.split()), edges) for s in sources]
    short = [i for i, b in enumerate(idx) if b == 0]
    long_ = [i for i, b in enumerate(idx) if b == len(edges)]
    if not with_att or not without or not short or not long_ or n_boot < 2:
        return None
    rng = random.Random(seed)

    def gap(draw: list[int]) -> float:
        def score(m: str) -> float:
            h, r = [hyps[m][i] for i in draw], [refs[i] for i in draw]
            return corpus_bleu(h, r, lowercase=True).score

        a, b = [score(m) for m in with_att], [score(m) for m in without]
        return sum(a) / len(a) - sum(b) / len(b)

    growth = sorted(
        gap(rng.choices(long_, k=len(long_))) - gap(rng.choices(short, k=len(short)))
        for _ in range(n_boot)
    )
    return growth[round(0.025 * (n_boot - 1))], growth[round(0.975 * (n_boot - 1))]


def verdict(g: list[float | None] | None, ci: tuple[float, float] | None = None) -> str:
    if g is None:
        return (
            "not decided: needs at least one model with attention and one of "
            f"{', '.join(NO_ATTENTION)}"
        )
    first, last = g[0], g[-1]
    if first is None or last is None:
        return "not decided: an end bucket is empty"
    shape = ", ".join("–" if x is None else f"{x:+.1f}" for x in g)
    lead = f"{first:+.1f} BLEU on the shortest sources, {last:+.1f} on the longest"
    if ci is not None:
        interval = f"[{ci[0]:+.1f}, {ci[1]:+.1f}]"
        shape += f"; growth longest − shortest, bootstrap 95 % interval {interval}"
    # the same rule as seqlab report's
    said = attention_gap_verdict(first, last, ci[0] if ci is not None else None)
    if said == REPRODUCED:
        return f"reproduced here: the attention models' lead grows: {lead} (per bucket: {shape})"
    if said == PARTLY:
        more = "significantly " if ci is not None else ""
        return (
            f"partly here: the attention models lead on the longest sources but not by "
            f"{more}more than on the shortest: {lead} (per bucket: {shape})"
        )
    return f"not reproduced here: the attention models' lead is {lead} (per bucket: {shape})"


def _link(png: Path, out: str) -> str:
    """The PNG's path as seen from the results file ``out``."""
    return os.path.relpath(png, Path(out).resolve().parent)


def main(argv: list[str] | None = None) -> str:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated (default: every run with hypotheses)")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--data-dir", default=str(api.default_data_dir() or ""))
    p.add_argument("--out", default="docs/results.md")
    p.add_argument("--png", help="the figure (default: docs/figures/ or beside --out)")
    p.add_argument(
        "--min-bucket",
        type=int,
        default=30,
        help="merge an open-ended top bucket with fewer sentences into the one below (0: never)",
    )
    p.add_argument(
        "--bootstrap", type=int, default=200, help="replicates for the growth interval (0: none)"
    )
    args = p.parse_args(argv)
    runs = Path(args.runs_dir)
    models = (
        args.models.split(",")
        if args.models
        else [m for m in ORDER if (runs / f"bench-{m}" / "test-beam.hyp").is_file()]
    )
    if not models:
        raise SystemExit(f"no {runs}/bench-*/test-beam.hyp: run benchmarks/translation.py first")
    folder = locate_multi30k(args.data_dir or None, langs=("de", "en"))
    pairs = read_parallel(folder / "test_2016_flickr.de.gz", folder / "test_2016_flickr.en.gz")
    src, ref = [s for s, _ in pairs], [t for _, t in pairs]
    hyps = {m: read_hyps(runs / f"bench-{m}" / "test-beam.hyp", len(src)) for m in models}
    edges = merge_sparse_tail(src, LENGTH_EDGES, args.min_bucket)
    table = {m: bleu_by_length(src, hyps[m], ref, edges) for m in models}
    ci = growth_interval(src, hyps, ref, edges, args.bootstrap)
    png = Path(args.png) if args.png else beside_out(args.out, "bleu-by-length.png")
    png.parent.mkdir(parents=True, exist_ok=True)
    plot_bleu_by_length(table, png, title="Multi30k test2016 de→en, beam 5")
    text = bucket_table(table)
    lead = gaps(table)
    said = verdict(lead, ci)
    command = shlex.join(["python", "benchmarks/bleu_by_length.py", *argv])
    sidecar = {  # the numbers for seqlab report (docs/claims.md), next to the PNG
        "command": command,
        "no_attention": list(NO_ATTENTION),
        "models": {m: [dataclasses.asdict(b) for b in bs] for m, bs in table.items()},
        "gaps": lead,
        "growth_ci": list(ci) if ci is not None else None,
        "bootstrap": args.bootstrap,
        "verdict": said,
    }
    write_json(png.with_suffix(".json"), sidecar)
    section = "\n".join(
        [
            HEADING,
            "",
            f"Command: `{command}` (hypotheses from the runs of benchmarks/translation.py). "
            f"Date: {datetime.date.today().isoformat()}.",
            "",
            "Lowercase sacreBLEU (13a) of the beam-5 test2016 output, by the German source's "
            "length in words; n = sentences in the bucket. Without attention: "
            f"{', '.join(m for m in models if m in NO_ATTENTION) or 'none'}.",
            "",
            text,
            "",
            f"![BLEU by source length]({_link(png, args.out)})",
            "",
            f"Verdict on the notes' claim (attention helps most on long sentences): {said}.",
        ]
    )
    print(text)
    print(said)
    write_section(Path(args.out), section, HEADING)
    print(f"wrote {args.out}, {png} and {png.with_suffix('.json')}")
    return said


if __name__ == "__main__":
    main()
