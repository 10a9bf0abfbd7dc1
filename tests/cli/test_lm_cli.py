"""`seqlab generate` and `seqlab score` on a tiny character model trained here: seeded
output repeats, score's total is the sum of its rows, user errors give one line + exit 2."""

import json
import math

import pytest
import torch

from seqlab import api
from seqlab.cli.main import main

TEXT = "\n".join(["to be or not to be", "that is the question", "the rest is silence"] * 40)


def char_gru_config(corpus, steps: int = 20, seed: int = 0, batch: int = 4, bptt: int = 16):
    """A character GRU LM (16 units) on ``corpus``: ``steps`` updates of Adam 1e-2."""
    return {
        "task": {"name": "lm", "data": "text", "path": str(corpus), "level": "char",
                 "batch_size": batch, "bptt": bptt, "eval_batch_size": 2},
        "model": {"name": "rnn_lm", "cell": "gru", "emb_dim": 16, "hidden": 16, "layers": 1,
                  "dropout": 0.0},
        "train": {"max_steps": steps, "precision": "fp32", "threads": 1, "progress": False,
                  "seed": seed, "valid_every": steps, "save_every": steps,
                  "optim": {"name": "adam", "lr": 1e-2}},
    }  # fmt: skip


def train_char_grus(root, seeds=(0,)) -> list:
    """``root/run<seed>`` for each seed: ``char_gru_config`` on TEXT (``root/corpus.txt``)."""
    n = torch.get_num_threads()
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT + "\n", encoding="utf-8")
    for seed in seeds:
        api.train(char_gru_config(corpus, seed=seed), run_dir=root / f"run{seed}", quiet=True)
    torch.set_num_threads(n)
    return [root / f"run{seed}" for seed in seeds]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_cli")
    (run,) = train_char_grus(root)
    (root / "corpus.txt").unlink()  # generate / score need only the checkpoint
    return run


def _main(capsys, *argv):
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_with_a_seed_repeats_and_starts_with_the_prompt(run_dir, capsys):
    args = ("generate", run_dir, "--prompt", "to be", "--max-tokens", 30, "--seed", 7)
    code, first, _ = _main(capsys, *args)
    assert code == 0 and first.startswith("to be")
    assert len(first) == len("to be") + 30 + 1  # 30 characters and the final newline
    assert _main(capsys, *args)[1] == first
    other = _main(capsys, *args[:-1], 8)[1]
    assert other != first
    code, greedy, _ = _main(capsys, "generate", run_dir, "--temperature", 0, "--top-k", 3)
    assert code == 0 and len(greedy) == 200 + 1


def test_score_prints_log_p_equal_to_the_sum_of_its_tokens(run_dir, capsys):
    code, out, _ = _main(capsys, "score", run_dir, "to be", "--json")
    assert code == 0
    record = json.loads(out)
    assert [t["token"] for t in record["tokens"]] == list("to be")
    total = sum(t["log_p"] for t in record["tokens"])
    assert record["log_prob"] == pytest.approx(total, abs=1e-9)
    assert record["log10_prob"] == pytest.approx(total / math.log(10), abs=1e-9)
    code, text, _ = _main(capsys, "score", run_dir, "to be")
    lines = text.splitlines()
    assert code == 0 and lines[0].startswith(f"log P = {record['log_prob']:.4f}")
    rows = lines[2:]
    assert len(rows) == 5 and rows[2].split()[1] == "␣"  # the space, shown by name
    assert sum(float(r.split()[-1]) for r in rows) == pytest.approx(record["log_prob"], abs=5e-4)


def test_generate_and_score_in_a_precision_equal_the_api_inside_its_context(
    run_dir, capsys, monkeypatch
):
    from seqlab.decode.precision import decoding_context
    from seqlab.nn import packed_linear as pl

    products = []
    real = pl.int8_product
    monkeypatch.setattr(pl, "int8_product", lambda *a: products.append(1) or real(*a))
    loaded = api.load(run_dir)
    for precision in ("int8", "bf16"):
        args = ("--max-tokens", 40, "--seed", 3, "--temperature", 0.7, "--precision", precision)
        code, out, _ = _main(capsys, "generate", run_dir, "--prompt", "to be", *args)
        with decoding_context(precision, "cpu"):
            text = loaded.generate("to be", max_tokens=40, temperature=0.7, seed=3)
        assert code == 0 and out == "to be" + text + "\n"
        if precision == "int8":  # every sampling step's output layer ran in int8, twice
            assert len(products) == 2 * 40
    code, out, _ = _main(capsys, "score", run_dir, "to be", "--json", "--precision", "bf16")
    with decoding_context("bf16", "cpu"):
        expected = loaded.score("to be").log_prob
    assert code == 0 and json.loads(out)["log_prob"] == expected
    with pytest.raises(SystemExit) as exit_:  # argparse's own exit: scoring runs no search
        _main(capsys, "score", run_dir, "to be", "--precision", "int8")
    assert exit_.value.code == 2 and "invalid choice: 'int8'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (("generate", "{missing}"), "no such run directory or checkpoint"),
        (("score", "{missing}", "to be"), "no such run directory or checkpoint"),
        (("generate", "{run}", "--prompt", ""), "the prompt is empty"),
        (("generate", "{run}", "--prompt", "zebra"), "never saw: 'z'"),
        (("score", "{run}", "zoo"), "the text has characters the model never saw: 'z'"),
        (("generate", "{run}", "--top-p", "0"), "top_p must be in (0, 1]"),
    ],
)
def test_user_errors_give_one_line_and_exit_2(run_dir, tmp_path, capsys, argv, message):
    argv = [a.format(run=run_dir, missing=tmp_path / "nope") for a in argv]
    code, out, err = _main(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seqlab: error: ")
    assert message in lines[0]
