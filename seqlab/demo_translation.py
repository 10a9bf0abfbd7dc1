"""The translation part of ``seqlab demo``: train, score, translate, show attention.

Trains ``configs/multi30k-transformer-15min.yaml`` (de→en, shipped Multi30k: the small
Transformer with dropout 0, a cosine decay fitted to the budget and length penalty 1.0)
for a wall-clock budget, scores test2016 with beam 5 (sacreBLEU: cased, lowercase 13a — the number
comparable to published tables — and chrF), prints five test translations beside their
references and writes the cross-attention heatmap of the first one.
"""

from __future__ import annotations

import time
from pathlib import Path

from seqlab import api, catalog
from seqlab.data.multi30k import file_name, locate_multi30k
from seqlab.data.readers import read_lines
from seqlab.inspect.attention import plot_attention

PRESET = "multi30k-transformer-15min.yaml"
N_EXAMPLES = 5


def run_translation_demo(
    minutes: float, seed: int, run_dir: str | None, overrides: list[str]
) -> int:
    preset = catalog.PRESET_DIR / PRESET
    run_dir = run_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"\nTransformer de→en on Multi30k for {minutes:g} min → {run_dir}")
    run = api.train(
        preset,
        run_dir=run_dir,
        overwrite=True,
        overrides=[
            f"train.max_minutes={minutes}",
            "train.max_steps=1000000",
            f"train.seed={seed}",
            "train.valid_every=1000000",  # one validation, at the end
            *overrides,
        ],
    )
    loaded = api.load(run.run_dir)
    metrics = loaded.evaluate("test")
    print(f"\ntest2016 (1,000 sentences, beam {loaded.task.cfg.test_beam}):")
    signatures = getattr(metrics, "signatures", {}) or {}
    for key in ("bleu_lc", "bleu", "chrf"):
        sig = signatures.get(key, "")
        print(f"  {key:<8} {metrics[key]:6.2f}  {sig}")

    folder = locate_multi30k()
    src = read_lines(folder / file_name("test_2016_flickr", "de"))[:N_EXAMPLES]
    ref = read_lines(folder / file_name("test_2016_flickr", "en"))[:N_EXAMPLES]
    out = loaded.translate_detailed(src, beam=5, return_attention=True)
    print("\nfive test sentences:")
    for s, r, t in zip(src, ref, out):
        print(f"  de:  {s}\n  en:  {t.hypotheses[0].text}\n  ref: {r}\n")
    first = out[0]
    if first.attention and "cross" in first.attention:
        path = plot_attention(
            first.attention["cross"][-1],  # last decoder layer (H, T, S)
            first.source_pieces,
            first.target_pieces,
            Path(run.run_dir) / "attention.png",
            title="last decoder layer, cross-attention",
        )
        print(f"attention heatmap: {path}")
    return 0
