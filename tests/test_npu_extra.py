"""`pip install 'titan-npu[npu]'` installs torch_npu with the torch the project pins
(scripts/setup.sh's TORCH_PIN), never whatever newest torch_npu and torch pip would pick."""

from __future__ import annotations

import re
from pathlib import Path

from titan_train.config.job import read_toml

REPO = Path(__file__).resolve().parents[1]


def test_the_npu_extra_pins_torch_npu_and_torch_to_the_setup_pin():
    extra = read_toml(REPO / "pyproject.toml")["project"]["optional-dependencies"]["npu"]
    torch_pin = re.search(r"TORCH_PIN=\$\{TORCH_PIN:-torch==([\d.]+)\}", (REPO / "scripts" / "setup.sh").read_text())
    assert torch_pin, "scripts/setup.sh's TORCH_PIN default moved"
    version = torch_pin.group(1)
    assert sorted(extra) == sorted([f"torch_npu=={version}", f"torch=={version}"])
