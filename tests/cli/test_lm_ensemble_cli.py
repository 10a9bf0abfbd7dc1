"""Language-model ensembles from the command line: ``seqlab generate / score / evaluate RUN
--ensemble RUN2``. A run pooled with itself samples, scores and evaluates as the run; two
runs of other seeds evaluate to a loss no higher than their mean (Jensen), and a run of
another task is refused in one line."""

import json

import pytest

from seqlab import api
from seqlab.cli.main import main
from tests.cli.test_lm_cli import char_gru_config, train_char_grus


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two character GRU LMs of seeds 0 and 1 on one corpus (kept: evaluate reads it)."""
    return train_char_grus(tmp_path_factory.mktemp("lm_pool"), seeds=(0, 1))


def _out(capsys, *argv):
    assert main([*map(str, argv)]) == 0
    return capsys.readouterr().out


def test_a_run_pooled_with_itself_generates_and_scores_as_the_run(runs, capsys):
    run = runs[0]
    for flags in (["--temperature", "0"], ["--seed", "3", "--top-k", "5"]):
        alone = _out(capsys, "generate", run, "--prompt", "to be", "--max-tokens", 30, *flags)
        pooled = _out(capsys, "generate", run, "--ensemble", run, "--prompt", "to be",
                      "--max-tokens", 30, *flags)  # fmt: skip
        assert pooled == alone
    alone = json.loads(_out(capsys, "score", run, "that is the question", "--json"))
    pooled = json.loads(
        _out(capsys, "score", run, "--ensemble", run, "that is the question", "--json")
    )
    assert pooled["log_prob"] == pytest.approx(alone["log_prob"], abs=1e-4)


def test_two_seeds_evaluate_no_worse_than_their_mean(runs, capsys):
    def loss(*paths):
        extra = [a for p in paths[1:] for a in ("--ensemble", p)]
        text = _out(capsys, "evaluate", paths[0], *extra, "--json")
        return json.loads(text.splitlines()[-1])["loss"]

    members = [loss(r) for r in runs]
    assert members[0] != members[1]
    assert loss(runs[0], runs[0]) == pytest.approx(members[0], abs=1e-5)
    assert loss(*runs) <= sum(members) / 2 + 1e-6


def test_a_run_with_another_vocabulary_is_refused_in_one_line(runs, capsys, tmp_path):
    corpus = tmp_path / "digits.txt"
    corpus.write_text("0123456789\n" * 50, encoding="utf-8")
    cfg = char_gru_config(corpus, steps=2, batch=2, bptt=8)
    api.train(cfg, run_dir=tmp_path / "digits", quiet=True)
    assert main(["generate", str(runs[0]), "--ensemble", str(tmp_path / "digits")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vocabularies differ" in err[0] and "digits" in err[0]


def test_an_lstm_lm_and_a_transformer_lm_pool_across_types(runs, capsys):
    """Language models keep their own states in the pool, so two architectures pool
    (seq2seq pools need one model type)."""
    root = runs[0].parent
    cfg = char_gru_config(root / "corpus.txt")
    cfg["model"] = {"name": "transformer_lm", "d_model": 16, "n_heads": 2, "d_ff": 32,
                    "layers": 1, "context": 32, "dropout": 0.0}  # fmt: skip
    api.train(cfg, run_dir=root / "tlm", quiet=True)

    def loss(*argv):
        return json.loads(_out(capsys, "evaluate", *argv, "--json").splitlines()[-1])["loss"]

    members = [loss(runs[0]), loss(root / "tlm")]
    pooled = loss(runs[0], "--ensemble", root / "tlm")
    assert pooled <= sum(members) / 2 + 1e-6 and pooled not in members
    text = _out(capsys, "generate", runs[0], "--ensemble", root / "tlm", "--max-tokens", 20)
    assert len(text.strip()) > 0


def test_explaining_a_pool_is_refused_with_what_to_do(runs):
    from seqlab.errors import SeqlabError

    pool = api.load_ensemble([runs[0], runs[1]])
    with pytest.raises(SeqlabError, match="no single pointer gate .* explain one run"):
        pool.explain("to be")
