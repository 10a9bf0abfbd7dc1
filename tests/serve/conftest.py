"""Session fixtures for the serving tests: the five tiny runs of ``tests.serve.runs``
(trained once, ~10 s in all), loaded with ``seqlab.load``, and one thread for torch."""

from __future__ import annotations

import pytest
import torch

from seqlab import api
from tests.serve import runs


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    # tiny tensors on a shared 2-core machine: one thread avoids OpenMP spin-waiting
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """``trained("lm")`` → the run directory, trained on first use."""
    done = {}

    def get(name):
        if name not in done:
            make = getattr(runs, f"{name}_run")
            done[name] = runs.keeping_threads(make, tmp_path_factory.mktemp(name))
        return done[name]

    return get


@pytest.fixture(scope="session")
def translation_dir(trained):
    return trained("translation")


@pytest.fixture(scope="session")
def pointer_generator_dir(trained):
    return trained("pointer_generator")


@pytest.fixture(scope="session")
def lm_dir(trained):
    return trained("lm")


@pytest.fixture(scope="session")
def classify_dir(trained):
    return trained("classify")


@pytest.fixture(scope="session")
def tag_dir(trained):
    return trained("tag")


@pytest.fixture(scope="session")
def luong_dir(tmp_path_factory):
    """A Luong (RNN) translation run, trained once (~2 s)."""
    return runs.keeping_threads(runs.rnn_translation_run, tmp_path_factory.mktemp("luong"), "luong")


@pytest.fixture(scope="session")
def translation_model(translation_dir):
    return api.load(translation_dir)


@pytest.fixture(scope="session")
def pointer_generator_model(pointer_generator_dir):
    return api.load(pointer_generator_dir)


@pytest.fixture(scope="session")
def lm_model(lm_dir):
    return api.load(lm_dir)


@pytest.fixture(scope="session")
def classify_model(classify_dir):
    return api.load(classify_dir)


@pytest.fixture(scope="session")
def tag_model(tag_dir):
    return api.load(tag_dir)
