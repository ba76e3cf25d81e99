"""The `multirank` contract's own check (tests/conftest.py): `rank_launch` must recognise every
way the suite starts trainer ranks or distributed workers, and nothing else, or `make test-fast`
(TITAN_TEST_NO_RANKS=1) would either miss a rank start or fail a test that starts none."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import rank_launch, spawned_workers
from tests.train.conftest import trainer_cmd


@pytest.mark.parametrize(
    "argv,env,kind",
    [
        (trainer_cmd(2, ["training.steps=2"]), None, "trainer"),
        (trainer_cmd(1), None, "trainer"),  # one rank: the training process itself
        (trainer_cmd(2, torchrun=True), None, "torchrun"),
        (["torchrun", "--nproc-per-node", "2", "train.py"], None, "torchrun"),
        (
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "tests/train/ckpt_worker.py", "save"],
            None,
            "torchrun",
        ),
        ([sys.executable, "/x/titan_doctor/diagnose/_comm_worker.py"], None, "worker"),
        ([sys.executable, "-m", "titan_doctor.diagnose._exact_worker", "--config", "c.toml"], None, "worker"),
        ([sys.executable, "-m", "titan_doctor", "diagnose", "--comm", "--nproc", "2"], None, "doctor-workers"),
        (
            [sys.executable, "-m", "titan_doctor", "diagnose", "--config", "llama_debug", "--exact"],
            None,
            "doctor-workers",
        ),
        (
            [sys.executable, "-c", "from titan_train.runtime import launch; launch.run_and_report(['x'], o, 'd')"],
            None,
            "launcher",
        ),
        ([sys.executable, "-c", "from titan_train.cli import main; main(['run', '--nproc', '2'])"], None, "trainer"),
        ([sys.executable, "loop.py"], {"RANK": "1", "WORLD_SIZE": "2", "TITAN_TRAIN_LAUNCHED": "1"}, "rank"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_every_way_the_suite_starts_ranks_is_recognised(argv, env, kind):
    assert rank_launch(argv, env) == kind


@pytest.mark.parametrize(
    "argv,env",
    [
        ([sys.executable, "-m", "titan_train.cli", "run", "--config", "llama_13b", "--print-config"], None),
        ([sys.executable, "-m", "titan_train", "run", "--help"], None),
        ([sys.executable, "-m", "titan_train.cli", "prepare-data", "in.txt", "--out", "o"], None),
        ([sys.executable, "-m", "titan_train.cli", "plot", "outputs/llama_debug"], None),
        ([sys.executable, "-m", "titan_doctor", "diagnose", "--log", "outputs/llama_debug"], None),
        ([sys.executable, "-m", "titan_doctor", "convert", "a", "b.pt"], None),
        ([sys.executable, "-c", "import torch"], None),
        (["git", "status"], None),
        ([sys.executable, "-m", "titan_doctor", "diagnose"], {"RANK": "0", "WORLD_SIZE": "2"}),  # a misconfigured env
    ],
)
def test_processes_that_start_no_ranks_are_not_counted(argv, env):
    assert rank_launch(argv, env) is None


def test_spawned_ranks_and_pool_workers_are_recognised_but_not_tokenizer_pools():
    import multiprocessing.pool
    from concurrent.futures import process

    torch_spawn = pytest.importorskip("torch.multiprocessing.spawn")
    assert spawned_workers(torch_spawn._wrap) == "mp.spawn"
    assert spawned_workers(multiprocessing.pool.worker) == "mp.pool"
    assert spawned_workers(process._process_worker) is None
    assert spawned_workers(None) is None
