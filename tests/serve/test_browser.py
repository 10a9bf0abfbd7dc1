"""The page in a real browser: Playwright drives Debian's chromium (headless) against a
uvicorn server on loopback, translates a sentence and checks that the n-best list and the
attention heatmap appear and answer hover; a screenshot is saved in the test's tmp dir.

``playwright install`` is never run (it downloads browsers); chromium comes from apt,
installed here when missing (CI runs as root on a fresh machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from seqlab.serve import Limits, create_app

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def _install_chromium() -> str | None:
    """None when /usr/bin/chromium is there (installed now if needed), else why not."""
    if CHROMIUM.exists():
        return None
    if shutil.which("apt-get") is None:
        return "no /usr/bin/chromium and no apt-get to install it"
    steps = [["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=APT_ENV)
        if done.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-300:]}"
    return None if CHROMIUM.exists() else "apt installed chromium but /usr/bin/chromium is missing"


@pytest.fixture(scope="module")
def browser():
    why = _install_chromium()
    if why is not None:
        if os.environ.get("SEQLAB_REQUIRE_BROWSER"):  # set by .ci/run: CI must run it
            pytest.fail(f"SEQLAB_REQUIRE_BROWSER is set but {why}")
        pytest.skip(f"cannot run the browser test: {why}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@contextlib.contextmanager
def live(loaded):
    """``http://127.0.0.1:<free port>`` serving ``loaded`` with uvicorn in a thread."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app(loaded, Limits()), host="127.0.0.1", port=port,
                            log_level="warning")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):  # wait for startup, bounded (a polling loop, not a timing assertion)
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def page(browser):
    """A fresh page; JavaScript errors on it fail the test."""
    p = browser.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    yield p
    p.close()
    assert errors == []


@pytest.fixture
def live_server(translation_model):
    with live(translation_model) as url:
        yield url


def test_page_translates_and_draws_the_heatmap(page, live_server, translation_model, tmp_path):
    sentence = "der hund läuft."
    (expected,) = translation_model.translate_detailed(
        [sentence], beam=2, nbest=2, return_attention=True
    )
    page.goto(live_server + "/")
    page.wait_for_selector("#translate-panel:not([hidden])")
    assert "transformer" in page.inner_text("#model-name")
    page.fill("#src", sentence)
    page.fill("#beam", "2")
    page.fill("#nbest", "2")
    page.click("#translate-btn")
    page.wait_for_selector("#heatmap td")
    hyps = page.locator("#nbest-list .hyp").all_inner_texts()
    assert hyps == [h.text for h in expected.hypotheses]
    scores = page.locator("#nbest-list .score").all_inner_texts()
    assert scores[0].startswith(f"score {expected.hypotheses[0].score:.3f}")
    # cross attention, layer 1, mean of heads: target pieces × source pieces
    assert page.input_value("#att-name") == "cross"
    assert page.locator("#att-head option").count() == 1 + 4  # mean + four heads
    rows = page.locator("#heatmap tbody tr").count()
    cols = page.locator("#heatmap thead th").count() - 1
    assert (rows, cols) == (len(expected.target_pieces), len(expected.source_pieces))
    heads = expected.attention["cross"][0]  # (H, T, S)
    cell = page.locator("#heatmap tbody tr").nth(0).locator("td").nth(0)
    assert float(cell.get_attribute("data-weight")) == pytest.approx(
        float(heads.mean(0)[0, 0]), abs=1e-3
    )
    cell.hover()
    hover = page.inner_text("#att-hover")
    assert hover.startswith(f"{expected.target_pieces[0]} ← {expected.source_pieces[0]}: ")
    page.select_option("#att-head", "2")  # head 3 alone
    weight = (
        page.locator("#heatmap tbody tr").nth(0).locator("td").nth(0).get_attribute("data-weight")
    )
    assert float(weight) == pytest.approx(float(heads[2, 0, 0]), abs=1e-3)
    page.select_option("#att-name", "encoder_self")  # source × source
    assert page.locator("#heatmap tbody tr").count() == len(expected.source_pieces)
    shot = tmp_path / "translate.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a bad request shows the server's message
    page.fill("#src", " ")
    page.click("#translate-btn")
    page.wait_for_selector("#error:not([hidden])")
    assert "text: is empty" in page.inner_text("#error")


def test_page_shows_a_pointer_generators_switch_and_copies(page, pointer_generator_model, tmp_path):
    """A pointer-generator run: one hypothesis (n-best fixed at 1), and after the attention
    map's last column each row's p_gen; the row of a word outside the target vocabulary
    (only a copy could write it) is marked as copied."""
    sentence = "Ein Mann namens Zyxwq läuft."
    (want,) = pointer_generator_model.translate_detailed([sentence], beam=2, return_attention=True)
    with live(pointer_generator_model) as url:
        page.goto(url + "/")
        page.wait_for_selector("#translate-panel:not([hidden])")
        assert page.is_disabled("#nbest") and page.input_value("#nbest") == "1"
        page.fill("#src", sentence)
        page.fill("#beam", "2")
        page.click("#translate-btn")
        page.wait_for_selector("#heatmap td.switch")
        assert page.locator("#nbest-list .hyp").all_inner_texts() == [want.text]
        rows = page.locator("#heatmap tbody tr")
        assert rows.count() == len(want.target_pieces)
        assert page.locator("#heatmap thead th").last.inner_text() == "p_gen"
        switch = page.locator("#heatmap td.switch").all_inner_texts()
        assert switch == [f"{float(p):.2f}" for p in want.p_gen]
        copied = page.locator("#heatmap tbody th.copied").all_inner_texts()
        assert copied == [w for w, c in zip(want.target_pieces, want.copied) if c] == ["zyxwq"]
        at = want.target_pieces.index("zyxwq")
        rows.nth(at).locator("td.switch").hover()
        assert page.inner_text("#att-hover").startswith(f"p_gen {float(want.p_gen[at]):.4f}")
        assert "copied" in page.inner_text("#att-hover")
        page.screenshot(path=str(tmp_path / "pointer-generator.png"), full_page=True)


def test_page_samples_from_a_language_model(page, lm_model):
    with live(lm_model) as url:
        page.goto(url + "/")
        page.wait_for_selector("#generate-panel:not([hidden])")
        assert page.is_hidden("#translate-panel") and page.is_hidden("#predict-panel")
        page.fill("#prompt", "to be")
        page.fill("#temperature", "0.5")
        page.fill("#top-k", "3")
        page.fill("#max-tokens", "20")
        page.fill("#seed", "7")
        page.click("#generate-btn")
        page.wait_for_function("document.getElementById('sample').textContent.length > 0")
        want = lm_model.generate("to be", max_tokens=20, temperature=0.5, top_k=3, seed=7)
        assert page.inner_text("#sample") == "to be" + want  # a character model: no joiner


def test_page_highlights_tagged_entities(page, tag_model, tmp_path):
    text = "John met Anna Smith in Paris today."
    (want,) = tag_model.predict([text])
    with live(tag_model) as url:
        page.goto(url + "/")
        page.wait_for_selector("#predict-panel:not([hidden])")
        assert page.inner_text("#predict-title") == "Tag entities"
        page.fill("#text", text)
        page.click("#predict-btn")
        page.wait_for_selector("#prediction mark.ent")
        marks = page.locator("#prediction mark.ent")
        shown = [(m.get_attribute("class"), m.inner_text()) for m in marks.all()]
        assert shown == [
            (f"ent ent-{e['type']}", f"{e['text']}{e['type']}") for e in want["entities"]
        ]
        assert (
            page.locator("#prediction .tagged").text_content().replace("PER", "").replace("LOC", "")
            == text
        )  # the sentence is shown whole, entities marked in place
        page.screenshot(path=str(tmp_path / "tag.png"))


def test_report_page_shows_every_figure_in_the_browser(page, tmp_path):
    """``seqlab report`` on this repository's own records: the page opens from disk and
    every figure it shows has loaded (a decoded image with a width), one section a claim."""
    from seqlab.inspect.report import build_report

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "site"
    info = build_report(root, out, claims_path=tmp_path / "claims.md")
    page.goto((out / "index.html").as_uri())
    page.wait_for_load_state("load")
    images = page.eval_on_selector_all(
        "img", "els => els.map(e => [e.getAttribute('src'), e.complete, e.naturalWidth])"
    )
    assert len(images) >= 5
    broken = [src for src, complete, width in images if not (complete and width > 0)]
    assert broken == []
    for claim in info["claims"]:
        assert page.locator(f"#{claim.key}").count() == 1
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
