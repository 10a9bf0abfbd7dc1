"""Pretrain, then fine-tune (Dai & Le 2015): a classifier started from a seqlab LM reads a
sentence exactly as the LM does; mismatched sizes are refused by name; the classify task
copies the LM in at the start of a run only, without moving the run's random stream."""

import pytest
import torch

from seqlab.api import resolve_run
from seqlab.config import ConfigError
from seqlab.data.vocab import PAD_ID, UNK_ID, Vocab
from seqlab.models.classifiers import RNNClassifier, RNNClassifierConfig
from seqlab.models.lm_transfer import transfer_lm
from seqlab.models.rnn_lm import RNNLM, RNNLMConfig
from seqlab.train.build import build_model, build_task
from seqlab.train.trainer import Trainer

LM_WORDS = ["a", "great", "film", "dull", "truly", "awful", "the"]
CLF_WORDS = ["film", "great", "unseen", "a", "dull"]  # "unseen" is not in the LM


def lm_and_classifier(cell="lstm", layers=2, bidirectional=False):
    torch.manual_seed(0)
    lm = RNNLM(RNNLMConfig(cell=cell, emb_dim=8, hidden=8, layers=layers), len(LM_WORDS) + 4)
    clf_cfg = RNNClassifierConfig(
        cell=cell, d_embed=8, hidden=8, num_layers=layers, bidirectional=bidirectional
    )
    clf = RNNClassifier(clf_cfg, vocab=len(CLF_WORDS) + 4, n_classes=2)
    return lm, clf, Vocab(LM_WORDS), Vocab(CLF_WORDS)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_the_classifier_reads_a_sentence_exactly_as_the_lm(cell):
    lm, clf, lm_vocab, clf_vocab = lm_and_classifier(cell)
    before = clf.embed.weight[clf_vocab.token_to_id("unseen")].clone()
    info = transfer_lm(clf, clf_vocab.tokens, lm, lm_vocab.tokens)
    assert info.coverage == pytest.approx(4 / 5) and (info.cells, info.total_cells) == (2, 2)
    lm.eval(), clf.eval()
    words = ["a", "great", "film", "<unk>"]
    x_lm = torch.tensor([lm_vocab.encode(words)])  # (1, 4)
    x_clf = torch.tensor([clf_vocab.encode(words)])  # (1, 4)
    state = lm(x_lm).state  # h: (1, L, H)
    z = clf.features(x_clf, torch.ones_like(x_clf, dtype=torch.bool))  # (1, H)
    torch.testing.assert_close(z, state.h[:, -1], atol=1e-6, rtol=1e-6)
    E = clf.embed.weight
    torch.testing.assert_close(E[UNK_ID], lm.embed.weight[UNK_ID], atol=0, rtol=0)
    assert torch.equal(E[PAD_ID], torch.zeros(8))
    assert torch.equal(E[clf_vocab.token_to_id("unseen")], before)  # not in the LM: kept


def test_a_bidirectional_classifier_gets_the_forward_direction_of_layer_0_only():
    lm, clf, lm_vocab, clf_vocab = lm_and_classifier("lstm", layers=1, bidirectional=True)
    backward = {k: v.clone() for k, v in clf.rnn.cell_at(0, 1).state_dict().items()}
    info = transfer_lm(clf, clf_vocab.tokens, lm, lm_vocab.tokens)
    assert (info.cells, info.total_cells) == (1, 2)
    for k, v in clf.rnn.cell_at(0, 0).state_dict().items():
        assert torch.equal(v, lm.rnn.cell_at(0, 0).state_dict()[k])
    for k, v in clf.rnn.cell_at(0, 1).state_dict().items():
        assert torch.equal(v, backward[k])


def test_mismatched_sizes_are_refused_by_name():
    torch.manual_seed(0)
    lm = RNNLM(RNNLMConfig(cell="gru", emb_dim=8, hidden=6, layers=1), 11)
    clf = RNNClassifier(RNNClassifierConfig(d_embed=8, hidden=8), vocab=9, n_classes=2)
    with pytest.raises(ConfigError, match=r"cell: classifier lstm vs LM gru.*hidden: classifier 8"):
        transfer_lm(clf, Vocab(CLF_WORDS).tokens, lm, Vocab(LM_WORDS).tokens)


def test_a_classifier_without_recurrent_layers_takes_the_embedding_table_only():
    from seqlab.models.kim_cnn import KimCNN, KimCNNConfig

    lm, _, lm_vocab, clf_vocab = lm_and_classifier("lstm", layers=1)
    cnn = KimCNN(KimCNNConfig(d_embed=8, widths=(2,), n_maps=3), vocab=9, n_classes=2)
    conv = {k: v.clone() for k, v in cnn.state_dict().items() if "embed" not in k}
    info = transfer_lm(cnn, clf_vocab.tokens, lm, lm_vocab.tokens)
    assert (info.cells, info.total_cells) == (0, 0) and info.coverage == pytest.approx(4 / 5)
    row = cnn.embed.weight[clf_vocab.token_to_id("great")]
    assert torch.equal(row, lm.embed.weight[lm_vocab.token_to_id("great")])
    assert all(torch.equal(v, cnn.state_dict()[k]) for k, v in conv.items())
    wide = KimCNN(KimCNNConfig(d_embed=10, widths=(2,), n_maps=3), vocab=9, n_classes=2)
    with pytest.raises(ConfigError, match="d_embed / emb_dim: classifier 10 vs LM 8"):
        transfer_lm(wide, clf_vocab.tokens, lm, lm_vocab.tokens)


def _lm_run(tmp_path):
    text = tmp_path / "lm.txt"
    text.write_text("a great film\nthe dull film\ntruly awful\n" * 30, encoding="utf-8")
    cfg = {
        "task": {"name": "lm", "data": "text", "path": str(text), "batch_size": 2, "bptt": 4},
        "model": {"name": "rnn_lm", "emb_dim": 8, "hidden": 8, "layers": 1},
        "train": {"max_steps": 2, "precision": "fp32", "threads": 1, "progress": False},
    }
    Trainer(resolve_run(cfg), tmp_path / "lm", quiet=True).fit()
    return tmp_path / "lm"


def _classify_cfg(tmp_path, **task):
    data = tmp_path / "d.tsv"
    data.write_text("pos\ta great film\nneg\ta dull film\n" * 10, encoding="utf-8")
    return resolve_run(
        {
            "task": {"name": "classify", "data": "tsv", "path": str(data), "min_freq": 1, **task},
            "model": {"name": "rnn_classifier", "d_embed": 8, "hidden": 8},
            "train": {"seed": 3},
        }
    )


def test_the_classify_task_copies_the_lm_at_the_start_of_a_run_only(tmp_path):
    lm_run = _lm_run(tmp_path)
    cfg = _classify_cfg(tmp_path, init_lm=str(lm_run))
    task = build_task(cfg)
    torch.manual_seed(5)
    model = build_model(cfg, task)
    after_build = torch.rand(1)
    torch.manual_seed(5)
    build_model(_classify_cfg(tmp_path), build_task(_classify_cfg(tmp_path)))
    assert torch.equal(torch.rand(1), after_build)  # loading the LM draws no random numbers
    from seqlab.api import load

    lm = load(lm_run)
    lm_ids = lm.task.tokenizer.vocab
    for word in ("a", "great", "film", "dull"):
        row = model.embed.weight[task.vocab.token_to_id(word)]
        assert torch.equal(row, lm.model.embed.weight[lm_ids.token_to_id(word)])
    assert task.lm_transfer.coverage == 1.0
    missing = _classify_cfg(tmp_path, init_lm=str(tmp_path / "no-such-run"))
    with pytest.raises(ConfigError, match="task.init_lm: .*no-such-run"):
        build_model(missing, build_task(missing))
    restored = build_task(cfg, tokenizer_state=task.tokenizer_state())
    restored.init_model(model)  # a checkpoint's run: nothing is copied
    assert restored.lm_transfer is None
