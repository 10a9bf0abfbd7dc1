"""Measurements shared by ``seqlab compare`` and the benchmark scripts: peak resident
memory of this process (reset per model where Linux allows it), training tokens/s read
back from a run's ``metrics.jsonl``, and per-model ``MODEL:key=value`` overrides.

``benchmarks/translation.py`` (and the benchmarks importing from it) use these; they
were moved here so that the library does not import the benchmark scripts.
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
from pathlib import Path


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux: ``clear_refs`` 5); False
    where that is not possible (then :func:`peak_rss_mib` is the whole process's peak)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    """Peak resident set size in MiB: ``VmHWM`` (reset per model where the kernel allows
    it), else ``resource.getrusage`` (the peak of the whole process so far)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kib / (1024.0 * 1024.0) if sys.platform == "darwin" else kib / 1024.0


def train_tokens_per_s(metrics_path: Path) -> float:
    """Median target tokens/s over the run's ``train`` log windows (metrics.jsonl); NaN
    when the run logged no window (shorter than ``train.log_every`` updates)."""
    rates = []
    for line in Path(metrics_path).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("event") == "train" and "tokens_per_s" in record:
            rates.append(float(record["tokens_per_s"]))
    return statistics.median(rates) if rates else float("nan")


def overrides_for(model: str, overrides: list[str]) -> list[str]:
    """The overrides that apply to ``model``: plain ``key=value`` ones and its own
    ``model:key=value`` ones (prefix removed), in the order given."""
    out = []
    for text in overrides:
        head, _, rest = text.partition(":")
        if "=" in head or not rest:
            out.append(text)
        elif head == model:
            out.append(rest)
    return out
