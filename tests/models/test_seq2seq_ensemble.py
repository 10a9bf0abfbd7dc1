"""The encoder-decoder ensemble (seqlab.models.ensemble.Seq2SeqEnsemble) over every
translation model: the pooled step is the members' mean probability; teacher forcing
equals stepping the pool (each member's cache and state carried); one member decodes as
the member; beam K = 1 equals greedy; batched beam search equals one input at a time; the
mean coverage is offered only when every member has one (Bahdanau, Luong)."""

import pytest
import torch

import seqlab.ensemble_load  # noqa: F401  (imports, so registers, every seq2seq model)
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, greedy
from seqlab.models.ensemble import Seq2SeqEnsemble
from seqlab.registry import MODELS
from seqlab.tasks.translation_eval import SearchSettings, coverage_of, decode_ids
from tests.models.test_rnn_seq2seq import SMALL, V, batch

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = {
    **{name: {**kw, "dropout": 0.0} for name, kw in SMALL.items()},
    "transformer": {"d_model": 16, "n_heads": 2, "d_ff": 32, "encoder_layers": 1,
                    "decoder_layers": 2, "dropout": 0.0},
    "convs2s": {"emb_dim": 16, "channels": 16, "encoder_layers": 1, "decoder_layers": 2,
                "dropout": 0.0},
}  # fmt: skip


def member(name: str, seed: int, dtype: torch.dtype = torch.float32):
    torch.manual_seed(seed)
    entry = MODELS.get(name)
    cfg = entry.config_cls(**KINDS[name])
    model = entry.target(cfg, src_vocab=V, tgt_vocab=V, pad_id=PAD_ID).to(dtype).eval()
    with torch.no_grad():  # wider than the default init: members that disagree, and end
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def start(model, b):
    return model.init_state(model.encode(b.src, b.src_mask), b.src_mask)


@pytest.mark.parametrize("name", list(KINDS))
@torch.no_grad()
def test_pool_is_the_members_mean_and_teacher_forcing_equals_stepping(name):
    b = batch()
    # float64: stepping and teacher forcing sum in different orders, and in float32 the
    # widened weights leave ~1e-5 of rounding on some CPUs (ConvS2S on AVX-512: 7.5e-5)
    members = [member(name, 0, torch.float64), member(name, 1, torch.float64)]
    ens = Seq2SeqEnsemble(members)
    full = ens(b.src, b.src_mask, b.y_in, torch.ones_like(b.tgt_mask))  # (B, T, V)
    alone = [m(b.src, b.src_mask, b.y_in, torch.ones_like(b.tgt_mask)) for m in members]
    by_hand = sum(a.softmax(-1) for a in alone) / 2  # (B, T, V)
    assert not torch.allclose(alone[0].softmax(-1), alone[1].softmax(-1), atol=1e-3)
    torch.testing.assert_close(full.exp(), by_hand, atol=1e-12, rtol=0)
    state = start(ens, b)
    for t in range(b.y_in.size(1)):
        log_p, state = ens.step(b.y_in[:, t], state)  # (B, V)
        torch.testing.assert_close(log_p, full[:, t], atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", ["bahdanau", "transformer"])
def test_one_member_decodes_as_the_member(name):
    m, b = member(name, 0), batch()
    sources = [row[: int(n)].tolist() for row, n in zip(b.src, b.src_mask.sum(1))]
    for beam in (1, 3):
        s = SearchSettings(beam=beam, max_len_a=1.0, max_len_b=4)
        alone = decode_ids(m, sources, s)
        pooled = decode_ids(Seq2SeqEnsemble([m]), sources, s)
        assert [[ids for ids, *_ in n] for n in pooled] == [[ids for ids, *_ in n] for n in alone]


@pytest.mark.parametrize("name", ["luong", "transformer"])
def test_beam_one_equals_greedy_and_batched_equals_alone(name):
    b = batch()
    ens = Seq2SeqEnsemble([member(name, 0), member(name, 1)])
    B = b.src.size(0)
    with torch.no_grad():
        g = greedy(ens, start(ens, b), B, BOS_ID, EOS_ID, max_len=8, pad_id=PAD_ID)
        k1 = beam_search(ens, start(ens, b), B, BOS_ID, EOS_ID, max_len=8, beam_size=1)
    assert torch.equal(k1.tokens[:, 0], g.tokens) and torch.equal(k1.lengths[:, 0], g.lengths)
    sources = [row[: int(n)].tolist() for row, n in zip(b.src, b.src_mask.sum(1))]
    s = SearchSettings(beam=3, max_len_a=1.0, max_len_b=4, length_penalty=0.6)
    together = decode_ids(ens, sources, s)
    alone = [decode_ids(ens, [x], s)[0] for x in sources]
    assert [[ids for ids, *_ in n] for n in together] == [[ids for ids, *_ in n] for n in alone]


def test_mean_coverage_only_when_every_member_has_one():
    b = batch()
    ens = Seq2SeqEnsemble([member("bahdanau", 0), member("bahdanau", 1)])
    with torch.no_grad():
        _, state = ens.step(torch.full((b.src.size(0),), BOS_ID), start(ens, b))
    cov, mask = ens.attention_coverage(state)
    parts = [m.attention_coverage(s)[0] for m, s in zip(ens.members, state.states)]
    torch.testing.assert_close(cov, (parts[0] + parts[1]) / 2)
    assert torch.equal(mask, b.src_mask)
    mixed = Seq2SeqEnsemble([member("bahdanau", 0), member("transformer", 1)])
    with pytest.raises(ValueError, match="needs a model whose decoder state"):
        coverage_of(mixed, 0.5)


@torch.no_grad()
def test_attention_of_a_pool_is_the_members_mean_alignment():
    b = batch()
    args = (b.src, b.src_mask, b.y_in, torch.ones_like(b.tgt_mask))
    rnn, tf, conv = member("luong", 0), member("transformer", 1), member("convs2s", 2)
    a_rnn = rnn.attention_maps(*args)["cross"]  # (B, T, S)
    a_tf = tf.attention_maps(*args)["cross"][-1].mean(1)  # last layer, mean of heads
    a_conv = conv.attention_maps(*args)["cross"][-1]  # last layer, one head
    pooled = Seq2SeqEnsemble([rnn, tf, conv]).attention_maps(*args)["cross"]
    assert pooled.shape == a_rnn.shape == (b.src.size(0), b.y_in.size(1), b.src.size(1))
    torch.testing.assert_close(pooled, (a_rnn + a_tf + a_conv) / 3)
    torch.testing.assert_close(pooled.sum(-1), torch.ones(pooled.shape[:2]))  # rows sum to 1
    alone = Seq2SeqEnsemble([tf]).attention_maps(*args)["cross"]
    torch.testing.assert_close(alone, a_tf)  # a pool of one: its member's alignment
