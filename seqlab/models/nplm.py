"""The neural probabilistic language model of Bengio et al. 2003 (JMLR 3, §2, eq. 1).

The notes (003, "Learning word embeddings") introduce it as the first way to learn word
embeddings: look up the embeddings of a fixed window of previous words, concatenate them,
and predict the next word with a hidden layer and a softmax. Bengio et al. 2003, §2:

    x = (C(w_{t−1}), C(w_{t−2}), …, C(w_{t−n+1}))        concatenation, (n−1)·m values
    y = b + W x + U tanh(d + H x)                          unnormalised log-probabilities
    P̂(w_t = i | w_{t−1}, …, w_{t−n+1}) = e^{y_i} / Σ_j e^{y_j}

with C (|V|, m) the word feature matrix, H (h, (n−1)m) and d (h,) the hidden layer,
U (|V|, h) the hidden-to-output weights, b (|V|,) the output biases and W (|V|, (n−1)m)
the optional direct connections from the word features to the output (W = 0 when there
are none; the paper trains both variants).

It fits the LM contract (DESIGN §6 and ``seqlab.models.lm_common``) by carrying the last
n−1 tokens it has read as its state, so a contiguous stream split into batches sees the
same windows as the unsplit stream; at the start of a stream the window is filled with
``pad_id`` (a learned "before the text" feature vector).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqlab.models.lm_common import LMOutput
from seqlab.nn.dropout import Dropout
from seqlab.nn.embedding import Embedding
from seqlab.registry import MODELS


@dataclass(frozen=True)
class NPLMConfig:
    """Hyper-parameters in the paper's letters (Bengio et al. 2003, §4.1).

    n: the model order (n−1 previous words are the context), m: word feature size,
    h: hidden units, direct: direct connections W. The paper's best Brown-corpus model
    is n=5, m=30, h=100 with direct connections; AP News n=6, m=100, h=60.
    """

    n: int = 5
    m: int = 60
    h: int = 100
    direct: bool = True
    dropout: float = 0.0
    init_std: float = 0.1

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError(f"n must be >= 2 (n−1 previous words as context), got {self.n}")
        if self.m < 1 or self.h < 1:
            raise ValueError(f"m and h must be >= 1, got m={self.m}, h={self.h}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.init_std <= 0:
            raise ValueError(f"init_std must be > 0, got {self.init_std}")


@dataclass
class NPLMState:
    """The last n−1 tokens read, oldest first.  window: (B, n−1) long."""

    window: Tensor

    def detach(self) -> NPLMState:
        return NPLMState(self.window.detach())


@MODELS.register("nplm", NPLMConfig)
class NPLM(nn.Module):
    """Bengio et al. 2003 neural probabilistic LM: y = b + W x + U tanh(d + H x).

    ``logits[:, t]`` scores the token after ``x[:, t]`` from the n−1 tokens ending at
    ``x[:, t]`` (earlier ones come from the carried window).

    Shapes:
        x: (B, T) long   state: NPLMState, window (B, n−1)   logits: (B, T, V)
        step(x (B,), state) -> logits (B, V), state

    Deviations: optional dropout on x and on tanh(d + H x) (the paper has none); C is
    initialised N(0, init_std²); the start-of-stream context is the ``pad_id`` feature
    vector, learned like any other word (the paper does not say how it pads).
    """

    def __init__(self, cfg: NPLMConfig, vocab: int, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg, self.vocab, self.pad_id = cfg, vocab, pad_id
        n, m, h = cfg.n, cfg.m, cfg.h
        self.C = Embedding(vocab, m, init_std=cfg.init_std)  # C (V, m)
        self.drop = Dropout(cfg.dropout)
        self.H = nn.Linear((n - 1) * m, h, bias=False)  # H (h, (n−1)m)
        self.d = nn.Parameter(torch.zeros(h))  # (h,)
        self.U = nn.Linear(h, vocab, bias=False)  # U (V, h)
        self.b = nn.Parameter(torch.zeros(vocab))  # (V,)
        self.W = nn.Linear((n - 1) * m, vocab, bias=False) if cfg.direct else None  # (V, (n−1)m)

    def init_state(self, batch_size: int, device: torch.device | str | None = None) -> NPLMState:
        window = torch.full((batch_size, self.cfg.n - 1), self.pad_id, device=device)  # (B, n−1)
        return NPLMState(window)

    def contexts(self, x: Tensor, state: NPLMState | None) -> tuple[Tensor, NPLMState]:
        """The n−1 tokens ending at each position, most recent first (the paper's order).

        Shapes: x (B, T) -> contexts (B, T, n−1) long, new state window (B, n−1)
        """
        if state is None:
            state = self.init_state(x.shape[0], x.device)
        k = self.cfg.n - 1
        stream = torch.cat([state.window.to(x.dtype), x], dim=1)  # (B, n−1+T)
        windows = stream.unfold(1, k, 1)[:, 1:]  # (B, T, n−1) oldest first, ends at x_t
        return windows.flip(-1), NPLMState(stream[:, -k:])  # (B, T, n−1), (B, n−1)

    def scores(self, ctx: Tensor) -> Tensor:
        """y = b + W x + U tanh(d + H x) for contexts w_{t−1}, …, w_{t−n+1}.

        Shapes: ctx (B, T, n−1) long -> y (B, T, V)
        """
        B, T, k = ctx.shape
        x = self.C(ctx).reshape(B, T, k * self.cfg.m)  # (B, T, (n−1)m) concatenation
        x = self.drop(x)  # (B, T, (n−1)m)
        a = torch.tanh(self.d + self.H(x))  # (B, T, h)
        a = self.drop(a)  # (B, T, h)
        y = self.b + self.U(a)  # (B, T, V)
        if self.W is not None:
            y = y + self.W(x)  # (B, T, V) direct connections
        return y

    def forward(self, x: Tensor, state: NPLMState | None = None) -> LMOutput:
        ctx, new_state = self.contexts(x, state)  # (B, T, n−1)
        return LMOutput(logits=self.scores(ctx), state=new_state)

    def step(self, x: Tensor, state: NPLMState | None) -> tuple[Tensor, NPLMState]:
        out = self.forward(x[:, None], state)  # logits (B, 1, V)
        return out.logits[:, 0], out.state
