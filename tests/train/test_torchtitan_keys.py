"""A torchtitan TOML with a key torchtitan's JobConfig lacks is refused, as torchtitan
refuses it, instead of training with the default: one line, naming the nearest valid key.
Keys torchtitan has but this trainer does not read stay a listed warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from titan_knowledge import load as load_knowledge
from titan_train.config import job, torchtitan

FIXTURES = Path(__file__).parent / "fixtures" / "torchtitan"
REPO = Path(__file__).resolve().parents[2]


def _raw(**changes) -> dict:
    raw = job.read_toml(FIXTURES / "llama3_8b.toml")
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        raw.setdefault(section, {})[key] = value
    return raw


def test_the_field_table_matches_torchtitan_v0_2_2_job_config():
    """Counted from torchtitan v0.2.2 torchtitan/config/job_config.py: JobConfig's 20
    sections plus 6 nested tables (training/validation dataloader, quantize linear /
    grouped_mm and their float8 / mx), 157 fields in all."""
    rows = load_knowledge("torchtitan_job_config")["section"]
    assert len(rows) == 26
    assert sum(len(r["keys"]) for r in rows) == 157
    names = {r["name"] for r in rows}
    assert {"job", "training", "parallelism", "checkpoint", "quantize.linear.float8", "validation.dataloader"} <= names


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.toml")), ids=lambda p: p.stem)
def test_torchtitans_own_configs_have_no_unknown_key(path):
    assert torchtitan.check_keys(job.read_toml(path)) == []


def test_a_misspelled_key_is_refused_naming_the_nearest_field():
    with pytest.raises(job.ConfigError) as err:
        torchtitan.convert(_raw(training__stpes=3), 8)
    assert str(err.value) == (
        "torchtitan config (v0.2.2 fields): training.stpes is not a field of torchtitan's "
        "[training]; did you mean training.steps?"
    )


def test_a_misspelled_section_and_a_nested_key_are_refused():
    raw = _raw()
    raw["parallelsim"] = {"tensor_parallel_degree": 2}
    raw.setdefault("quantize", {}).setdefault("linear", {}).setdefault("float8", {})["recipe"] = "rowwise"
    with pytest.raises(job.ConfigError) as err:
        torchtitan.convert(raw, 8)
    assert str(err.value).endswith("(1 more unknown)")
    lines = [line for _, line in torchtitan._unknown_keys(raw, torchtitan._known_keys())]
    assert sorted(lines) == [
        "[parallelsim] is not a torchtitan section; did you mean [parallelism]?",
        "quantize.linear.float8.recipe is not a field of torchtitan's [quantize.linear.float8]; did you mean "
        "quantize.linear.float8.recipe_name?",
    ]


def test_keys_a_custom_config_module_adds_are_listed_not_refused():
    raw = _raw(job__custom_config_module="my_project.config", training__my_knob=4)
    conversion = torchtitan.convert(raw, 8)
    mine = [line for line in conversion.ignored if "my_knob" in line]
    assert mine == [
        "training.my_knob is not a field of torchtitan's [training]: added by job.custom_config_module? "
        "not read by this trainer"
    ]


def test_a_torchtitan_field_this_trainer_lacks_stays_a_warning():
    conversion = torchtitan.convert(_raw(training__gc_freq=5), 8)
    assert "training.gc_freq = 5: no equivalent in this trainer" in conversion.ignored


@pytest.mark.multirank
def test_the_cli_refuses_a_misspelled_key_in_one_line_naming_the_section_that_has_it(tmp_path):
    text = (FIXTURES / "llama3_8b.toml").read_text().replace("[training]\n", "[training]\nwarmup_stesp = 3\n", 1)
    assert "warmup_stesp" in text
    (tmp_path / "tt.toml").write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "titan_train",
            "run",
            "--config",
            str(tmp_path / "tt.toml"),
            "--nproc",
            "8",
            "--print-config",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "titan-train: error: torchtitan config (v0.2.2 fields): training.warmup_stesp is not a field of "
        "torchtitan's [training]; did you mean lr_scheduler.warmup_steps?"
    ]
