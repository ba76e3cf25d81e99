"""Every NPU-side name the rules emit exists in the torch_npu package source.

torch_npu cannot be imported without CANN, so its wheel is read statically (tests/npu_wheel.py).
Skipped only when the registry is unreachable.
"""

from __future__ import annotations

import pytest

from titan_doctor.migrate import npu_api
from titan_doctor.migrate.rules.load import NPU_API_FILE, builtin_files
from titan_knowledge import load_toml, rules_dir

from ..npu_wheel import VERSION, torch_npu_wheel


@pytest.fixture(scope="module")
def sources():
    return npu_api.wheel_sources(torch_npu_wheel())


def _emitted() -> list[tuple[str, dict]]:
    out = []
    for path in builtin_files():
        for rule in load_toml(path).get("rule", []):
            if rule["kind"] == "rename":
                out.append((rule["new"], rule))
    return out


@pytest.mark.parametrize("new, rule", _emitted(), ids=[n for n, _ in _emitted()])
def test_emitted_name_exists_in_torch_npu(sources, new, rule):
    if rule.get("provided_by"):  # registered at import time, e.g. Backend.HCCL
        text = sources[f"torch_npu/{rule['provided_by'].removeprefix('torch_npu/')}"]
        assert rule["evidence"] in text
        return
    if rule.get("gate") == "members":  # each name let through must exist too
        assert all(npu_api.resolves(sources, f"{new}.{m}") for m in rule["members"])
    if rule.get("gate"):
        # the rule maps a whole namespace; the names it lets through are checked here / below
        assert npu_api.resolves(sources, new)
        return
    assert npu_api.resolves(sources, new), f"{new} not found in torch_npu {VERSION}"


def test_names_data_matches_the_wheel(sources):
    """rules/migrate/npu_api.toml is exactly what the wheel provides (regenerate if not)."""
    shipped = (rules_dir() / "migrate" / NPU_API_FILE).read_text()
    assert shipped == npu_api.render_toml(sources, VERSION)


def test_gated_names_resolve(sources):
    """Each name the torch.cuda gate lets through is defined in torch_npu/npu or promised by
    its __all__ (the legacy *Tensor types are created by the C extension)."""
    data = load_toml(rules_dir() / "migrate" / NPU_API_FILE)["torch_npu"]
    promised = set(npu_api.declared_all(sources))
    missing = [n for n in data["npu"] if n not in promised and not npu_api.resolves(sources, f"torch.npu.{n}")]
    assert missing == []


def test_resolver_rejects_what_is_not_there(sources):
    assert not npu_api.resolves(sources, "torch.npu.CUDAGraph")
    assert not npu_api.resolves(sources, "torch.npu.matmul.allow_tf32")
    assert not npu_api.resolves(sources, "torch_npu.npu.mstx.range")
