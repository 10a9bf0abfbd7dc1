"""seqlab report on a temporary repository with hand-made records: the verdict rules
give the expected verdicts (reproduced / partly / not reproduced / not here), the page
parses and every <img> it shows exists, docs/claims.md lists every claim; the markdown
table parser reads the benchmarks' tables."""

import json
from html.parser import HTMLParser

import pytest

from seqlab.cli.main import main as cli
from seqlab.inspect import claim_rules_cost as cost
from seqlab.inspect.claim_rules import (
    attention_long_sentences,
    beam_vs_greedy,
    coverage_repetition,
    deep_plain_nets,
    pointer_generalisation,
    vanishing_gradients,
    word_order,
)
from seqlab.inspect.claims import Records
from seqlab.inspect.figures import figure, save_png
from seqlab.inspect.report import build_report
from seqlab.inspect.results_md import column, number, sections, tables

TRANSLATION = """# Results

## Translation (Multi30k de→en, test2016)

Command: `python benchmarks/translation.py --models convs2s`

| model | params | lc BLEU greedy | lc BLEU beam | met |
|---|---|---|---|---|
| ConvS2S (`convs2s`) | 7.31M | 35.5 | 36.9 | **no** |
| Cho GRU (`cho`) | 1.20M | {cho_greedy} | 15.0 | **no** |

## Gradient flow

Some text with `code` and a figure:

![gradient vs distance](figures/gradflow-time.png)
![missing one](figures/not-there.png)
"""


def _png(path):
    fig = figure(1, 1)
    fig.add_subplot(1, 1, 1).plot([0, 1])
    return save_png(fig, path)


def _write(root, name, record):
    (root / "docs" / "figures" / name).write_text(json.dumps(record), encoding="utf-8")


def _gradflow(lstm_acc=1.0, gru_acc=1.0, gru_keep=1e-4):
    def v(end, acc):
        return {"init": {"h": [1.0, 0.5, 0.3, end]}, "accuracy_trained": acc}

    return {
        "time": {
            "distance": 2,
            "variants": {
                "rnn": v(1e-9, 0.5),
                "lstm": v(1e-4, lstm_acc),
                "gru": v(gru_keep, gru_acc),
            },
        }
    }


@pytest.fixture
def repo(tmp_path):
    """A repository with results.md, figures and the cited test; no benchmark sidecars."""
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    (tmp_path / "tests" / "decode").mkdir(parents=True)
    (tmp_path / "tests" / "decode" / "test_beam.py").write_text(
        "def test_beam_one_equals_greedy():\n    pass\n"
    )
    md = TRANSLATION.replace("{cho_greedy}", "14.0")
    (tmp_path / "docs" / "results.md").write_text(md, encoding="utf-8")
    _png(tmp_path / "docs" / "figures" / "gradflow-time.png")
    _write(tmp_path, "gradflow.json", _gradflow())
    return tmp_path


def test_parser_reads_the_benchmark_tables():
    body = sections(TRANSLATION.replace("{cho_greedy}", "—"))[
        "Translation (Multi30k de→en, test2016)"
    ]
    (rows,) = tables(body)
    assert [column(r, "model") for r in rows] == ["ConvS2S (`convs2s`)", "Cho GRU (`cho`)"]
    assert number(column(rows[0], "lc BLEU beam")) == 36.9
    assert number(column(rows[1], "lc BLEU greedy")) is None
    assert number("7.31M") == 7.31e6 and number("1,725") == 1725 and number("**35.5**") == 35.5
    assert number("52.1×") == 52.1 and number("−0.5") == -0.5 and number("1.7e-09") == 1.7e-09
    assert tables("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n| 4 | 5 |") == [[{"a": "4", "b": "5"}]]


def test_verdicts_follow_the_rules(repo):
    rec = Records(repo)
    assert vanishing_gradients(rec).verdict == "reproduced"
    _write(repo, "gradflow.json", _gradflow(gru_acc=0.5))  # GRU keeps gradient, never learns
    assert vanishing_gradients(Records(repo)).verdict == "partly"
    _write(repo, "gradflow.json", _gradflow(gru_keep=1e-9, lstm_acc=0.5))
    assert vanishing_gradients(Records(repo)).verdict == "partly"  # LSTM keeps 1e5×
    b = beam_vs_greedy(rec)
    assert b.verdict == "reproduced" and "2 of 2" in b.why
    assert {s.path for s in b.sources} >= {"tests/decode/test_beam.py"}
    md = TRANSLATION.replace("{cho_greedy}", "16.0")  # greedy beats beam for Cho
    (repo / "docs" / "results.md").write_text(md, encoding="utf-8")
    assert beam_vs_greedy(Records(repo)).verdict == "partly"
    (repo / "tests" / "decode" / "test_beam.py").write_text("")
    assert beam_vs_greedy(Records(repo)).verdict == "not reproduced"
    for rule in (
        attention_long_sentences,
        deep_plain_nets,
        word_order,
        coverage_repetition,
        pointer_generalisation,
        cost.transformer_cost,
        cost.sinusoidal_offsets,
        cost.dot_vs_additive,
    ):
        c = rule(rec)
        assert c.verdict == "not here" and "run `" in c.why, c.key


def test_benchmark_sidecar_rules(repo):
    _write(repo, "bleu-by-length.json", {"gaps": [1.0, 2.0, 5.0]})
    _write(
        repo,
        "pointer-generator.json",
        {
            "rows": [
                {"variant": "plain", "metrics": {"repeat_trigram": 4.0}},
                {"variant": "coverage", "metrics": {"repeat_trigram": 3.9}},
            ]
        },
    )
    nets = {"plain20": 0.10, "plain56": 0.20, "resnet20": 0.09, "resnet56": 0.08}
    _write(
        repo,
        "vision-depth.json",
        {"step": 500, "nets": {k: {"train_loss_at_step": v} for k, v in nets.items()}},
    )
    contrast = [{"text": "not good.", "label": "neg"}, {"text": "fine.", "label": "pos"}]
    _write(
        repo,
        "sentiment-mr.json",
        {
            "contrast": contrast,
            "models": [
                {"model": "avg", "accuracy": [70, 71], "contrast_right": [0, 2]},
                {"model": "lstm", "accuracy": [72, 73], "contrast_right": [2, 2]},
            ],
        },
    )
    test = {"exact_n10": 0.8, "coverage_n10": 0.99, "exact_n50": 0.1, "coverage_n50": 0.9}
    worse = {"exact_n10": 0.7, "coverage_n10": 0.98, "exact_n50": 0.0, "coverage_n50": 0.95}
    _write(
        repo,
        "pointers.json",
        {
            "results": [
                {"preset": "hull10", "train_n": "10", "test_n": [10, 50], "test": test},
                {"preset": "hull-baseline", "train_n": "10", "test_n": [10, 50], "test": worse},
            ]
        },
    )
    _write(
        repo,
        "positional-offset.json",
        {
            "offsets": [
                {"k": 1, "max_error_float64": 1e-14, "dot_spread_over_pos": 1e-14},
                {"k": 2, "max_error_float64": 1e-3, "dot_spread_over_pos": 1e-14},
            ]
        },
    )
    _write(
        repo,
        "attention-speed.json",
        {"D": 8, "rows": [{"S": 4, "ratio_forward": 2.0, "ratio_forward_backward": 3.0}]},
    )
    rec = Records(repo)
    assert attention_long_sentences(rec).verdict == "reproduced"
    assert coverage_repetition(rec).verdict == "partly"  # 4.0 → 3.9 is < 10 % less
    assert deep_plain_nets(rec).verdict == "reproduced"
    assert word_order(rec).verdict == "reproduced" and "not good." in word_order(rec).why
    assert pointer_generalisation(rec).verdict == "partly"  # n = 50: exact up, coverage down
    assert cost.sinusoidal_offsets(rec).verdict == "partly"
    assert cost.dot_vs_additive(rec).verdict == "reproduced"
    _write(repo, "bleu-by-length.json", {"gaps": [3.0, 2.0, -1.0]})
    assert attention_long_sentences(Records(repo)).verdict == "not reproduced"
    rows = [  # with the equal-budget control plain+, coverage is compared with it
        {"variant": "plain", "metrics": {"repeat_trigram": 4.0}},
        {"variant": "plain+", "metrics": {"repeat_trigram": 3.0}},
        {"variant": "coverage", "metrics": {"repeat_trigram": 2.0}},
    ]
    _write(repo, "pointer-generator.json", {"rows": rows})
    assert coverage_repetition(Records(repo)).verdict == "reproduced"
    assert "3.00 % without coverage" in coverage_repetition(Records(repo)).why
    rows[1]["metrics"]["repeat_trigram"] = 1.5  # training on did more than coverage
    _write(repo, "pointer-generator.json", {"rows": rows})
    assert coverage_repetition(Records(repo)).verdict == "not reproduced"


def test_transformer_cost_needs_a_gpu_record_for_the_training_half(repo):
    def point(family, train, decode, peak):
        return {
            "family": family,
            "axis": "t",
            "t": 512,
            "train_s": train,
            "decode_s": decode,
            "peak_bytes": peak,
        }

    def fits(a, b):
        return {
            "rnn": {"state_bytes": {"t": {"exponent": a}}},
            "transformer": {"state_bytes": {"t": {"exponent": b}}},
        }

    cpu = [point("rnn", 0.04, 0.1, None), point("transformer", 0.9, 0.9, None)]
    _write(repo, "complexity.json", {"points": cpu, "fits": fits(0.0, 1.0)})
    c = cost.transformer_cost(Records(repo))
    assert c.verdict == "partly" and "not measurable" in c.why
    gpu = [point("rnn", 0.04, 0.1, 1), point("transformer", 0.01, 0.9, 1)]
    _write(repo, "complexity.json", {"points": gpu, "fits": fits(0.0, 1.0)})
    assert cost.transformer_cost(Records(repo)).verdict == "reproduced"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        if "id" in a:
            self.ids.add(a["id"])


def test_report_page_and_claims_md(repo, tmp_path, capsys):
    out = tmp_path / "site"
    code = cli(["report", "--root", str(repo), "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "reproduced" in printed and "not here" in printed
    page = _Page()
    page.feed((out / "index.html").read_text(encoding="utf-8"))
    page.close()
    assert page.imgs and all((out / src).is_file() for src in page.imgs)
    assert all(not src.startswith(("/", "..")) for src in page.imgs)  # self-contained
    assert "figures/gradflow-time.png" in page.imgs
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "figures/not-there.png is missing" in html
    claims = (repo / "docs" / "claims.md").read_text(encoding="utf-8")
    info = build_report(repo, out)
    assert len(info["claims"]) == 10 and {c.key for c in info["claims"]} <= page.ids
    for c in info["claims"]:
        assert f"| [{c.statement}](#{c.key}) | **{c.verdict}** |" in claims
        assert "Rule: " in claims
    assert "`pytest tests/decode/test_beam.py -k test_beam_one_equals_greedy`" in claims


def test_report_outside_a_repository_is_a_user_error(tmp_path, capsys):
    assert cli(["report", "--root", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "docs is missing" in capsys.readouterr().err


def test_the_vision_sidecar_feeds_the_depth_rule(repo):
    from benchmarks import vision as bench

    losses = {"plain20": 0.5, "plain56": 0.9, "resnet20": 0.4, "resnet56": 0.3}
    curves = {  # test errors in the same order as the losses
        n: bench.Curve(n, steps=[10, 20], train_loss=[1.0, v], eval_steps=[20], test_error=[v / 10])
        for n, v in losses.items()
    }
    path = repo / "docs" / "figures" / "vision-depth.json"
    bench.write_depth_json((curves, 100, repo / "depth.png"), "python benchmarks/vision.py", path)
    c = deep_plain_nets(Records(repo))
    assert c.verdict == "reproduced" and "plain-56 0.9500 / 9.00 %" in c.why
    assert any(s.command == "python benchmarks/vision.py" for s in c.sources)
