"""Translation that must copy: Multi30k de→en at word level with a deliberately small
target vocabulary, for the pointer-generator (See, Liu & Manning 2017).

Pipeline (docs/pointer-generator.md):

1. Read the splits (Multi30k, or any parallel files); lowercase and cut into words and
   punctuation (``tokenize``: ``\\w+`` runs with inner ``-`` / ``'``, every other
   non-space character alone).
2. Target vocabulary: the ``tgt_vocab_size`` most frequent training target words (specials
   included); source vocabulary: training source words seen ``src_min_freq`` times, at most
   ``src_vocab_size``. Names, numbers and rare words fall outside the target vocabulary;
   a German token spelled like the English reference word can still be produced by
   copying it (seqlab.data.oov: per-sentence OOV ids V + k).
3. Loss (eq. 13): Σ_t −log P(y_t) over the extended vocabulary + λ Σ_t covloss_t
   (``cov_lambda`` = λ; 0 disables). Label smoothing is not defined here: an extended id
   outside the row's source has probability 0.
4. ``evaluate``: teacher-forced loss / ppl, then decoded output (``seqlab.decode``)
   mapped back to words, detokenised and scored against the lowercased references:
   ``bleu_lc`` (sacreBLEU 13a), ``chrf``, ``oov_copy`` (% of the reference tokens that are
   target-OOV *and* in the source which the output contains, clipped counts),
   ``repeat_trigram`` (% of the output's trigrams that repeat an earlier trigram of the
   same sentence; ``ref_repeat_trigram`` the same for the references), ``unk`` (% of
   output tokens that are ``<unk>``) and ``p_gen`` (mean p_gen of the decoded steps).
   Decoding (seqlab.tasks.copy_translation_decode) may forbid ``<unk>`` (``block_unk``)
   or replace each ``<unk>`` by its most-attended source word (``replace_unk``) or move
   its probability onto the copies at every step (``unk_to_copy``); all are decode-time
   options, off by default (See et al. decode without them; the presets set unk_to_copy).
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from seqlab.data.copy_dropout import copy_dropout
from seqlab.data.multi30k import locate_multi30k
from seqlab.data.oov import (
    CopyBatch,
    CopyExample,
    GramSpec,
    collate_copy,
    extended_to_words,
    make_copy_example,
    source_inputs,
)
from seqlab.data.readers import read_parallel, resolve_path
from seqlab.data.vocab import BOS_ID, PAD_ID, UNK, Vocab
from seqlab.data.word_stats import N_WORD_STATS, WordStats
from seqlab.errors import DataError, SeqlabError
from seqlab.eval.bleu import corpus_bleu, corpus_chrf
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task
from seqlab.tasks.copy_distill import read_distilled
from seqlab.tasks.copy_losses import copy_switch_loss, copy_token_weights
from seqlab.tasks.copy_translation_config import CopyTranslationConfig
from seqlab.tasks.copy_translation_decode import (
    decode_copy,
    decode_copy_detailed,
    model_device,
    replace_unk_by_attention,
)
from seqlab.tasks.translation_eval import Hypothesis, SearchSettings, Translation

__all__ = [
    "CopyTranslationConfig",
    "CopyTranslationTask",
    "decode_copy",
    "detokenize",
    "oov_copy_counts",
    "repeated_ngrams",
    "tokenize",
]

log = logging.getLogger("seqlab.tasks")

_WORD = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")
_NO_SPACE_BEFORE = re.compile(r" ([.,!?;:)\]])")
_NO_SPACE_AFTER = re.compile(r"([(\[]) ")
_MULTI30K = {"train": "train", "valid": "val"}


def tokenize(text: str) -> list[str]:
    """Lowercased words and punctuation: "A man's T-shirt." → [a, man's, t-shirt, .]."""
    return _WORD.findall(text.lower())


def detokenize(words: Sequence[str]) -> str:
    """Words → text: one space between words, none before ``. , ! ? ; : ) ]`` or after
    ``( [`` (so sacreBLEU's 13a tokeniser sees what it sees in the references)."""
    text = " ".join(words)
    return _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", text))


def oov_copy_counts(
    src: Sequence[str], ref: Sequence[str], hyp: Sequence[str], tgt_vocab: Vocab
) -> tuple[int, int]:
    """(copied, copyable): copyable = reference tokens outside the target vocabulary that
    also occur in the source; copied = how many of them the output contains (per word
    min(count in reference, count in output))."""
    in_src = set(src)
    need = Counter(w for w in ref if w not in tgt_vocab and w in in_src)
    have = Counter(hyp)
    return sum(min(n, have[w]) for w, n in need.items()), sum(need.values())


def repeated_ngrams(words: Sequence[str], n: int = 3) -> tuple[int, int]:
    """(repeats, total) n-grams of one sentence; a repeat equals an earlier n-gram of it."""
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(grams) - len(set(grams)), len(grams)


@TASKS.register("copy_translation", CopyTranslationConfig)
class CopyTranslationTask(Task):
    """Word-level translation with a small target vocabulary: OOVs must be copied."""

    pad_id = PAD_ID
    inference_methods = ("translate", "translate_detailed", "explain")

    # ------------------------------------------------------------------ data

    def _paths(self) -> dict[str, tuple[Path, Path]]:
        cfg = self.cfg
        if cfg.data == "files":
            named = {
                "train": (cfg.train_src, cfg.train_tgt),
                "valid": (cfg.valid_src, cfg.valid_tgt),
                "test": (cfg.test_src, cfg.test_tgt),
            }
            return {
                k: (resolve_path(s, self.data_dir), resolve_path(t, self.data_dir))
                for k, (s, t) in named.items()
                if s is not None
            }
        folder = locate_multi30k(self.data_dir, langs=(cfg.src_lang, cfg.tgt_lang))
        names = {**_MULTI30K, "test": cfg.test_split}
        return {
            split: (folder / f"{n}.{cfg.src_lang}.gz", folder / f"{n}.{cfg.tgt_lang}.gz")
            for split, n in names.items()
        }

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        cfg = self.cfg
        self._fresh = tokenizer_state is None
        self.embedding_coverage: dict[str, float] = {}
        self.words: dict[str, tuple[list[list[str]], list[list[str]]]] = {}
        self.refs: dict[str, list[str]] = {}
        for split, (src_path, tgt_path) in self._paths().items():
            pairs = read_parallel(src_path, tgt_path)
            if split == "train":
                n_raw_train = len(pairs)  # a distill_tgt file has one line per raw pair
            if split == "train" and cfg.max_train_examples is not None:
                pairs = pairs[: cfg.max_train_examples]
            self.words[split] = ([tokenize(s) for s, _ in pairs], [tokenize(t) for _, t in pairs])
            self.refs[split] = [t.lower() for _, t in pairs]
        if tokenizer_state is not None:
            try:
                self.src_vocab = Vocab.from_dict(tokenizer_state["src"])
                self.tgt_vocab = Vocab.from_dict(tokenizer_state["tgt"])
                self.stats = (
                    WordStats.from_dict(tokenizer_state["word_stats"])
                    if cfg.src_word_stats
                    else None
                )
            except (KeyError, TypeError) as exc:
                raise DataError(
                    "the saved vocabularies are not a copy_translation tokenizer state",
                    hint="load the checkpoint with the config it was saved with",
                ) from exc
        else:
            src, tgt = self.words["train"]
            self.src_vocab = Vocab.build(src, cfg.src_min_freq, cfg.src_vocab_size)
            self.tgt_vocab = Vocab.build(tgt, 1, cfg.tgt_vocab_size)
            self.stats = WordStats.build(src, tgt) if cfg.src_word_stats else None
        if cfg.distill_tgt is not None:  # after the vocabularies: they stay the references'
            (src, refs), ref_text = self.words["train"], self.refs["train"]
            tgt = read_distilled(
                resolve_path(cfg.distill_tgt, self.data_dir), n_raw_train, tokenize
            )[: len(src)]
            self.words["train"] = (src, tgt)
            self.refs["train"] = [detokenize(t) for t in tgt]
            if cfg.distill_with_refs:  # both: the N distilled pairs, then the N references
                self.words["train"] = (src + src, tgt + refs)
                self.refs["train"] += ref_text
        self._filter_train()
        self.grams = (
            GramSpec(cfg.char_ngram_min, cfg.char_ngram_max, cfg.src_char_ngrams)
            if cfg.src_char_ngrams
            else None
        )
        self.examples = {
            split: [
                make_copy_example(
                    s,
                    t,
                    self.src_vocab,
                    self.tgt_vocab,
                    self.grams,
                    self.stats,
                    training_pair=split == "train",
                )
                for s, t in zip(*pair)
            ]
            for split, pair in self.words.items()
        }
        if cfg.copy_dropout:  # training pairs only (seqlab.data.copy_dropout)
            self.examples["train"] = copy_dropout(
                self.examples["train"],
                self.tgt_vocab,
                cfg.copy_dropout,
                cfg.copy_dropout_min_id,
                self.seed,
            )
        log.info("copy_translation: V_src %d, V_tgt %d", len(self.src_vocab), len(self.tgt_vocab))

    def _filter_train(self) -> None:
        src, tgt = self.words["train"]
        L = self.cfg.max_len
        keep = [i for i in range(len(src)) if len(src[i]) + 1 <= L and len(tgt[i]) + 1 <= L]
        if not keep:
            raise DataError(f"every training pair is longer than task.max_len={L} words")
        if len(keep) < len(src):
            n_out = len(src) - len(keep)
            log.warning("dropped %d of %d training pairs over max_len=%d", n_out, len(src), L)
            self.words["train"] = ([src[i] for i in keep], [tgt[i] for i in keep])
            self.refs["train"] = [self.refs["train"][i] for i in keep]

    def tokenizer_state(self) -> dict[str, Any]:
        state = {"src": self.src_vocab.to_dict(), "tgt": self.tgt_vocab.to_dict()}
        if self.stats is not None:
            state["word_stats"] = self.stats.to_dict()
        return state

    def _split(self, split: str) -> str:
        name = {"val": "valid", "dev": "valid", self.cfg.test_split: "test"}.get(split, split)
        if name not in self.examples:
            raise DataError(
                f"the copy_translation task has no split {split!r}",
                hint=f"available: {', '.join(self.examples)}",
            )
        return name

    # ------------------------------------------------------------------ training

    def model_kwargs(self) -> dict[str, Any]:
        kwargs = {"src_vocab": len(self.src_vocab), "tgt_vocab": len(self.tgt_vocab)}
        if self.cfg.src_char_ngrams:  # the n-gram table z_g (K + 1 rows)
            kwargs["src_gram_buckets"] = self.cfg.src_char_ngrams
        if self.cfg.src_word_stats:  # W_f: F statistics -> E
            kwargs["src_stat_features"] = N_WORD_STATS
        return {**kwargs, "pad_id": PAD_ID}

    def init_model(self, model: nn.Module) -> None:
        """At the start of a run, the configured word vectors into the word embeddings."""
        if not self._fresh:
            return
        from seqlab.tasks.pretrained_embeddings import load_vectors

        for side, vocab in (("src", self.src_vocab), ("tgt", self.tgt_vocab)):
            name = getattr(self.cfg, f"{side}_embeddings_path")
            if name is not None:
                path = resolve_path(name, self.data_dir)
                field = f"task.{side}_embeddings_path"
                self.embedding_coverage[side] = load_vectors(
                    model, (f"{side}_embed",), vocab, path, field
                )

    def train_lengths(self) -> np.ndarray:
        ex = self.examples["train"]
        return np.array([max(len(e.src_ids), len(e.tgt_ext) + 1) for e in ex], dtype=np.int64)

    def collate(self, indices: list[int], split: str = "train") -> CopyBatch:
        examples = self.examples[self._split(split)]
        return collate_copy([examples[i] for i in indices])

    def loss(self, model: nn.Module, batch: CopyBatch, label_smoothing: float = 0.0) -> LossOutput:
        """Σ over non-pad targets of −log P(y_t) + λ covloss_t (See et al. 2017, eq. 13),
        with the optional copy terms (``copy_weight``, ``switch_lambda``). ``nll_sum`` is
        always the plain Σ −log P(y_t), so perplexities stay comparable."""
        if label_smoothing:
            raise SeqlabError(
                "copy_translation has no label smoothing (an extended id outside the source "
                "has probability 0): set train.label_smoothing=0"
            )
        out = model(
            batch.src,
            batch.src_mask,
            batch.y_in,
            batch.tgt_mask,
            batch.src_ext,
            batch.n_oov,
            details=True,
            src_grams=batch.src_grams,
            src_stats=batch.src_stats,
        )
        log_P = out.log_probs.gather(-1, batch.y_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
        keep = batch.tgt_mask  # (B, T)
        nll_sum = -(log_P * keep).sum()  # ()
        loss_sum = nll_sum
        V = len(self.tgt_vocab)
        if self.cfg.copy_weight != 1.0:
            m = copy_token_weights(batch.y_out, keep, V, self.cfg.copy_weight)  # (B, T)
            loss_sum = -(log_P * m).sum()  # ()
        if self.cfg.switch_lambda:
            switch = copy_switch_loss(out.p_gen, batch.y_out, batch.src_ext, keep, V)  # ()
            loss_sum = loss_sum + self.cfg.switch_lambda * switch
        if self.cfg.cov_lambda:
            loss_sum = loss_sum + self.cfg.cov_lambda * (out.cov_loss * keep).sum()  # ()
        return LossOutput(loss_sum, nll_sum.detach(), int(batch.n_tokens))

    # ------------------------------------------------------------------ evaluation

    def _teacher_forced(self, model: nn.Module, split: str) -> tuple[float, int]:
        """Σ −log P(y) over the split and its token count (length-sorted batches of at
        most ``eval_batch_tokens`` B · (S + T) slots)."""
        examples = self.examples[split]
        cost = [len(e.src_ids) + len(e.tgt_ext) + 1 for e in examples]
        order = sorted(range(len(examples)), key=lambda i: cost[i])
        nll, n_tok, start = 0.0, 0, 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * cost[order[end]] <= (
                self.cfg.eval_batch_tokens
            ):
                end += 1
            batch = self.collate(order[start:end], split).to(model_device(model))
            out = self.loss(model, batch)
            nll, n_tok, start = nll + float(out.nll_sum), n_tok + out.n_tokens, end
        return nll, n_tok

    def _settings(self, beam: int, **kw: Any) -> SearchSettings:
        """Search settings: a keyword given and not None wins, else the config's (the CLI
        passes every search flag, None where the user gave none); others are ignored."""
        cfg = self.cfg

        def pick(name: str) -> Any:
            return getattr(cfg, name) if kw.get(name) is None else kw[name]

        return SearchSettings(
            beam=beam,
            nbest=kw.get("nbest") or 1,
            max_len_a=pick("max_len_a"),
            max_len_b=pick("max_len_b"),
            length_penalty=pick("length_penalty"),
            batch_tokens=cfg.eval_batch_tokens,
        )

    def _decode(
        self,
        model: nn.Module,
        examples: Sequence[CopyExample],
        settings: SearchSettings,
        coverage_penalty: float | None = None,
        detailed: bool = False,
    ) -> Any:
        """``decode_copy`` (``decode_copy_detailed`` with ``detailed``) with the config's
        ``block_unk`` / ``replace_unk`` / ``unk_to_copy`` / ``coverage_penalty`` (β given
        and not None wins)."""
        cfg = self.cfg
        to_copy = len(self.tgt_vocab) if cfg.unk_to_copy else None
        beta = cfg.coverage_penalty if coverage_penalty is None else coverage_penalty
        decode = decode_copy_detailed if detailed else decode_copy
        return decode(
            model,
            examples,
            settings,
            cfg.block_unk,
            cfg.replace_unk,
            to_copy,
            beta,
            cfg.coverage_penalty_words,
        )

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """Loss / ppl (teacher forced, whole split) and the decoded-output metrics (module
        docstring): ``valid`` decodes the first ``valid_bleu_sentences`` with
        ``valid_beam``, other splits the first ``test_sentences`` (0 = all) with
        ``test_beam``; ``block_unk`` / ``replace_unk`` as configured."""
        split = self._split(split)
        was_training = model.training
        model.eval()
        try:
            nll, n_tok = self._teacher_forced(model, split)
            examples = self.examples[split]
            n = len(examples)
            limit = self.cfg.valid_bleu_sentences if split == "valid" else self.cfg.test_sentences
            if limit:
                n = min(n, limit)
            beam = self.cfg.valid_beam if split == "valid" else self.cfg.test_beam
            decoded = self._decode(model, examples[:n], self._settings(beam))
        finally:
            model.train(was_training)
        src_words, ref_words = self.words[split]
        hyps = [
            extended_to_words(ids, self.tgt_vocab, e.oovs) for (ids, _), e in zip(decoded, examples)
        ]
        copied = copyable = rep = grams = ref_rep = ref_grams = 0
        for s, r, h in zip(src_words, ref_words, hyps):
            c, k = oov_copy_counts(s, r, h, self.tgt_vocab)
            copied, copyable = copied + c, copyable + k
            a, b = repeated_ngrams(h)
            rep, grams = rep + a, grams + b
            a, b = repeated_ngrams(r)
            ref_rep, ref_grams = ref_rep + a, ref_grams + b
        texts = [detokenize(h) for h in hyps]
        refs = self.refs[split][:n]
        n_words = max(1, sum(map(len, hyps)))
        return {
            "loss": nll / n_tok,
            "ppl": math.exp(min(nll / n_tok, 50.0)),
            "bleu_lc": corpus_bleu(texts, refs, lowercase=True).score,
            "chrf": corpus_chrf(texts, refs).score,
            "oov_copy": 100.0 * copied / max(1, copyable),
            "oov_copyable": float(copyable),
            "repeat_trigram": 100.0 * rep / max(1, grams),
            "ref_repeat_trigram": 100.0 * ref_rep / max(1, ref_grams),
            "unk": 100.0 * sum(h.count(UNK) for h in hyps) / n_words,
            "p_gen": float(np.mean([p for _, p in decoded])) if decoded else float("nan"),
        }

    # ------------------------------------------------------------------ inference

    def _examples_of(self, sentences: Sequence[str]) -> list[CopyExample]:
        if isinstance(sentences, str):
            raise TypeError("pass a list of sentences, e.g. [text]")
        return [
            make_copy_example(
                tokenize(s), [], self.src_vocab, self.tgt_vocab, self.grams, self.stats
            )
            for s in sentences
        ]

    @torch.no_grad()
    def translate(
        self, model: nn.Module, sentences: list[str], beam: int = 4, **search: Any
    ) -> list[str]:
        """Raw source sentences → lowercase detokenised translations (copied OOVs
        included; ``block_unk`` / ``replace_unk`` as configured); ``search``: max_len_a,
        max_len_b, length_penalty, coverage_penalty (None: the config's)."""
        return [t.text for t in self.translate_detailed(model, sentences, beam, **search)]

    @torch.no_grad()
    def translate_detailed(
        self,
        model: nn.Module,
        sentences: list[str],
        beam: int = 4,
        nbest: int = 1,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        length_penalty: float | None = None,
        return_attention: bool = False,
        coverage_penalty: float | None = None,
        test_compile: bool | None = None,
    ) -> list[Translation]:
        """Raw sentences → ``Translation`` records, as ``TranslationTask.translate_detailed``
        (what ``seqlab translate --json/--plot`` and ``seqlab serve`` read): the search's
        ``nbest`` best hypotheses (≤ ``beam``; with ``replace_unk`` only 1), best first, each
        with its score and log P (``CopyDecoded``; ``test_compile`` is refused). With
        ``return_attention`` (of the best hypothesis) the pieces are the
        source words + ``</s>`` (columns) and the output words + ``</s>`` (rows; no ``</s>``
        row when the length limit cut the output), the attention is ``{"cross": a (T, S)}``,
        ``p_gen`` (T,) the switch at each step and ``copied`` (T,) whether the word is
        outside the target vocabulary, so that only a copy could produce it. A search
        setting left None is the task config's."""
        if isinstance(sentences, str):
            raise TypeError("pass a list of sentences, e.g. [text]")
        if not 1 <= nbest <= beam:
            raise SeqlabError(f"need 1 <= nbest <= beam, got nbest {nbest} beam {beam}")
        if nbest > 1 and self.cfg.replace_unk:
            raise SeqlabError(
                f"nbest {nbest}: task.replace_unk rewrites only the best hypothesis from its "
                "attention; ask for nbest 1, or decode with task.unk_to_copy=true"
            )
        if test_compile:
            raise SeqlabError(
                "task 'copy_translation' has no compiled decoding; decode without compiling"
            )
        search = dict(
            max_len_a=max_len_a, max_len_b=max_len_b, length_penalty=length_penalty, nbest=nbest
        )
        examples = self._examples_of(sentences)
        was_training = model.training
        model.eval()
        try:
            decoded = self._decode(
                model, examples, self._settings(beam, **search), coverage_penalty, detailed=True
            )
        finally:
            model.train(was_training)
        out = []
        V = len(self.tgt_vocab)
        for sentence, e, d in zip(sentences, examples, decoded):
            words = extended_to_words(d.ids, self.tgt_vocab, e.oovs)
            hyps = [Hypothesis(detokenize(words), d.ids, d.score, d.log_prob)]
            for ids, score, log_prob in d.others:
                text = detokenize(extended_to_words(ids, self.tgt_vocab, e.oovs))
                hyps.append(Hypothesis(text, ids, score, log_prob))
            t = Translation(sentence, hyps)
            if return_attention:  # one row per decoded step: </s> only if the search wrote it
                ended = d.p_gen.numel() == len(d.ids) + 1  # not cut by the length limit
                t.source_pieces = [*tokenize(sentence), "</s>"]
                t.target_pieces = [*words, "</s>"] if ended else words
                t.attention = {"cross": d.attention}  # (T, S)
                t.p_gen = d.p_gen  # (T,)
                t.copied = [i >= V for i in d.ids] + ([False] if ended else [])  # (T,)
            out.append(t)
        return out

    @torch.no_grad()
    def explain(self, model: nn.Module, sentence: str, beam: int = 1) -> dict[str, Any]:
        """Decode one sentence and return, per output step, p_gen, the attention a^t and
        the coverage c^t: {"source": words + [</s>], "output": words + [</s>],
        "p_gen": (T,), "attention": (T, S), "coverage": (T, S), "cov_loss": (T,)}.
        With ``replace_unk`` the output shows the replaced words; the per-step values are
        those of the decoded steps (before replacement)."""
        (example,) = self._examples_of([sentence])
        was_training = model.training
        model.eval()
        try:
            settings = self._settings(beam)
            to_copy = len(self.tgt_vocab) if self.cfg.unk_to_copy else None
            ((ids, _),) = decode_copy(
                model,
                [example],
                settings,
                self.cfg.block_unk,
                unk_to_copy_vocab=to_copy,
                coverage_penalty=self.cfg.coverage_penalty,
                coverage_words=self.cfg.coverage_penalty_words,
            )
            device = model_device(model)
            src = torch.tensor([example.src_ids], device=device)  # (1, S)
            src_ext = torch.tensor([example.src_ext], device=device)  # (1, S)
            extras = source_inputs([example], device)  # n-grams (1, S, G), stats (1, S, F)
            y_in = torch.tensor([[BOS_ID, *ids]], device=device)  # (1, T)
            ones = torch.ones_like(src, dtype=torch.bool)  # (1, S)
            out = model(
                src,
                ones,
                y_in,
                torch.ones_like(y_in, dtype=torch.bool),
                src_ext,
                len(example.oovs),
                details=True,
                **extras,
            )
        finally:
            model.train(was_training)
        if self.cfg.replace_unk:
            ids = replace_unk_by_attention(ids, out.attention[0], example.src_ext)
        words = extended_to_words(ids, self.tgt_vocab, example.oovs)
        return {
            "source": [*tokenize(sentence), "</s>"],
            "output": [*words, "</s>"],
            "p_gen": out.p_gen[0].cpu(),
            "attention": out.attention[0].cpu(),
            "coverage": out.coverage[0].cpu(),
            "cov_loss": out.cov_loss[0].cpu(),
        }
