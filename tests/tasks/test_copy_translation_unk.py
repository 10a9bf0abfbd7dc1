"""Decode-time ``<unk>`` options of copy_translation (seqlab.tasks.copy_translation_decode):
``block_unk`` never emits ``<unk>`` (greedy and beam; beam K = 1 equals greedy),
``replace_unk`` puts the most-attended source word in place of each ``<unk>`` (hand-built
attention, then a model's own), and the defaults decode exactly as the plain searches do.

The "unk-loving" model is a seeded pointer-generator whose output bias on ``<unk>`` and
p_gen bias are raised, so that ``<unk>`` has most of the mass at every step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seqlab import api
from seqlab.data.collate import pad_batch
from seqlab.data.oov import extended_to_words, make_copy_example
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK, UNK_ID, Vocab
from seqlab.decode import beam_search, greedy
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.nn.masks import padding_mask
from seqlab.tasks.copy_translation import CopyTranslationConfig, CopyTranslationTask, tokenize
from seqlab.tasks.copy_translation_decode import (
    UnkBlockedDecoder,
    decode_copy,
    forbid_unk,
    replace_unk_by_attention,
)
from seqlab.tasks.translation_eval import SearchSettings

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SRC_VOCAB = Vocab(["ein", "mann", "frau", "läuft", "namens", "und", "."])
TGT_VOCAB = Vocab(["a", "man", "woman", "runs", "named", "and", "."])
SOURCES = [
    "ein mann namens boa läuft .",
    "eine frau namens kiwu und boa läuft .",
    "tom",
    "ein mann läuft mit bob und ann .",
]
SMALL = {"emb_dim": 8, "hidden_size": 8, "attn_dim": 8, "out_dim": 8, "dropout": 0.0}


def examples():
    return [make_copy_example(s.split(), [], SRC_VOCAB, TGT_VOCAB) for s in SOURCES]


def seeded_model(
    seed: int = 0,
    src_vocab: int = len(SRC_VOCAB),
    tgt_vocab: int = len(TGT_VOCAB),
    pad_id: int = PAD_ID,
):
    torch.manual_seed(seed)
    return PointerGenerator(PointerGeneratorConfig(**SMALL), src_vocab, tgt_vocab, pad_id).eval()


def unk_loving(
    model: PointerGenerator, rival: float = 6.0, p_gen_bias: float = 5.0
) -> PointerGenerator:
    """P(<unk>) ≈ 0.87 at every step (P_vocab(<unk>) ≈ 0.88, p_gen ≈ 0.99); the first
    word after the specials (id 4) has most of the rest, EOS very little, so what the
    search picks once <unk> is blocked is that word (or a copy). ``rival=0`` and a lower
    ``p_gen_bias`` leave more to the copies."""
    with torch.no_grad():
        model.V_prime.bias[UNK_ID] += 8.0
        model.V_prime.bias[4] += rival
        model.V_prime.bias[EOS_ID] -= 8.0
        model.b_ptr.fill_(p_gen_bias)
    return model


def first_step(model, exs):
    """log P of the first decoding step for each example.  -> (B, V + n_oov)"""
    src, lengths = pad_batch([e.src_ids for e in exs], PAD_ID)  # (B, S)
    src_ext, _ = pad_batch([e.src_ext for e in exs], PAD_ID)  # (B, S)
    mask = padding_mask(lengths)  # (B, S)
    n_oov = max(len(e.oovs) for e in exs)
    state = model.init_state(model.encode(src, mask, src_ext, n_oov), mask)
    return state, model.step(torch.full((len(exs),), BOS_ID), state)[0]


def settings(beam: int, alpha: float = 0.6) -> SearchSettings:
    return SearchSettings(beam=beam, max_len_a=1.5, max_len_b=5, length_penalty=alpha)


# ----------------------------------------------------------------- block_unk


def test_forbid_unk_sets_only_unk_to_minus_infinity():
    log_p = torch.log_softmax(torch.randn(3, 12), dim=-1)  # (B, V')
    out = forbid_unk(log_p)
    assert torch.isneginf(out[:, UNK_ID]).all()
    keep = torch.arange(12) != UNK_ID
    assert torch.equal(out[:, keep], log_p[:, keep])


@pytest.mark.parametrize("beam", [1, 3])
def test_block_unk_never_emits_unk_where_the_model_prefers_it(beam):
    model, exs = unk_loving(seeded_model()), examples()
    _, log_p = first_step(model, exs)
    assert (log_p.argmax(-1) == UNK_ID).all() and (log_p[:, UNK_ID].exp() > 0.5).all()
    plain = decode_copy(model, exs, settings(beam))
    assert all(UNK_ID in ids for ids, _ in plain)  # the model's own choice is <unk>
    blocked = decode_copy(model, exs, settings(beam), block_unk=True)
    for ids, p_gen in blocked:
        assert ids and UNK_ID not in ids and 0.0 < p_gen < 1.0


def test_beam_size_one_with_block_unk_equals_greedy_with_block_unk():
    model, exs = unk_loving(seeded_model(1), rival=0.0, p_gen_bias=1.5), examples()
    state, log_p = first_step(model, exs)
    assert (log_p.argmax(-1) == UNK_ID).all()
    decoder = UnkBlockedDecoder(model)
    g = greedy(decoder, state, len(exs), BOS_ID, EOS_ID, max_len=9, pad_id=PAD_ID)
    b = beam_search(decoder, state, len(exs), BOS_ID, EOS_ID, max_len=9, beam_size=1, alpha=0.0)
    assert not (g.tokens == UNK_ID).any()
    assert torch.equal(b.tokens[:, 0], g.tokens) and torch.equal(b.lengths[:, 0], g.lengths)
    torch.testing.assert_close(b.log_probs[:, 0], g.log_probs)


# ----------------------------------------------------------------- replace_unk


def test_replace_unk_takes_the_most_attended_source_word_by_hand():
    """Source "ein boa . kiwu </s>" (only "." is a target word). Each <unk> becomes the
    source word with the most attention at its step, written as in the source (a copy id,
    or the target id of "."); other ids are kept; the final </s> is never a candidate,
    even when it has the most attention; a source without words keeps the <unk>."""
    ex = make_copy_example(["ein", "boa", ".", "kiwu"], [], SRC_VOCAB, TGT_VOCAB)
    V, dot, a = len(TGT_VOCAB), TGT_VOCAB.token_to_id("."), TGT_VOCAB.token_to_id("a")
    assert ex.src_ext == (V + 0, V + 1, dot, V + 2, EOS_ID)
    ids = [a, UNK_ID, UNK_ID, a, UNK_ID, UNK_ID]
    attention = torch.tensor(
        [
            [0.2, 0.2, 0.2, 0.2, 0.2],
            [0.1, 0.1, 0.1, 0.6, 0.1],  # kiwu
            [0.1, 0.1, 0.7, 0.0, 0.1],  # "."
            [0.0, 0.9, 0.0, 0.0, 0.1],  # not <unk>: unchanged
            [0.0, 0.3, 0.1, 0.0, 0.6],  # </s> has the most: the best word, boa
            [0.4, 0.1, 0.1, 0.4, 0.0],  # a tie: the first position, ein
        ]
    )
    out = replace_unk_by_attention(ids, attention, ex.src_ext)
    assert out == [a, V + 2, dot, a, V + 1, V + 0]
    assert extended_to_words(out, TGT_VOCAB, ex.oovs) == ["a", "kiwu", ".", "a", "boa", "ein"]
    assert replace_unk_by_attention([a, a], attention, ex.src_ext) == [a, a]
    assert replace_unk_by_attention([UNK_ID], torch.ones(1, 1), (EOS_ID,)) == [UNK_ID]


def test_replace_unk_in_decoding_uses_the_models_own_attention():
    model, exs = unk_loving(seeded_model(2)), examples()
    plain = decode_copy(model, exs, settings(3))
    replaced = decode_copy(model, exs, settings(3), replace_unk=True)
    for e, (ids, p_gen), (new, p_gen_new) in zip(exs, plain, replaced):
        assert UNK_ID in ids and UNK_ID not in new and p_gen == p_gen_new
        y_in = torch.tensor([[BOS_ID, *ids]])  # the decoded steps, EOS step included
        src, src_ext = torch.tensor([e.src_ids]), torch.tensor([e.src_ext])
        out = model(
            src, torch.ones_like(src, dtype=torch.bool), y_in,
            torch.ones_like(y_in, dtype=torch.bool), src_ext, len(e.oovs), details=True,
        )  # fmt: skip
        best = out.attention[0, :, :-1].argmax(-1)  # (T,) without the final </s>
        want = [e.src_ext[int(best[t])] if j == UNK_ID else j for t, j in enumerate(ids)]
        assert new == want


# ----------------------------------------------------------------- defaults unchanged


def decode_as_before(model, exs, beam, **search):
    """What decode_copy did before the options: one search on the model itself
    (``search``: more keyword arguments for beam search)."""
    src, lengths = pad_batch([e.src_ids for e in exs], PAD_ID)  # (B, S)
    src_ext, _ = pad_batch([e.src_ext for e in exs], PAD_ID)  # (B, S)
    mask = padding_mask(lengths)  # (B, S)
    n_oov = max(len(e.oovs) for e in exs)
    limit = torch.tensor([int(1.5 * (len(e.src_ids) - 1) + 5) for e in exs])  # (B,)
    state = model.init_state(model.encode(src, mask, src_ext, n_oov), mask)
    if beam == 1:
        res = greedy(model, state, len(exs), BOS_ID, EOS_ID, max_len=limit, pad_id=PAD_ID)
        tokens, lens = res.tokens, res.lengths
    else:
        res = beam_search(
            model,
            state,
            len(exs),
            BOS_ID,
            EOS_ID,
            max_len=limit,
            beam_size=beam,
            alpha=0.6,
            **search,
        )
        tokens, lens = res.tokens[:, 0], res.lengths[:, 0]
    rows = [row[:n] for row, n in zip(tokens.tolist(), lens.tolist())]
    return [row[:-1] if row and row[-1] == EOS_ID else row for row in rows]


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("loves_unk", [False, True])
def test_defaults_leave_decoding_unchanged(beam, loves_unk):
    model, exs = seeded_model(3), examples()
    if loves_unk:
        unk_loving(model)
    want = decode_as_before(model, exs, beam)
    for got in (
        decode_copy(model, exs, settings(beam)),
        decode_copy(model, exs, settings(beam), block_unk=False, replace_unk=False),
    ):
        assert [ids for ids, _ in got] == want
    cfg = CopyTranslationConfig()
    assert cfg.block_unk is False and cfg.replace_unk is False


# ----------------------------------------------------------------- config and task


def test_config_validates_the_unk_options():
    with pytest.raises(ValueError, match="block_unk must be true or false"):
        CopyTranslationConfig(block_unk="yes")
    with pytest.raises(ValueError, match="choose one"):
        CopyTranslationConfig(block_unk=True, replace_unk=True)
    for preset in ("multi30k-pointer-generator", "multi30k-pointer-generator-coverage"):
        path = CONFIGS / f"{preset}.yaml"
        assert api.resolve_config(path).task_cfg.unk_to_copy is True  # the presets' choice
        assert api.resolve_config(path).task_cfg.block_unk is False
        off = api.resolve_config(path, ["task.unk_to_copy=false", "task.replace_unk=true"])
        assert off.task_cfg.block_unk is False and off.task_cfg.replace_unk is True


@pytest.fixture
def files(tmp_path):
    names = ["boa", "kiwu", "tom", "ann", "bob", "lin", "mes", "rau"]
    out = {}
    for split, n in (("train", 40), ("valid", 8), ("test", 8)):
        de = [f"ein mann namens {names[i % 8]} läuft ." for i in range(n)]
        en = [f"a man named {names[i % 8]} runs ." for i in range(n)]
        for side, lines in (("src", de), ("tgt", en)):
            path = tmp_path / f"{split}.{side}"
            path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
            out[f"{split}_{side}"] = str(path)
    return out


@pytest.mark.parametrize("option", [{}, {"block_unk": True}, {"replace_unk": True}])
def test_task_evaluate_and_translate_apply_the_options(files, option):
    cfg = CopyTranslationConfig(
        data="files", tgt_vocab_size=10, src_min_freq=1, test_beam=2, **files, **option
    )
    task = CopyTranslationTask(cfg, None, 0)
    task.prepare()
    model = unk_loving(seeded_model(4, **task.model_kwargs()))
    metrics = task.evaluate(model, "test")
    (text,) = task.translate(model, ["Ein Mann namens Zyxwq läuft."], beam=2)
    words = task.explain(model, "Ein Mann namens Zyxwq läuft.")["output"]
    if not option:
        assert metrics["unk"] > 50.0 and UNK in text and UNK in words
    else:
        assert metrics["unk"] == 0.0 and UNK not in text and UNK not in words
    if "replace_unk" in option:  # every output word is a target word or a source word
        source = {"ein", "mann", "namens", "zyxwq", "läuft", "."}
        assert all(w in source or w in task.tgt_vocab for w in tokenize(text))
