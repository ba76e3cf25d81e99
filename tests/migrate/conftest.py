import os

import pytest


@pytest.fixture(autouse=True)
def _no_git_config(monkeypatch):
    """migrate asks git what it ignores: the machine's global git config must not decide."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
