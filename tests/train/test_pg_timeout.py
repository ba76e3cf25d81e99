"""distributed.timeout_s reaches init_process_group (0 keeps torch's default), and
torchtitan's comm timeouts convert to it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from titan_train.config import job as config_mod
from titan_train.config import torchtitan as tt

DEBUG = Path(__file__).with_name("fixtures") / "torchtitan" / "debug_model.toml"


class _Stop(Exception):
    pass


@pytest.mark.parametrize("timeout_s, expected", [(0, None), (2400, timedelta(seconds=2400))])
def test_the_timeout_goes_to_init_process_group(monkeypatch, timeout_s, expected):
    from titan_train import train as train_mod

    seen = {}

    def init(backend, **kwargs):
        seen.update(kwargs, backend=backend)
        raise _Stop

    monkeypatch.setattr(train_mod.dist, "init_process_group", init)
    for var, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(var, value)
    cfg = config_mod.from_raw({"distributed": {"backend": "gloo", "timeout_s": timeout_s}})
    with pytest.raises(_Stop):
        train_mod.train(cfg)
    assert seen == {"backend": "gloo", "timeout": expected}


def test_torchtitans_comm_timeouts_become_the_longer_one():
    raw = config_mod.read_toml(DEBUG)
    assert tt.from_raw(dict(raw), [], 2, "t")[0].distributed.timeout_s == 0  # not set: torch's default
    raw["comm"] = {"init_timeout_seconds": 900, "train_timeout_seconds": 200}
    cfg, conversion = tt.from_raw(raw, [], 2, "t")
    assert cfg.distributed.timeout_s == 900
    assert "one process-group timeout here, the longer (900 s)" in conversion.approximated[-1]
    cfg, _ = tt.load(DEBUG, ["comm.init_timeout_seconds=600"], 2)
    assert cfg.distributed.timeout_s == 600


def test_a_negative_timeout_is_refused():
    cfg = config_mod.from_raw({"distributed": {"timeout_s": -1}})
    with pytest.raises(config_mod.ConfigError, match="distributed.timeout_s"):
        config_mod.validate(cfg, 1)
