"""Pointer-generator network with coverage: See, Liu & Manning 2017, "Get To The Point:
Summarization with Pointer-Generator Networks" (§2.1–2.3). The notes (002, "issues (1)
and (2)") use it for repetition and for out-of-vocabulary words.

    x_i = E[w_i]  (+ mean_{g ∈ G(w_i)} z_g)  (+ W_f f(w_i))   encoder input (B, S, E)
    h_i = [h→_i ; h←_i]                               BiLSTM encoder states (B, S, 2H)  §2.1
    s_t = LSTM(x_t, s_{t−1}),  x_t = E[y_{t−1}]  (+ W_ζ ζ_t)   decoder state (B, H)
    c^t = Σ_{t'<t} a^{t'}        (c^0 = 0)             coverage vector (B, S)           eq. 10
    e_i^t = vᵀ tanh(W_h h_i + W_s s_t + w_c c_i^t + b_attn)                            eq. 11
    a^t = softmax(e^t)           (padding excluded)    attention (B, S)                 eq. 2
    h*_t = Σ_i a_i^t h_i                               context vector (B, 2H)           eq. 3
    P_vocab = softmax(V′(V [s_t ; h*_t] + b) + b′)     (B, V)                           eq. 4
    p_gen = σ(w_h*ᵀ h*_t + w_sᵀ s_t + w_xᵀ x_t + b_ptr)                                eq. 8
    P(w) = p_gen P_vocab(w) + (1 − p_gen) Σ_{i: w_i = w} a_i^t   over V + n_oov ids     eq. 9
    covloss_t = Σ_i min(a_i^t, c_i^t)                                                   eq. 12

The copy term is a scatter-add of (1 − p_gen)·a^t into the extended vocabulary at each
row's own source ids ``src_ext`` (seqlab.data.oov): a source word outside the target
vocabulary has the id V + k of its row and receives exactly (1 − p_gen) Σ of its
attention. The coverage of step t holds the attention of the *earlier* steps only
(eq. 10's sum stops at t − 1); adding the current step makes min(a^t, c^t + a^t) = a^t and
the loss the constant 1 (the OpenNMT-py bug the issue mentions; tested).
The training loss (eq. 13, −log P(w*_t) + λ covloss_t) is the task's
(seqlab.tasks.copy_translation).

Optional, not in See et al.: with ``src_gram_buckets`` > 0 (the task's
``src_char_ngrams``) the encoder input adds to the word embedding the mean of the hashed
character n-gram vectors z_g of the word (fastText, Bojanowski et al. 2017, §3.2;
seqlab.data.char_ngrams). A source word outside the source vocabulary is otherwise the
single vector E[<unk>], and the model cannot tell a name it should copy from a rare
German word it should translate. With ``src_stat_features`` = F > 0 (the task's
``src_word_stats``) it also adds W_f f(w_i), a linear map of the word's F corpus
statistics (how often it occurs on the target and the source side of the training text;
seqlab.data.word_stats): whether a word is spelled the same in both languages.
With ``selective_read`` the decoder input adds W_ζ ζ_t, CopyNet's selective read of the
encoder states at the source positions holding y_{t−1} (Gu et al. 2016, §3.3;
seqlab.nn.selective_read), so a copied word is more than E[<unk>] to the decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.data.vocab import UNK_ID
from seqlab.decode.state import static_field
from seqlab.models.rnn_common import init_uniform_, lengths_of
from seqlab.nn.attention import AdditiveScore
from seqlab.nn.cells import LSTMCell
from seqlab.nn.embedding import Embedding
from seqlab.nn.masks import masked_softmax
from seqlab.nn.recurrent import Recurrent
from seqlab.nn.selective_read import selective_read
from seqlab.registry import MODELS

__all__ = [
    "CoverageAttention",
    "PointerGenerator",
    "PointerGeneratorConfig",
    "PointerGeneratorMemory",
    "PointerGeneratorOutput",
    "PointerGeneratorState",
    "coverage_loss",
    "final_distribution",
]


def final_distribution(
    P_vocab: Tensor, a: Tensor, p_gen: Tensor, src_ext: Tensor, n_oov: int
) -> Tensor:
    """See et al. 2017, eq. 9: P(w) = p_gen P_vocab(w) + (1 − p_gen) Σ_{i: w_i = w} a_i.

    P_vocab is padded with n_oov zeros (the extended vocabulary), then (1 − p_gen)·a_i is
    scatter-added at index src_ext[b, i] of each row. Σ_w P(w) = 1 whenever P_vocab and a
    sum to 1. Padded source positions carry a_i = 0, so their ids receive nothing.

    Shapes:
        P_vocab: (B, [T,] V)   a: (B, [T,] S)   p_gen: (B, [T])
        src_ext: (B, S) long, values in [0, V + n_oov)
        returns: P (B, [T,] V + n_oov)
    """
    g = p_gen.unsqueeze(-1)  # (B, [T,] 1)
    P = g * P_vocab  # (B, [T,] V)
    if n_oov:
        P = torch.cat([P, P.new_zeros(*P.shape[:-1], n_oov)], dim=-1)  # (B, [T,] V + n_oov)
    index = src_ext if a.dim() == 2 else src_ext.unsqueeze(1).expand_as(a)  # (B, [T,] S)
    return P.scatter_add(-1, index, (1.0 - g) * a)  # (B, [T,] V + n_oov)


def coverage_loss(a: Tensor, cov: Tensor) -> Tensor:
    """See et al. 2017, eq. 12: covloss_t = Σ_i min(a_i^t, c_i^t), c^t = Σ_{t'<t} a^{t'}.

    Bounded by Σ_i a_i^t = 1; 0 at t = 0 (c^0 = 0).

    Shapes: a (B, [T,] S), cov (B, [T,] S) -> (B, [T])
    """
    return torch.minimum(a, cov).sum(dim=-1)  # (B, [T])


class CoverageAttention(nn.Module):
    """Additive attention with a coverage feature (See et al. 2017, eqs. 1–3 and 11):

        e_i^t = vᵀ tanh(W_h h_i + W_s s_t + w_c c_i^t + b_attn),   a^t = softmax(e^t),
        h*_t = Σ_i a_i^t h_i

    W_h, W_s and v are the ``AdditiveScore`` of seqlab.nn.attention (its Uₐ, Wₐ, vₐ:
    Bahdanau's score, the same function); ``precompute_keys`` holds W_h h_i + b_attn once
    per source. With ``coverage=False`` there is no w_c (eq. 1), and with b_attn = 0 this
    is exactly ``Attention(score="additive")`` (tested).

    Shapes:
        s: (B, Dq) decoder state   keys_pre: (B, S, A)   h: (B, S, Dk)
        mask: (B, S) bool          cov: (B, S) c^t
        returns: h* (B, Dk), a (B, S)
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, coverage: bool) -> None:
        super().__init__()
        self.coverage = coverage
        self.score = AdditiveScore(query_dim, key_dim, attn_dim)  # W_s = W_a, W_h = U_a, v = v_a
        self.b_attn = nn.Parameter(torch.zeros(attn_dim))  # (A,)
        self.w_c = nn.Parameter(torch.zeros(attn_dim)) if coverage else None  # (A,)

    def precompute_keys(self, h: Tensor) -> Tensor:
        return self.score.U_a(h) + self.b_attn  # (B, S, A)  W_h h_i + b_attn

    def forward(
        self, s: Tensor, keys_pre: Tensor, h: Tensor, mask: Tensor, cov: Tensor
    ) -> tuple[Tensor, Tensor]:
        feature = keys_pre + self.score.W_a(s).unsqueeze(1)  # (B, S, A)  + W_s s_t
        if self.w_c is not None:
            feature = feature + cov.unsqueeze(-1).to(feature.dtype) * self.w_c  # (B, S, A)
        e = self.score.v_a(torch.tanh(feature)).squeeze(-1)  # (B, S)
        a = masked_softmax(e.to(torch.promote_types(e.dtype, torch.float32)), mask)  # (B, S)
        h_star = torch.bmm(a.unsqueeze(1).to(h.dtype), h).squeeze(1)  # (B, Dk)
        return h_star, a


@dataclass(frozen=True)
class PointerGeneratorConfig:
    """The paper (§4): E = 128 (emb_dim), H = 256 (hidden_size, both LSTMs), attention
    width 2H = 512, no dropout; ``coverage`` adds w_c (eq. 11). Defaults are CPU-sized.
    ``selective_read`` (not in See et al.) adds W_ζ ζ_t to the decoder input (CopyNet)."""

    emb_dim: int = 128
    hidden_size: int = 256
    attn_dim: int = 256
    out_dim: int = 256
    coverage: bool = True
    dropout: float = 0.1
    init_range: float = 0.1
    forget_bias: float = 1.0
    selective_read: bool = False

    def __post_init__(self) -> None:
        for name in ("emb_dim", "hidden_size", "attn_dim", "out_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if not self.init_range > 0:
            raise ValueError(f"model.init_range must be > 0, got {self.init_range}")


@dataclass
class PointerGeneratorMemory:
    """``encode``'s output. Shapes: h (B, S, 2H); s_0, s_cell_0 (B, H); src_ext (B, S)."""

    h: Tensor
    s_0: Tensor
    s_cell_0: Tensor
    src_ext: Tensor
    n_oov: int


@dataclass
class PointerGeneratorState:
    """Decoder state after step t − 1, batch first (reordered by ``reorder_state``; h, keys,
    src_mask and src_ext are static, ``static_field``).

    Shapes: s, s_cell (B, H) the LSTM's (h, c) = s_{t−1}; h (B, S, 2H); keys (B, S, A) =
    W_h h_i + b_attn; src_mask, src_ext (B, S); cov (B, S) = c^t (attention of steps < t);
    for inspection, of the last step: a (B, S), p_gen (B,), cov_loss (B,).
    """

    s: Tensor
    s_cell: Tensor
    h: Tensor = static_field()
    keys: Tensor = static_field()
    src_mask: Tensor = static_field()
    src_ext: Tensor = static_field()
    n_oov: int
    cov: Tensor
    a: Tensor
    p_gen: Tensor
    cov_loss: Tensor


class PointerGeneratorOutput(NamedTuple):
    """Teacher-forced outputs, row t = the step that emits y_t.

    Shapes: log_probs (B, T, V + n_oov); p_gen (B, T); attention a^t (B, T, S);
    coverage c^t (B, T, S) (what step t saw); cov_loss (B, T).
    """

    log_probs: Tensor
    p_gen: Tensor
    attention: Tensor
    coverage: Tensor
    cov_loss: Tensor


@MODELS.register("pointer_generator", PointerGeneratorConfig)
class PointerGenerator(nn.Module):
    """BiLSTM encoder, LSTM decoder, coverage attention, copy/generate mixture (See 2017).

    ``forward`` and ``step`` return log P(w) over the extended vocabulary V + n_oov
    (normalised: the searches' log_softmax leaves them unchanged). The extended source
    ids come with the batch (``src_ext``, ``n_oov``; seqlab.data.oov); without them the
    source ids are read as target ids (a shared vocabulary, as in the algorithmic tasks),
    ids ≥ V as UNK. Decoder inputs ≥ V (copied OOVs) are read as UNK by E (§2.2); with
    ``selective_read`` ζ tells them apart.

    Shapes:
        src (B, S), src_mask (B, S) bool, y_in (B, T), src_ext (B, S) -> (B, T, V + n_oov)
        step(y_prev (B,), state) -> (B, V + n_oov), state
        attention_maps -> {"cross": a (B, T, S), "coverage": c (B, T, S)}

    Deviations: the decoder's initial state is ReLU(W_reduce [→h_S ; ←h_1]) for h and c
    (the authors' code; the paper does not say). Dropout on the embeddings and before V
    (not in the paper). Training with coverage from the start is the task's choice (the
    paper adds it for a final short phase). Uniform U(−r, r) initialisation, LSTM forget
    biases at ``forget_bias``. log P is taken of P floored at the smallest normal float,
    so impossible extended ids get a finite −87 (float32) instead of −∞.
    """

    def __init__(
        self,
        cfg: PointerGeneratorConfig,
        src_vocab: int,
        tgt_vocab: int,
        pad_id: int = 0,
        src_gram_buckets: int = 0,
        src_stat_features: int = 0,
    ) -> None:
        super().__init__()
        E, H, A = cfg.emb_dim, cfg.hidden_size, cfg.attn_dim
        self.cfg, self.pad_id, self.V_size = cfg, pad_id, tgt_vocab
        self.dropout = cfg.dropout  # a float attribute, so train.dropout_from_step can set it
        self.src_embed = Embedding(src_vocab, E, padding_idx=pad_id)
        # z_g for g in 1 … K; id 0 pads a word's bag (not counted in the mean)
        self.src_gram_embed = (
            nn.EmbeddingBag(src_gram_buckets + 1, E, mode="mean", padding_idx=0)
            if src_gram_buckets > 0
            else None
        )
        # W_f: the word's F corpus statistics f(w) -> E (no bias: </s> and padding have f = 0)
        self.src_stat_proj = (
            nn.Linear(src_stat_features, E, bias=False) if src_stat_features > 0 else None
        )
        self.tgt_embed = Embedding(tgt_vocab, E, padding_idx=pad_id)
        # W_ζ: CopyNet's selective read ζ_t (2H) -> the decoder input (E); no bias (ζ = 0
        # where y_{t−1} is not in the source)
        self.W_zeta = nn.Linear(2 * H, E, bias=False) if cfg.selective_read else None
        self.encoder = Recurrent("lstm", E, H, bidirectional=True)
        self.W_reduce_h = nn.Linear(2 * H, H)  # s_0 = ReLU(W [→h_S ; ←h_1] + b)
        self.W_reduce_c = nn.Linear(2 * H, H)  # the same for the LSTM memory cell
        self.decoder = Recurrent("lstm", E, H)  # fused over all T when teacher forcing
        self.attention = CoverageAttention(H, 2 * H, A, cfg.coverage)
        self.V = nn.Linear(3 * H, cfg.out_dim)  # V [s_t ; h*_t] + b
        self.V_prime = nn.Linear(cfg.out_dim, tgt_vocab)  # V′(·) + b′
        self.w_h_star = nn.Linear(2 * H, 1, bias=False)
        self.w_s = nn.Linear(H, 1, bias=False)
        self.w_x = nn.Linear(E, 1, bias=False)
        self.b_ptr = nn.Parameter(torch.zeros(1))
        init_uniform_(self, cfg.init_range)  # type: ignore[arg-type]
        if self.src_stat_proj is not None:  # W_f = 0: training starts from the model without
            nn.init.zeros_(self.src_stat_proj.weight)  # statistics (log counts reach ~12)
        with torch.no_grad():
            for cell in (*self.encoder.cells, *self.decoder.cells):
                cell.b_f.fill_(cfg.forget_bias)

    # --- pieces ----------------------------------------------------------------------

    @property
    def decoder_cell(self) -> LSTMCell:
        return self.decoder.cell_at(0, 0)  # type: ignore[return-value]

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training)

    def _extended_source(
        self, src: Tensor, src_ext: Tensor | None, n_oov: int | None
    ) -> tuple[Tensor, int]:
        if src_ext is None:
            return torch.where(src < self.V_size, src, UNK_ID), 0  # (B, S)
        if n_oov is None:
            n_oov = max(0, int(src_ext.max()) + 1 - self.V_size)
        return src_ext, n_oov

    def source_input(
        self, src: Tensor, src_grams: Tensor | None = None, src_stats: Tensor | None = None
    ) -> Tensor:
        """x_i = dropout(E[w_i] + mean_{g ∈ G(w_i)} z_g + W_f f(w_i)), each optional term
        present when the model was built with it. A position without n-grams or
        statistics (``</s>``, padding) adds 0.

        Shapes: src (B, S), src_grams (B, S, G) ids in [0, K], 0 = none,
                src_stats (B, S, F) float -> (B, S, E)
        """
        x = self.src_embed(src)  # (B, S, E)
        if self.src_gram_embed is not None:
            self._check_extra("src_grams", src_grams, src, "character n-grams", "G")
            assert src_grams is not None
            x = x + self.gram_mean(src_grams).to(x.dtype)
        if self.src_stat_proj is not None:
            self._check_extra("src_stats", src_stats, src, "word statistics", "F")
            assert src_stats is not None
            x = x + self.src_stat_proj(src_stats.to(self.src_stat_proj.weight.dtype)).to(x.dtype)
        return self._drop(x)  # (B, S, E)

    fused_gram_mean = True
    """``gram_mean`` through ``nn.EmbeddingBag`` (True) or the readable masked mean, which
    ONNX can export (its exporter has no EmbeddingBag with a padding id)."""

    def gram_mean(self, src_grams: Tensor) -> Tensor:
        """mean_{g ∈ G(w_i)} z_g over a word's n-gram ids, id 0 = none (not counted; a word
        without n-grams gets 0). Fused: ``nn.EmbeddingBag(mode="mean", padding_idx=0)``;
        readable: Σ_g [g ≠ 0] z_g / max(1, Σ_g [g ≠ 0]); equal (tests/models/
        test_pointer_generator.py).

        Shapes: src_grams (B, S, G) ids in [0, K] -> (B, S, E)
        """
        assert self.src_gram_embed is not None
        B, S, G = src_grams.shape
        if self.fused_gram_mean:
            return self.src_gram_embed(src_grams.reshape(B * S, G)).view(B, S, -1)  # (B, S, E)
        z = F.embedding(src_grams, self.src_gram_embed.weight)  # (B, S, G, E)
        real = (src_grams != 0).unsqueeze(-1).to(z.dtype)  # (B, S, G, 1)
        return (z * real).sum(2) / real.sum(2).clamp_min(1.0)  # (B, S, E)

    @staticmethod
    def _check_extra(name: str, value: Tensor | None, src: Tensor, what: str, dim: str) -> None:
        if value is None or value.dim() != 3 or value.shape[:2] != src.shape:
            got = None if value is None else tuple(value.shape)
            raise ValueError(
                f"this model reads the {what} of each source word: pass {name} of shape "
                f"(B, S, {dim}) with (B, S) = {tuple(src.shape)}, got {got}"
            )

    def decoder_input(self, y: Tensor, h: Tensor, src_ext: Tensor, src_mask: Tensor) -> Tensor:
        """x = dropout(E[y] + W_ζ ζ) with extended ids y ≥ V read as UNK in E; the
        selective read ζ of the states h (seqlab.nn.selective_read) only with
        ``selective_read``.

        Shapes: y (B, [T]) extended ids; h (B, S, 2H); src_ext, src_mask (B, S)
                -> (B, [T,] E)
        """
        x = self.tgt_embed(torch.where(y < self.V_size, y, UNK_ID))  # (B, [T,] E)
        if self.W_zeta is not None:
            x = x + self.W_zeta(selective_read(y, src_ext, src_mask, h)).to(x.dtype)
        return self._drop(x)  # (B, [T,] E)

    def mixture(
        self, s: Tensor, h_star: Tensor, x: Tensor, a: Tensor, src_ext: Tensor, n_oov: int
    ) -> tuple[Tensor, Tensor]:
        """Eqs. 4, 8, 9: (log P over V + n_oov, p_gen), in float32 at least.

        Shapes: s (B, [T,] H), h_star (B, [T,] 2H), x (B, [T,] E), a (B, [T,] S)
                -> log P (B, [T,] V + n_oov), p_gen (B, [T])
        """
        logits = self.V_prime(self.V(self._drop(torch.cat([s, h_star], dim=-1))))  # (B,[T,]V)
        dtype = torch.promote_types(logits.dtype, torch.float32)
        P_vocab = torch.softmax(logits.to(dtype), dim=-1)  # (B, [T,] V)
        z = self.w_h_star(h_star) + self.w_s(s) + self.w_x(x) + self.b_ptr  # (B, [T,] 1)
        p_gen = torch.sigmoid(z.to(dtype)).squeeze(-1)  # (B, [T])
        P = final_distribution(P_vocab, a.to(dtype), p_gen, src_ext, n_oov)  # (B, [T,] V')
        floor = torch.finfo(dtype).tiny
        return P.clamp_min(floor).log(), p_gen  # (B, [T,] V + n_oov), (B, [T])

    # --- the contract (DESIGN §6) -----------------------------------------------------

    def encode(
        self,
        src: Tensor,
        src_mask: Tensor,
        src_ext: Tensor | None = None,
        n_oov: int | None = None,
        src_grams: Tensor | None = None,
        src_stats: Tensor | None = None,
    ) -> PointerGeneratorMemory:
        x = self.source_input(src, src_grams, src_stats)  # (B, S, E)
        h, (h_n, c_n) = self.encoder(x, lengths_of(src_mask))  # (B, S, 2H), (2, B, H) ×2
        s_0 = F.relu(self.W_reduce_h(torch.cat([h_n[0], h_n[1]], dim=-1)))  # (B, H)
        s_cell_0 = F.relu(self.W_reduce_c(torch.cat([c_n[0], c_n[1]], dim=-1)))  # (B, H)
        src_ext, n_oov = self._extended_source(src, src_ext, n_oov)  # (B, S)
        return PointerGeneratorMemory(h, s_0, s_cell_0, src_ext, n_oov)

    def init_state(self, memory: PointerGeneratorMemory, src_mask: Tensor) -> PointerGeneratorState:
        h = memory.h  # (B, S, 2H)
        dtype = torch.promote_types(h.dtype, torch.float32)  # a, c^t, p_gen in fp32 at least
        zeros = h.new_zeros(h.shape[:2], dtype=dtype)  # (B, S)
        B = h.shape[0]
        return PointerGeneratorState(
            s=memory.s_0,
            s_cell=memory.s_cell_0,
            h=h,
            keys=self.attention.precompute_keys(h),  # (B, S, A)
            src_mask=src_mask,
            src_ext=memory.src_ext,
            n_oov=memory.n_oov,
            cov=zeros,  # c^0 = 0
            a=zeros.clone(),
            p_gen=h.new_zeros(B, dtype=dtype),  # (B,)
            cov_loss=h.new_zeros(B, dtype=dtype),  # (B,)
        )

    def step(
        self, y_prev: Tensor, state: PointerGeneratorState
    ) -> tuple[Tensor, PointerGeneratorState]:
        x = self.decoder_input(y_prev, state.h, state.src_ext, state.src_mask)  # (B, E)
        (s, s_cell), _ = self.decoder_cell.step(x, (state.s, state.s_cell))  # (B, H) ×2
        h_star, a = self.attention(
            s, state.keys, state.h, state.src_mask, state.cov
        )  # (B, 2H), (B, S)
        log_P, p_gen = self.mixture(s, h_star, x, a, state.src_ext, state.n_oov)  # (B, V')
        new = PointerGeneratorState(
            s=s,
            s_cell=s_cell,
            h=state.h,
            keys=state.keys,
            src_mask=state.src_mask,
            src_ext=state.src_ext,
            n_oov=state.n_oov,
            cov=state.cov + a,  # c^{t+1} = c^t + a^t
            a=a,
            p_gen=p_gen,
            cov_loss=coverage_loss(a, state.cov),  # (B,)  against c^t: steps < t only
        )
        return log_P, new

    @staticmethod
    def attention_coverage(state: PointerGeneratorState) -> tuple[Tensor, Tensor]:
        """What beam search's coverage penalty reads (seqlab.decode.beam_search,
        ``coverage``): per row, Σ_{t' ≤ t} a^{t'}, the attention each source position has
        received over the steps so far, the last one included (``state.cov`` after
        ``step``), and the source mask.

        Shapes: state with B rows -> (B, S) float, (B, S) bool
        """
        return state.cov, state.src_mask

    def oov_attention_coverage(self, state: PointerGeneratorState) -> tuple[Tensor, Tensor]:
        """``attention_coverage`` over the source words outside the target vocabulary only
        (extended ids ≥ V: the words only a copy can produce), for a coverage penalty that
        asks the search to attend to those (``task.coverage_penalty_words: oov``).

        Shapes: state with B rows -> (B, S) float, (B, S) bool
        """
        return state.cov, state.src_mask & (state.src_ext >= self.V_size)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        y_in: Tensor,
        tgt_mask: Tensor,
        src_ext: Tensor | None = None,
        n_oov: int | None = None,
        details: bool = False,
        src_grams: Tensor | None = None,
        src_stats: Tensor | None = None,
    ) -> Tensor | PointerGeneratorOutput:
        """Teacher forcing: log P (B, T, V + n_oov), or with ``details`` the
        ``PointerGeneratorOutput`` (p_gen, attention, coverage, coverage loss per step).
        The decoder LSTM runs fused over all T; attention loops over t (c^t needs a^{<t}).
        ``src_grams`` (B, S, G), ``src_stats`` (B, S, F): the source words' n-gram ids and
        corpus statistics, for a model that reads them.
        """
        memory = self.encode(src, src_mask, src_ext, n_oov, src_grams, src_stats)
        state = self.init_state(memory, src_mask)
        x = self.decoder_input(y_in, memory.h, memory.src_ext, src_mask)  # (B, T, E)
        s, _ = self.decoder(x, initial_state=(state.s[None], state.s_cell[None]))  # (B, T, H)
        cov, h_stars, attn, covs = state.cov, [], [], []
        for t in range(y_in.shape[1]):
            h_star, a = self.attention(
                s[:, t], state.keys, state.h, src_mask, cov
            )  # (B, 2H), (B, S)
            h_stars.append(h_star)
            attn.append(a)
            covs.append(cov)
            cov = cov + a  # (B, S)
        h_star = torch.stack(h_stars, dim=1)  # (B, T, 2H)
        a = torch.stack(attn, dim=1)  # (B, T, S)
        c = torch.stack(covs, dim=1)  # (B, T, S)
        log_P, p_gen = self.mixture(
            s, h_star, x, a, memory.src_ext, memory.n_oov
        )  # (B, T, V′), (B, T)
        if not details:
            return log_P  # (B, T, V + n_oov)
        return PointerGeneratorOutput(log_P, p_gen, a, c, coverage_loss(a, c))

    @torch.no_grad()
    def attention_maps(
        self,
        src: Tensor,
        src_mask: Tensor,
        y_in: Tensor,
        tgt_mask: Tensor,
        src_ext: Tensor | None = None,
        n_oov: int | None = None,
        src_grams: Tensor | None = None,
        src_stats: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """a^t and c^t (B, T, S) of the teacher-forced pass (row t emits y_t)."""
        out = self.forward(
            src,
            src_mask,
            y_in,
            tgt_mask,
            src_ext,
            n_oov,
            details=True,
            src_grams=src_grams,
            src_stats=src_stats,
        )
        assert isinstance(out, PointerGeneratorOutput)
        return {"cross": out.attention, "coverage": out.coverage}
