"""Ranks that disagree never train together: two static nodes started with different
configs are both refused at start-up, naming the rank and the field; so are ranks whose
data differs in content at the same path."""

from __future__ import annotations

import pytest

from titan_train.config import job
from titan_train.config.parallel_dims import ParallelDims
from titan_train.distributed import same_job
from titan_train.runtime.launch import free_port

from .conftest import FAST, REPO, start_node

DIMS = ParallelDims(dp=2)


def _described(**overrides) -> dict[str, str]:
    cfg = job.load(REPO / "configs" / "llama_debug.toml", [f"{k}={v}" for k, v in overrides.items()])
    return same_job.describe(cfg, DIMS, {"tokenizer": "t1", "tokens": "d1"})


def test_the_same_job_on_every_rank_passes():
    assert same_job.first_difference([_described(), _described()]) is None
    assert same_job.digest(_described()) == same_job.digest(_described())


def test_another_config_value_is_named_with_the_rank():
    line = same_job.first_difference([_described(), _described(), _described(**{"optimizer.lr": 0.01})])
    assert line == (
        "rank 2 runs another job than rank 0: optimizer.lr is 0.01 there and 0.001 on rank 0; "
        "start every node with the same config, data and tokenizer"
    )


def test_data_that_differs_in_content_at_the_same_path_is_named():
    cfg = job.load(REPO / "configs" / "llama_debug.toml")
    mine = same_job.describe(cfg, DIMS, {"tokenizer": "t1", "tokens": "d1"})
    theirs = same_job.describe(cfg, DIMS, {"tokenizer": "t1", "tokens": "d2"})
    assert same_job.first_difference([mine, theirs]).startswith(
        "rank 1 runs another job than rank 0: data content (tokens) is d2 there and d1 on rank 0"
    )


@pytest.mark.multirank
def test_two_static_nodes_with_different_configs_are_both_refused(tmp_path):
    port = free_port()
    rendezvous = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    lrs = {0: "0.001", 1: "0.002"}
    nodes = [
        start_node(
            tmp_path,
            nproc=1,
            overrides=FAST + ["training.steps=2", f"optimizer.lr={lrs[k]}"],
            extra=[*rendezvous, "--node-rank", str(k)],
        )
        for k in (0, 1)
    ]
    outs = [n.communicate(timeout=300) for n in nodes]
    expected = (
        "rank 1 runs another job than rank 0: optimizer.lr is 0.002 there and 0.001 on rank 0; "
        "start every node with the same config, data and tokenizer"
    )
    for n, (out, err) in zip(nodes, outs):
        assert n.returncode == 2, f"{out[-2000:]}\n{err[-2000:]}"
        assert expected in err, err[-3000:]
    assert not any("step 1/2" in out for out, _ in outs)  # no step was trained
