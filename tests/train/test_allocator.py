"""keep_freed_memory: glibc serves large blocks from the heap afterwards, so a second
allocation of the same big tensor does not page-fault through fresh memory."""

import os
import resource
import subprocess
import sys

SCRIPT = r"""
import resource, sys, torch
from seqlab.train.allocator import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory() is True
def faults_of_one_alloc():
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(64 * 2**20 // 4)  # 64 MiB, above glibc's largest mmap threshold
    del x
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
faults_of_one_alloc()
print(min(faults_of_one_alloc() for _ in range(3)))
"""


def _faults(mode: str, env: dict[str, str] | None = None) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return int(out.stdout.split()[-1])


def test_reallocating_a_big_tensor_reuses_pages_once_tuned():
    pages = 64 * 2**20 // resource.getpagesize()
    assert _faults("plain", {"SEQLAB_MALLOC": "default"}) > pages // 2  # mmap'd afresh
    assert _faults("tuned") < pages // 20  # served from the kept heap


def test_opt_out_by_environment_leaves_the_allocator_alone():
    code = "from seqlab.train.allocator import keep_freed_memory as k; print(k(), k())"
    env = {**os.environ, "SEQLAB_MALLOC": "default"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["False", "False"]
