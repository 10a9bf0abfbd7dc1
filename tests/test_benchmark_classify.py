"""benchmarks/classify.py's bookkeeping (no training): separate invocations build up one
table from the sidecar JSON, and only when the earlier rows compare (same split, contrast)."""

import argparse
import dataclasses
import json

from benchmarks import classify as bench
from benchmarks.classify_report import pool_weights_line
from seqlab.data.mr import ContrastItem

CONTRAST = [ContrastItem(text="not bad at all", label=1, phenomenon="negation", line=2)]


def result(model, accuracy, command=""):
    n = len(accuracy)
    return bench.Result(
        model, 1000, accuracy, [3.0] * n, [500] * n, contrast_right=[1], command=command
    )


def sidecar(path, models, n_folds=10, contrast=CONTRAST, command="python earlier"):
    data = {
        "command": command,
        "n_folds": n_folds,
        "recurrent": list(bench.RECURRENT),
        "contrast": [dataclasses.asdict(c) for c in contrast],
        "models": [dataclasses.asdict(result(m, [70.0 + i, 72.0])) for i, m in enumerate(models)],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_models_not_run_now_keep_their_earlier_rows(tmp_path):
    path = sidecar(tmp_path / "s.json", ["avg", "kim-cnn"])
    kept = bench.earlier_results(path, ["lstm", "kim-cnn"], 10, CONTRAST)
    assert [r.model for r in kept] == ["avg"]  # kim-cnn is run again: its old row goes
    assert kept[0].accuracy == [70.0, 72.0] and kept[0].command == "python earlier"


def test_earlier_rows_of_another_split_or_contrast_set_are_dropped(tmp_path):
    path = sidecar(tmp_path / "s.json", ["avg"], n_folds=5)
    assert bench.earlier_results(path, ["lstm"], 10, CONTRAST) == []
    other = [ContrastItem(text="good", label=1, phenomenon="plain", line=2)]
    path = sidecar(tmp_path / "t.json", ["avg"])
    assert bench.earlier_results(path, ["lstm"], 10, other) == []
    assert bench.earlier_results(tmp_path / "missing.json", ["lstm"], 10, CONTRAST) == []


def test_section_names_the_command_of_every_row(tmp_path):
    path = sidecar(tmp_path / "s.json", ["avg"])
    now = result("lstm", [75.0, 77.0], command="python now")
    rows = bench.earlier_results(path, ["lstm"], 10, CONTRAST) + [now]
    args = argparse.Namespace(minutes_per_fold=3.0, n_folds=10, contrast="c.tsv", models=["lstm"])
    text = bench.render_section(rows, CONTRAST, "python now", args)
    assert "Command (`avg`): `python earlier`" in text
    assert "Command (`lstm`): `python now`" in text
    assert "Best: `lstm` 76.0 %" in text
    assert "3 min of training per fold" in text
    args.models = []  # an ensemble-only command trains nothing and must not claim a budget
    text = bench.render_section(rows, CONTRAST, "python now", args)
    assert "This command trains nothing" in text and "min of training per fold" not in text


def _mr_folder(tmp_path):
    folder = tmp_path / "mr_polarity"
    folder.mkdir()
    words = ["good fun", "a joy", "truly great", "bad dull", "awful slow", "a bore"]
    pos = b"".join(b"%s %d \n" % (words[i % 3].encode(), i) for i in range(30))
    neg = b"".join(b"%s %d \n" % (words[3 + i % 3].encode(), i) for i in range(30))
    (folder / "rt-polarity.pos").write_bytes(pos)
    (folder / "rt-polarity.neg").write_bytes(neg)
    return tmp_path


def _train_fold(runs, data_dir, name, fold, seed):
    from seqlab import api

    overrides = [
        f"task.fold={fold}",
        "task.n_folds=3",
        f"train.seed={seed}",
        "train.max_steps=3",
        "train.max_epochs=1",
        "train.threads=1",
        "model.d_embed=8",
        "model.dropout=0.0",
    ]
    api.train(
        bench.ROOT / "configs" / "mr-avg.yaml",
        run_dir=runs / f"bench-mr-{name}" / f"fold-{fold}",
        data_dir=data_dir,
        overrides=overrides,
        quiet=True,
    )


def _two_members(tmp_path):
    """Members "a" and "b", folds 0 and 1 of a 3-fold split, with their earlier results."""
    data_dir, runs = _mr_folder(tmp_path), tmp_path / "runs"
    for fold in range(2):
        _train_fold(runs, data_dir, "a", fold, seed=0)
        _train_fold(runs, data_dir, "b", fold, seed=1)
    known = {"a": result("a", [70.0, 72.0]), "b": result("b", [71.0, 73.0])}
    return data_dir, runs, known


def test_the_ensemble_averages_the_fold_models_probabilities(tmp_path):
    import torch

    from seqlab import api

    data_dir, runs, known = _two_members(tmp_path)
    ens = bench.ensemble(["a", "b"], 2, runs, str(data_dir), CONTRAST, known, "cmd")
    for fold in range(2):
        probs, gold = 0, None
        for name in ("a", "b"):
            m = api.load(runs / f"bench-mr-{name}" / f"fold-{fold}", data_dir=data_dir)
            logits, gold = m.task.split_logits(m.model, "test")
            probs = probs + logits.softmax(-1)
        want = 100.0 * float((probs.argmax(-1) == gold).float().mean())
        assert ens.accuracy[fold] == want
    assert ens.minutes == [6.0, 6.0] and ens.updates == [1000, 1000]
    assert ens.members == ["a", "b"] and len(ens.contrast_right) == 1
    same = bench.ensemble(["a", "a"], 2, runs, str(data_dir), [], known, "cmd")
    alone = [
        100.0
        * api.load(runs / "bench-mr-a" / f"fold-{k}", data_dir=data_dir).evaluate("test")[
            "accuracy"
        ]
        for k in range(2)
    ]
    assert torch.allclose(torch.tensor(same.accuracy), torch.tensor(alone))
    assert "ensemble, mean probability of `a` + `b`" in bench.accuracy_table([ens], 2)


def test_the_stacked_pool_is_fitted_on_valid_and_scored_on_test(tmp_path):
    import torch

    from seqlab import api
    from seqlab.eval.ensemble import fit_log_linear_pool

    data_dir, runs, known = _two_members(tmp_path)
    ens = bench.ensemble(["a", "b"], 2, runs, str(data_dir), CONTRAST, known, "cmd", "stacked")
    assert ens.model == "stacked" and ens.pool == "stacked" and len(ens.weights) == 2
    for fold in range(2):
        lp = {"valid": [], "test": []}
        for name in ("a", "b"):
            m = api.load(runs / f"bench-mr-{name}" / f"fold-{fold}", data_dir=data_dir)
            for split in lp:
                logits, y = m.task.split_logits(m.model, split)
                lp[split].append((logits.double().log_softmax(-1), y))
        pool = fit_log_linear_pool(torch.stack([v for v, _ in lp["valid"]]), lp["valid"][0][1])
        assert ens.weights[fold] == [round(float(w), 4) for w in pool.weights]
        s = pool.logits(torch.stack([t for t, _ in lp["test"]]))
        gold = lp["test"][0][1]
        assert ens.accuracy[fold] == 100.0 * float((s.argmax(-1) == gold).float().mean())
    label = "ensemble, stacked log-linear pool of `a` + `b`"
    assert label in bench.accuracy_table([ens], 2)
    assert "`a` " in pool_weights_line(ens) and "`b` " in pool_weights_line(ens)


def test_lstm_lm_pretrains_on_unlabelled_text_then_starts_every_fold_from_it(tmp_path):
    import gzip

    from seqlab import api

    data_dir = _mr_folder(tmp_path)
    (data_dir / "ptb").mkdir()
    with gzip.open(data_dir / "ptb" / "ptb.train.txt.gz", "wt", encoding="utf-8") as f:
        f.write(" the fun film \n a dull bore \n" * 400)
    args = argparse.Namespace(
        data_dir=str(data_dir),
        lm_sources="ptb,mr",
        runs_dir=str(tmp_path / "runs"),
        lm_minutes=0.02,
        verbose=False,
    )
    lm_run, line = bench.pretrain_lm(args)
    assert "ptb+mr" in line and "transductive" in line
    text = (tmp_path / "runs" / "mr-lm-corpus.txt").read_text(encoding="utf-8").splitlines()
    assert len(text) == 800 + 60 and "the fun film" in text
    lm = api.load(lm_run, data_dir=data_dir)
    fold = bench.Result("lstm-lm")
    overrides = [f"task.init_lm={lm_run}", "task.n_folds=3", "train.max_steps=1"]
    bench.run_fold("lstm-lm", 0, 0.1, overrides, str(data_dir), tmp_path / "runs", [], fold, False)
    clf = api.load(tmp_path / "runs" / "bench-mr-lstm-lm" / "fold-0", data_dir=data_dir)
    word = clf.task.vocab.token_to_id("fun")
    lm_word = lm.task.tokenizer.vocab.token_to_id("fun")
    # one Adam update (lr 1e-3) away from the LM's vector; a random start is ~0.1 away
    diff = clf.model.embed.weight[word] - lm.model.embed.weight[lm_word]
    assert float(diff.detach().abs().max()) <= 1.01e-3
    assert len(fold.accuracy) == 1


def test_the_table_shows_the_kept_checkpoints_validation_accuracy():
    now = result("lstm", [75.0, 77.0])
    now.valid_accuracy = [78.0, 79.0]
    old = result("avg", [70.0, 72.0])  # an earlier row that did not record it
    rows = bench.accuracy_table([now, old], 2).splitlines()
    assert "| valid acc % |" in rows[0]
    assert "| 75.0 – 77.0 | 78.5 |" in rows[2]
    assert "| 70.0 – 72.0 | — |" in rows[3]


def test_refit_trains_on_train_and_valid_for_the_chosen_epochs(tmp_path):
    from seqlab import api

    data_dir, runs = _mr_folder(tmp_path), tmp_path / "runs"
    _train_fold(runs, data_dir, "avg", 1, seed=0)  # the selection run
    selected = api.load(runs / "bench-mr-avg" / "fold-1", data_dir=data_dir)
    n_train = len(selected.task.splits["train"].ids)
    n_valid = len(selected.task.splits["valid"].ids)
    small = ["task.n_folds=3", "train.threads=1", "model.d_embed=8", "model.dropout=0.0"]
    refit = bench.Result("avg-refit")
    bench.refit_fold("avg", 1, 1.0, small, str(data_dir), runs, CONTRAST, refit, False)
    again = api.load(runs / "bench-mr-avg" / "fold-1-refit", data_dir=data_dir, prefer="latest")
    assert again.config.task_cfg.refit
    assert again.step == round(selected.step * (n_train + n_valid) / n_train)
    assert refit.updates == [again.step]
    train = again.task.splits["train"].texts
    assert sorted(train) == sorted(
        selected.task.splits["train"].texts + selected.task.splits["valid"].texts
    )
    assert again.task.splits["test"].texts == selected.task.splits["test"].texts  # unseen
    assert refit.accuracy == [100.0 * again.evaluate("test")["accuracy"]]
    assert len(refit.contrast_right) == 1
    assert "averaged embeddings, refit on train + valid" in bench.accuracy_table([refit], 1)


def test_the_refit_stack_fits_on_the_held_out_runs_and_scores_the_refit_runs(tmp_path):
    import torch

    from seqlab import api
    from seqlab.eval.ensemble import fit_log_linear_pool

    data_dir, runs, known = _two_members(tmp_path)
    small = ["task.n_folds=3", "train.threads=1", "model.d_embed=8", "model.dropout=0.0"]
    for name in ("a", "b"):
        for fold in range(2):  # the refit runs of members "a" and "b" (preset mr-avg)
            selected = api.load(runs / f"bench-mr-{name}" / f"fold-{fold}", data_dir=data_dir)
            overrides = [*small, "task.refit=true", f"train.max_steps={selected.step + 2}"]
            api.train(
                bench.ROOT / "configs" / "mr-avg.yaml",
                run_dir=runs / f"bench-mr-{name}" / f"fold-{fold}-refit",
                data_dir=data_dir,
                overrides=[f"task.fold={fold}", *overrides, "train.patience=null"],
                quiet=True,
            )
    stacked = bench.ensemble(["a", "b"], 2, runs, str(data_dir), [], known, "c", "stacked")
    ens = bench.ensemble(["a", "b"], 2, runs, str(data_dir), [], known, "c", "stacked", True)
    assert ens.model == "stacked-refit" and ens.weights == stacked.weights  # same pool fit
    for fold in range(2):
        valid, test = [], []
        for name in ("a", "b"):
            held = api.load(runs / f"bench-mr-{name}" / f"fold-{fold}", data_dir=data_dir)
            refit = api.load(
                runs / f"bench-mr-{name}" / f"fold-{fold}-refit", data_dir=data_dir, prefer="latest"
            )
            assert refit.config.task_cfg.refit and not held.config.task_cfg.refit
            logits, y = held.task.split_logits(held.model, "valid")
            valid.append((logits.double().log_softmax(-1), y))
            logits, gold = refit.task.split_logits(refit.model, "test")
            test.append(logits.double().log_softmax(-1))
        pool = fit_log_linear_pool(torch.stack([v for v, _ in valid]), valid[0][1])
        s = pool.logits(torch.stack(test))
        assert ens.accuracy[fold] == 100.0 * float((s.argmax(-1) == gold).float().mean())
    assert "(refit runs)" in bench.accuracy_table([ens], 2)
