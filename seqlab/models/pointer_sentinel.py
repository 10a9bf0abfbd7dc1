"""The pointer sentinel-LSTM of Merity, Xiong, Bradbury & Socher 2016 (ICLR 2017, §2).

The notes (002, "Pointer Sentinel Mixture Models") mix a softmax over the vocabulary with
a pointer over the most recent words, the sentinel deciding how much mass each receives:

    p(w) = g · p_vocab(w) + (1 − g) · p_ptr(w)

An LSTM reads the stream; the pointer looks at the window of its last L outputs
h_{N−L+1} … h_N (the current one included) and the words x_i read at those positions:

    p_vocab = softmax(U h_N)                                        (§2.1)
    q = tanh(W h_N + b)                                             (§2.3, eq. 2)
    z_i = qᵀ h_i,   i in the window                                 (§2.2, eq. 3)
    a = softmax([z; qᵀ s])         s: the learned sentinel vector   (§2.3, eq. 4)
    g = a[L + 1]                   the sentinel's share             (§2.3, eq. 5)
    p(w) = g · p_vocab(w) + Σ_{i: x_i = w} a_i                       (§2.3, eq. 7)

The last sum is the paper's (1 − g) · p_ptr(w) with p_ptr(w) = Σ_{i: x_i = w} a_i / (1 − g)
(eq. 6). The window is carried across batches in the state (truncated BPTT: detached), so
a contiguous stream split into batches sees the same windows as the unsplit stream.
Window slots that were never filled (start of a stream) and ``pad_id`` tokens are masked:
they receive zero attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput, VocabProjection
from seqlab.models.rnn_common import batch_major, layer_major
from seqlab.nn.cells import LSTMCell
from seqlab.nn.dropout import Dropout
from seqlab.nn.embedding import Embedding
from seqlab.nn.masks import masked_softmax
from seqlab.nn.recurrent import Recurrent
from seqlab.registry import MODELS


def pointer_sentinel_mixture(
    vocab_logits: Tensor, q: Tensor, h_mem: Tensor, x_mem: Tensor, mask: Tensor, s: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """log p(w) = log(g · p_vocab(w) + Σ_{i: x_i = w} a_i), a = softmax([qᵀh_i; qᵀs]).

    Merity et al. 2016, eqs. 3–7 (module docstring). g · p_vocab is formed as
    exp(log g + log_softmax(U h)), log g from a log-sum-exp.

    Deviations: g · p_vocab(w) is floored at the smallest normal float (1.2·10⁻³⁸ in
    float32, 2.2·10⁻³⁰⁸ in float64; no gradient below it), so log p stays finite where it
    would underflow; the total mass then exceeds 1 by at most V times that floor. (A
    log-space logaddexp would need no floor but its backward pass costs about five times
    as much at V = 10⁴.)

    Shapes:
        vocab_logits: (B, T, V)  U h_t, unnormalised
        q:            (B, T, H)  queries tanh(W h_t + b)
        h_mem:        (B, S, H)  candidate states h_i
        x_mem:        (B, S) long, the word read at each candidate
        mask:         (B, T, S) bool, True = query t may point at candidate i
        s:            (H,) sentinel
        returns:      log p (B, T, V), g (B, T), a (B, T, S) (pointer weights, 0 where masked),
                      in float32 or float64 (the inputs' dtype promoted to at least float32)
    """
    # A normalisation: computed in float32 at least, also under bf16/fp16 autocast.
    dtype = torch.promote_types(vocab_logits.dtype, torch.float32)
    with torch.autocast(vocab_logits.device.type, enabled=False):
        vocab_logits, q, h_mem, s = (t.to(dtype) for t in (vocab_logits, q, h_mem, s))
        z = q @ h_mem.transpose(1, 2)  # (B, T, S)
        z_s = (q @ s)[..., None]  # (B, T, 1) the sentinel's score qᵀs
        scores = torch.cat([z, z_s], dim=-1)  # (B, T, S+1)
        keep = torch.cat([mask, mask.new_ones(*mask.shape[:2], 1)], dim=-1)  # (B, T, S+1)
        a_all = masked_softmax(scores, keep)  # (B, T, S+1)
        a, g = a_all[..., :-1], a_all[..., -1]  # (B, T, S), (B, T)
        # log g without underflow: z_s − log Σ_{kept} exp(score)
        log_g = z_s[..., 0] - torch.logsumexp(scores.masked_fill(~keep, float("-inf")), dim=-1)
        B, T, S = a.shape
        index = x_mem[:, None, :].expand(B, T, S)  # (B, T, S)
        log_p_vocab = F.log_softmax(vocab_logits, dim=-1)  # (B, T, V)
        log_vocab = log_g[..., None] + log_p_vocab  # (B, T, V) log g·p_vocab
        floor = math.log(torch.finfo(log_vocab.dtype).tiny)  # −87.3 in float32: exp stays normal
        p = log_vocab.clamp_min(floor).exp().scatter_add(-1, index, a)  # (B, T, V) eq. 7
        log_p = p.log()  # (B, T, V)
        return log_p, g, a  # (B, T, V), (B, T), (B, T, S)


def window_mask(T: int, P: int, device: torch.device | None = None) -> Tensor:
    """Query t (stream position P + t) may point at keys P + t − (L−1) … P + t, L = P + 1.

    Keys are the P carried states followed by the T new ones.  Shapes: returns (T, P+T) bool.
    """
    offset = torch.arange(P + T, device=device)[None, :] - torch.arange(T, device=device)[:, None]
    return (offset >= 0) & (offset <= P)  # (T, P+T)


@dataclass(frozen=True)
class PointerSentinelConfig:
    """Hyper-parameters. The LSTM fields mean what they mean in ``rnn_lm`` (RNNLMConfig), so
    a preset compares the pointer with its own LSTM baseline at equal size by copying them;
    ``window`` is L. The paper's PTB model: 2 × 650 LSTM, L = 100, BPTT 100.

    ``init_range`` r: every parameter ~ U(−r, r) (Zaremba 2014), None keeps the layers'
    own initialisation; ``forget_bias``: the LSTM's b_f after that initialisation.
    """

    emb_dim: int = 200
    hidden: int = 200
    layers: int = 2
    window: int = 100
    dropout: float = 0.2
    tie_weights: bool = False
    init_range: float | None = 0.1
    forget_bias: float = 1.0

    def __post_init__(self) -> None:
        for name in ("emb_dim", "hidden", "layers", "window"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        if self.tie_weights and self.emb_dim != self.hidden:
            raise ValueError(
                f"model.tie_weights needs hidden == emb_dim, got {self.hidden} and {self.emb_dim}"
            )
        if self.init_range is not None and not self.init_range > 0:
            raise ValueError(f"model.init_range must be > 0 or null, got {self.init_range}")


@dataclass
class PointerSentinelState:
    """LSTM state and the pointer window (the L − 1 outputs before the next position).

    h, c: (B, layers, H)   h_mem: (B, L−1, H)   x_mem: (B, L−1) long   filled: (B, L−1) bool
    """

    h: Tensor
    c: Tensor
    h_mem: Tensor
    x_mem: Tensor
    filled: Tensor

    def detach(self) -> PointerSentinelState:
        return PointerSentinelState(
            self.h.detach(), self.c.detach(), self.h_mem.detach(), self.x_mem, self.filled
        )


@MODELS.register("pointer_sentinel", PointerSentinelConfig)
class PointerSentinelLSTM(nn.Module):
    """Pointer sentinel-LSTM LM (Merity et al. 2016): p = g·p_vocab + Σ_{x_i = w} a_i.

    ``logits`` are the mixture's log-probabilities log p (log_softmax leaves them as they
    are); ``extras["gate"]`` is g per token and ``extras["pointer"]`` the weights a_i over
    the carried window (L − 1 slots, oldest first) followed by this batch's T positions.

    Shapes:
        x: (B, T) long   logits: (B, T, V)   extras: gate (B, T), pointer (B, T, L−1+T)
        step(x (B,), state) -> logits (B, V), state

    Deviations: U has a bias b (U = E when ``tie_weights``); dropout on the embeddings,
    between LSTM layers and on the outputs h_t (the window holds the dropped-out outputs);
    the paper's BPTT through the whole window is cut at batch boundaries (the carried window
    is detached); the ``pad_id`` embedding row is zero and pad tokens are never pointed at.
    """

    def __init__(self, cfg: PointerSentinelConfig, vocab: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.vocab, self.pad_id = cfg, vocab, pad_id
        H = cfg.hidden
        self.embed = Embedding(vocab, cfg.emb_dim, padding_idx=pad_id, init_std=0.1)  # (V, E)
        self.drop = Dropout(cfg.dropout)
        self.rnn = Recurrent("lstm", cfg.emb_dim, H, cfg.layers, dropout=cfg.dropout)
        self.U = VocabProjection(H, vocab, tied=cfg.tie_weights)  # p_vocab = softmax(U h + b)
        self.W = nn.Linear(H, H)  # q = tanh(W h + b)
        self.s = nn.Parameter(torch.empty(H))  # the sentinel (H,)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        r = self.cfg.init_range
        nn.init.normal_(self.s, 0.0, self.cfg.hidden**-0.5)
        if r is not None:
            for p in self.parameters():
                p.uniform_(-r, r)
        for cell in self.rnn.cells:
            if isinstance(cell, LSTMCell) and cell.b_f is not None:
                cell.b_f.fill_(self.cfg.forget_bias)
        if self.U.b is not None:
            self.U.b.zero_()
        self.embed.weight[self.pad_id].zero_()

    def init_state(
        self, batch_size: int, device: torch.device | str | None = None
    ) -> PointerSentinelState:
        H, layers, P = self.cfg.hidden, self.cfg.layers, self.cfg.window - 1
        dtype = self.s.dtype
        zeros = torch.zeros(batch_size, layers, H, device=device, dtype=dtype)  # (B, layers, H)
        return PointerSentinelState(
            h=zeros,
            c=zeros.clone(),
            h_mem=torch.zeros(batch_size, P, H, device=device, dtype=dtype),  # (B, L−1, H)
            x_mem=torch.full((batch_size, P), self.pad_id, device=device),  # (B, L−1)
            filled=torch.zeros(batch_size, P, dtype=torch.bool, device=device),  # (B, L−1)
        )

    def vocab_logits(self, h: Tensor) -> Tensor:
        """U h + b (U = E when tied).  Shapes: h (B, T, H) -> (B, T, V)"""
        return self.U(h, self.embed.weight if self.cfg.tie_weights else None)  # (B, T, V)

    def forward(self, x: Tensor, state: PointerSentinelState | None = None) -> LMOutput:
        if state is None:
            state = self.init_state(x.shape[0], x.device)
        e = self.drop(self.embed(x))  # (B, T, E)
        out, (h_n, c_n) = self.rnn(e, initial_state=(layer_major(state.h), layer_major(state.c)))
        h = self.drop(out)  # (B, T, H)
        q = torch.tanh(self.W(h))  # (B, T, H)
        P, T = state.h_mem.shape[1], x.shape[1]
        h_mem = torch.cat([state.h_mem, h], dim=1)  # (B, P+T, H)
        x_mem = torch.cat([state.x_mem, x], dim=1)  # (B, P+T)
        filled = torch.cat([state.filled, x != self.pad_id], dim=1)  # (B, P+T)
        mask = window_mask(T, P, x.device)[None] & filled[:, None, :]  # (B, T, P+T)
        log_p, g, a = pointer_sentinel_mixture(self.vocab_logits(h), q, h_mem, x_mem, mask, self.s)
        new_state = PointerSentinelState(
            h=batch_major(h_n),  # (B, layers, H)
            c=batch_major(c_n),  # (B, layers, H)
            h_mem=h_mem[:, T:],  # (B, L−1, H)
            x_mem=x_mem[:, T:],  # (B, L−1)
            filled=filled[:, T:],  # (B, L−1)
        )
        return LMOutput(logits=log_p, state=new_state, extras={"gate": g, "pointer": a})

    def step(
        self, x: Tensor, state: PointerSentinelState | None
    ) -> tuple[Tensor, PointerSentinelState]:
        out = self.forward(x[:, None], state)  # logits (B, 1, V)
        return out.logits[:, 0], out.state
