"""Subword tokenizer backed by sentencepiece (Kudo & Richardson 2018), BPE or unigram LM.

Training settings chosen for seqlab:

- ``pad=0 unk=1 bos=2 eos=3`` with the names ``<pad> <unk> <s> </s>``, as every tokenizer.
- ``normalization="identity"`` (default) with ``remove_extra_whitespaces=False``: text is
  not rewritten, so ``decode(encode(t)) == t`` for every text whose characters were seen
  in training (leading, trailing and repeated spaces and TABs included). This is what
  detokenized evaluation (sacreBLEU) needs. ``"nmt_nfkc"`` applies sentencepiece's NFKC
  normalisation instead; the round trip then holds only for already-normalised text.
- ``num_threads=1`` and the whole corpus (no sampling), so the same inputs always give
  byte-identical models.
- ``cache_dir``: the trained model is stored as ``spm-<sha256>.model``, the key hashing the
  training text, every trainer setting and the sentencepiece version; training again with
  the same inputs loads the file instead (``tokenizer.from_cache`` is then True).
- ``encode_sampled``: BPE-dropout (Provilkov et al. 2020) / subword regularisation (Kudo
  2018) through sentencepiece's own sampler, reproducible from a seed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import threading
from collections.abc import Iterable
from io import BytesIO
from pathlib import Path
from typing import Any, Literal

import sentencepiece as spm

from seqlab.atomic_file import write_atomic
from seqlab.data.tokenizers import Tokenizer, with_path
from seqlab.data.vocab import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, UNK, UNK_ID
from seqlab.errors import DataError

__all__ = ["SentencePieceTokenizer"]

log = logging.getLogger("seqlab.data")

_CACHE_FORMAT = "seqlab.spm-cache/1"  # bump when the meaning of a cached file changes


class SentencePieceTokenizer(Tokenizer):
    """Wraps a serialised sentencepiece model whose specials have seqlab's ids 0–3.

    ``decode`` drops ``<pad> <s> </s>`` and shows ``<unk>`` as `` ⁇ `` (sentencepiece's
    default surface, with its spaces).
    """

    kind = "sentencepiece"

    def __init__(self, model: bytes, settings: dict[str, Any] | None = None) -> None:
        try:
            sp = spm.SentencePieceProcessor(model_proto=model)
        except RuntimeError as e:
            raise DataError(
                "not a valid sentencepiece model",
                hint="train one with SentencePieceTokenizer.train",
            ) from e
        found = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise DataError(
                f"sentencepiece model has pad/unk/bos/eos ids {found}, seqlab needs (0, 1, 2, 3)",
                hint="re-train it with SentencePieceTokenizer.train, or with spm_train "
                "--pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3",
            )
        self._sp = sp
        self._model = bytes(model)
        self.settings: dict[str, Any] = dict(settings or {})
        self.from_cache = False

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        model_type: Literal["bpe", "unigram"] = "bpe",
        character_coverage: float = 1.0,
        cache_dir: str | Path | None = None,
        normalization: Literal["identity", "nmt_nfkc"] = "identity",
        byte_fallback: bool = False,
    ) -> SentencePieceTokenizer:
        """Train on ``texts`` (one sentence each, no newlines) a vocabulary of exactly
        ``vocab_size`` pieces, specials included.

        ``character_coverage`` < 1 maps the rarest characters to ``<unk>`` (0.9995 is the
        usual choice for large-alphabet languages). ``byte_fallback=True`` spells unseen
        characters as UTF-8 bytes instead of ``<unk>`` (adds 256 pieces; needs
        ``vocab_size`` > 260). See the module docstring for caching and determinism.
        """
        if model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}")
        if normalization not in ("identity", "nmt_nfkc"):
            raise ValueError(
                f"normalization must be 'identity' or 'nmt_nfkc', not {normalization!r}"
            )
        corpus = [t for t in texts if t]
        for i, t in enumerate(corpus):
            if "\n" in t:
                raise DataError(
                    f"training text {i} contains a newline",
                    hint="pass one sentence per text (e.g. the lines of read_lines)",
                )
        if not corpus:
            raise DataError("no training text", hint="pass at least one non-empty sentence")
        options: dict[str, Any] = {
            "vocab_size": int(vocab_size),
            "model_type": model_type,
            "character_coverage": float(character_coverage),
            "normalization_rule_name": normalization,
            "remove_extra_whitespaces": normalization != "identity",
            "byte_fallback": bool(byte_fallback),
            "pad_id": PAD_ID,
            "unk_id": UNK_ID,
            "bos_id": BOS_ID,
            "eos_id": EOS_ID,
            "pad_piece": PAD,
            "unk_piece": UNK,
            "bos_piece": BOS,
            "eos_piece": EOS,
            "num_threads": 1,
            "input_sentence_size": 0,
            "max_sentence_length": max(4192, *(len(t.encode("utf-8")) for t in corpus)),
            "minloglevel": 2,
        }
        settings = {
            "vocab_size": options["vocab_size"],
            "model_type": model_type,
            "character_coverage": options["character_coverage"],
            "normalization": normalization,
            "byte_fallback": options["byte_fallback"],
            "sentencepiece": spm.__version__,
        }
        cache_file = None
        if cache_dir is not None:
            cache_file = Path(cache_dir) / f"spm-{_cache_key(corpus, options)}.model"
            cached = _load_cached(cache_file, settings)
            if cached is not None:
                return cached
        writer = BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(corpus), model_writer=writer, **options
            )
        except RuntimeError as e:
            msg = str(e).split("] ", 1)[-1]  # drop sentencepiece's source location
            raise DataError(
                f"sentencepiece training failed: {msg}",
                hint="lower vocab_size, or train on more text",
            ) from e
        tok = cls(writer.getvalue(), settings)
        if cache_file is not None:
            write_atomic(cache_file, tok._model)
        return tok

    @classmethod
    def from_model_file(cls, path: str | Path) -> SentencePieceTokenizer:
        """Wrap an existing ``.model`` file (its specials must have ids 0–3)."""
        path = Path(path)
        if not path.is_file():
            raise DataError("sentencepiece model not found", path=path, hint="check the path")
        try:
            return cls(path.read_bytes())
        except DataError as e:
            raise with_path(e, path) from e

    @property
    def model_bytes(self) -> bytes:
        """The serialised sentencepiece model (what ``spm_train`` writes to ``.model``)."""
        return self._model

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def pieces(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return self._sp.encode(text, add_bos=add_bos, add_eos=add_eos)

    def encode_sampled(self, texts: list[str], alpha: float, seed: int) -> list[list[int]]:
        """One random segmentation of each text; the same ``seed`` gives the same ids.

        BPE model: BPE-dropout (Provilkov, Emelianenko & Voita 2020, §3): while a word is
        segmented, each applicable merge is skipped with probability ``alpha`` (0 gives
        ``encode``'s segmentation, 1 gives characters). Unigram model: subword
        regularisation (Kudo 2018, §3.3): a segmentation x drawn with probability ∝
        P(x)^alpha over all segmentations (``nbest_size=-1``).

        sentencepiece draws from a thread-local generator seeded, when the thread first
        samples, from its global seed: a fresh thread per call after
        ``set_random_generator_seed(seed)`` makes the draw a function of ``seed`` alone,
        whatever sampled before (checkpoints store the seed's source, so resume is exact).
        """
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        result: list[Any] = []

        def draw() -> None:
            try:
                result.append(
                    self._sp.encode(
                        list(texts),
                        enable_sampling=True,
                        alpha=alpha,
                        nbest_size=-1,
                        num_threads=1,
                    )  # fmt: skip
                )
            except BaseException as e:  # re-raised in the caller's thread
                result.append(e)

        spm.set_random_generator_seed(int(seed))
        worker = threading.Thread(target=draw, name="seqlab-spm-sample")
        worker.start()
        worker.join()
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def decode(self, ids: Iterable[int]) -> str:
        keep = [i for i in self._check_ids(ids) if i not in (PAD_ID, BOS_ID, EOS_ID)]
        return self._sp.decode(keep)

    def id_to_piece(self, i: int) -> str:
        self._check_ids([i])
        return self._sp.id_to_piece(i)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SentencePieceTokenizer) and other._model == self._model

    def _payload(self) -> dict[str, Any]:
        return {"model": base64.b64encode(self._model).decode("ascii"), "settings": self.settings}

    @classmethod
    def _from_payload(cls, state: dict[str, Any]) -> SentencePieceTokenizer:
        try:
            model = base64.b64decode(state.get("model", ""), validate=True)
        except (binascii.Error, TypeError) as e:
            raise DataError(
                "sentencepiece model is not valid base64", hint="save the tokenizer again"
            ) from e
        return cls(model, state.get("settings"))


def _cache_key(corpus: list[str], options: dict[str, Any]) -> str:
    """sha256 of the cache format, sentencepiece version, trainer options and the text."""
    h = hashlib.sha256()
    header = {"format": _CACHE_FORMAT, "sentencepiece": spm.__version__, "options": options}
    h.update(json.dumps(header, sort_keys=True).encode("utf-8"))
    for t in corpus:  # texts hold no "\n", so "\n"-joined content is unambiguous
        h.update(b"\n")
        h.update(t.encode("utf-8"))
    return h.hexdigest()


def _load_cached(path: Path, settings: dict[str, Any]) -> SentencePieceTokenizer | None:
    if not path.is_file():
        return None
    try:
        tok = SentencePieceTokenizer(path.read_bytes(), settings)
    except (DataError, OSError) as e:
        log.warning("%s: unusable cached sentencepiece model (%s); re-training", path, e)
        return None
    tok.from_cache = True
    return tok
