"""docs/decoding.md §7: the ```python blocks, run in order in a fresh interpreter, print
exactly the ```text blocks (```py blocks are sketches and are not run)."""

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "decoding.md"


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


def test_decoding_doc_examples_print_what_the_doc_says():
    text = DOC.read_text(encoding="utf-8")
    code, expected = "".join(blocks(text, "python")), "".join(blocks(text, "text"))
    assert code and expected
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected
