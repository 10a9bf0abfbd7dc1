"""What every benchmark does with ``docs/results.md``: say which machine made its numbers,
and put its own section into the file without touching the others.

A results file is markdown. A benchmark owns the section that starts at its heading
line (``## Language models``) and runs to the next ``## `` heading. Writing the section
again replaces exactly those lines and keeps the rest of the file byte for byte. The
write is atomic (``seqlab.atomic_file.write_atomic``): the new text goes to a temporary
file beside the target, which then replaces it. A run that is killed or fails while
writing leaves the old file as it was, never half of one.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from seqlab.atomic_file import write_atomic
from seqlab.train.fingerprint import cpu_model, gpu_description

EMPTY = "# Results\n"
ROOT = Path(__file__).resolve().parent.parent
DOCS_RESULTS = ROOT / "docs" / "results.md"


def beside_out(out: str | Path, name: str) -> Path:
    """Where a benchmark writes a figure or record ``name`` that goes with its table in
    ``out``: ``docs/figures/<name>`` when ``out`` is the docs' ``docs/results.md``, else
    beside ``out`` (a scratch run to ``--out /tmp/x.md`` leaves the docs' figures alone)."""
    if Path(out).resolve() == DOCS_RESULTS.resolve():
        return ROOT / "docs" / "figures" / name
    return Path(out).parent / name


def machine_description() -> str:
    """The machine line of a results section: CPU model, cores, torch version and threads,
    Python, and the GPUs where a CUDA device is visible."""
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}"
        f"{gpu_description()}"
    )


def _span(lines: list[str], heading: str) -> tuple[int, int] | None:
    """Where the section under ``heading`` is: (index of the heading line, index of the next
    ``## `` heading or ``len(lines)``); None if the heading is not a line of the file."""
    if heading not in lines:
        return None
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start, end


def section_body(path: Path, heading: str) -> list[str]:
    """The lines of ``path``'s section under ``heading``, without the heading line itself;
    [] if the file or the section is not there. Benchmarks read their earlier rows here."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    span = _span(lines, heading)
    return [] if span is None else lines[span[0] + 1 : span[1]]


def with_section(text: str, section: str, heading: str) -> str:
    """``text`` with the section under ``heading`` (up to the next ``## `` heading, or the
    end) replaced by ``section``; appended after a blank line if there is none yet."""
    if not section.startswith(heading):
        raise ValueError(f"the section must start with its heading {heading!r}")
    lines = text.splitlines()
    span = _span(lines, heading)
    if span is None:
        return f"{text.rstrip()}\n\n{section.rstrip()}\n"
    start, end = span
    after = lines[end:]
    new = lines[:start] + section.rstrip("\n").splitlines() + ([""] + after if after else [])
    return "\n".join(new) + "\n"


def write_section(path: Path, section: str, heading: str) -> None:
    """Put ``section`` (which starts with its ``heading`` line) into the markdown file at
    ``path``, replacing that heading's old section and keeping everything else."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else EMPTY
    write_atomic(path, with_section(text, section, heading))
