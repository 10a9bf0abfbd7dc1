"""Using a trained language model: sample text (``generate``) and score a sentence (``score``).

Sampling novel sequences (notes 003): feed the prompt, then repeatedly draw
ŷ⟨t⟩ ~ q(· | ŷ⟨<t⟩) and feed it back as the next input, with q the model's distribution
reshaped by temperature / top-k / top-p (``seqlab.decode.sampling.sample``; a seeded
``torch.Generator`` makes it reproducible). Without a prompt the model starts after a
boundary: ⟨/s⟩ for a word model (the start of a sentence), ``"\\n"`` for a character model
(the start of a line).

Scoring (notes 003: P(y⟨1⟩ y⟨2⟩ y⟨3⟩) = P(y⟨1⟩) P(y⟨2⟩ | y⟨1⟩) P(y⟨3⟩ | y⟨1⟩ y⟨2⟩)):

    log P(sentence) = Σ_t log p(y⟨t⟩ | boundary, y⟨<t⟩)

over the sentence's tokens, for a word model ending with ⟨/s⟩ (the PTB convention: a
sentence's probability includes that it ends), for a character model its characters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from seqlab.data.tokenizers import CharTokenizer
from seqlab.data.vocab import BOS_ID, EOS, EOS_ID, PAD_ID, UNK_ID
from seqlab.decode.sampling import check_filters, sample
from seqlab.errors import SeqlabError
from seqlab.models.lm_common import prime, token_log_probs


@dataclass
class TokenScore:
    """One scored token: its text, p(token | before) and ln p."""

    token: str
    p: float
    log_p: float


@dataclass
class SentenceScore:
    """``score``'s result: log P (natural log) of the sentence and of every token."""

    text: str
    log_prob: float
    tokens: list[TokenScore]

    @property
    def log10_prob(self) -> float:
        return self.log_prob / math.log(10.0)

    @property
    def perplexity(self) -> float:
        mean = -self.log_prob / len(self.tokens)
        return math.exp(mean) if mean < 709.0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "log_prob": self.log_prob,
            "log10_prob": self.log10_prob,
            "n_tokens": len(self.tokens),
            "perplexity": self.perplexity,
            "tokens": [{"token": t.token, "p": t.p, "log_p": t.log_p} for t in self.tokens],
        }


class _NeverSpecial:
    """A step decoder that gives −∞ to the ids a training stream never contains (``<pad>``,
    ``<s>``; for characters also ``</s>`` and ``<unk>``), so that sampling emits only text."""

    def __init__(self, model: nn.Module, banned: list[int], V: int) -> None:
        self.decoder = model  # the name ``seqlab.nn.packed_linear.module_to_pack`` unwraps
        self.ban = torch.zeros(V, dtype=torch.bool, device=next(model.parameters()).device)
        self.ban[banned] = True  # (V,)

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        logits, state = self.decoder.step(y_prev, state)  # (B, V)
        return logits.masked_fill(self.ban, float("-inf")), state  # (B, V)


class LMInference:
    """``generate`` and ``score`` for :class:`seqlab.tasks.lm.LMTask` (mixed into it)."""

    tokenizer: Any
    cfg: Any

    @property
    def is_char(self) -> bool:
        return isinstance(self.tokenizer, CharTokenizer)

    def boundary_id(self) -> int:
        """The token a text starts after: ⟨/s⟩ (word), ``"\\n"`` (char, when known)."""
        if self.is_char and "\n" in self.tokenizer.vocab:
            return self.tokenizer.vocab.token_to_id("\n")
        return EOS_ID

    def text_ids(self, text: str, what: str) -> tuple[list[int], list[str]]:
        """Ids and display pieces of ``text``; a character model refuses characters it has
        never seen, a word model maps unknown words to ⟨unk⟩ (shown as ``word→<unk>``)."""
        if not text or (not self.is_char and not text.split()):
            hint = " (or leave out --prompt to start after a boundary)" if what == "prompt" else ""
            raise SeqlabError(f"the {what} is empty: give some text{hint}")
        pieces = self.tokenizer.pieces(text)
        ids = self.tokenizer.vocab.encode(pieces)
        if self.is_char:
            unknown = sorted({p for p, i in zip(pieces, ids) if i == UNK_ID})
            if unknown:
                n = self.tokenizer.vocab_size - 4
                raise SeqlabError(
                    f"the {what} has characters the model never saw: "
                    f"{', '.join(repr(c) for c in unknown[:10])} (its vocabulary has {n} "
                    "characters): remove or replace them"
                )
        shown = [p if i != UNK_ID else f"{p}→<unk>" for p, i in zip(pieces, ids)]
        return ids, shown

    def sentence_ids(self, text: str) -> tuple[list[int], list[str]]:
        """The tokens a scored text predicts: its ids and pieces, for a word model with
        ⟨/s⟩ appended (a sentence's probability includes that it ends)."""
        ids, shown = self.text_ids(text, "text")
        if not self.is_char:
            ids, shown = [*ids, EOS_ID], [*shown, EOS]
        return ids, shown

    def render(self, ids: list[int]) -> str:
        """Text of generated ids: characters joined; words joined by spaces with ⟨/s⟩ as a
        line break and ⟨unk⟩ written ``<unk>``."""
        if self.is_char:
            return self.tokenizer.decode(ids)
        words = [self.tokenizer.vocab.id_to_token(i) for i in ids]
        lines, line = [], []
        for w in words:
            if w == EOS:
                lines.append(" ".join(line))
                line = []
            else:
                line.append(w)
        return "\n".join([*lines, " ".join(line)])

    @torch.no_grad()
    def generate(
        self,
        model: nn.Module,
        prompt: str | None = None,
        max_tokens: int = 200,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> str:
        """Sample ``max_tokens`` tokens after ``prompt``; returns the continuation's text.

        The prompt's last token is the first input of the sampler; the tokens before it
        prime the state (``seqlab.models.lm_common.prime``). The same seed gives the same
        text. ``temperature=0`` is greedy (argmax).

        Deviations: ids that never occur in a training stream get probability 0 before
        sampling (``<pad>``, ``<s>``; for characters also ``</s>``, ``<unk>``), so q is
        renormalised over the tokens the model was trained to emit.
        """
        if max_tokens < 1:
            raise SeqlabError(f"--max-tokens must be >= 1, got {max_tokens}")
        try:
            check_filters(temperature, top_k, top_p)
        except ValueError as exc:
            raise SeqlabError(str(exc)) from None
        ids = [self.boundary_id()] if prompt is None else self.text_ids(prompt, "prompt")[0]
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        context = torch.tensor([ids[:-1]], dtype=torch.long, device=device)  # (1, C)
        state = prime(model, context)
        generator = torch.Generator(device=device).manual_seed(seed)
        banned = [PAD_ID, BOS_ID] + ([EOS_ID, UNK_ID] if self.is_char else [])
        result = sample(
            _NeverSpecial(model, banned, self.tokenizer.vocab_size),
            state,
            1,
            bos_id=ids[-1],
            eos_id=-1,  # never stop early: a language model generates a stream
            max_len=max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=generator,
        )
        model.train(was_training)
        return self.render(result.tokens[0].tolist())

    @torch.no_grad()
    def score(self, model: nn.Module, text: str) -> SentenceScore:
        """log P(text) and p of every token, read after the boundary token (module doc)."""
        ids, shown = self.sentence_ids(text)
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        context = torch.tensor([[self.boundary_id()]], dtype=torch.long, device=device)  # (1, 1)
        y = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
        try:
            log_p = token_log_probs(model, context, y)[0].double()  # (T,)
        except ValueError as exc:
            raise SeqlabError(f"cannot score this text: {exc}") from None
        finally:
            model.train(was_training)
        values = log_p.tolist()
        tokens = [TokenScore(s, math.exp(v), v) for s, v in zip(shown, values)]
        return SentenceScore(text, float(log_p.sum()), tokens)

    @torch.no_grad()
    def explain(self, model: nn.Module, text: str) -> dict[str, Any]:
        """What the LM computed for each token of ``text`` (read after the boundary, as
        :meth:`score`): ln p of each target, and what the model can show of how it chose.
        A pointer-mixing LM: the sentinel gate g and the pointer weights a_i over the tokens
        read so far (Merity et al. 2016, eq. 4–7; ``extras`` of the forward). A Transformer
        LM: the masked self-attention of every layer and head (``attention_maps``).

        Returns {"input": pieces read (boundary first), "target": pieces predicted,
        "log_p": (T,)} and "gate": g (T,), "pointer": a (T, T) (row t over the inputs
        0 … t; row sum = 1 − g_t), or "self_attention": (L, H, T, T) (row t over the
        inputs 0 … t; row sum = 1). Raises SeqlabError for a model with neither.
        """
        from seqlab.models.lm_ensemble import LMEnsemble

        if isinstance(model, LMEnsemble):
            raise SeqlabError(
                "an ensemble of language models has no single pointer gate or attention to "
                "explain: explain one run (without --ensemble)"
            )
        ids, shown = self.sentence_ids(text)
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        x = torch.tensor([[self.boundary_id(), *ids[:-1]]], dtype=torch.long, device=device)
        maps = getattr(model, "attention_maps", None)
        try:
            out = model(x, None)  # logits (1, T, V)
            attention = maps(x)[:, 0] if maps is not None else None  # (L, H, T, T)
        finally:
            model.train(was_training)
        pointer = "gate" in out.extras and "pointer" in out.extras
        if not pointer and attention is None:
            raise SeqlabError(
                f"{type(model).__name__} has no pointer gate or attention to explain "
                "(pointer_sentinel and transformer_lm models have); use score for per-token "
                "probabilities"
            )
        T = x.shape[1]
        log_p = torch.log_softmax(out.logits[0].float(), dim=-1)  # (T, V)
        boundary = self.tokenizer.vocab.id_to_token(self.boundary_id())
        explained: dict[str, Any] = {
            "input": [boundary, *shown[:-1]],
            "target": shown,
            "log_p": log_p.gather(1, torch.tensor(ids, device=device)[:, None])[:, 0].cpu(),
        }
        if pointer:
            explained["gate"] = out.extras["gate"][0].float().cpu()  # (T,)
            explained["pointer"] = out.extras["pointer"][0, :, -T:].float().cpu()  # (T, T)
        if attention is not None:
            explained["self_attention"] = attention.float().cpu()  # (L, H, T, T)
        return explained
