"""The pointer-generator ensemble (seqlab.models.pointer_generator_ensemble) and the linear
pool it decodes with (seqlab.decode.ensemble): the pooled step is the members' mean
probability by hand and sums to 1 over the extended vocabulary; one member decodes as the
member; teacher forcing equals stepping; beam K = 1 equals greedy; batched equals one by
one; members that cannot be pooled are refused (also when loading runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from seqlab.config import ConfigError
from seqlab.data.collate import pad_batch
from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode import beam_search, greedy
from seqlab.decode.ensemble import EnsembleDecoder, linear_pool
from seqlab.ensemble_load import check_members, ensemble_of
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.models.pointer_generator_ensemble import PointerGeneratorEnsemble
from seqlab.nn.masks import padding_mask
from seqlab.tasks.copy_translation_decode import decode_copy
from seqlab.tasks.translation_eval import SearchSettings
from tests.tasks.test_copy_translation_unk import SMALL, SRC_VOCAB, TGT_VOCAB, examples

pytestmark = pytest.mark.usefixtures("one_thread")


def member(seed: int, tgt_vocab: int = len(TGT_VOCAB)) -> PointerGenerator:
    torch.manual_seed(seed)
    cfg = PointerGeneratorConfig(**SMALL, init_range=0.5)  # wide: members that disagree
    return PointerGenerator(cfg, len(SRC_VOCAB), tgt_vocab, PAD_ID).eval()


def batch(exs):
    src, lengths = pad_batch([e.src_ids for e in exs], PAD_ID)  # (B, S)
    src_ext, _ = pad_batch([e.src_ext for e in exs], PAD_ID)  # (B, S)
    return src, padding_mask(lengths), src_ext, max(len(e.oovs) for e in exs)


def start(model, exs):
    src, mask, src_ext, n_oov = batch(exs)
    return model.init_state(model.encode(src, mask, src_ext, n_oov), mask)


def settings(beam: int) -> SearchSettings:
    return SearchSettings(beam=beam, max_len_a=1.5, max_len_b=5, length_penalty=0.6)


def test_linear_pool_is_the_mean_probability_of_normalised_members():
    a, b = torch.randn(3, 7), torch.randn(3, 7) * 4 + 2  # unnormalised logits
    pooled = linear_pool([a, b])  # (3, 7)
    by_hand = (a.softmax(-1) + b.softmax(-1)) / 2
    torch.testing.assert_close(pooled.exp(), by_hand)
    with pytest.raises(ValueError, match="at least one"):
        linear_pool([])


def test_pooled_step_is_the_members_mean_over_the_extended_vocabulary():
    exs = examples()
    members = [member(0), member(1), member(2)]
    ens = PointerGeneratorEnsemble(members)
    y = torch.full((len(exs),), BOS_ID)
    log_p, state = ens.step(y, start(ens, exs))  # (B, V + n_oov)
    probs = [m.step(y, start(m, exs))[0].exp() for m in members]
    assert not torch.allclose(probs[0], probs[1], atol=1e-3)  # the members disagree
    torch.testing.assert_close(log_p.exp(), sum(probs) / 3)
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(len(exs)))
    # an OOV source word ("boa", id V) gets the members' mean copy mass, nothing generated
    V = len(TGT_VOCAB)
    torch.testing.assert_close(log_p[0, V].exp(), sum(p[0, V] for p in probs) / 3)
    # the second step goes on from each member's own state
    y2 = log_p.argmax(-1)
    log_p2, _ = ens.step(y2, state)
    by_hand = []
    for m in members:
        _, s = m.step(y, start(m, exs))
        by_hand.append(m.step(y2, s)[0].exp())
    torch.testing.assert_close(log_p2.exp(), sum(by_hand) / 3)


@pytest.mark.parametrize("beam", [1, 3])
def test_one_member_decodes_as_the_member(beam):
    m, exs = member(0), examples()
    alone = decode_copy(m, exs, settings(beam))
    pooled = decode_copy(PointerGeneratorEnsemble([m]), exs, settings(beam))
    assert [ids for ids, _ in pooled] == [ids for ids, _ in alone]
    for (_, g1), (_, g2) in zip(pooled, alone):
        assert g1 == pytest.approx(g2, abs=1e-6)


def test_teacher_forcing_equals_stepping_the_pool():
    exs = examples()
    ens = PointerGeneratorEnsemble([member(0), member(1)])
    src, mask, src_ext, n_oov = batch(exs)
    torch.manual_seed(5)
    y_in = torch.randint(4, len(TGT_VOCAB) + n_oov, (len(exs), 6))  # (B, T) with copies
    y_in[:, 0] = BOS_ID
    out = ens(src, mask, y_in, torch.ones_like(y_in, dtype=torch.bool), src_ext, n_oov, True)
    state = start(ens, exs)
    for t in range(y_in.shape[1]):
        log_p, state = ens.step(y_in[:, t], state)
        torch.testing.assert_close(out.log_probs[:, t], log_p, atol=2e-5, rtol=1e-5)
    # details: the members' mean p_gen and attention
    outs = [m(src, mask, y_in, torch.ones_like(mask), src_ext, n_oov, True) for m in ens.members]
    torch.testing.assert_close(out.p_gen, (outs[0].p_gen + outs[1].p_gen) / 2)
    torch.testing.assert_close(out.attention, (outs[0].attention + outs[1].attention) / 2)


def test_beam_one_equals_greedy_and_batched_equals_one_by_one():
    exs = examples()
    ens = PointerGeneratorEnsemble([member(0), member(1)])
    state = start(ens, exs)
    g = greedy(ens, state, len(exs), BOS_ID, EOS_ID, max_len=9, pad_id=PAD_ID)
    b = beam_search(ens, state, len(exs), BOS_ID, EOS_ID, max_len=9, beam_size=1, alpha=0.0)
    assert torch.equal(b.tokens[:, 0], g.tokens) and torch.equal(b.lengths[:, 0], g.lengths)
    together = decode_copy(ens, exs, settings(3))
    alone = [decode_copy(ens, [e], settings(3))[0] for e in exs]
    assert [ids for ids, _ in together] == [ids for ids, _ in alone]


def test_coverage_penalty_reads_the_members_mean_coverage():
    exs = examples()
    ens = PointerGeneratorEnsemble([member(0), member(1)])
    y = torch.full((len(exs),), BOS_ID)
    _, state = ens.step(y, start(ens, exs))
    cov, mask = ens.attention_coverage(state)
    torch.testing.assert_close(cov, (state.states[0].cov + state.states[1].cov) / 2)
    _, oov_mask = ens.oov_attention_coverage(state)
    assert torch.equal(oov_mask, mask & (state.states[0].src_ext >= len(TGT_VOCAB)))
    out = decode_copy(ens, exs, settings(3), coverage_penalty=1.0, coverage_words="oov")
    assert len(out) == len(exs) and all(0.0 < p < 1.0 for _, p in out)


def test_members_with_other_vocabularies_are_refused():
    with pytest.raises(ValueError, match="different target vocabularies"):
        PointerGeneratorEnsemble([member(0), member(1, tgt_vocab=len(TGT_VOCAB) + 1)])
    with pytest.raises(ValueError, match="at least one"):
        EnsembleDecoder([])


class FakeTask:
    """What ``check_members`` reads of a loaded run's task."""

    def __init__(self, vocab: str = "v1", kwargs: dict | None = None) -> None:
        self.vocab, self.kwargs = vocab, kwargs or {"src_vocab": 9}

    def tokenizer_state(self) -> dict:
        return {"tgt": self.vocab}

    def model_kwargs(self) -> dict:
        return self.kwargs


class OtherTask(FakeTask):
    pass


def _loaded(model, task=None):
    return SimpleNamespace(model=model, task=task or FakeTask())


def test_loading_refuses_runs_that_cannot_be_pooled():
    m0, m1 = member(0), member(1)
    first = _loaded(m0)
    assert isinstance(ensemble_of(["a", "b"], [first, _loaded(m1)]), PointerGeneratorEnsemble)
    cases = {
        "b: its vocabularies differ from a's": _loaded(m1, FakeTask(vocab="v2")),
        "b: its model reads other inputs": _loaded(
            m1, FakeTask(kwargs={"src_vocab": 9, "src_gram_buckets": 4})
        ),
        "b: its task is OtherTask, a's FakeTask": _loaded(m1, OtherTask()),
        "b: its model is a Linear, a's a PointerGenerator": _loaded(torch.nn.Linear(2, 2)),
    }
    for message, second in cases.items():
        with pytest.raises(ConfigError, match=message):
            check_members(["a", "b"], [first, second])
    with pytest.raises(ConfigError, match="no ensemble for a Linear"):
        ensemble_of(["a"], [_loaded(torch.nn.Linear(2, 2))])


def test_load_ensemble_needs_runs_and_one_prefer_per_run(tmp_path):
    from seqlab import api

    with pytest.raises(ConfigError, match="at least one run"):
        api.load_ensemble([])
    with pytest.raises(ConfigError, match="2 runs but 1 prefer values"):
        api.load_ensemble([tmp_path, tmp_path], prefer=["best"])
