"""Shared test setup: fixed seeds, few threads (CI machine has 2 cores), the gpu marker and
the compiles marker (torch.compile needs a C++ compiler on a CPU)."""

import os
import shutil

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def _cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend (inductor) would use, if any."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA device on this machine")
    skip_cpp = pytest.mark.skip(reason="no C++ compiler (g++, clang++ or $CXX) for torch.compile")
    gpu, cpp = torch.cuda.is_available(), _cpp_compiler() is not None
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip_gpu)
        if "compiles" in item.keywords and not cpp:
            item.add_marker(skip_cpp)


@pytest.fixture
def one_thread():
    """One intra-op thread for the test (tiny models are faster so, and steadier when other
    processes share the cores); restored afterwards. Use with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
