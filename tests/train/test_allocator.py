"""keep_freed_memory: glibc keeps a freed big block mapped in the process and serves the
next allocations of that size from it, instead of munmap-ing it and mmap-ing (and
page-faulting through) fresh memory on every training step.

The property is asserted on the process's mapped size (/proc/self/statm), which only the
allocator changes, over twelve allocate/free rounds of a 64 MiB tensor. An earlier version
counted the minor page faults of one re-allocation; that count also includes faults the
kernel makes on its own (automatic NUMA balancing unmaps resident pages to sample them),
and small allocations that land in the freed block can make the heap grow once or twice
before it settles, so on a CI host it once read all 16,384 pages.
"""

import os
import subprocess
import sys

SCRIPT = r"""
import sys, torch
from seqlab.train.allocator import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory() is True
def mapped_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * 4096
n = 64 * 2**20 // 4  # 64 MiB of float32, above glibc's largest mmap threshold (32 MiB)
for _ in range(12):
    x = torch.ones(n); during = mapped_bytes(); del x
    print(during, mapped_bytes())
"""

MIB = 2**20
LINUX = sys.platform.startswith("linux")


def _does_nothing_off_linux() -> None:
    """Off Linux there is no glibc mallopt (and no /proc): the module says it does nothing."""
    from seqlab.train.allocator import keep_freed_memory

    assert keep_freed_memory() is False


def _rounds(env: dict[str, str] | None = None, mode: str = "tuned") -> list[tuple[int, int]]:
    """(mapped bytes while the tensor lives, mapped bytes after its free) per round."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return [tuple(int(v) for v in line.split()) for line in out.stdout.splitlines()]


def test_plain_glibc_unmaps_a_big_tensor_on_every_free():
    if not LINUX:
        return _does_nothing_off_linux()
    rounds = _rounds({"SEQLAB_MALLOC": "default"}, mode="plain")
    assert len(rounds) == 12
    assert all(during - after >= 64 * MIB for during, after in rounds)


def test_tuned_allocator_keeps_freed_blocks_and_settles():
    if not LINUX:
        return _does_nothing_off_linux()
    rounds = _rounds()
    assert len(rounds) == 12
    assert all(during - after < 4 * MIB for during, after in rounds)  # never unmapped
    settled = [during for during, _ in rounds[6:]]
    assert max(settled) - min(settled) < 4 * MIB  # later rounds map nothing new


def test_opt_out_by_environment_leaves_the_allocator_alone():
    code = "from seqlab.train.allocator import keep_freed_memory as k; print(k(), k())"
    env = {**os.environ, "SEQLAB_MALLOC": "default"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["False", "False"]
