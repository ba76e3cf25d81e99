"""Every config field declares its meaning and valid values next to its definition; the
errors and the README's reference are generated from that metadata."""

from __future__ import annotations

import math
import typing

import pytest

from titan_train.config import job as config
from titan_train.config import reference as config_reference
from titan_train.config.fields import Range, range_error

from .conftest import REPO

# Numeric fields whose every integer / float is meaningful (declared without a range on purpose).
UNBOUNDED = {("training", "seed"), ("data", "seed")}


def _numeric(section: str, name: str) -> bool:
    hint = typing.get_type_hints(typing.get_type_hints(config.JobConfig)[section])[name]
    kinds = typing.get_args(hint) or (hint,)
    return any(k in (int, float) for k in kinds)  # list[float]: its args are (float,); list[str] is not numeric


def test_every_numeric_field_declares_its_range_and_every_field_its_meaning():
    missing_range = [
        k for k, f in config.FIELDS.items() if _numeric(*k) and f.metadata.get("range") is None and k not in UNBOUNDED
    ]
    missing_doc = [k for k, f in config.FIELDS.items() if not f.metadata.get("doc")]
    assert missing_range == [] and missing_doc == []
    assert len(config.FIELDS) >= 60  # all nine sections were walked


@pytest.mark.parametrize("key", sorted(k for k in config.FIELDS if _numeric(*k) and config.FIELDS[k].metadata["range"]))
def test_the_default_is_valid_and_both_sides_of_every_bound_are_checked(key):
    section, name = key
    f = config.FIELDS[key]
    cfg = config.JobConfig()
    assert config.check_ranges(cfg) is None  # defaults are valid
    bounds: Range = f.metadata["range"]
    for edge, bad in ((bounds.ge, -1), (bounds.gt, 0), (bounds.le, 1), (bounds.lt, 0)):
        if edge is None:
            continue
        value = edge - 1 if bad == -1 else edge if bad == 0 else max(edge + 1, edge * 2)  # 1e30 + 1 == 1e30
        value = [value, value] if f.metadata["each"] else (float(value) if isinstance(f.default, float) else int(value))
        assert range_error(f"{section}.{name}", f, value) is not None, (key, value)
        setattr(getattr(cfg, section), name, value)
        with pytest.raises(config.ConfigError, match=rf"^{section}\.{name} = .* must be "):
            config.check_ranges(cfg)
        cfg = config.JobConfig()


def test_non_finite_numbers_are_refused_even_where_unbounded_above():
    for key in [("optimizer", "lr"), ("optimizer", "weight_decay"), ("watchdog", "floor_s")]:
        cfg = config.JobConfig()
        setattr(getattr(cfg, key[0]), key[1], math.inf)
        with pytest.raises(config.ConfigError, match="must be a finite number"):
            config.check_ranges(cfg)


def test_range_descriptions():
    assert Range(ge=1).describe() == ">= 1"
    assert Range(gt=0).describe() == "> 0"
    assert Range(ge=0, le=1).describe() == "in [0, 1]"
    assert Range(gt=0, lt=1).describe() == "in (0, 1)"
    assert Range(lt=0.5).describe() == "< 0.5"


def test_the_readme_config_reference_is_up_to_date():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme == config_reference.render(readme), (
        "README.md's config reference is stale: run python -m titan_train.config.reference"
    )


def test_the_reference_lists_every_key_with_its_range_and_check_mode_catches_drift(tmp_path):
    table = config_reference.reference()
    for (_section, name), f in config.FIELDS.items():
        assert f"| `{f.metadata.get('toml_key') or name}` |" in table
    assert "| `norm_eps` | `1e-05` | in (0, 1) | RMSNorm epsilon |" in table
    assert "| `async` | false |" in table  # the TOML key, not the Python field name
    stale = tmp_path / "README.md"
    stale.write_text(f"intro\n{config_reference.BEGIN}\nold table\n{config_reference.END}\nrest\n")
    assert config_reference.main(["--readme", str(stale), "--check"]) == 1
    assert "old table" in stale.read_text()  # --check writes nothing
    assert config_reference.main(["--readme", str(stale)]) == 0
    text = stale.read_text()
    assert text.startswith("intro\n") and text.endswith("rest\n") and "old table" not in text
    assert config_reference.main(["--readme", str(stale), "--check"]) == 0
    no_markers = tmp_path / "plain.md"
    no_markers.write_text("nothing here\n")
    assert config_reference.main(["--readme", str(no_markers), "--check"]) == 2
