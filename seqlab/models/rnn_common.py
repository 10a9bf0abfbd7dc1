"""What the four RNN encoder–decoders share (sutskever, cho, bahdanau, luong).

* ``RNNEncoderDecoder``: the seq2seq model contract (DESIGN §6) written once. A model
  supplies ``encode``, ``init_state``, ``advance`` (one decoder step from the embedded
  previous token) and ``readout`` (decoder features → logits); the base class derives

      step(y_prev, state) = readout(advance(E_tgt[y_prev], state))
      forward(src, y_in)  = readout(decode(E_tgt[y_in], init_state(encode(src))))

  where ``decode`` runs ``advance`` over the T target positions (``unroll``). A model whose
  decoder does not feed its own outputs back (sutskever, cho, luong without input feeding)
  overrides ``decode`` with one fused recurrent call over all T steps; ``step`` then runs
  the same weights through the cells, and the tests prove the two paths equal.
* ``stacked_step``: one time step through every layer of a unidirectional ``Recurrent``
  using its own cells (so ``step`` and the fused ``forward`` share every weight).
* ``DeepOutput``: the maxout readout of Bahdanau et al. 2015 (app. A.2.2) and Cho et al.
  2014 (app. A.1.2).
* Initialisations of the papers: ``init_uniform_`` (Sutskever 2014, Luong 2015) and
  ``init_gaussian_orthogonal_`` (Cho 2014, Bahdanau 2015).

Dropout (not in Sutskever, Cho or Bahdanau; Luong 2015 uses 0.2 between LSTM layers) is
applied to the embeddings, between stacked recurrent layers and before the vocabulary
projection; ``dropout=0`` is the papers' setting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.nn.attention import AdditiveScore
from seqlab.nn.cells import GRUCell, LSTMCell
from seqlab.nn.embedding import Embedding
from seqlab.nn.packed_linear import linear
from seqlab.nn.recurrent import Recurrent


def check_config(cfg: Any, layers: str, tied: str) -> None:
    """The checks every RNN seq2seq config shares: ``cfg.<layers>`` ≥ 1, dropout in
    [0, 1), and ``tie_output`` only when ``cfg.<tied>`` (the width the output matrix
    multiplies) equals ``emb_dim``."""
    if getattr(cfg, layers) < 1:
        raise ValueError(f"{layers} must be >= 1, got {getattr(cfg, layers)}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.tie_output and getattr(cfg, tied) != cfg.emb_dim:
        raise ValueError(
            f"tie_output needs {tied} == emb_dim, got {getattr(cfg, tied)}, {cfg.emb_dim}"
        )


def lengths_of(mask: Tensor) -> Tensor:
    """Real lengths from a padding mask (True = keep).  (B, S) bool -> (B,) long."""
    return mask.sum(dim=1)  # (B,)


def layer_major(h: Tensor) -> Tensor:
    """A model state (B, L, H) -> ``Recurrent``'s layout (L, B, H)."""
    return h.transpose(0, 1).contiguous()  # (L, B, H)


def batch_major(h: Tensor) -> Tensor:
    """``Recurrent``'s final state (L, B, H) -> a model state (B, L, H) (batch on dim 0,
    so ``seqlab.decode.reorder_state`` can reorder it)."""
    return h.transpose(0, 1).contiguous()  # (B, L, H)


def stacked_step(
    rnn: Recurrent, x: Tensor, h: Tensor, c: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """One time step through every layer of a unidirectional ``Recurrent``, with its cells.

        x_1 = x,   a⟨t⟩_l = cell_l(x_l, a⟨t−1⟩_l),   x_{l+1} = dropout(a⟨t⟩_l)

    The same equations and weights as ``rnn(x[:, None], initial_state=...)`` (fused), one
    step at a time; for the LSTM the state of layer l is (h_l, c_l).

    Shapes:
        x:    (B, D)
        h, c: (B, L, H) (c only for the LSTM)
        returns: h, c (B, L, H) (c None for GRU / RNN); the top-layer output is h[:, -1]
    """
    if rnn.bidirectional:
        raise ValueError("stacked_step runs a unidirectional Recurrent")
    hs, cs = [], []
    for layer in range(rnn.num_layers):
        cell = rnn.cell_at(layer, 0)
        if c is None:
            a, _ = cell.step(x, h[:, layer])  # (B, H)
        else:
            (a, c_l), _ = cell.step(x, (h[:, layer], c[:, layer]))  # (B, H), (B, H)
            cs.append(c_l)
        hs.append(a)
        x = F.dropout(a, rnn.dropout, rnn.training)  # (B, H) input of the next layer
    h_new = torch.stack(hs, dim=1)  # (B, L, H)
    return h_new, (torch.stack(cs, dim=1) if c is not None else None)  # (B, L, H)


def unroll(advance: Callable[[Tensor, Any], tuple[Any, Any]], e: Tensor, state: Any) -> Any:
    """Run a decoder step over every target position (teacher forcing) and stack the
    per-step features along time. ``advance(e_t (B, D), state) -> (features, state)``,
    features a tensor or a NamedTuple of tensors with batch first.

    Shapes: e (B, T, D) -> features with a time axis inserted at dim 1: (B, T, ·)
    """
    outs = []
    for t in range(e.shape[1]):
        feat, state = advance(e[:, t], state)
        outs.append(feat)
    if isinstance(outs[0], Tensor):
        return torch.stack(outs, dim=1)  # (B, T, ·)
    return type(outs[0])(*(torch.stack(parts, dim=1) for parts in zip(*outs)))  # (B, T, ·)


def maxout(t_tilde: Tensor) -> Tensor:
    """Maxout with pool size 2 (Goodfellow et al. 2013), as in Bahdanau 2015 app. A.2.2:

        t_j = max{t̃_{2j−1}, t̃_{2j}},  j = 1 … l

    Shapes: t_tilde (..., 2l) -> (..., l)
    """
    return t_tilde.unflatten(-1, (-1, 2)).amax(dim=-1)  # (..., l)


class DeepOutput(nn.Module):
    """The deep output of Bahdanau et al. 2015 (app. A.2.2) and Cho et al. 2014 (app. A.1.2):

        t̃_i = U_o s_i + V_o E y_{i−1} + C_o c_i + b_o        (2l)   Cho: O_h h′, O_y y, O_c c
        t_i = maxout(t̃_i)                                   (l)    pairs (2j−1, 2j)
        p(y_i | y_<i, x) = softmax(W_o t_i)                 (in RNNEncoderDecoder.vocab_logits)

    ``maxout=False`` replaces the maxout by t_i = tanh(t̃_i) with t̃_i of size l (a
    tanh deep output of the same width).

    Shapes:
        s: (B, [T,] Ds) decoder state   e: (B, [T,] E) embedding of y_{i−1}
        c: (B, [T,] Dc) context          returns t: (B, [T,] l)

    Deviations: one bias b_o (in U_o); Cho writes O_y y_{t−1} with a one-hot y, here
    V_o acts on the target embedding E y (a factorised O_y = V_o E, as in Bahdanau).
    """

    def __init__(self, s_dim: int, emb_dim: int, c_dim: int, l: int, use_maxout: bool) -> None:
        super().__init__()
        self.l, self.use_maxout = l, use_maxout
        width = 2 * l if use_maxout else l
        self.U_o = nn.Linear(s_dim, width)  # U_o s + b_o
        self.V_o = nn.Linear(emb_dim, width, bias=False)  # V_o E y_{i−1}
        self.C_o = nn.Linear(c_dim, width, bias=False)  # C_o c_i

    def forward(self, s: Tensor, e: Tensor, c: Tensor) -> Tensor:
        t_tilde = self.U_o(s) + self.V_o(e) + self.C_o(c)  # (B, [T,] 2l or l)
        return maxout(t_tilde) if self.use_maxout else torch.tanh(t_tilde)  # (B, [T,] l)


class RNNEncoderDecoder(nn.Module):
    """Base of the RNN encoder–decoders: embeddings, vocabulary projection, the contract.

        e_src = dropout(E_src[x]),  e = dropout(E_tgt[y])              (B, ·, E)
        logits = W_out · dropout(t) + b_out,  W_out = E_tgt when tied   (B, ·, V)

    Subclasses implement ``encode``, ``init_state``, ``advance`` and ``readout``, and may
    override ``decode`` with a fused path. ``tgt_mask`` is not needed by a left-to-right
    decoder (position t reads y_≤t only); logits at padded target positions are computed
    and ignored by the loss.

    Shapes:
        src (B, S) long, src_mask (B, S) bool, y_in (B, T) long, tgt_mask (B, T) bool
        forward -> logits (B, T, V);  step(y_prev (B,), state) -> logits (B, V), state
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        pad_id: int,
        emb_dim: int,
        out_dim: int,
        dropout: float,
        tie_output: bool,
    ) -> None:
        super().__init__()
        if tie_output and out_dim != emb_dim:
            raise ValueError(f"tie_output needs readout width {out_dim} == emb_dim {emb_dim}")
        self.pad_id, self.dropout = pad_id, dropout
        self.src_embed = Embedding(src_vocab, emb_dim, padding_idx=pad_id)
        self.tgt_embed = Embedding(tgt_vocab, emb_dim, padding_idx=pad_id)
        # W_out (V, out_dim); None when tied to E_tgt (Press & Wolf 2017).
        self.W_out = None if tie_output else nn.Parameter(torch.empty(tgt_vocab, out_dim))
        self.b_out = nn.Parameter(torch.zeros(tgt_vocab))  # (V,)

    # --- shared pieces -------------------------------------------------------------------

    def embed_source(self, src: Tensor) -> Tensor:
        return F.dropout(self.src_embed(src), self.dropout, self.training)  # (B, S, E)

    def embed_target(self, y: Tensor) -> Tensor:
        return F.dropout(self.tgt_embed(y), self.dropout, self.training)  # (B, [T,] E)

    def vocab_logits(self, t: Tensor) -> Tensor:
        """logits = W_out dropout(t) + b_out.  (B, [T,] D_out) -> (B, [T,] V)."""
        W = self.tgt_embed.weight if self.W_out is None else self.W_out  # (V, D_out)
        # linear: F.linear, on a packed bf16 / int8 W inside a search (seqlab.nn.packed_linear)
        return linear(F.dropout(t, self.dropout, self.training), W, self.b_out)  # (B, [T,] V)

    # --- per model -----------------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor) -> Any:
        raise NotImplementedError

    def init_state(self, memory: Any, src_mask: Tensor) -> Any:
        raise NotImplementedError

    def advance(self, e_prev: Tensor, state: Any) -> tuple[Any, Any]:
        """One decoder step from the embedded previous token: (features, new state)."""
        raise NotImplementedError

    def readout(self, features: Any) -> Tensor:
        """Decoder features (B, [T,] ·) -> logits (B, [T,] V)."""
        raise NotImplementedError

    def decode(self, e: Tensor, state: Any) -> Any:
        """Teacher forcing over all target positions; the default loops ``advance``."""
        return unroll(self.advance, e, state)

    # --- the contract (DESIGN §6) --------------------------------------------------------

    def features(self, src: Tensor, src_mask: Tensor, y_in: Tensor) -> Any:
        """Teacher-forced decoder features (B, T, ·) for the target prefix ``y_in``."""
        state = self.init_state(self.encode(src, src_mask), src_mask)
        return self.decode(self.embed_target(y_in), state)

    def forward(self, src: Tensor, src_mask: Tensor, y_in: Tensor, tgt_mask: Tensor) -> Tensor:
        return self.readout(self.features(src, src_mask, y_in))  # (B, T, V)

    def step(self, y_prev: Tensor, state: Any) -> tuple[Tensor, Any]:
        features, state = self.advance(self.embed_target(y_prev), state)
        return self.readout(features), state  # (B, V)


@torch.no_grad()
def zero_padding_rows_(model: RNNEncoderDecoder) -> None:
    for embed in (model.src_embed, model.tgt_embed):
        if embed.padding_idx is not None:
            embed.weight[embed.padding_idx].zero_()


@torch.no_grad()
def init_uniform_(
    model: RNNEncoderDecoder,
    init_range: float,
    forget_bias: float | None = None,
    tgt_embed_range: float | None = None,
) -> None:
    """Every parameter ~ U(−r, r) (Sutskever 2014 §3.4: r = 0.08; Luong 2015 §4.1: r = 0.1);
    padding rows of the embeddings stay zero. With ``forget_bias`` (not in those papers;
    Gers et al. 2000, Jozefowicz et al. 2015: 1) every LSTM forget-gate bias b_f then starts
    at that value, so Γf ≈ σ(b_f) keeps the cell state from the first update. With
    ``tgt_embed_range`` r_y (not in those papers) the target embedding, which is also the
    softmax matrix W_s when the output is tied, is drawn from U(−r_y, r_y) instead: a row
    of U(−r, r) has norm r·√(E/3), so at E = 256 the papers' r gives W_s rows 2× shorter
    than at their E = 1000 (see LuongConfig)."""
    for p in model.parameters():
        p.uniform_(-init_range, init_range)
    if tgt_embed_range is not None:
        model.tgt_embed.weight.uniform_(-tgt_embed_range, tgt_embed_range)
    zero_padding_rows_(model)
    if forget_bias is not None:
        for m in model.modules():
            if isinstance(m, LSTMCell) and m.b_f is not None:
                m.b_f.fill_(forget_bias)


@torch.no_grad()
def init_gaussian_orthogonal_(model: RNNEncoderDecoder) -> None:
    """Bahdanau 2015 app. B.1 (and Cho 2014 app. A): recurrent weight matrices random
    orthogonal; Wₐ, Uₐ ~ N(0, 0.001²); vₐ and all biases 0; every other weight
    ~ N(0, 0.01²). In the cells' stacked matrices W = [W_h | W_x] each gate's state block
    W_h (H, H) is made orthogonal. Padding rows of the embeddings stay zero."""
    for p in model.parameters():
        if p.dim() == 1:
            p.zero_()
        else:
            p.normal_(0.0, 0.01)
    for module in model.modules():
        if isinstance(module, GRUCell):
            for W in (module.W_r, module.W_u, module.W_c):
                nn.init.orthogonal_(W[:, : module.hidden_size])  # W_h block (H, H)
        elif isinstance(module, AdditiveScore):
            module.W_a.weight.normal_(0.0, 0.001)
            module.U_a.weight.normal_(0.0, 0.001)
            module.v_a.weight.zero_()
    zero_padding_rows_(model)
