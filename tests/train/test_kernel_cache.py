"""seqlab.train.kernel_cache: the oneDNN kernel cache size (docs/perf-notes-amx.md §46)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from seqlab.cli.main import main
from seqlab.train.kernel_cache import CAPACITY, VARIABLE, enlarge_kernel_cache


@pytest.fixture
def unset(monkeypatch):
    """The variable absent for the test and restored after it (setenv records the
    original state, so whatever the test sets is undone)."""
    monkeypatch.setenv(VARIABLE, "placeholder")
    monkeypatch.delenv(VARIABLE)


def test_sets_the_capacity_when_unset(unset):
    assert enlarge_kernel_cache() is True
    assert os.environ[VARIABLE] == str(CAPACITY)
    assert enlarge_kernel_cache(10) is False  # the first value stays
    assert os.environ[VARIABLE] == str(CAPACITY)


def test_leaves_the_users_value(monkeypatch):
    monkeypatch.setenv(VARIABLE, "1024")
    assert enlarge_kernel_cache() is False
    assert os.environ[VARIABLE] == "1024"


def test_blank_value_counts_as_unset(monkeypatch):
    monkeypatch.setenv(VARIABLE, "  ")
    assert enlarge_kernel_cache(2048) is True
    assert os.environ[VARIABLE] == "2048"


def test_rejects_a_negative_capacity(unset):
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        enlarge_kernel_cache(-1)
    assert VARIABLE not in os.environ


def test_the_command_line_sets_it_first(unset, capsys):
    assert main([]) == 0  # prints the help
    assert os.environ[VARIABLE] == str(CAPACITY)


# Two sweeps over 1,100 distinct bf16 product shapes (more than oneDNN's default 1,024
# cached kernels), the cache size set, or not, after ``import torch`` as seqlab does it.
SWEEP = textwrap.dedent(
    """
    import sys
    import torch
    if sys.argv[1] == "enlarge":
        from seqlab.train.kernel_cache import enlarge_kernel_cache
        assert enlarge_kernel_cache(2048)
    torch.set_num_threads(1)
    W = torch.randn(16, 16, dtype=torch.bfloat16)
    x = torch.randn(1100, 16, dtype=torch.bfloat16)
    for sweep in range(2):
        print(f"sweep {sweep}", flush=True)
        for m in range(1, 1101):
            x[:m] @ W
    """
)


def second_sweep_misses(mode: str) -> tuple[int, int]:
    """(oneDNN kernel-cache misses in the first sweep, in the second) of ``SWEEP``."""
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    env["ONEDNN_VERBOSE"] = "profile_create"
    out = subprocess.run(
        [sys.executable, "-c", SWEEP, mode], env=env, capture_output=True, text=True, check=True
    ).stdout
    first, _, second = out.partition("sweep 1")
    return first.count("cache_miss"), second.count("cache_miss")


def test_the_enlarged_cache_keeps_every_shape_of_a_sweep():
    first, second = second_sweep_misses("default")
    if first < 1000:
        pytest.skip("bf16 products do not build oneDNN kernels on this CPU")
    assert second > 500  # the default 1,024 entries evict each shape before it returns
    first, second = second_sweep_misses("enlarge")
    assert first > 1000
    assert second == 0
