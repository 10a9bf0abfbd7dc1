"""BiLSTM sequence tagger with optional character features and a softmax or CRF output
(Lample et al. 2016 "Neural Architectures for Named Entity Recognition"; Huang et al.
2015; character CNN of Ma & Hovy 2016).

Per word t of a sentence (notes 003: the many-to-many RNN of the NER example, x⟨t⟩ → ŷ⟨t⟩):

    x_t = [E_w[w_t] ; c_t]                       word embedding ; character features
    c_t = [→h_char ; ←h_char]                     char BiLSTM final states (Lample §4.1)
        or max_τ tanh(conv(E_c[chars of w_t]))_τ  char CNN, max over positions (Ma & Hovy §2.1)
    h_t = [→h_t ; ←h_t] = BiLSTM(dropout(x))_t    (Lample §2.1)
    P_t = W_P dropout(h_t) + b_P                  emissions, one score per tag (B, T, K)

    softmax:  p(y_t | x) = softmax(P_t),   loss Σ_t −log p(y_t | x)
    crf:      p(y | x) ∝ exp s(x, y) (seqlab.nn.crf.CRF),   loss −log p(y | x)

Decoding: argmax per word (softmax) or Viterbi (CRF). With ``constraint="iob2"`` both
decoders return only valid IOB2 sequences (the softmax one by Viterbi over log p with
forbidden transitions at −∞; the CRF also trains with them at −∞).

Deviations: Lample et al. train with SGD (lr 0.01, batch 1) and use pretrained word
vectors; seqlab's presets use Adam and mini-batches, and embeddings start random unless
``task.embeddings_path`` is set. The char CNN applies tanh before the max (as Ma & Hovy's
code). No hidden layer between the BiLSTM and the output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.conv import Conv1d
from seqlab.nn.crf import CRF, iob2_allowed, viterbi
from seqlab.nn.dropout import Dropout
from seqlab.nn.embedding import Embedding
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


@dataclass(frozen=True)
class TaggerConfig:
    """Hyper-parameters. Lample et al. 2016: word_dim 100, char_dim 25, char_hidden 25,
    hidden 100 (per direction), dropout 0.5, CRF output."""

    word_dim: int = 100
    char: Literal["none", "lstm", "cnn"] = "lstm"
    char_dim: int = 25
    char_hidden: int = 25
    char_filters: int = 30
    char_width: int = 3
    cell: Literal["lstm", "gru"] = "lstm"
    hidden: int = 100
    num_layers: int = 1
    dropout: float = 0.5
    decoder: Literal["softmax", "crf"] = "crf"
    constraint: Literal["none", "iob2"] = "none"

    def __post_init__(self) -> None:
        for name in ("word_dim", "char_dim", "char_hidden", "char_filters", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_layers < 1:
            raise ValueError(f"model.num_layers must be >= 1, got {self.num_layers}")
        if self.char_width < 1 or self.char_width % 2 == 0:
            raise ValueError(f"model.char_width must be odd and >= 1, got {self.char_width}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")


class CharBiLSTM(nn.Module):
    """c = [→h_char ; ←h_char]: final states of a BiLSTM over a word's characters.

    Shapes:
        chars: (N, W) long, pad_id after the word  ->  (N, 2·H)
    """

    def __init__(self, n_chars: int, D: int, H: int, dropout: float, pad_id: int = 0) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.embed = Embedding(n_chars, D, padding_idx=pad_id, init_std=D**-0.5)
        self.drop = Dropout(dropout)
        self.rnn = Recurrent("lstm", D, H, bidirectional=True)
        self.out_dim = 2 * H

    def forward(self, chars: Tensor) -> Tensor:
        lengths = (chars != self.pad_id).sum(1).clamp(min=1)  # (N,)
        e = self.drop(self.embed(chars))  # (N, W, D)
        _, (h_n, _) = self.rnn(e, lengths)  # (2, N, H): forward final, backward final
        return torch.cat([h_n[0], h_n[1]], dim=-1)  # (N, 2H)


class CharCNN(nn.Module):
    """c = max_τ tanh(conv(E_c[chars]))_τ over the word's real characters (Ma & Hovy 2016).

    Shapes:
        chars: (N, W) long, pad_id after the word  ->  (N, C)
    """

    def __init__(
        self, n_chars: int, D: int, C: int, width: int, dropout: float, pad_id: int = 0
    ) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.embed = Embedding(n_chars, D, padding_idx=pad_id, init_std=D**-0.5)
        self.drop = Dropout(dropout)
        self.conv = Conv1d(D, C, width, padding="same")
        self.out_dim = C

    def forward(self, chars: Tensor) -> Tensor:
        keep = chars != self.pad_id  # (N, W)
        # Zero rows at padding = the convolution's zero padding: extra padding changes nothing.
        e = self.drop(self.embed(chars)) * keep.unsqueeze(-1)  # (N, W, D)
        h = torch.tanh(self.conv(e))  # (N, W, C)
        h = h.masked_fill(~keep.unsqueeze(-1), float("-inf"))  # (N, W, C) max over real chars
        return h.max(dim=1).values  # (N, C)


@MODELS.register("bilstm_tagger", TaggerConfig)
class BiLSTMTagger(nn.Module):
    """BiLSTM(-CRF) tagger (Lample et al. 2016) with character features.

    ``word_init`` (from the task, fresh training only) initialises the word embedding
    from pretrained vectors and returns their coverage.

    Shapes:
        words (B, T) long, chars (B, T, W) long, mask (B, T) bool -> emissions P (B, T, K)
        loss(P, y, mask) -> (B,) per-sentence −log p        decode(P, mask) -> (B, T)
    """

    def __init__(
        self,
        cfg: TaggerConfig,
        n_words: int,
        n_chars: int,
        tags: Sequence[str],
        pad_id: int = 0,
        word_init: Callable[[nn.Module], float] | None = None,
    ) -> None:
        super().__init__()
        self.cfg, self.tags, self.pad_id = cfg, tuple(tags), pad_id
        K = len(self.tags)
        self.word_embed = Embedding(n_words, cfg.word_dim, pad_id, init_std=cfg.word_dim**-0.5)
        self.coverage = word_init(self.word_embed) if word_init is not None else None
        if cfg.char == "lstm":
            self.char_features = CharBiLSTM(
                n_chars, cfg.char_dim, cfg.char_hidden, cfg.dropout, pad_id
            )
        elif cfg.char == "cnn":
            self.char_features = CharCNN(
                n_chars, cfg.char_dim, cfg.char_filters, cfg.char_width, cfg.dropout, pad_id
            )
        else:
            self.char_features = None
        D = cfg.word_dim + (self.char_features.out_dim if self.char_features else 0)
        self.drop = Dropout(cfg.dropout)
        self.rnn = Recurrent(
            cfg.cell, D, cfg.hidden, cfg.num_layers, bidirectional=True, dropout=cfg.dropout
        )
        self.W_P = nn.Linear(2 * cfg.hidden, K)
        self.crf = CRF(K, cfg.constraint, self.tags) if cfg.decoder == "crf" else None
        if cfg.decoder == "softmax" and cfg.constraint == "iob2":
            allowed, allowed_start = iob2_allowed(self.tags)
            self.register_buffer("allowed", allowed, persistent=False)
            self.register_buffer("allowed_start", allowed_start, persistent=False)

    def features(self, words: Tensor, chars: Tensor, mask: Tensor) -> Tensor:
        """x_t = [E_w[w_t] ; c_t].  -> (B, T, D)"""
        x = self.word_embed(words)  # (B, T, D_w)
        if self.char_features is None:
            return x
        c = self.char_features(chars[mask])  # (N, D_c), real words only
        c_all = c.new_zeros(*mask.shape, c.shape[-1])  # (B, T, D_c), zero at padded words
        c_all = c_all.masked_scatter(mask.unsqueeze(-1), c)  # (B, T, D_c)
        return torch.cat([x, c_all], dim=-1)  # (B, T, D_w + D_c)

    def forward(self, words: Tensor, chars: Tensor, mask: Tensor) -> Tensor:
        x = self.drop(self.features(words, chars, mask))  # (B, T, D)
        lengths = mask.sum(1)  # (B,)
        h, _ = self.rnn(x, lengths)  # (B, T, 2H), zero at padding
        return self.W_P(self.drop(h))  # (B, T, K)

    def loss(self, P: Tensor, y: Tensor, mask: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """−log p(y | x) per sentence: CRF NLL, or Σ_t token cross-entropy (softmax).

        Shapes: P (B, T, K), y (B, T), mask (B, T) -> (B,)
        """
        if self.crf is not None:
            if label_smoothing:
                raise ValueError("label smoothing is not defined for the CRF output")
            return self.crf.nll(P, y, mask)  # (B,)
        logits = P.float()  # (B, T, K) loss in fp32
        ce = F.cross_entropy(
            logits.transpose(1, 2), y, reduction="none", label_smoothing=label_smoothing
        )  # (B, T)
        return torch.where(mask, ce, 0.0).sum(1)  # (B,)

    @torch.no_grad()
    def decode(self, P: Tensor, mask: Tensor) -> Tensor:
        """Best tags: Viterbi (CRF, or softmax under the IOB2 constraint), else argmax.

        Shapes: P (B, T, K), mask (B, T) -> (B, T) long, 0 at padding
        """
        if self.crf is not None:
            return self.crf.decode(P, mask)[0]
        if self.cfg.constraint == "iob2":
            log_p = torch.log_softmax(P.float(), dim=-1)  # (B, T, K)
            K = len(self.tags)
            A = log_p.new_zeros(K, K).masked_fill(~self.allowed, float("-inf"))  # (K, K)
            A_start = log_p.new_zeros(K).masked_fill(~self.allowed_start, float("-inf"))  # (K,)
            return viterbi(log_p, mask, A, A_start, log_p.new_zeros(K))[0]  # (B, T)
        return P.argmax(-1).masked_fill(~mask, 0)  # (B, T)
