"""``seqlab report``: the notes' claims with their computed verdicts, and every recorded
result, on one static HTML page (a self-contained folder: ``index.html`` + ``figures/``,
no JavaScript), plus ``docs/claims.md``.

    from seqlab.inspect.report import build_report
    info = build_report(".", "runs/report", runs=["runs/compare-reverse"])

Read: ``docs/results.md`` (every ``## `` section, rendered), ``docs/figures/*.json``
(through the claim rules, :mod:`seqlab.inspect.claim_rules`), ``tests/`` (cited tests) and
the run directories given (config, final metrics, PNGs, a ``compare.json``). Every
figure the page shows is copied into ``OUT/figures``; a figure that is referenced but
missing is named in the text instead, so the page never shows a broken image.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

from seqlab.errors import SeqlabError
from seqlab.inspect.claims import Claim, check_all, claims_markdown
from seqlab.inspect.results_md import sections

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       line-height: 1.45; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.4em 0; }
code { background: #f5f5f5; padding: 0 0.2em; }
.v { font-weight: bold; padding: 0.1em 0.4em; border-radius: 3px; white-space: nowrap; }
.reproduced { background: #c8efc8; } .partly { background: #fbeeb8; }
.not-reproduced { background: #f6c4c4; } .not-here { background: #e4e4e4; }
.rule { color: #555; font-size: 0.9em; }
"""


class _Figures:
    """Copies figures into ``OUT/figures`` under unique names; returns their page path."""

    def __init__(self, out: Path) -> None:
        self.dir = out / "figures"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.copied: dict[Path, str] = {}

    def add(self, path: Path) -> str | None:
        path = path.resolve()
        if not path.is_file():
            return None
        if path not in self.copied:
            name, i = path.name, 1
            while name in self.copied.values():  # another figure of the same file name
                i += 1
                name = f"{path.stem}-{i}{path.suffix}"
            shutil.copyfile(path, self.dir / name)
            self.copied[path] = name
        return f"figures/{self.copied[path]}"


def _inline(text: str) -> str:
    """Escaped text with markdown's `code`, **bold** and [links](url) (no images)."""
    out = []
    for i, part in enumerate(re.split(r"(`[^`]*`)", text)):
        if i % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", part)
        part = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', part)
        out.append(part)
    return "".join(out)


def _table(lines: list[str]) -> str:
    def cells(line: str) -> list[str]:
        inner = line.strip().strip("|")
        return [c.strip() for c in inner.split("|")]

    head = "".join(f"<th>{_inline(c)}</th>" for c in cells(lines[0]))
    body = "".join(
        "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in cells(line)) + "</tr>"
        for line in lines[2:]
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def markdown_html(text: str, base: Path, figures: _Figures) -> str:
    """The small markdown subset the benchmark scripts write, as HTML: ``###`` headings,
    pipe tables, images (copied; relative to ``base``), ``- `` lists, paragraphs and the
    ``<details>``/``<summary>`` lines they use."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line:
            i += 1
        elif line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                block.append(lines[i])
                i += 1
            out.append(_table(block) if len(block) >= 2 else _inline(block[0]))
        elif re.fullmatch(r"</?details>|<details><summary>.*</summary>|</?summary>", line):
            out.append(line)
            i += 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 1, 6)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].strip().startswith("- "):
                items.append(f"<li>{_inline(lines[i].strip()[2:])}</li>")
                i += 1
            out.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while (
                i < len(lines)
                and lines[i].strip()
                and not lines[i].strip().startswith(("|", "#", "- ", "<details", "</details"))
            ):
                para.append(lines[i].strip())
                i += 1
            out.append("<p>" + _images(" ".join(para), base, figures) + "</p>")
    return "\n".join(out)


def _images(text: str, base: Path, figures: _Figures) -> str:
    """Paragraph text with ``![alt](path)`` as <img> of the copied figure (or a note)."""
    parts = re.split(r"!\[([^\]]*)\]\(([^)\s]+)\)", text)
    out = [_inline(parts[0])]
    for j in range(1, len(parts), 3):
        alt, src, rest = parts[j], parts[j + 1], parts[j + 2]
        page = figures.add(base / src)
        if page is None:
            out.append(f"<i>(figure {html.escape(src)} is missing)</i>")
        else:
            out.append(f'<img src="{page}" alt="{html.escape(alt)}">')
        out.append(_inline(rest))
    return "".join(out)


def claim_html(c: Claim, root: Path, figures: _Figures) -> str:
    """One claim: statement, verdict badge, why, the rule and its evidence (figures shown)."""
    cls = c.verdict.replace(" ", "-")
    parts = [
        f'<h3 id="{c.key}">{html.escape(c.statement)} '
        f'<span class="v {cls}">{html.escape(c.verdict)}</span></h3>',
        f"<p>{_inline(c.why)}</p>",
        f'<p class="rule">Rule: {_inline(c.rule)}</p>',
    ]
    items = []
    for s in c.sources:
        cite = (
            f"{s.kind} <code>{html.escape(s.path)}</code> — <code>{html.escape(s.command)}</code>"
        )
        items.append(f"<li>{cite}</li>")
        if s.kind == "figure":
            page = figures.add(root / s.path)
            if page is not None:
                parts.append(f'<img src="{page}" alt="{html.escape(s.path)}">')
    parts.append("<ul>" + "".join(items) + "</ul>" if items else "<p>No evidence recorded.</p>")
    return "\n".join(parts)


def run_html(run_dir: Path, figures: _Figures) -> str:
    """A run directory: model/task from config.yaml, the last validation metrics from
    metrics.jsonl, a compare.json's table, and its PNGs."""
    import yaml

    from seqlab.inspect.compare import compare_table

    if not run_dir.is_dir():
        raise SeqlabError(f"report: --runs {run_dir} is not a directory; pass run folders")
    parts = [f"<h3>{html.escape(str(run_dir))}</h3>"]
    cfg_path = run_dir / "config.yaml"
    if cfg_path.is_file():
        cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
        model, task = ((cfg.get(s) or {}).get("name", "?") for s in ("model", "task"))
        parts.append(f"<p>model <code>{model}</code>, task <code>{task}</code></p>")
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        last = [json.loads(x) for x in metrics.read_text(encoding="utf-8").splitlines()]
        final = [r for r in last if r.get("event") in ("valid", "final")]
        if final:
            shown = {k: v for k, v in final[-1].items() if k.startswith("valid/") or k == "step"}
            parts.append(f"<p>{_inline(json.dumps(shown))}</p>")
    if (run_dir / "compare.json").is_file():
        record = json.loads((run_dir / "compare.json").read_text(encoding="utf-8"))
        parts.append(markdown_html(compare_table(record), run_dir, figures))
    for png in sorted(run_dir.glob("*.png")):
        page = figures.add(png)
        parts.append(f'<img src="{page}" alt="{html.escape(png.name)}">')
    return "\n".join(parts)


def build_report(
    root: str | Path = ".",
    out: str | Path = "runs/report",
    runs: list[str | Path] | None = None,
    claims_path: str | Path | None = None,
    command: str = "seqlab report",
) -> dict[str, Any]:
    """Write ``out/index.html`` (+ ``out/figures``) and ``claims_path`` (default
    ``root/docs/claims.md``); return ``{"claims", "index", "claims_md", "figures"}``."""
    root, out = Path(root), Path(out)
    if not (root / "docs").is_dir():
        raise SeqlabError(f"report: {root}/docs is missing; run from the repository root")
    claims = check_all(root)
    claims_md = Path(claims_path) if claims_path else root / "docs" / "claims.md"
    claims_md.write_text(claims_markdown(claims, command), encoding="utf-8")
    if (out / "figures").is_dir():  # only what this page uses
        shutil.rmtree(out / "figures")
    figures = _Figures(out)
    summary = "".join(
        f'<tr><td><a href="#{c.key}">{html.escape(c.statement)}</a></td>'
        f'<td><span class="v {c.verdict.replace(" ", "-")}">{c.verdict}</span></td></tr>'
        for c in claims
    )
    body = [
        "<h1>seqlab: the notes' claims, checked</h1>",
        f"<p>Generated by <code>{html.escape(command)}</code> from docs/results.md, "
        "docs/figures/*.json and tests/; verdicts are computed by the rules shown under each "
        "claim (seqlab/inspect/claim_rules.py). The same list: docs/claims.md.</p>",
        f"<table><tr><th>claim</th><th>verdict</th></tr>{summary}</table>",
        "<h2>Claims</h2>",
        *(claim_html(c, root, figures) for c in claims),
    ]
    md = root / "docs" / "results.md"
    if md.is_file():
        body.append("<h2>Results (docs/results.md)</h2>")
        for heading, text in sections(md.read_text(encoding="utf-8")).items():
            body.append(f"<h2>{html.escape(heading)}</h2>")
            body.append(markdown_html(text, md.parent, figures))
    if runs:
        body.append("<h2>Runs</h2>")
        body += [run_html(Path(r), figures) for r in runs]
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>seqlab report</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return {
        "claims": claims,
        "index": index,
        "claims_md": claims_md,
        "figures": sorted(figures.copied.values()),
    }
