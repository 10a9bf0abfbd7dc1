"""seqlab.eval: metrics computed from decoded output (sacreBLEU BLEU / chrF, length buckets)."""

from seqlab.eval.bleu import (
    LENGTH_EDGES,
    LengthBucket,
    MetricScore,
    bleu_by_length,
    bucket_index,
    bucket_table,
    corpus_bleu,
    corpus_chrf,
    plot_bleu_by_length,
    score_corpus,
    tokenization_warning,
)

__all__ = [
    "LENGTH_EDGES",
    "LengthBucket",
    "MetricScore",
    "bleu_by_length",
    "bucket_index",
    "bucket_table",
    "corpus_bleu",
    "corpus_chrf",
    "plot_bleu_by_length",
    "score_corpus",
    "tokenization_warning",
]
