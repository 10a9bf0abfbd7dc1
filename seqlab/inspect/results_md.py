"""Reading docs/results.md back: its ``## `` sections, the markdown tables in a section
(one dict per row, keyed by the header cells) and the numbers in their cells.

Used by ``seqlab report`` for the benchmarks that record only markdown (the translation
table, which is built up over several invocations). Robust to what the benchmark scripts
write: bold (``**no**``), thousands separators, units (``7.31M``, ``12.5%``, ``52.1×``),
a dash for a missing value, and prose or images between tables.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def sections(text: str) -> dict[str, str]:
    """``{heading without '## ': body}`` for every level-2 section of a markdown text."""
    out: dict[str, str] = {}
    heading, body = None, []
    for line in text.splitlines():
        if line.startswith("## "):
            if heading is not None:
                out[heading] = "\n".join(body).strip("\n")
            heading, body = line[3:].strip(), []
        elif heading is not None:
            body.append(line)
    if heading is not None:
        out[heading] = "\n".join(body).strip("\n")
    return out


def find_section(all_sections: dict[str, str], prefix: str) -> str | None:
    """The body of the first section whose heading starts with ``prefix``, else None."""
    return next((body for head, body in all_sections.items() if head.startswith(prefix)), None)


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:]
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split("|")]


def tables(body: str) -> list[list[dict[str, str]]]:
    """Every pipe table of ``body``: a list of rows, each ``{header cell: cell}``. A table
    is a header line, a ``|---|`` line and the ``|`` lines after it; rows with the wrong
    number of cells are dropped."""
    lines = body.splitlines()
    found: list[list[dict[str, str]]] = []
    i = 0
    while i + 1 < len(lines):
        head, rule = lines[i].strip(), lines[i + 1].strip()
        if head.startswith("|") and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", rule):
            header = _cells(head)
            rows, i = [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = _cells(lines[i])
                if len(cells) == len(header):
                    rows.append(dict(zip(header, cells)))
                i += 1
            found.append(rows)
        else:
            i += 1
    return found


def number(cell: str | None) -> float | None:
    """The first number in a cell (``'1,725'`` → 1725, ``'7.31M'`` → 7310000, ``'12.5%'``
    → 12.5, ``'**35.5**'`` → 35.5); None for ``—``, ``-``, empty or no number."""
    if cell is None:
        return None
    text = cell.replace("**", "").replace("−", "-").strip()
    m = _NUMBER.search(text)
    if m is None:
        return None
    value = float(m.group(0).replace(",", ""))
    suffix = text[m.end() : m.end() + 1]
    return value * {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}.get(suffix, 1.0)


def column(row: dict[str, str], *names: str) -> str | None:
    """The cell of the first header that equals one of ``names`` or starts with it."""
    for name in names:
        for key, cell in row.items():
            if key == name or key.startswith(name):
                return cell
    return None
