"""Explicit discovery: importing this module imports every module that registers a model,
task, search or schedule (DESIGN §3: no directory scanning), and lists the presets."""

from __future__ import annotations

from pathlib import Path

from seqlab import registry

# Modules that register entries are imported here, one line each, as they land.
REGISTERING_MODULES: tuple[str, ...] = (
    "seqlab.train.schedules",
    "seqlab.decode",
    "seqlab.models.transformer",
    "seqlab.models.sutskever",
    "seqlab.models.cho",
    "seqlab.models.bahdanau",
    "seqlab.models.luong",
    "seqlab.models.convs2s",
    "seqlab.tasks.algorithmic",
    "seqlab.tasks.translation",
    "seqlab.models.classifiers",
    "seqlab.models.kim_cnn",
    "seqlab.models.nbsvm",
    "seqlab.models.transformer_classifier",
    "seqlab.tasks.classification",
    "seqlab.models.tagger",
    "seqlab.tasks.tagging",
    "seqlab.models.rnn_lm",
    "seqlab.models.transformer_lm",
    "seqlab.tasks.lm",
    "seqlab.models.nplm",
    "seqlab.models.pointer_sentinel",
    "seqlab.models.cnn",
    "seqlab.models.resnet",
    "seqlab.tasks.image_classification",
    "seqlab.models.pointer_net",
    "seqlab.tasks.pointer_tasks",
    "seqlab.models.pointer_generator",
    "seqlab.tasks.copy_translation",
    "seqlab.models.ntm",
    "seqlab.tasks.ntm_tasks",
    "seqlab.models.captioner",
    "seqlab.tasks.captioning",
)

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"


def load_all() -> dict[str, registry.Registry]:
    """Import every registering module; return the registries by plural kind."""
    import importlib

    for name in REGISTERING_MODULES:
        importlib.import_module(name)
    return registry.ALL


def presets(directory: Path = PRESET_DIR) -> list[Path]:
    """The YAML presets shipped with seqlab (the ``configs/`` folder of the source tree)."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.yaml"))
