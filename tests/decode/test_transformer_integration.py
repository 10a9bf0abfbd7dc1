"""seqlab.decode on a seqlab.nn TransformerDecoder (K/V cache state with its own reorder).

The wrapper adds what a model adds around the stack: token embedding, positional encoding
at offset ``state.length``, and an output projection. Beam search reorders
``TransformerDecoderState`` through its ``reorder`` method (every layer's cache and the
memory mask); the scores are checked against log P(Y) from the *teacher-forced* forward
(one causal pass, no cache), so the cache, its reordering and the bookkeeping are all
tested at once.
"""

import torch
from torch import Tensor, nn

from seqlab.decode import beam_search, gnmt_length_penalty, greedy, repeat_rows
from seqlab.nn import Embedding, SinusoidalPositionalEncoding, TransformerDecoder
from seqlab.nn.masks import padding_mask
from seqlab.nn.transformer_decoder import TransformerDecoderState

V, D, H, BOS, EOS, PAD = 9, 16, 2, 1, 0, -1
TOL = 1e-9  # atol, float64


class TinyTransformerDecoder(nn.Module):
    """StepDecoder around ``TransformerDecoder``: logits = W · Dec(PE(E[y]), memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = Embedding(V, D)
        self.pe = SinusoidalPositionalEncoding(D)
        self.decoder = TransformerDecoder(2, D, H, 2 * D, dropout=0.0)
        self.out = nn.Linear(D, V)
        for m in self.decoder.modules():  # nn.Linear's default draws, not the reference init:
            if isinstance(m, nn.Linear):  # an untrained decoder whose outputs depend on
                m.reset_parameters()  # its inputs enough for varied hypotheses
        self.double().eval()

    def init_state(self, memory: Tensor, mask: Tensor) -> TransformerDecoderState:
        return self.decoder.init_state(memory, mask)

    def step(self, y_prev: Tensor, state: TransformerDecoderState):
        x = self.pe(self.embed(y_prev[:, None]), offset=state.length)  # (B, 1, D)
        h, state = self.decoder.step(x, state)  # (B, 1, D)
        return self.out(h[:, 0]), state  # (B, V)

    def teacher_forced_log_probs(self, memory: Tensor, mask: Tensor, tokens: Tensor) -> Tensor:
        """log p(y_t | y_<t) for every position, one causal pass.  (B, T) -> (B, T)."""
        y_in = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)  # (B, T)
        h, _ = self.decoder(self.pe(self.embed(y_in)), memory, None, mask)  # (B, T, D)
        log_p = self.out(h).log_softmax(-1)  # (B, T, V)
        return log_p.gather(2, tokens[:, :, None]).squeeze(2)  # (B, T)


def setup():
    torch.manual_seed(0)
    model = TinyTransformerDecoder()
    with torch.no_grad():
        model.out.bias[EOS] += 0.25  # hypotheses that end early and ones that reach max_len
    lengths = torch.tensor([4, 2, 6])
    memory = torch.randn(3, 6, D, dtype=torch.float64) * 2  # (B, S, D), padding is garbage
    return model, memory, padding_mask(lengths, 6)


def test_greedy_and_beam_on_transformer_decoder():
    model, memory, mask = setup()
    B, K, N, alpha = 3, 3, 2, 0.6
    g = greedy(model, model.init_state(memory, mask), B, BOS, EOS, max_len=7, pad_id=PAD)
    b1 = beam_search(model, model.init_state(memory, mask), B, BOS, EOS, 7, beam_size=1, pad_id=PAD)
    assert torch.equal(b1.tokens[:, 0], g.tokens)
    torch.testing.assert_close(b1.scores[:, 0], g.scores, atol=TOL, rtol=0)

    r = beam_search(
        model,
        model.init_state(memory, mask),
        B,
        BOS,
        EOS,
        7,
        beam_size=K,
        n_best=N,
        alpha=alpha,
        pad_id=PAD,
    )
    assert (r.scores[:, 0] >= r.scores[:, 1]).all()
    assert (r.lengths == 7).any() and (r.lengths < 7).any()
    # Recompute log P of every n-best hypothesis with the teacher-forced forward.
    tokens = r.tokens.flatten(0, 1)  # (B·N, T)
    lengths = r.lengths.flatten()  # (B·N,)
    inside = torch.arange(tokens.size(1)) < lengths[:, None]  # (B·N, T)
    safe = tokens.masked_fill(~inside, EOS)  # (B·N, T) PAD is not a vocabulary id
    mem = repeat_rows(memory, B, N, memory.device)  # (B·N, S, D)
    msk = repeat_rows(mask, B, N, memory.device)  # (B·N, S)
    with torch.no_grad():
        log_p = (model.teacher_forced_log_probs(mem, msk, safe) * inside).sum(1)  # (B·N,)
    torch.testing.assert_close(log_p.view(B, N), r.log_probs, atol=TOL, rtol=0)
    torch.testing.assert_close(
        log_p.view(B, N) / gnmt_length_penalty(r.lengths, alpha), r.scores, atol=TOL, rtol=0
    )

    # Batched == unbatched: the middle source alone, with its own (shorter) padding.
    alone = beam_search(
        model,
        model.init_state(memory[1:2, :3], mask[1:2, :3]),
        1,
        BOS,
        EOS,
        7,
        beam_size=K,
        n_best=N,
        alpha=alpha,
        pad_id=PAD,
    )
    T = alone.tokens.size(2)
    assert torch.equal(alone.tokens[0], r.tokens[1, :, :T])
    torch.testing.assert_close(alone.scores[0], r.scores[1], atol=TOL, rtol=0)
