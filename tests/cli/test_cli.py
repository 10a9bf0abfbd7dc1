"""The console script: version, list, and clean errors with exit code 2."""

import subprocess
import sys

from seqlab import __version__
from seqlab.cli.main import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.strip() == f"seqlab {__version__}"


def test_list_prints_every_kind(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for kind in ("models", "tasks", "searches", "schedules", "presets"):
        assert f"{kind} (" in out


def test_console_script_runs_as_module():
    proc = subprocess.run(
        [sys.executable, "-m", "seqlab.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and __version__ in proc.stdout
