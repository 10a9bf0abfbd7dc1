"""Machine translation: Multi30k (shipped) or any parallel files, a joint sentencepiece
tokenizer, teacher-forced training, and evaluation by decoding + sacreBLEU.

Pipeline (docs/translation.md):

1. Read the splits with the validated readers (trailing spaces stripped).
2. Train sentencepiece (BPE or unigram; Kudo & Richardson 2018) on the **train** split
   only — one joint model over both languages by default, so source and target share
   ids and a model may tie its embeddings — or restore it from ``tokenizer_state`` (a
   checkpoint never retrains). Trained models are cached under ``$SEQLAB_CACHE/spm``
   (default ``~/.cache/seqlab/spm``), keyed by the training text and every setting.
3. Encode every split once. The source is x₁ … x_n ⟨/s⟩ (EOS appended, no BOS: the
   encoder sees where the sentence ends, as in fairseq); the target is
   y_in = ⟨s⟩ y₁ … y_m, y_out = y₁ … y_m ⟨/s⟩ (``collate_seq2seq``).
4. Loss: token cross-entropy with label smoothing (``token_cross_entropy``).
5. ``evaluate``: teacher-forced loss / perplexity, and BLEU from *decoded* output only:
   decode (``seqlab.decode``) → sentencepiece decode (removes subwords, restores the
   original spacing: detokenised text) → sacreBLEU cased BLEU, lowercase BLEU (the
   number comparable to the published tables), chrF, with signatures. Never BLEU from
   teacher-forced logits.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from seqlab.data.collate import Seq2SeqBatch, collate_seq2seq
from seqlab.data.lazy import LazySplits
from seqlab.data.multi30k import locate_multi30k
from seqlab.data.readers import read_parallel, resolve_path
from seqlab.data.spm import SentencePieceTokenizer
from seqlab.data.tokenizers import Tokenizer
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.errors import DataError
from seqlab.eval.bleu import bleu_by_length, bucket_table, plot_bleu_by_length, score_corpus
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task, seq2seq_token_loss
from seqlab.tasks.translation_eval import (
    Hypothesis,
    SearchSettings,
    Translation,
    attention_records,
    coverage_of,
    decode_ids,
)

__all__ = ["EvalResult", "TranslationConfig", "TranslationTask", "spm_cache_dir"]

log = logging.getLogger("seqlab.tasks")

SPLITS = ("train", "valid", "test")
_MULTI30K = {"train": "train", "valid": "val"}  # the test file is cfg.test_split


@dataclass(frozen=True)
class TranslationConfig:
    """Data, tokenizer and evaluation settings of the translation task.

    ``data``: ``multi30k`` (shipped copy, or the run's data_dir) or ``files`` (the six
    ``train_src`` … ``test_tgt`` paths; test optional). ``max_len``: training pairs with
    more subwords than this on either side are dropped (counted in the log); evaluation
    never drops. ``valid_bleu_sentences``: BLEU during training decodes only the first N
    valid sentences (0 = all); ``valid_beam`` / ``test_beam``: beam width there (1 =
    greedy). ``max_train_examples``: keep only the first N training pairs (smoke tests).
    ``subword_sampling``: every training batch is re-segmented at random with this
    sentencepiece ``alpha`` (BPE: BPE-dropout's merge-dropout probability, Provilkov et
    al. 2020, who use 0.1; unigram: Kudo 2018's smoothing exponent) on the sides named by
    ``sampling_sides``; 0 = off. Evaluation always uses the fixed segmentation.
    ``test_compile``: test-time decoding (every split but ``valid``, ``translate``,
    ``evaluate_files``) goes through the Transformer's compiled, weight-frozen decoder step
    (``seqlab.decode.compiled``: greedy ~1.65× and beam 5 ~1.2× faster per step on a bf16
    CPU after a first compile of ~1 minute); validation during training never compiles.
    ``length_penalty`` (GNMT α) and ``coverage_penalty`` (GNMT β, beam search only; models
    with ``attention_coverage``: bahdanau, luong) are the search settings every decode of
    the run uses — evaluate, translate, evaluate_files, the server — unless a call names
    its own; ``max_len_a`` / ``max_len_b`` likewise.
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
    joint: bool = True
    vocab_size: int = 8000
    model_type: Literal["bpe", "unigram"] = "bpe"
    character_coverage: float = 1.0
    cache_dir: str | None = None
    max_len: int = 256
    max_train_examples: int | None = None
    valid_bleu_sentences: int = 500
    valid_beam: int = 1
    test_beam: int = 5
    test_compile: bool = False
    length_penalty: float = 0.6
    coverage_penalty: float = 0.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    eval_max_tokens: int = 8000
    subword_sampling: float = 0.0
    sampling_sides: Literal["both", "source", "target"] = "both"

    def __post_init__(self) -> None:
        paths = [self.train_src, self.train_tgt, self.valid_src, self.valid_tgt]
        tests = [self.test_src, self.test_tgt]
        if self.data == "files":
            if any(p is None for p in paths):
                raise ValueError("data: files needs train_src, train_tgt, valid_src and valid_tgt")
            if (self.test_src is None) != (self.test_tgt is None):
                raise ValueError("give both test_src and test_tgt, or neither")
        elif any(p is not None for p in paths + tests):
            raise ValueError("file paths are set but data is 'multi30k': set data: files")
        if self.src_lang == self.tgt_lang:
            raise ValueError(f"src_lang and tgt_lang are both {self.src_lang!r}")
        for name in ("vocab_size", "max_len", "valid_beam", "test_beam", "eval_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if self.valid_bleu_sentences < 0:
            raise ValueError("task.valid_bleu_sentences must be >= 0 (0 = all)")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError("task.max_train_examples must be >= 1 or null")
        if not 0.0 <= self.subword_sampling < 1.0:
            raise ValueError(
                f"task.subword_sampling must be in [0, 1), got {self.subword_sampling} "
                "(0.1 is BPE-dropout's usual rate)"
            )
        for name in ("length_penalty", "coverage_penalty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"task.{name} must be finite and >= 0, got {value}")
        if self.sampling_sides not in ("both", "source", "target"):
            raise ValueError(
                f"task.sampling_sides must be both, source or target, not {self.sampling_sides!r}"
            )


class EvalResult(dict):
    """``evaluate``'s metrics (name → float), plus what is not a number:
    ``signatures`` (metric → sacreBLEU signature), ``hypotheses`` (the decoded text) and
    ``settings`` (the search used)."""

    def __init__(self, metrics: dict[str, float], signatures: dict[str, str], **info: Any):
        super().__init__(metrics)
        self.signatures = signatures
        self.hypotheses: list[str] = info.get("hypotheses", [])
        self.settings: dict[str, Any] = info.get("settings", {})
        self.warning: str | None = info.get("warning")


def spm_cache_dir(configured: str | None = None) -> Path:
    """``configured``, else ``$SEQLAB_CACHE/spm``, else ``~/.cache/seqlab/spm``."""
    if configured:
        return Path(configured).expanduser()
    root = os.environ.get("SEQLAB_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "seqlab").expanduser() / "spm"


@TASKS.register("translation", TranslationConfig)
class TranslationTask(Task):
    """Sentence translation (Multi30k or parallel files) scored by sacreBLEU on decoded text."""

    pad_id = PAD_ID
    inference_methods = ("translate", "translate_detailed", "evaluate_files")

    # ------------------------------------------------------------------ data

    def _split_names(self) -> list[str]:
        """The splits this config names (no file is touched)."""
        if self.cfg.data == "files":
            return [k for k in ("train", "valid", "test") if getattr(self.cfg, f"{k}_src")]
        return [*_MULTI30K, "test"]

    def _paths(self) -> dict[str, tuple[Path, Path]]:
        cfg = self.cfg
        if cfg.data == "files":
            return {
                k: (
                    resolve_path(getattr(cfg, f"{k}_src"), self.data_dir),
                    resolve_path(getattr(cfg, f"{k}_tgt"), self.data_dir),
                )
                for k in self._split_names()
            }
        folder = locate_multi30k(self.data_dir, langs=(cfg.src_lang, cfg.tgt_lang))
        names = {**_MULTI30K, "test": cfg.test_split}
        return {
            split: (folder / f"{n}.{cfg.src_lang}.gz", folder / f"{n}.{cfg.tgt_lang}.gz")
            for split, n in names.items()
        }

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        """Train the tokenizer on the training split, or restore it from a checkpoint's
        ``tokenizer_state``. Splits are read and encoded on first use (``texts``, ``ids``):
        a restored task reads no data to translate (``seqlab translate``, ``seqlab
        serve`` work on a machine without the corpus) and only the test files to evaluate
        ``test``."""
        names = self._split_names()
        self.texts: LazySplits[tuple[list[str], list[str]]] = LazySplits(names, self._read)
        self.ids: LazySplits[tuple[list[list[int]], list[list[int]]]] = LazySplits(
            names, self._encode
        )
        if tokenizer_state is not None:
            self._restore_tokenizers(tokenizer_state)
        else:
            self._train_tokenizers()

    def _read(self, split: str) -> tuple[list[str], list[str]]:
        """(source lines, target lines) of ``split``, checked by ``read_parallel``."""
        src_path, tgt_path = self._paths()[split]
        pairs = read_parallel(src_path, tgt_path)
        if split == "train" and self.cfg.max_train_examples is not None:
            pairs = pairs[: self.cfg.max_train_examples]
        return [s for s, _ in pairs], [t for _, t in pairs]

    def _encode(self, split: str) -> tuple[list[list[int]], list[list[int]]]:
        """(source ids + </s>, target ids) of ``split``; train is filtered by ``max_len``."""
        src, tgt = self.texts[split]
        ids = (
            [self.src_tok.encode(s) + [EOS_ID] for s in src],
            [self.tgt_tok.encode(t) for t in tgt],
        )
        return self._filter_train(ids) if split == "train" else ids

    def _train_tokenizers(self) -> None:
        cfg = self.cfg
        src, tgt = self.texts["train"]
        kw = {
            "vocab_size": cfg.vocab_size,
            "model_type": cfg.model_type,
            "character_coverage": cfg.character_coverage,
            "cache_dir": spm_cache_dir(cfg.cache_dir),
        }
        if cfg.joint:
            self.src_tok = self.tgt_tok = SentencePieceTokenizer.train(src + tgt, **kw)
        else:
            self.src_tok = SentencePieceTokenizer.train(src, **kw)
            self.tgt_tok = SentencePieceTokenizer.train(tgt, **kw)
        cached = self.src_tok.from_cache and self.tgt_tok.from_cache
        log.info("sentencepiece %s (%s)", cfg.model_type, "from cache" if cached else "trained")

    def tokenizer_state(self) -> dict[str, Any]:
        if self.cfg.joint:
            return {"joint": True, "shared": self.src_tok.to_state()}
        return {"joint": False, "src": self.src_tok.to_state(), "tgt": self.tgt_tok.to_state()}

    def _restore_tokenizers(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or bool(state.get("joint")) != self.cfg.joint:
            raise DataError(
                f"the saved tokenizer state does not match task.joint={self.cfg.joint}",
                hint="load the checkpoint with the config it was saved with",
            )
        if self.cfg.joint:
            self.src_tok = self.tgt_tok = Tokenizer.from_state(state["shared"])
        else:
            self.src_tok = Tokenizer.from_state(state["src"])
            self.tgt_tok = Tokenizer.from_state(state["tgt"])

    def _filter_train(
        self, ids: tuple[list[list[int]], list[list[int]]]
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Drop training pairs longer than ``max_len`` subwords (from ids and texts)."""
        src, tgt = ids
        L = self.cfg.max_len
        keep = [i for i in range(len(src)) if len(src[i]) <= L and len(tgt[i]) + 1 <= L]
        if not keep:
            raise DataError(f"every training pair is longer than task.max_len={L} subwords")
        if len(keep) == len(src):
            return ids
        n_out = len(src) - len(keep)
        log.warning("dropped %d of %d training pairs over max_len=%d", n_out, len(src), L)
        s_txt, t_txt = self.texts["train"]
        self.texts.replace("train", ([s_txt[i] for i in keep], [t_txt[i] for i in keep]))
        return [src[i] for i in keep], [tgt[i] for i in keep]

    def _split(self, split: str) -> str:
        aliases = {"val": "valid", "dev": "valid", self.cfg.test_split: "test"}
        name = aliases.get(split, split)
        if name not in self.ids:
            raise DataError(
                f"the translation task has no split {split!r}",
                hint=f"available: {', '.join(self.ids)}",
            )
        return name

    # ------------------------------------------------------------------ training

    def model_kwargs(self) -> dict[str, Any]:
        return {
            "src_vocab": self.src_tok.vocab_size,
            "tgt_vocab": self.tgt_tok.vocab_size,
            "pad_id": PAD_ID,
        }

    def init_model(self, model: nn.Module) -> None:
        """Refuse, before any training, a ``coverage_penalty`` the model cannot serve."""
        if self.cfg.coverage_penalty > 0.0:
            try:
                coverage_of(model, self.cfg.coverage_penalty)
            except ValueError as e:
                raise ValueError(f"task.coverage_penalty: {e}") from None

    def train_lengths(self) -> np.ndarray:
        src, tgt = self.ids["train"]
        return np.array([max(len(s), len(t) + 1) for s, t in zip(src, tgt)], dtype=np.int64)

    def collate(self, indices: list[int], split: str = "train") -> Seq2SeqBatch:
        """The batch of ``indices``; a ``train`` batch is re-segmented at random when
        ``subword_sampling`` > 0 (``_sampled_pairs``)."""
        split = self._split(split)
        if split == "train" and self.cfg.subword_sampling > 0:
            return collate_seq2seq(self._sampled_pairs(indices), bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)
        return self._fixed_batch(indices, split)

    def _fixed_batch(self, indices: list[int], split: str) -> Seq2SeqBatch:
        """The batch in the fixed segmentation (evaluation, every split)."""
        src, tgt = self.ids[self._split(split)]
        pairs = [(src[i], tgt[i]) for i in indices]
        return collate_seq2seq(pairs, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)

    def _sampled_pairs(self, indices: list[int]) -> list[tuple[list[int], list[int]]]:
        """BPE-dropout / subword regularisation of one training batch (Provilkov et al.
        2020 sample a new segmentation of every sentence each time it is used). The seed
        is drawn from torch's generator, which checkpoints store: a resumed run draws the
        same segmentations. A sample longer than ``max_len`` keeps the fixed one."""
        cfg = self.cfg
        src, tgt = self.ids["train"]
        src_txt, tgt_txt = self.texts["train"]
        seed = int(torch.randint(0, 2**31 - 1, ()).item())
        new_src = [src[i] for i in indices]
        new_tgt = [tgt[i] for i in indices]
        if cfg.sampling_sides in ("both", "source"):
            drawn = self.src_tok.encode_sampled(
                [src_txt[i] for i in indices], cfg.subword_sampling, seed
            )
            new_src = [d + [EOS_ID] if len(d) < cfg.max_len else f for d, f in zip(drawn, new_src)]
        if cfg.sampling_sides in ("both", "target"):
            drawn = self.tgt_tok.encode_sampled(
                [tgt_txt[i] for i in indices], cfg.subword_sampling, seed + 1
            )
            new_tgt = [d if len(d) < cfg.max_len else f for d, f in zip(drawn, new_tgt)]
        return list(zip(new_src, new_tgt))

    def loss(
        self, model: nn.Module, batch: Seq2SeqBatch, label_smoothing: float = 0.0
    ) -> LossOutput:
        return seq2seq_token_loss(model, batch, PAD_ID, label_smoothing)

    # ------------------------------------------------------------------ evaluation

    def _teacher_forced(self, model: nn.Module, split: str) -> tuple[float, int]:
        """Σ −log p(y) over the split and its token count (length-sorted batches)."""
        src, tgt = self.ids[split]
        device = next(model.parameters()).device
        order = sorted(range(len(src)), key=lambda i: (len(tgt[i]), len(src[i])))
        nll, n_tok, start = 0.0, 0, 0
        while start < len(order):
            # grow the batch while B · (max ℓ_src + max ℓ_tgt) fits the budget
            end, S, T = start, 0, 0
            while end < len(order):
                i = order[end]
                S2, T2 = max(S, len(src[i])), max(T, len(tgt[i]) + 1)
                if end > start and (end - start + 1) * (S2 + T2) > self.cfg.eval_max_tokens:
                    break
                end, S, T = end + 1, S2, T2
            batch = self._fixed_batch(order[start:end], split).to(device)
            out = self.loss(model, batch)
            nll, n_tok, start = nll + float(out.nll_sum), n_tok + out.n_tokens, end
        return nll, n_tok

    def _settings(self, beam: int, nbest: int = 1, **kw: Any) -> SearchSettings:
        """Search settings: a keyword given and not None wins, else the task config's."""
        cfg = self.cfg

        def pick(name: str) -> Any:
            value = kw.get(name)
            return getattr(cfg, name) if value is None else value

        return SearchSettings(
            beam=beam,
            nbest=nbest,
            max_len_a=pick("max_len_a"),
            max_len_b=pick("max_len_b"),
            length_penalty=pick("length_penalty"),
            coverage_penalty=pick("coverage_penalty"),
            batch_tokens=cfg.eval_max_tokens * 2,
            compiled=pick("test_compile"),
        )

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> EvalResult:
        """Teacher-forced loss / ppl on the whole split; bleu, bleu_lc, chrf from decoded
        text (``valid``: the first ``valid_bleu_sentences`` with ``valid_beam``; other
        splits: all, with ``test_beam``). Signatures are in ``result.signatures``."""
        split = self._split(split)
        was_training = model.training
        model.eval()
        try:
            nll, n_tok = self._teacher_forced(model, split)
            src_ids = self.ids[split][0]
            src_txt, refs = self.texts[split]
            n = len(src_ids)
            if split == "valid" and self.cfg.valid_bleu_sentences:
                n = min(n, self.cfg.valid_bleu_sentences)
            beam = self.cfg.valid_beam if split == "valid" else self.cfg.test_beam
            # validation decodes eagerly: the weights change between validations
            settings = self._settings(beam, test_compile=False if split == "valid" else None)
            decoded = decode_ids(model, src_ids[:n], settings)
        finally:
            model.train(was_training)
        hyps = [self.tgt_tok.decode(nbest[0][0]) for nbest in decoded]
        scores = score_corpus(hyps, refs[:n])
        metrics = {
            "loss": nll / n_tok,
            "ppl": math.exp(min(nll / n_tok, 50.0)),
            "bleu": scores["bleu"],
            "bleu_lc": scores["bleu_lc"],
            "chrf": scores["chrf"],
        }
        signatures = {k: str(scores[f"{k}_signature"]) for k in ("bleu", "bleu_lc", "chrf")}
        return EvalResult(
            metrics,
            signatures,
            hypotheses=hyps,
            settings=dataclasses.asdict(settings) | {"split": split, "bleu_sentences": n},
            warning=scores.get("warning"),
        )

    # ------------------------------------------------------------------ inference

    @torch.no_grad()
    def translate_detailed(
        self,
        model: nn.Module,
        sentences: list[str],
        beam: int = 5,
        nbest: int = 1,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        length_penalty: float | None = None,
        return_attention: bool = False,
        coverage_penalty: float | None = None,
        test_compile: bool | None = None,
    ) -> list[Translation]:
        """Raw sentences → ``Translation`` records (n-best, scores, optional attention).
        A search setting left None is the task config's (``TranslationConfig``)."""
        if isinstance(sentences, str):
            raise TypeError("pass a list of sentences, e.g. [text]")
        settings = self._settings(
            beam,
            nbest,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            length_penalty=length_penalty,
            coverage_penalty=coverage_penalty,
            test_compile=test_compile,
        )
        src_ids = [self.src_tok.encode(s.strip()) + [EOS_ID] for s in sentences]
        was_training = model.training
        model.eval()
        try:
            decoded = decode_ids(model, src_ids, settings) if sentences else []
            records = None
            if return_attention and sentences:
                records = attention_records(model, src_ids, [nb[0][0] for nb in decoded])
        finally:
            model.train(was_training)
        out = []
        for i, (sentence, nb) in enumerate(zip(sentences, decoded)):
            hyps = [Hypothesis(self.tgt_tok.decode(ids), ids, s, lp) for ids, s, lp in nb]
            t = Translation(sentence, hyps)
            if return_attention:
                t.source_pieces = [self.src_tok.id_to_piece(j) for j in src_ids[i]]
                t.target_pieces = [self.tgt_tok.id_to_piece(j) for j in nb[0][0]] + ["</s>"]
                t.attention = records[i] if records is not None else None
            out.append(t)
        return out

    def translate(
        self,
        model: nn.Module,
        sentences: list[str],
        beam: int = 5,
        nbest: int = 1,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        length_penalty: float | None = None,
        return_attention: bool = False,
        coverage_penalty: float | None = None,
        test_compile: bool | None = None,
    ) -> list[Any]:
        """Translate raw sentences; detokenised text out, in input order.

        Returns one string per input; with ``nbest`` > 1 a list of ``(text, score)`` per
        input (best first; score = log P / lp + cp, GNMT α = ``length_penalty``, β =
        ``coverage_penalty``; None = the task config's); with ``return_attention`` the full
        ``Translation`` records (attention from ``model.attention_maps`` when the model
        has it). ``test_compile``: decode through the compiled decoder step (None = the
        task config's ``test_compile``; docs/decoding.md "Compiled decoding").
        """
        results = self.translate_detailed(
            model,
            sentences,
            beam,
            nbest,
            max_len_a,
            max_len_b,
            length_penalty,
            return_attention,
            coverage_penalty,
            test_compile,
        )
        if return_attention:
            return results
        if nbest == 1:
            return [r.text for r in results]
        return [[(h.text, h.score) for h in r.hypotheses] for r in results]

    def evaluate_files(
        self,
        model: nn.Module,
        src_path: str | Path,
        ref_path: str | Path,
        beam: int = 5,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: int | None = None,
        plot_path: str | Path | None = None,
        hyp_path: str | Path | None = None,
        coverage_penalty: float | None = None,
        test_compile: bool | None = None,
    ) -> dict[str, Any]:
        """Translate any parallel test set and score it: bleu, bleu_lc, chrf (+ signatures),
        the source-length bucket table (``buckets``, ``bucket_table``), optionally a bucket
        PNG at ``plot_path`` and the hypotheses written to ``hyp_path``. Search settings
        left None are the task config's, as in ``evaluate``."""
        pairs = read_parallel(src_path, ref_path)
        sources, refs = [s for s, _ in pairs], [r for _, r in pairs]
        hyps = self.translate(
            model,
            sources,
            beam,
            1,
            max_len_a,
            max_len_b,
            length_penalty,
            coverage_penalty=coverage_penalty,
            test_compile=test_compile,
        )
        settings = self._settings(  # what translate used, for the record
            beam, length_penalty=length_penalty, coverage_penalty=coverage_penalty
        )
        result: dict[str, Any] = {"src": str(src_path), "ref": str(ref_path), "beam": beam}
        result["length_penalty"] = settings.length_penalty if beam > 1 else None
        result["coverage_penalty"] = settings.coverage_penalty if beam > 1 else None
        result |= score_corpus(hyps, refs)
        buckets = bleu_by_length(sources, hyps, refs)
        result["buckets"] = [b.to_dict() for b in buckets]
        result["bucket_table"] = bucket_table(buckets)
        if plot_path is not None:
            result["plot"] = str(plot_bleu_by_length(buckets, plot_path))
        if hyp_path is not None:
            Path(hyp_path).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
            result["hypotheses_file"] = str(hyp_path)
        return result
