"""benchmarks/ner.py: the section says which word embeddings the command used; ``--jobs 2``
trains the two presets in parallel processes (tiny generated CoNLL files, a few updates)."""

from benchmarks import ner as bench


def test_the_section_names_the_embeddings_the_command_set():
    plain = "python benchmarks/ner.py --minutes 10 train.threads=1"
    assert bench.embeddings_note(plain) == "Random word embeddings (no external vectors)."
    vecs = f"{plain} task.embeddings_path=runs/embeddings/sgns.txt"
    assert "`runs/embeddings/sgns.txt`" in bench.embeddings_note(vecs)
    assert "Random" not in bench.embeddings_note(vecs)
    assert "vocabulary" not in bench.embeddings_note(vecs)
    assert "join the vocabulary" in bench.embeddings_note(f"{vecs} task.embeddings_vocab=extend")


def test_jobs_2_trains_both_models_in_processes_and_writes_the_crf_gain(tmp_path):
    from tests.tasks.test_tagging_task import sentences, write_conll

    paths = {s: write_conll(tmp_path / f"{s}.txt", sentences(60, i)) for i, s in
             enumerate(("train", "valid", "test"))}  # fmt: skip
    out = tmp_path / "results.md"
    out.write_text("# Results\n\n## Other\n\nkept\n", encoding="utf-8")
    rows = bench.main(
        ["--jobs", "2", "--minutes", "1", "--out", str(out), "--runs-dir", str(tmp_path),
         "task.data=files", *(f"task.{s}_path={p}" for s, p in paths.items()),
         "train.max_steps=3", "train.threads=1", "train.progress=false",
         "bilstm:train.max_steps=2"]
    )  # fmt: skip
    assert [(r.model, r.updates) for r in rows] == [("bilstm", 2), ("bilstm-crf", 3)]
    text = out.read_text(encoding="utf-8")
    assert "## Other\n\nkept" in text and text.count(bench.HEADING) == 1
    assert "CRF gain (BiLSTM-CRF − BiLSTM, entity F1)" in text
    for model in ("bilstm", "bilstm-crf"):
        assert (tmp_path / f"bench-conll-{model}" / "metrics.jsonl").is_file()
