"""Multi-node with real processes: two `titan-train run` "nodes" of 2 ranks each on this
machine, meeting through torch's c10d rendezvous, train exactly like 4 ranks on one node."""

from __future__ import annotations

import pytest

from titan_train.runtime.launch import free_port

from .conftest import FAST, losses, ok, run_trainer, start_node

pytestmark = pytest.mark.multirank  # every test here starts trainer ranks or worker processes

STEPS = ["training.steps=2"]


def test_two_nodes_of_two_ranks_match_four_ranks_on_one_node(tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    single.mkdir(), multi.mkdir()
    ok(run_trainer(single, nproc=4, overrides=FAST + STEPS))

    port = free_port()
    rendezvous = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    nodes = [
        start_node(multi, nproc=2, overrides=FAST + STEPS, extra=[*rendezvous, "--node-rank", str(k)]) for k in (0, 1)
    ]
    outs = [n.communicate(timeout=300) for n in nodes]
    for n, (out, err) in zip(nodes, outs):
        assert n.returncode == 0, f"{out[-2000:]}\n{err[-2000:]}"
    assert sum("world 4 = dp 4 x pp 1 x tp 1" in out for out, _ in outs) == 1  # only global rank 0 prints
    logs = multi / "outputs" / "llama_debug" / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["rank0.log", "rank1.log", "rank2.log", "rank3.log"]

    want, got = losses(single), losses(multi)
    assert sorted(got) == [1, 2]
    for step in got:
        assert got[step] == pytest.approx(want[step], abs=1e-5), (step, got[step], want[step])
