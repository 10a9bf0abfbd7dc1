"""n-best lists from the pointer-generator (``translate_detailed(nbest=N)``, ``seqlab
translate --nbest``, serve's ``nbest``): the N hypotheses are beam search's own N best
over the extended vocabulary (each one's log P checked against teacher forcing in
tests/models/test_pointer_generator.py), the first is the 1-best decode, batched equals
one sentence at a time, and ``replace_unk`` (which rewrites the best only) refuses N > 1."""

from __future__ import annotations

import pytest
import torch

from seqlab.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seqlab.decode.beam import beam_search
from seqlab.errors import SeqlabError
from seqlab.models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from seqlab.nn.masks import padding_mask
from seqlab.tasks.translation_eval import batch_limits
from tests.tasks.test_copy_translation import _task, files  # noqa: F401

SMALL = PointerGeneratorConfig(emb_dim=8, hidden_size=8, attn_dim=8, out_dim=8, dropout=0.0)
SENTENCES = ["Ein Mann namens Zyxwq läuft.", "Eine Frau schläft.", "Ein Kind namens Boa springt."]


def _model(task) -> PointerGenerator:
    torch.manual_seed(3)
    return PointerGenerator(SMALL, **task.model_kwargs()).double().eval()


def test_the_n_best_are_the_searchs_own_and_the_first_is_the_one_best(files):  # noqa: F811
    task = _task(files)
    model = _model(task)
    done = task.translate_detailed(model, SENTENCES, beam=4, nbest=3)
    one = task.translate_detailed(model, SENTENCES, beam=4, nbest=1)
    alone = [task.translate_detailed(model, [s], beam=4, nbest=3)[0] for s in SENTENCES]
    for t, first, single in zip(done, one, alone):
        assert len(t.hypotheses) == 3 and t.hypotheses[0] == first.hypotheses[0]
        assert [h.ids for h in t.hypotheses] == [h.ids for h in single.hypotheses]
        scores = [h.score for h in t.hypotheses]
        assert scores == sorted(scores, reverse=True)
    # the same three rows as beam search run directly on the encoded sentence
    (e,) = task._examples_of([SENTENCES[0]])
    src = torch.tensor([e.src_ids])
    mask = padding_mask(torch.tensor([len(e.src_ids)]))
    memory = model.encode(src, mask, torch.tensor([e.src_ext]), len(e.oovs))
    limit = batch_limits([len(e.src_ids) - 1], task._settings(4))  # (1,) ⌊a·|x| + b⌋
    r = beam_search(model, model.init_state(memory, mask), 1, BOS_ID, EOS_ID,
                    max_len=limit, beam_size=4, n_best=3,
                    alpha=task.cfg.length_penalty, pad_id=PAD_ID)  # fmt: skip
    want = [row[:n] for row, n in zip(r.tokens[0].tolist(), r.lengths[0].tolist())]
    want = [w[:-1] if w and w[-1] == EOS_ID else w for w in want]
    assert [h.ids for h in done[0].hypotheses] == want
    torch.testing.assert_close(
        torch.tensor([h.log_prob for h in done[0].hypotheses], dtype=torch.float64),
        r.log_probs[0].double(), atol=1e-6, rtol=0,
    )  # fmt: skip


def test_nbest_above_the_beam_or_with_replace_unk_is_refused(files):  # noqa: F811
    task = _task(files)
    model = _model(task)
    with pytest.raises(SeqlabError, match="need 1 <= nbest <= beam"):
        task.translate_detailed(model, SENTENCES, beam=2, nbest=3)
    replacing = _task(files, replace_unk=True)
    with pytest.raises(SeqlabError, match="replace_unk rewrites only the best"):
        replacing.translate_detailed(_model(replacing), SENTENCES, beam=3, nbest=2)
