"""Registry and typed config: duplicates raise, unknown keys name the closest valid one."""

from dataclasses import dataclass, field
from typing import Literal

import pytest

from seqlab.config import ConfigError, dump_yaml, from_dict, resolve, to_dict
from seqlab.registry import Registry


@dataclass(frozen=True)
class Opt:
    lr: float = 1e-3
    name: Literal["adam", "sgd"] = "adam"


@dataclass(frozen=True)
class Cfg:
    d_model: int = 64
    dropout: float = 0.1
    tie: bool = False
    sizes: tuple[int, ...] = (1, 2)
    note: str | None = None
    opt: Opt = field(default_factory=Opt)


def test_registry_register_get_and_duplicates():
    reg = Registry("model")

    @reg.register("tiny", Cfg)
    class Tiny:
        """A tiny model."""

    assert reg.get("tiny").target is Tiny
    assert reg.get("tiny").doc == "A tiny model."
    assert reg.names() == ["tiny"]
    with pytest.raises(KeyError, match="already registered"):
        reg.register("tiny", Cfg)(object)
    with pytest.raises(KeyError, match="Did you mean: tiny"):
        reg.get("tinny")


def test_registry_requires_dataclass_config():
    with pytest.raises(TypeError):
        Registry("x").register("a", dict)


def test_resolve_defaults_preset_overrides(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("d_model: 128\nopt:\n  name: sgd\n")
    cfg = resolve(Cfg, preset, ["opt.lr=0.5", "tie=true", "sizes=[3,4]", "note=hi"])
    assert cfg == Cfg(d_model=128, tie=True, sizes=(3, 4), note="hi", opt=Opt(0.5, "sgd"))
    assert from_dict(Cfg, to_dict(cfg)) == cfg
    assert "d_model: 128" in dump_yaml(cfg)


def test_int_is_accepted_for_float_but_not_the_reverse():
    assert resolve(Cfg, overrides=["dropout=0"]).dropout == 0.0
    with pytest.raises(ConfigError, match="d_model: expected an integer"):
        resolve(Cfg, overrides=["d_model=1.5"])


def test_unknown_override_names_closest_key():
    with pytest.raises(ConfigError, match="Did you mean 'd_model'"):
        resolve(Cfg, overrides=["d_modle=3"])
    with pytest.raises(ConfigError, match="Did you mean 'lr'"):
        resolve(Cfg, overrides=["opt.lrr=3"])


def test_unknown_preset_key_names_file_and_line(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("d_model: 128\nopt:\n  nmae: sgd\n")
    with pytest.raises(ConfigError, match=r"p\.yaml:3: unknown key 'opt\.nmae'.*'name'"):
        resolve(Cfg, preset)


def test_bad_literal_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not one of 'adam', 'sgd'"):
        resolve(Cfg, overrides=["opt.name=rmsprop"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("d_model: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        resolve(Cfg, bad)
    with pytest.raises(ConfigError, match="no such preset"):
        resolve(Cfg, tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        resolve(Cfg, overrides=["d_model"])


def test_float_without_dot_in_exponent_is_a_number():
    # PyYAML (YAML 1.1) parses "5e-4" as a string; a float field must still accept it.
    assert resolve(Cfg, overrides=["dropout=5e-4"]).dropout == 5e-4
    with pytest.raises(ConfigError, match="expected a number"):
        resolve(Cfg, overrides=["dropout=abc"])
