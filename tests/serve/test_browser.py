"""The page in a real browser: Playwright drives Debian's chromium (headless) against a
uvicorn server on loopback, translates a sentence and checks that the n-best list and the
attention heatmap appear and answer hover; a screenshot is saved in the test's tmp dir.

``playwright install`` is never run (it downloads browsers); chromium comes from apt,
installed here when missing (CI runs as root on a fresh machine).
"""

from __future__ import annotations

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
        pytest.skip(f"cannot run the browser test: {why}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def live_server(translation_model):
    """``http://127.0.0.1:<free port>`` serving the tiny translation model (uvicorn)."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app(translation_model, Limits()), host="127.0.0.1",
                            port=port, log_level="warning")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):  # wait for startup, bounded (a polling loop, not a timing assertion)
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.02)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_page_translates_and_draws_the_heatmap(browser, live_server, translation_model, tmp_path):
    sentence = "der hund läuft."
    (expected,) = translation_model.translate_detailed(
        [sentence], beam=2, nbest=2, return_attention=True
    )
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
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
    assert errors == []
