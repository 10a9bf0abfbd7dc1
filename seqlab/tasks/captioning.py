"""Attention captioning of generated scenes ("caption"; Xu et al. 2015 on seqlab.data.scenes).

Pipeline (docs/captioning.md):

1. Scenes: ``n_train`` / ``n_valid`` scenes of the training compositions and ``n_test``
   scenes that each hold a held-out composition (``split``: type pairs or colour–shape
   types), all from ``seed`` (``seqlab.data.scenes``). A split is generated the first
   time it is used; images are rendered per batch (64×64×3 bytes each, never stored).
2. Captions: whitespace words of the grammar, the fixed vocabulary ``caption_vocab()``
   (ids 0–3 the specials); y_in = ⟨s⟩ y, y_out = y ⟨/s⟩.
3. Loss (summed; the Trainer divides by the target tokens):
   Σ_t −log p(y_t) + λ Σ_images Σ_i (1 − Σ_t α_ti)²   (Xu et al. eq. 14, λ = ``lambda_ds``).
4. ``evaluate(split)``: teacher-forced loss and perplexity; greedy captions (and beam
   captions with ``valid_beam`` / ``test_beam`` > 1) scored by sacreBLEU corpus BLEU-4
   against the one true caption (``bleu4`` as a 0–1 fraction, ``bleu`` 0–100), exact
   match, and attention localisation (:func:`localisation`).

Attention localisation: for every colour or shape word the model generates, take the
attention map α_t it used to emit that word, its peak region argmax_i α_ti, and that
region's centre in pixels; a hit when the centre lies in the box of an object the word
describes. The referents of a word: the scene objects matching its whole phrase ("red
circle"), else those matching the word alone ("red"); a word that describes no object is
a miss. ``attention_in_box`` is the mean attention mass on the referents' boxes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from seqlab.config import ConfigError
from seqlab.data.collate import pad_batch
from seqlab.data.scenes import (
    COLOURS,
    SHAPES,
    Scene,
    SceneSpec,
    caption_vocab,
    generate_scenes,
    render_batch,
)
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab
from seqlab.decode import beam_search, greedy
from seqlab.errors import DataError, SeqlabError
from seqlab.eval.bleu import corpus_bleu
from seqlab.models.captioner import doubly_stochastic_penalty, region_centres
from seqlab.nn.masks import padding_mask
from seqlab.registry import TASKS
from seqlab.tasks.base import LossOutput, Task, token_cross_entropy

__all__ = [
    "CaptionBatch",
    "CaptionConfig",
    "CaptionTask",
    "Described",
    "localisation",
]

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class CaptionConfig:
    """Scenes, split, regulariser and evaluation of the caption task.

    Scene fields (``canvas`` … ``split_seed``) are those of ``seqlab.data.scenes.SceneSpec``;
    ``seed`` draws the scenes (train: seed, valid: seed + 1, test: seed + 2).
    ``lambda_ds``: λ of the doubly stochastic regulariser (0 switches it off; the paper
    gives no value; 1, common in reimplementations, spread the attention off the objects
    in short runs here: docs/captioning.md §5).
    ``valid_beam`` / ``test_beam``: beam width of the extra beam-search metrics (1: greedy
    only). ``max_caption_len``: decoding limit in words (the grammar's longest is 13).
    """

    n_train: int = 40000
    n_valid: int = 500
    n_test: int = 1000
    canvas: int = 64
    seed: int = 0
    min_objects: int = 2
    max_objects: int = 3
    min_size: int = 20
    max_size: int = 24
    split: Literal["pairs", "types"] = "pairs"
    n_held_out: int | None = None
    split_seed: int = 0
    lambda_ds: float = 0.01
    valid_beam: int = 1
    test_beam: int = 3
    max_caption_len: int = 20
    eval_batch_size: int = 250

    def __post_init__(self) -> None:
        for name in ("n_train", "n_valid", "n_test", "valid_beam", "test_beam"):
            if getattr(self, name) < 1:
                raise ConfigError(f"task.{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_batch_size < 1:
            raise ConfigError(f"task.eval_batch_size must be >= 1, got {self.eval_batch_size}")
        if self.max_caption_len < 14:
            raise ConfigError(
                f"task.max_caption_len must be >= 14 (13 words + </s>), got {self.max_caption_len}"
            )
        if self.lambda_ds < 0:
            raise ConfigError(f"task.lambda_ds must be >= 0, got {self.lambda_ds}")
        try:
            self.spec()
        except ValueError as exc:
            raise ConfigError(f"task: {exc}") from None

    def spec(self) -> SceneSpec:
        return SceneSpec(
            canvas=self.canvas,
            min_objects=self.min_objects,
            max_objects=self.max_objects,
            min_size=self.min_size,
            max_size=self.max_size,
            split=self.split,
            n_held_out=self.n_held_out,
            split_seed=self.split_seed,
        )


@dataclass(frozen=True)
class CaptionBatch:
    """Rendered scenes and their captions for teacher forcing.

    Shapes:
        images:   (B, 3, H, W) float in [0, 1]
        y_in:     (B, T) long, ⟨s⟩ y_1 … y_m then pad
        y_out:    (B, T) long, y_1 … y_m ⟨/s⟩ then pad
        tgt_mask: (B, T) bool, True = real step
        index:    (B,) long, the scenes' positions in their split
        n_tokens: int, Σ_b (m_b + 1)
    """

    images: Tensor
    y_in: Tensor
    y_out: Tensor
    tgt_mask: Tensor
    index: Tensor
    n_tokens: int

    @property
    def batch_size(self) -> int:
        return int(self.images.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> CaptionBatch:
        move = {"non_blocking": non_blocking}
        return CaptionBatch(
            self.images.to(device, **move),
            self.y_in.to(device, **move),
            self.y_out.to(device, **move),
            self.tgt_mask.to(device, **move),
            self.index.to(device, **move),
            self.n_tokens,
        )


def images_tensor(scenes: Sequence[Scene]) -> Tensor:
    """Rendered scenes as a float batch.  Shapes: returns (B, 3, H, W) in [0, 1]."""
    pixels = torch.from_numpy(render_batch(scenes))  # (B, H, W, 3) uint8
    return pixels.permute(0, 3, 1, 2).float().div_(255.0)  # (B, 3, H, W)


def _referents(words: Sequence[str], t: int, scene: Scene) -> list[int]:
    """Objects the colour/shape word ``words[t]`` describes (module doc): those matching its
    phrase (the colour–shape pair it belongs to), else those matching the word alone."""
    word = words[t]
    if word in COLOURS:
        colour = word
        shape = words[t + 1] if t + 1 < len(words) and words[t + 1] in SHAPES else None
    else:
        shape = word
        colour = words[t - 1] if t > 0 and words[t - 1] in COLOURS else None
    objs = scene.objects
    both = [k for k, o in enumerate(objs) if o.colour == colour and o.shape == shape]
    if both:
        return both
    attr = "colour" if word in COLOURS else "shape"
    return [k for k, o in enumerate(objs) if getattr(o, attr) == word]


def localisation(
    words: Sequence[str], alpha: Tensor, scene: Scene, grid: tuple[int, int]
) -> tuple[list[bool], list[float]]:
    """Attention localisation of one generated caption (module doc).

    ``alpha[t]`` is the map used to emit ``words[t]``. For each colour or shape word: a hit
    when the centre of its peak region lies in a referent's box (x0 ≤ x < x1, y0 ≤ y < y1),
    and the attention mass on the referents' boxes (union).

    Shapes: alpha (T, L) with T ≥ len(words) -> (hits, masses), one per object word
    """
    centres = region_centres(grid, (scene.canvas, scene.canvas))  # (L, 2)
    x, y = centres[:, 0], centres[:, 1]  # (L,), (L,)
    hits, masses = [], []
    for t, word in enumerate(words):
        if word not in COLOURS and word not in SHAPES:
            continue
        inside = torch.zeros_like(x, dtype=torch.bool)  # (L,)
        for k in _referents(words, t, scene):
            x0, y0, x1, y1 = scene.objects[k].box
            inside |= (x >= x0) & (x < x1) & (y >= y0) & (y < y1)  # (L,)
        a_t = alpha[t].double()  # (L,)
        hits.append(bool(inside[int(a_t.argmax())]))
        masses.append(float(a_t[inside].sum()))
    return hits, masses


@dataclass
class Described:
    """One decoded caption with its attention: the words (no specials) and α_t per word.

    Shapes: alpha (len(words) + 1, L) — the last row emitted ⟨/s⟩ (if it was emitted)
    """

    scene: Scene
    words: list[str]
    alpha: Tensor
    beta: Tensor


@TASKS.register("caption", CaptionConfig)
class CaptionTask(Task):
    """Caption generated scenes; BLEU-4 and attention localisation on held-out compositions."""

    pad_id = PAD_ID

    def prepare(self, tokenizer_state: dict[str, Any] | None = None) -> None:
        self.vocab = caption_vocab()
        if tokenizer_state is not None:
            saved = Vocab.from_dict(tokenizer_state.get("vocab", {}))
            if saved != self.vocab:
                raise DataError(
                    "the checkpoint's caption vocabulary differs from this seqlab's scene grammar",
                    hint="load it with the seqlab version that trained it",
                )
        self.spec = self.cfg.spec()
        self.splits: dict[str, list[Scene] | None] = dict.fromkeys(SPLITS)

    def scenes(self, split: str) -> list[Scene]:
        """The scenes of ``split`` (generated on first use)."""
        if split not in self.splits:
            raise SeqlabError(f"caption task has no split {split!r}; it has: {', '.join(SPLITS)}")
        if self.splits[split] is None:
            cfg = self.cfg
            n = {"train": cfg.n_train, "valid": cfg.n_valid, "test": cfg.n_test}[split]
            offset = SPLITS.index(split)
            self.splits[split] = generate_scenes(
                self.spec, n, held_out=split == "test", seed=cfg.seed + offset
            )
        return self.splits[split]  # type: ignore[return-value]

    def tokenizer_state(self) -> dict[str, Any]:
        return {"vocab": self.vocab.to_dict()}

    def model_kwargs(self) -> dict[str, Any]:
        return {
            "tgt_vocab": len(self.vocab),
            "pad_id": PAD_ID,
            "in_channels": 3,
            "image_size": self.cfg.canvas,
        }

    def train_lengths(self) -> np.ndarray:
        return np.array([len(s.tokens()) + 1 for s in self.scenes("train")])  # + </s>

    def collate(self, indices: list[int], split: str = "train") -> CaptionBatch:
        data = self.scenes(split)
        scenes = [data[i] for i in indices]
        y, m = pad_batch([self.vocab.encode(s.tokens()) for s in scenes], PAD_ID)  # (B, T−1)
        B = y.shape[0]
        y_in = torch.cat([torch.full((B, 1), BOS_ID, dtype=torch.long), y], dim=1)  # (B, T)
        y_out = torch.cat([y, torch.full((B, 1), PAD_ID, dtype=torch.long)], dim=1)  # (B, T)
        y_out[torch.arange(B), m] = EOS_ID  # ⟨/s⟩ right after the last word
        tgt_mask = padding_mask(m + 1, y_in.shape[1])  # (B, T)
        index = torch.tensor(indices, dtype=torch.long)  # (B,)
        return CaptionBatch(images_tensor(scenes), y_in, y_out, tgt_mask, index, int(m.sum()) + B)

    def loss(self, model: nn.Module, batch: CaptionBatch, label_smoothing: float = 0.0):
        """Σ_t CE + λ Σ_b Σ_i (1 − Σ_t α_ti)²; ``nll_sum`` is the CE part only."""
        logits, alpha, _ = model(  # (B, T, V), (B, T, L)
            batch.images, None, batch.y_in, batch.tgt_mask, return_attention=True
        )
        ce = token_cross_entropy(logits, batch.y_out, PAD_ID, label_smoothing)
        if self.cfg.lambda_ds == 0:
            return ce
        ds = doubly_stochastic_penalty(alpha.float(), batch.tgt_mask).sum()  # ()
        return LossOutput(ce.loss_sum + self.cfg.lambda_ds * ds, ce.nll_sum, ce.n_tokens)

    # ------------------------------------------------------------------ decoding

    def words(self, ids: Sequence[int]) -> list[str]:
        """Decoded ids up to the first ⟨/s⟩, specials dropped."""
        out = []
        for i in ids:
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(self.vocab.id_to_token(int(i)))
        return out

    @torch.no_grad()
    def describe(
        self, model: nn.Module, split: str, indices: Sequence[int], beam: int = 1
    ) -> list[Described]:
        """Caption scenes ``indices`` of ``split`` (greedy, or beam search of width ``beam``)
        and recover the attention of every emitted word by teacher-forcing the caption
        (the same α as during decoding: cached step == teacher forcing, tested)."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        data = self.scenes(split)
        scenes = [data[i] for i in indices]
        images = images_tensor(scenes).to(device)  # (B, 3, H, W)
        state = model.init_state(model.encode(images, None), None)
        B, max_len = len(scenes), self.cfg.max_caption_len
        if beam > 1:
            res = beam_search(model, state, B, BOS_ID, EOS_ID, max_len, beam_size=beam)
        else:
            res = greedy(model, state, B, BOS_ID, EOS_ID, max_len)
        tokens = res.tokens[:, 0] if res.tokens.dim() == 3 else res.tokens  # (B, T)
        words = [self.words(row) for row in tokens.tolist()]
        y_in = torch.cat(  # (B, T)  ⟨s⟩ then the caption: row t emitted token t
            [torch.full((B, 1), BOS_ID, dtype=torch.long, device=device), tokens[:, :-1]], dim=1
        )
        y_in = y_in.masked_fill(y_in == PAD_ID, EOS_ID)  # (B, T) a valid id after the end
        maps = model.attention_maps(images, None, y_in, None)
        model.train(was_training)
        return [
            Described(s, w, maps["alpha"][b, : len(w) + 1].cpu(), maps["beta"][b].cpu())
            for b, (s, w) in enumerate(zip(scenes, words))
        ]

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def evaluate(self, model: nn.Module, split: str = "valid") -> dict[str, float]:
        """loss, ppl; greedy bleu4 (0–1), bleu (0–100), exact_match, localisation,
        attention_in_box, object_words; with a beam width > 1 for the split the same with
        the suffix ``_beam``."""
        was_training = model.training
        model.eval()
        data = self.scenes(split)
        device = next(model.parameters()).device
        nll, n_tok = 0.0, 0
        size = self.cfg.eval_batch_size
        chunks = [list(range(i, min(i + size, len(data)))) for i in range(0, len(data), size)]
        for ix in chunks:
            batch = self.collate(ix, split).to(device)
            logits = model(batch.images, None, batch.y_in, batch.tgt_mask)  # (B, T, V)
            out = token_cross_entropy(logits, batch.y_out, PAD_ID)
            nll += float(out.nll_sum)
            n_tok += out.n_tokens
        metrics = {"loss": nll / n_tok, "ppl": float(np.exp(nll / n_tok))}
        beam = self.cfg.test_beam if split == "test" else self.cfg.valid_beam
        for width, suffix in [(1, ""), *([(beam, "_beam")] if beam > 1 else [])]:
            described = [d for ix in chunks for d in self.describe(model, split, ix, width)]
            metrics.update({k + suffix: v for k, v in self.score(described, model).items()})
        model.train(was_training)
        return metrics

    def score(self, described: Sequence[Described], model: nn.Module) -> dict[str, float]:
        """BLEU-4, exact match and localisation of decoded captions."""
        hyps = [" ".join(d.words) for d in described]
        refs = [d.scene.caption() for d in described]
        bleu = corpus_bleu(hyps, refs).score  # 0–100
        hits: list[bool] = []
        masses: list[float] = []
        for d in described:
            h, m = localisation(d.words, d.alpha, d.scene, model.grid)
            hits += h
            masses += m
        return {
            "bleu4": bleu / 100.0,
            "bleu": bleu,
            "exact_match": float(np.mean([h == r for h, r in zip(hyps, refs)])),
            "localisation": float(np.mean(hits)) if hits else 0.0,
            "attention_in_box": float(np.mean(masses)) if masses else 0.0,
            "object_words": float(len(hits)),
        }
