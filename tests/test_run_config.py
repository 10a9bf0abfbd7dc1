"""Run configuration: sections typed by their registered names, errors with file/line."""

import pytest

from seqlab.config import ConfigError
from seqlab.run_config import resolve_run


def test_defaults_preset_and_overrides(tmp_path):
    preset = tmp_path / "run.yaml"
    preset.write_text(
        "task: {name: algorithmic, kind: sort}\n"
        "model:\n  name: transformer\n  d_model: 64\n"
        "schedule: {name: inverse_sqrt, warmup: 100}\n"
        "train: {max_steps: 7, optim: {name: adamw, lr: 0.002}}\n"
    )
    cfg = resolve_run(preset, ["model.n_heads=8", "train.batch.max_tokens=512"])
    assert cfg.task == "algorithmic" and cfg.task_cfg.kind == "sort"
    assert cfg.model_cfg.d_model == 64 and cfg.model_cfg.n_heads == 8
    assert cfg.schedule == "inverse_sqrt" and cfg.schedule_cfg.warmup == 100
    assert cfg.train.max_steps == 7 and cfg.train.optim.name == "adamw"
    assert cfg.train.batch.max_tokens == 512
    assert resolve_run(cfg.to_dict()) == cfg  # the saved form rebuilds the same config


def test_schedule_defaults_to_constant():
    cfg = resolve_run({"task": {"name": "algorithmic"}, "model": {"name": "transformer"}})
    assert cfg.schedule == "constant"


def test_unknown_key_names_file_line_and_closest(tmp_path):
    preset = tmp_path / "run.yaml"
    preset.write_text("task: {name: algorithmic}\nmodel:\n  name: transformer\n  d_modl: 64\n")
    with pytest.raises(ConfigError, match=r"run\.yaml:4: unknown key 'model\.d_modl'.*'d_model'"):
        resolve_run(preset)


def test_unknown_name_section_and_type_errors():
    base = {"task": {"name": "algorithmic"}, "model": {"name": "transformer"}}
    with pytest.raises(ConfigError, match="Did you mean: transformer"):
        resolve_run({**base, "model": {"name": "transfomer"}})
    with pytest.raises(ConfigError, match="unknown section 'trian'.*'train'"):
        resolve_run({**base, "trian": {}})
    with pytest.raises(ConfigError, match="max_steps: expected an integer"):
        resolve_run(base, ["train.max_steps=ten"])
    with pytest.raises(ConfigError, match="needs a name"):
        resolve_run({"model": {"name": "transformer"}})
    with pytest.raises(ConfigError, match="divisible"):
        resolve_run(base, ["model.d_model=30"])


def test_overriding_the_schedule_name_drops_the_old_schedules_fields():
    """The preset's inverse_sqrt ``variant`` means nothing to cosine: naming another
    schedule starts the section afresh, and its other overrides apply in any order."""
    preset = {
        "task": {"name": "algorithmic"},
        "model": {"name": "transformer", "d_model": 64},
        "schedule": {"name": "inverse_sqrt", "variant": "fairseq", "warmup": 100},
    }
    for overrides in (
        ["schedule.name=cosine", "schedule.warmup=200", "schedule.total_steps=0"],
        ["schedule.total_steps=0", "schedule.warmup=200", "schedule.name=cosine"],
    ):
        cfg = resolve_run(preset, overrides)
        assert cfg.schedule == "cosine" and cfg.schedule_cfg.warmup == 200
        assert cfg.schedule_cfg.total_steps == 0
    same = resolve_run(preset, ["schedule.name=inverse_sqrt", "schedule.warmup=50"])
    assert same.schedule_cfg.variant == "fairseq" and same.schedule_cfg.warmup == 50
    assert resolve_run(preset, ["model.n_heads=8"]).model_cfg.d_model == 64
    with pytest.raises(ConfigError, match="variant"):  # a field of the old name stays wrong
        resolve_run(preset, ["schedule.name=cosine", "schedule.variant=fairseq"])
