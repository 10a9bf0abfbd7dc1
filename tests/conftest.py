"""Shared test setup: fixed seeds, few threads (CI machine has 2 cores), the gpu marker and
the compiles marker (torch.compile needs a C++ compiler on a CPU)."""

import os

import pytest
import torch

from seqlab.decode.compiled import cpp_compiler


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA device on this machine")
    skip_cpp = pytest.mark.skip(reason="no C++ compiler (g++, clang++ or $CXX) for torch.compile")
    # .ci/run sets SEQLAB_REQUIRE_COMPILER: there the compile tests must run (and fail without one)
    gpu = torch.cuda.is_available()
    cpp = cpp_compiler() is not None or bool(os.environ.get("SEQLAB_REQUIRE_COMPILER"))
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
