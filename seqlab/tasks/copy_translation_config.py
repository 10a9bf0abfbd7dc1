"""The settings of the ``copy_translation`` task (seqlab.tasks.copy_translation): data,
vocabularies, the loss terms and the decode-time options."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["CopyTranslationConfig"]


@dataclass(frozen=True)
class CopyTranslationConfig:
    """Data, vocabularies, loss weight λ and evaluation settings.

    ``data``: ``multi30k`` (shipped copy or the run's data_dir) or ``files`` (the paths;
    test optional). ``max_len``: training pairs with more words on either side are
    dropped. ``valid_bleu_sentences``: decode only the first N valid sentences (0 = all);
    ``test_sentences``: the same for every other split (0 = all; for smoke tests).

    Decode-time treatment of ``<unk>`` (evaluation, ``translate``, ``explain``; none is
    in See et al. 2017, all default off; seqlab.tasks.copy_translation_decode):
    ``block_unk``: log P(<unk>) = −∞ at every decoding step, so the search picks a
    vocabulary word or a copy; ``replace_unk``: each ``<unk>`` left in the output becomes
    the source word with the highest attention weight at its step (Luong et al. 2015);
    ``unk_to_copy``: at every step ``<unk>``'s probability moves to the source words
    outside the target vocabulary, in proportion to their copy probabilities. At most one
    of the three. ``coverage_penalty`` β > 0: beam search (``test_beam`` > 1, ``translate``
    with a beam) ranks finished hypotheses by log P / lp + β Σ_i log min(Σ_t a_i^t, 1),
    GNMT's coverage penalty (Wu et al. 2016, §7), which favours outputs that attend to
    every source word; 0 (default) = off, as in See et al. ``coverage_penalty_words``:
    ``all`` (default, GNMT) sums over every source word, ``oov`` over the source words
    outside the target vocabulary only (those only a copy can produce; not in GNMT).

    ``src_char_ngrams``: K > 0 gives the encoder, besides each source word's embedding,
    the mean of its hashed character n-gram vectors (``char_ngram_min`` ≤ n ≤
    ``char_ngram_max``, K buckets; fastText, seqlab.data.char_ngrams), so a word outside
    the source vocabulary is no longer only ``<unk>``. 0 (default) = See et al.'s encoder.

    ``src_word_stats``: true gives the encoder, for each source word, W_f f(w) with f(w) =
    [log(1 + n_tgt(w)), log(1 + n_src(w)), 1[digit]], its counts in the training target
    and source text (a training pair's own occurrences left out; seqlab.data.word_stats):
    whether the word is spelled the same in both languages, and so is likely copied.
    False (default) = See et al.'s encoder.

    Training terms that favour copying (seqlab.tasks.copy_losses; neither is in See et
    al.): ``copy_weight`` w ≥ 1 weighs the NLL of targets only a copy can produce (ids ≥ V)
    by w; ``switch_lambda`` λ ≥ 0 adds λ Σ_t of a cross-entropy on p_gen where the
    reference decides between copying and generating (Gulcehre et al. 2016). Defaults 1 and
    0 = eq. 13 alone. ``copy_dropout`` q ∈ [0, 1]: in each training pair, each target
    vocabulary word of id ≥ ``copy_dropout_min_id`` that the source spells the same way is
    relabelled, with probability q, as an OOV of that pair, so it must be copied
    (seqlab.data.copy_dropout; drawn once from the run's seed); 0 (default) = off.

    ``distill_tgt``: a file with one line per raw training pair (``seqlab distill`` writes
    it from a teacher run or ensemble): each line replaces that pair's reference as the
    training target, after the vocabularies are built from the references, so the student
    shares its teacher's vocabularies (sequence-level knowledge distillation, Kim & Rush
    2016; seqlab.tasks.copy_distill). The ``train`` split is then the distilled one;
    valid and test keep their references. None (default) = the references.
    ``distill_with_refs``: train on both, each source twice, once with its distilled
    target and once with its reference (2N pairs); false (default) = the distilled only.

    ``src_embeddings_path`` / ``tgt_embeddings_path``: word2vec text vectors (e.g. from
    ``seqlab embed train``; D = ``model.emb_dim``) copied into the encoder's / decoder's
    word embedding at the start of a run (seqlab.tasks.pretrained_embeddings); None
    (default) = random initialisation.
    """

    src_lang: str = "de"
    tgt_lang: str = "en"
    data: Literal["multi30k", "files"] = "multi30k"
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    test_split: str = "test_2016_flickr"
    tgt_vocab_size: int = 2000
    src_vocab_size: int = 10000
    src_min_freq: int = 2
    cov_lambda: float = 1.0
    max_len: int = 60
    max_train_examples: int | None = None
    valid_bleu_sentences: int = 500
    test_sentences: int = 0
    valid_beam: int = 1
    test_beam: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.5
    max_len_b: int = 5
    eval_batch_tokens: int = 8000
    block_unk: bool = False
    replace_unk: bool = False
    unk_to_copy: bool = False
    coverage_penalty: float = 0.0
    src_char_ngrams: int = 0
    char_ngram_min: int = 3
    char_ngram_max: int = 5
    src_word_stats: bool = False
    copy_weight: float = 1.0
    switch_lambda: float = 0.0
    copy_dropout: float = 0.0
    copy_dropout_min_id: int = 250
    coverage_penalty_words: Literal["all", "oov"] = "all"
    distill_tgt: str | None = None
    distill_with_refs: bool = False
    src_embeddings_path: str | None = None
    tgt_embeddings_path: str | None = None

    def __post_init__(self) -> None:
        paths = [self.train_src, self.train_tgt, self.valid_src, self.valid_tgt]
        if self.data == "files":
            if any(p is None for p in paths):
                raise ValueError(
                    "task.data: files needs train_src, train_tgt, valid_src, valid_tgt"
                )
            if (self.test_src is None) != (self.test_tgt is None):
                raise ValueError("task.test_src / task.test_tgt: give both or neither")
        elif any(p is not None for p in [*paths, self.test_src, self.test_tgt]):
            raise ValueError("task.train_src …: file paths are set but data is 'multi30k'")
        for name in ("tgt_vocab_size", "src_vocab_size"):
            if getattr(self, name) < 5:
                raise ValueError(
                    f"task.{name} must be >= 5 (4 specials), got {getattr(self, name)}"
                )
        for name in ("src_min_freq", "max_len", "valid_beam", "test_beam", "eval_batch_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if not (self.copy_weight >= 1 and math.isfinite(self.copy_weight)):
            raise ValueError(
                f"task.copy_weight must be a finite number >= 1 (1 = off), got {self.copy_weight}"
            )
        for name in ("cov_lambda", "coverage_penalty", "switch_lambda"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"task.{name} must be a finite number >= 0, got {value}")
        if not 0.0 <= self.copy_dropout <= 1.0:
            raise ValueError(
                f"task.copy_dropout must be in [0, 1] (0 = off), got {self.copy_dropout}"
            )
        if self.coverage_penalty_words not in ("all", "oov"):
            raise ValueError(
                "task.coverage_penalty_words must be 'all' or 'oov', got "
                f"{self.coverage_penalty_words!r}"
            )
        if self.copy_dropout_min_id < 4:
            raise ValueError(
                "task.copy_dropout_min_id must be >= 4 (ids 0-3 are the specials), got "
                f"{self.copy_dropout_min_id}"
            )
        for name in ("valid_bleu_sentences", "test_sentences"):
            if getattr(self, name) < 0:
                raise ValueError(f"task.{name} must be >= 0 (0 = all)")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError("task.max_train_examples must be >= 1 or null")
        if self.distill_with_refs and self.distill_tgt is None:
            raise ValueError("task.distill_with_refs needs task.distill_tgt (the distilled file)")
        for name in (
            "block_unk",
            "replace_unk",
            "unk_to_copy",
            "src_word_stats",
            "distill_with_refs",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"task.{name} must be true or false, got {getattr(self, name)!r}")
        if self.src_char_ngrams < 0:
            raise ValueError(
                f"task.src_char_ngrams must be >= 0 (0 = off), got {self.src_char_ngrams}"
            )
        if not 1 <= self.char_ngram_min <= self.char_ngram_max:
            raise ValueError(
                "task.char_ngram_min / char_ngram_max: need 1 <= min <= max, got "
                f"{self.char_ngram_min} / {self.char_ngram_max}"
            )
        if self.block_unk + self.replace_unk + self.unk_to_copy > 1:
            raise ValueError(
                "task.block_unk, task.replace_unk and task.unk_to_copy: choose one (each "
                "decides what becomes of <unk>)"
            )
