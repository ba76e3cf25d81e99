"""The launcher checks for FSDP2 by the installed torch's version, without importing torch
(seconds of CPU before any rank starts); a rank imports it to be sure."""

import importlib.metadata

import pytest

from titan_train import cli


@pytest.mark.parametrize(
    "version,release", [("2.13.0", (2, 13)), ("2.6.0a0+git1234", (2, 6)), ("2.5.1+cpu", (2, 5)), ("dev", ())]
)
def test_release_is_the_leading_numeric_version(version, release):
    assert cli._release(version) == release


def test_the_launcher_refuses_a_torch_without_fsdp2_by_its_version(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.5.1")
    with pytest.raises(cli._UserError, match=r"torch 2\.5\.1 has no FSDP2 .*install torch >= 2\.6"):
        cli._require_fsdp2(importing=False)


def test_the_launcher_accepts_a_new_enough_torch_without_importing_it(monkeypatch):
    import sys

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.13.0")
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", None)  # an import would raise
    cli._require_fsdp2(importing=False)
    with pytest.raises(cli._UserError, match="has no FSDP2"):
        cli._require_fsdp2(importing=True)  # a rank imports, and here that import fails
