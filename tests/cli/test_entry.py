"""The ``seqlab`` entry point: a torchrun rank leaves without the interpreter's teardown
(where gloo's native threads can abort a finished rank), and loses nothing it printed."""

import os
import subprocess
import sys

import pytest

# An atexit hook stands for the interpreter's teardown: it runs on a normal exit only.
SCRIPT = """
import atexit, sys
atexit.register(lambda: print("teardown ran", flush=True))
sys.argv = ["seqlab", *sys.argv[1:]]
from seqlab.cli.main import entry
entry()
"""


def _run(args: list[str], world_size: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    if world_size is not None:
        env["WORLD_SIZE"] = world_size
    cmd = [sys.executable, "-c", SCRIPT, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("world_size", [None, "1"])
def test_a_single_process_exits_normally(world_size):
    done = _run(["--version"], world_size)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("seqlab ")
    assert "teardown ran" in done.stdout


def test_a_torchrun_rank_skips_the_teardown_and_keeps_its_output():
    # stdout is a pipe here, so block-buffered: the version line reaches the parent only
    # if exit_without_teardown flushes before os._exit.
    done = _run(["--version"], "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("seqlab ")
    assert "teardown ran" not in done.stdout


@pytest.mark.parametrize(
    "args, says",
    [(["train", "no/such/preset.yaml"], "seqlab: error:"), (["--no-such-flag"], "usage:")],
)
def test_a_torchrun_rank_keeps_the_error_code_and_message(args, says):
    done = _run(args, "2")
    assert done.returncode == 2
    assert says in done.stderr
    assert "teardown ran" not in done.stdout
