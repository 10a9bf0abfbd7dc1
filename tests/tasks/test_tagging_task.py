"""The tagging task: CoNLL files, vocabularies, batches, entity F1 by seqeval on a hand
example (conlleval and strict modes), tokenisation, training end to end, load and predict."""

from __future__ import annotations

import json
import random

import pytest
import torch
from torch import nn

from seqlab import api
from seqlab.data.conll import Sentence, entity_spans
from seqlab.data.vocab import PAD_ID, UNK_ID
from seqlab.errors import DataError, SeqlabError
from seqlab.models.tagger import BiLSTMTagger, TaggerConfig
from seqlab.tasks.tagging import TaggingConfig, TaggingTask, tokenize


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


LEXICON = {
    "PER": ["John", "Mary", "Smith", "Anna", "Peter"],
    "LOC": ["Paris", "London", "Berlin", "Rome"],
    "ORG": ["Acme", "Reuters", "Siemens"],
    "O": ["visited", "met", "in", "the", "and", "said", "today", "with", "."],
}


def sentences(n, seed):
    """Random sentences: each slot an entity of 1–2 words of one type or an O word; two
    entities of one type are never adjacent, so the tags follow from the words."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tokens, tags = [], []
        kind = "O"
        for _ in range(rng.randint(2, 7)):
            kind = rng.choice([k for k in ["PER", "LOC", "ORG", "O", "O", "O"] if k != kind])
            for i in range(1 if kind == "O" else rng.randint(1, 2)):
                tokens.append(rng.choice(LEXICON[kind]))
                tags.append("O" if kind == "O" else ("B-" if i == 0 else "I-") + kind)
        out.append((tokens, tags))
    return out


def write_conll(path, sents, docstart=True):
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for tokens, tags in sents:
        lines += [f"{w} NN B-NP {t}" for w, t in zip(tokens, tags)] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def files_config(tmp_path, n_train=150, **kw):
    paths = {
        f"{split}_path": write_conll(tmp_path / f"{split}.txt", sentences(n, seed))
        for split, n, seed in [("train", n_train, 0), ("valid", 40, 1), ("test", 30, 2)]
    }
    return TaggingConfig(data="files", **paths, **kw)


def prepared(cfg, state=None):
    task = TaggingTask(cfg)
    task.prepare(state)
    return task


def test_prepare_vocabularies_and_batches(tmp_path):
    task = prepared(files_config(tmp_path))
    assert task.tags == ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    assert "Paris" in task.words and "P" in task.chars
    batch = task.collate([0, 1, 2])
    lengths = [len(task.sentences["train"][i].tokens) for i in range(3)]
    T = max(lengths)
    assert batch.words.shape == (3, T) and batch.chars.shape[:2] == (3, T)
    assert batch.mask.sum(1).tolist() == lengths and batch.n_tokens == sum(lengths)
    assert (batch.words[~batch.mask] == PAD_ID).all() and (batch.chars[~batch.mask] == 0).all()
    s = task.sentences["train"][0]
    assert task.chars.decode(batch.chars[0, 0][batch.chars[0, 0] != 0].tolist()) == list(
        s.tokens[0]
    )
    assert [task.tags[k] for k in batch.tags[0, : lengths[0]]] == list(s.tags)
    sent = prepared(files_config(tmp_path, normalize="sentence")).collate([0, 1, 2])
    assert sent.n_tokens == 3
    # the checkpoint's vocabularies rebuild the same ids without re-counting
    again = prepared(files_config(tmp_path), json.loads(json.dumps(task.tokenizer_state())))
    assert again.words == task.words and again.chars == task.chars and again.tags == task.tags


def test_digits_lowercase_and_unk_replacement(tmp_path):
    train = [(["Born", "1996-08-22", "in", "Rome"], ["O", "O", "O", "B-LOC"])] * 3 + [
        (["rare", "Rome"], ["O", "B-LOC"])
    ]
    cfg = TaggingConfig(
        data="files",
        train_path=write_conll(tmp_path / "t.txt", train),
        valid_path=write_conll(tmp_path / "v.txt", train),
        lowercase=True,
        unk_replace=1.0,
    )
    task = prepared(cfg)
    assert "0000-00-00" in task.words and "born" in task.words and "Born" not in task.words
    batch = task.collate([3], "train")  # "rare" is the only singleton
    assert batch.words[0].tolist() == [UNK_ID, task.words.token_to_id("rome")]
    assert task.collate([3], "valid").words[0, 0] == task.words.token_to_id("rare")


class Scripted(nn.Module):
    """Emits a fixed tag per word id (a one-hot emission table)."""

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, words, chars, mask):
        return self.table[words]

    def loss(self, P, y, mask, label_smoothing=0.0):
        return -P.log_softmax(-1).gather(2, y[..., None])[..., 0].masked_fill(~mask, 0).sum(1)

    def decode(self, P, mask):
        return P.argmax(-1).masked_fill(~mask, 0)


HAND = [
    (["John", "lives", "in", "New", "York"], ["B-PER", "O", "O", "B-LOC", "I-LOC"]),
    (["Acme", "hired", "Mary"], ["B-ORG", "O", "B-PER"]),
    (["Big", "Corp"], ["B-ORG", "I-ORG"]),
]
PREDICTED = {  # word → predicted tag; "York" missed, "Acme" an I- tag that starts an entity
    "John": "B-PER", "lives": "O", "in": "O", "New": "B-LOC", "York": "O",
    "Acme": "I-ORG", "hired": "O", "Mary": "B-PER", "Big": "B-ORG", "Corp": "I-ORG",
}  # fmt: skip


@pytest.mark.parametrize(
    "mode, expected",
    [
        # conlleval: 5 gold, 5 predicted (I-ORG after nothing starts ORG "Acme"), 4 correct
        ("default", {"f1": 80.0, "precision": 80.0, "recall": 80.0, "f1_ORG": 100.0}),
        # strict IOB2: "Acme" (I-ORG) is no entity: 4 predicted, 3 correct → P 3/4, R 3/5
        ("strict", {"f1": 200 / 3, "precision": 75.0, "recall": 60.0, "f1_ORG": 200 / 3}),
    ],
)
def test_entity_f1_on_a_hand_example(tmp_path, mode, expected):
    path = write_conll(tmp_path / "hand.txt", HAND)
    task = prepared(TaggingConfig(data="files", train_path=path, valid_path=path, mode=mode))
    table = torch.full((len(task.words), len(task.tags)), -10.0)
    for word, tag in PREDICTED.items():
        table[task.words.token_to_id(word), task.tags.index(tag)] = 10.0
    metrics = task.evaluate(Scripted(table), "valid")
    for key, value in {**expected, "f1_PER": 100.0, "f1_LOC": 0.0, "accuracy": 80.0}.items():
        assert metrics[key] == pytest.approx(value, abs=1e-9), key
    assert metrics["loss"] == pytest.approx(20.0 * 2 / 10, abs=1e-6)  # two tokens at −log p≈20


def test_tokenize():
    text = "U.S. troops left New York-based Acme on 1996-08-22, paying $1,000.50 (don't ask)."
    tokens = [t for t, _, _ in tokenize(text)]
    assert tokens == [
        "U.S.", "troops", "left", "New", "York-based", "Acme", "on", "1996-08-22", ",",
        "paying", "$", "1,000.50", "(", "don't", "ask", ")", ".",
    ]  # fmt: skip
    assert all(text[a:b] == t for t, a, b in tokenize(text))
    assert tokenize("   ") == []


def test_train_evaluate_load_and_predict(tmp_path):
    cfg = files_config(tmp_path, n_train=200)
    config = {
        "task": {"name": "tag", **{k: v for k, v in vars(cfg).items() if v is not None}},
        "model": {"name": "bilstm_tagger", "word_dim": 16, "char": "cnn", "char_dim": 8,
                  "char_filters": 8, "hidden": 16, "dropout": 0.0, "decoder": "crf"},
        "train": {"max_steps": 40, "valid_every": 40, "save_every": 40, "log_every": 40,
                  "precision": "fp32", "progress": False, "early_stop_metric": "f1",
                  "early_stop_mode": "max", "optim": {"name": "adam", "lr": 0.02},
                  "batch": {"max_tokens": 256}},
    }  # fmt: skip
    run = api.train(config, run_dir=tmp_path / "run", quiet=True)
    valid = run.metrics["valid"]
    for key in ("loss", "f1", "precision", "recall", "accuracy", "f1_PER", "f1_LOC", "f1_ORG"):
        assert key in valid
    assert valid["f1"] > 90.0  # the entity type is a word's identity here
    loaded = api.load(tmp_path / "run")
    assert set(loaded.inference_methods) == {"predict", "tag"}
    texts = ["John met Anna Smith in Paris today.", "", "Reuters said Siemens visited Rome"]
    out = loaded.task.predict(loaded.model, texts)
    json.dumps(out)
    assert [o["text"] for o in out] == texts
    for o in out:
        assert set(o) == {"text", "tokens", "tags", "entities"}
        assert len(o["tokens"]) == len(o["tags"])
        assert [(e["type"], e["start"], e["end"]) for e in o["entities"]] == entity_spans(o["tags"])
        for e in o["entities"]:
            assert set(e) == {"type", "start", "end", "text", "char_start", "char_end"}
            assert e["text"] == o["text"][e["char_start"] : e["char_end"]]
    assert out[1] == {"text": "", "tokens": [], "tags": [], "entities": []}
    assert out[0]["tags"][:4] == ["B-PER", "O", "B-PER", "I-PER"]
    assert {"type": "LOC", "text": "Paris"}.items() <= out[0]["entities"][2].items()
    assert loaded.tag([["Mary", "visited", "London"]]) == [["B-PER", "O", "B-LOC"]]
    test = loaded.evaluate("test")
    assert 0.0 <= test["f1"] <= 100.0
    # the vocabularies travel in the checkpoint: predict needs no data files
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").unlink()
    again = api.load(tmp_path / "run")
    assert again.predict(texts[:1]) == out[:1]
    with pytest.raises(DataError, match="file not found"):
        again.evaluate("valid")


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="train_path"):
        TaggingConfig(data="files")
    with pytest.raises(ValueError, match="unk_replace"):
        TaggingConfig(unk_replace=1.5)
    with pytest.raises(DataError, match="no data folder"):
        prepared(TaggingConfig())
    task = prepared(files_config(tmp_path))
    with pytest.raises(DataError, match="no split 'dev2'"):
        task.evaluate(Scripted(torch.zeros(len(task.words), len(task.tags))), "dev2")
    with pytest.raises(SeqlabError, match="list of sentences"):
        task.predict(nn.Linear(1, 1), "John met Mary")
    train = write_conll(tmp_path / "a.txt", [(["a"], ["B-PER"])])
    valid = write_conll(tmp_path / "b.txt", [(["b"], ["B-FOO"])])
    state = task.tokenizer_state()  # a vocabulary without FOO
    restored = prepared(TaggingConfig(data="files", train_path=train, valid_path=valid), state)
    with pytest.raises(DataError, match=r"b.txt:3: tag 'B-FOO' .* not in the training tag set"):
        restored.collate([0], "train")  # the files are read when first needed


def test_embeddings_path_initialises_words_only_when_training_starts(tmp_path):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("2 3\nParis 0.5 0.5 0.5\nrome -1 0 1\n", encoding="utf-8")
    cfg = files_config(tmp_path, embeddings_path=str(vectors))
    task = prepared(cfg)
    model = BiLSTMTagger(TaggerConfig(word_dim=3, char="none", hidden=4), **task.model_kwargs())
    words = task.words
    n_real = len(words) - 4
    assert model.coverage == pytest.approx(2 / n_real, abs=1e-12)  # Paris, Rome (via "rome")
    assert model.word_embed.weight[words.token_to_id("Paris")].tolist() == [0.5, 0.5, 0.5]
    assert model.word_embed.weight[words.token_to_id("Rome")].tolist() == [-1.0, 0.0, 1.0]
    assert (model.word_embed.weight[PAD_ID] == 0).all()
    vectors.unlink()  # a checkpoint's task never reads the vectors again
    restored = prepared(cfg, task.tokenizer_state())
    assert restored.model_kwargs()["word_init"] is None


def test_embeddings_vocab_extend_adds_the_vector_words_and_looks_them_up(tmp_path):
    vectors = tmp_path / "vectors.txt"
    rows = ["paris 1 1 1", "lisbon 2 2 2", "<num> 3 3 3", "<unk> 9 9 9", "rome -1 0 1"]
    vectors.write_text(f"{len(rows)} 3\n" + "\n".join(rows) + "\n", encoding="utf-8")
    plain = prepared(files_config(tmp_path, embeddings_path=str(vectors)))
    cfg = files_config(tmp_path, embeddings_path=str(vectors), embeddings_vocab="extend")
    task = prepared(cfg)
    # the train vocabulary keeps its ids; the file's new words follow, specials never added
    n_train = len(plain.words)
    assert task.words.tokens[:n_train] == plain.words.tokens
    assert task.words.tokens[n_train:] == ["paris", "lisbon", "<num>", "rome"]
    # a train word keeps its own id; an unseen word falls back to the file's spelling
    assert task.word_id("Paris") == plain.words.token_to_id("Paris") != UNK_ID
    assert task.word_id("Lisbon") == task.words.token_to_id("lisbon")
    assert task.word_id("LISBON") == task.words.token_to_id("lisbon")
    assert task.word_id("1,500") == task.words.token_to_id("<num>")
    assert task.word_id("Oslo") == UNK_ID and plain.word_id("Lisbon") == UNK_ID
    model = BiLSTMTagger(TaggerConfig(word_dim=3, char="none", hidden=4), **task.model_kwargs())
    assert model.word_embed.weight[task.word_id("Lisbon")].tolist() == [2.0, 2.0, 2.0]
    assert model.word_embed.weight[task.word_id("Paris")].tolist() == [1.0, 1.0, 1.0]
    # encoded sentences use the same lookup; the checkpoint's vocabulary suffices
    words, _, _ = task._encode([Sentence(("LISBON", "visited"), ("B-LOC", "O"), 1)], "valid")
    assert words == [[task.words.token_to_id("lisbon"), task.words.token_to_id("visited")]]
    vectors.unlink()
    restored = prepared(cfg, json.loads(json.dumps(task.tokenizer_state())))
    assert restored.words == task.words and restored.word_id("LISBON") == task.word_id("lisbon")
    with pytest.raises(ValueError, match="embeddings_vocab=extend needs task.embeddings_path"):
        files_config(tmp_path, embeddings_vocab="extend")
