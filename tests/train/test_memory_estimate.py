"""The analytic memory estimate: its terms are recomputed from the live model and the
trainer's own sharding, so a change to model.py, kernels.py (the reference ops the build
picks on CPU) or parallel.py that drifts the formulas fails here."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import pytest

from titan_train.config.job import JobConfig, load, validate
from titan_train.config.paths import configs_dir
from titan_train.memory import estimate as me

# A model small enough to build and run forward in a second under FakeTensorMode, with a
# vocabulary that does not divide by 4 (FSDP padding) and a SwiGLU width unlike d.
TINY = [
    "model.d_model=64",
    "model.n_heads=4",
    "model.n_kv_heads=4",
    "model.vocab_size=130",
    "model.multiple_of=32",
    "model.max_seq_len=64",
    "training.seq_len=32",
    "training.batch_size=8",
]


def tiny(*overrides: str) -> JobConfig:
    return load(configs_dir() / "llama_debug.toml", TINY + list(overrides))


@contextlib.contextmanager
def built(cfg: JobConfig, world: int):
    """(parts, dims) of the trainer's own build on rank 0 of a fake world, fake tensors."""
    torch = pytest.importorskip("torch")
    from titan_doctor.diagnose import memory_exact as mx
    from titan_train.build import build
    from titan_train.config.parallel_dims import ParallelDims

    dims = ParallelDims.of(cfg.distributed, world)
    with mx.fake_world(world, 0):
        mesh = dims.build_mesh("cpu")
        with mx.fake_tensors():
            yield build(cfg, dims, torch.device("cpu"), mesh=mesh), dims


def saved_bytes(cfg: JobConfig, world: int) -> int:
    """Bytes autograd saves in one forward + loss of the trainer's own built model on rank 0
    (fake tensors, fake process group): every saved tensor's storage once, parameters (as
    each module holds them while it runs: FSDP's unsharded ones) and buffers excluded."""
    import torch

    from titan_doctor.diagnose import memory_exact as mx
    from titan_train.components.loss import cross_entropy, loss_context

    with built(cfg, world) as (parts, dims):
        model = parts.model_parts[0]
        ((inputs, targets),) = mx.random_batches(cfg, dims, torch.device("cpu"))()
        not_activations = {_storage(b)._cdata for b in model.buffers()}
        seen = {}

        def pack(x):
            st = _storage(x)
            seen[st._cdata] = st
            return x

        def params_in_use(module, args, output):  # global hooks run before FSDP's reshard
            not_activations.update(_storage(p)._cdata for p in module.parameters(recurse=False))

        hook = torch.nn.modules.module.register_module_forward_hook(params_in_use)
        try:
            with (
                torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x),
                parts.precision.autocast("cpu"),
                loss_context(dims.tp > 1),
            ):
                loss = cross_entropy(model(inputs), targets)
        finally:
            hook.remove()
        total = sum(st.nbytes() for key, st in seen.items() if key not in not_activations)
        del loss
    return total


def _storage(x):
    return (x._local_tensor if hasattr(x, "_local_tensor") else x).untyped_storage()


LAYOUTS = [  # (world, overrides): fp32, autocast, FSDP mixed precision, TP (sequence parallel), GQA
    (1, []),
    (1, ['training.mixed_precision="bf16"']),
    (2, ['training.mixed_precision="bf16"']),
    (2, ["distributed.tp_size=2"]),
    (4, ["distributed.tp_size=2", 'training.mixed_precision="bf16"', "model.n_kv_heads=2"]),
    (2, ["model.n_kv_heads=1", "training.batch_size=4"]),
]


@pytest.mark.parametrize("world,overrides", LAYOUTS)
def test_block_and_head_formulas_match_what_autograd_saves(world, overrides):
    """Per block: the difference between a 2-block and a 1-block model; outside the blocks
    (embedding, final norm, output, loss): what a 1-block model saves beyond one block."""
    one, two = (tiny(*overrides, f"model.n_layers={n}") for n in (1, 2))
    s1, s2 = saved_bytes(one, world), saved_bytes(two, world)
    lay = me.layout(two, world, "gloo")
    assert s2 - s1 == me.block_saved(lay, lay.micro_batch)
    assert 2 * s1 - s2 == me.head_saved(lay, lay.micro_batch, first=True, last=True)


def test_block_formula_terms_scale_with_their_dimensions():
    lay = me.layout(tiny(), 1, "gloo")
    b = lay.micro_batch
    wider = dataclasses.replace(lay, model=dataclasses.replace(lay.model, multiple_of=lay.model.ffn_dim * 2))
    T = b * lay.seq_len
    # SwiGLU keeps four (T x f) tensors: w1 out, silu out, w3 out, their product
    assert me.block_saved(wider, b) - me.block_saved(lay, b) == 4 * T * (wider.model.ffn_dim - lay.model.ffn_dim) * 4
    assert me.block_saved(lay, 2 * b) == 2 * me.block_saved(lay, b)


def shard_bytes(cfg: JobConfig, world: int) -> tuple[int, int]:
    """(bytes of this rank's parameter storages, number of parameter tensors) as the
    trainer's build lays them out (FSDP pads every shard to the largest)."""
    with built(cfg, world) as (parts, _):
        params = parts.parameters()
        storages = {_storage(p)._cdata: _storage(p).nbytes() for p in params}
    return sum(storages.values()), len(params)


@pytest.mark.parametrize(
    "world,overrides",
    [
        (4, []),
        (4, ["distributed.tp_size=2"]),
        (3, ["model.n_heads=1", "model.n_kv_heads=1", "training.batch_size=9"]),
        (4, ["distributed.dp_replicate_size=2"]),  # HSDP: shards over 2, not 4
        (8, ["distributed.dp_replicate_size=2", "distributed.tp_size=2"]),
    ],
)
def test_parameter_and_adamw_terms_match_the_trainers_sharding(world, overrides):
    cfg = tiny("model.n_layers=2", *overrides)
    validate(cfg, world)
    stored, n_tensors = shard_bytes(cfg, world)
    stage = me.estimate(me.layout(cfg, world, "gloo"), accelerator=False).stages[0]
    terms = {t.name: t.bytes for t in stage.terms}
    assert terms["params (sharded, fp32)"] == stored
    # AdamW: exp_avg and exp_avg_sq, fp32, one per stored element; one fp32 step per tensor
    assert terms["optimizer state"] == 2 * stored + 4 * n_tensors


def test_hsdp_shards_over_dp_shard_only_on_a_two_dimensional_mesh():
    """2 replicas x 2 shards: each rank holds what FSDP over 2 ranks holds, its parameters
    are DTensors (Replicate, Shard(0)) on the (dp_replicate, dp_shard) mesh, and the planner
    counts the state divided by dp_shard, with one communicator per data-parallel dim."""
    from torch.distributed.tensor import Replicate, Shard

    hsdp = tiny("model.n_layers=2", "distributed.dp_replicate_size=2")
    with built(hsdp, 4) as (parts, dims):
        wq = parts.model_parts[0].layers["0"].attention.wq.weight
        assert (dims.dp, dims.dp_shard, dims.dp_replicate) == (4, 2, 2)
        assert wq.device_mesh.mesh_dim_names == ("dp_replicate", "dp_shard")
        assert tuple(wq.placements) == (Replicate(), Shard(0))
        assert wq.to_local().shape[0] == wq.shape[0] // 2
    assert shard_bytes(hsdp, 4) == shard_bytes(tiny("model.n_layers=2"), 2)
    big = load(configs_dir() / "llama_7b.toml")
    on = {
        r: me.layout(
            dataclasses.replace(big, distributed=dataclasses.replace(big.distributed, dp_replicate_size=r)), 16, "hccl"
        )
        for r in (1, 2)
    }
    opt = {r: {t.name: t.bytes for t in me.estimate(lay).worst.terms}["optimizer state"] for r, lay in on.items()}
    assert opt[2] == pytest.approx(2 * opt[1], rel=2e-3)
    assert me.communicators(on[1]) == 1  # the world; dp spans it (DeviceMesh reuses the world group)
    assert me.communicators(on[2]) == 3  # the world, dp_replicate (2 ranks), dp_shard (8 ranks)


def test_adamw_state_is_two_fp32_per_parameter_divided_by_the_shard_count():
    cfg = load(configs_dir() / "llama_7b.toml")
    params = me.estimate(me.layout(cfg, 1, "gloo")).params
    for world in (1, 8, 64):
        opt = {t.name: t.bytes for t in me.estimate(me.layout(cfg, world, "gloo")).stages[0].terms}["optimizer state"]
        assert opt == pytest.approx(2 * 4 * params / world, rel=2e-3)


def test_terms_sum_to_the_peak_and_margins_apply():
    cfg = load(configs_dir() / "llama_13b.toml")
    on_card = me.estimate(me.layout(cfg, 16, "hccl"), accelerator=True).worst
    assert on_card.peak_bytes == on_card.tensor_bytes + on_card.comm_bytes + on_card.margin_bytes
    assert sum(t.bytes for t in on_card.terms) == on_card.tensor_bytes
    assert on_card.margin_bytes == int(me.ALLOCATOR_MARGIN * on_card.tensor_bytes)
    # 13B on 16 cards = dp 8 x tp 2: the world group, dp and tp groups, 2 x 200 MB each
    assert on_card.comm_bytes == 3 * 2 * 200 * 2**20
    on_cpu = me.estimate(me.layout(cfg, 16, "gloo"), accelerator=False).worst
    assert on_cpu.comm_bytes == 0 and on_cpu.margin_bytes == 0


def test_hccl_buffsize_counts_per_communicator():
    cfg = load(configs_dir() / "llama_70b.toml")
    small = me.layout(cfg, 64, "hccl", hccl_buffsize_mb=50)
    assert me.comm_buffers(small) == 3 * 2 * 50 * 2**20
    assert me.comm_buffers(me.layout(cfg, 8, "hccl")) == 1 * 2 * 200 * 2**20  # tp 8 = the world: one group


def test_activation_checkpointing_and_sharding_lower_the_estimate():
    cfg = load(configs_dir() / "llama_7b.toml")
    peak = {}
    for ac, option in (("none", "all_mm"), ("selective", "all_mm"), ("selective", "op"), ("full", "all_mm")):
        training = dataclasses.replace(cfg.training, activation_checkpoint=ac, selective_ac_option=option)
        peak[ac if option == "all_mm" else option] = me.estimate(
            me.layout(dataclasses.replace(cfg, training=training), 8, "hccl")
        ).peak_bytes
    assert peak["none"] > peak["selective"] > peak["op"] > peak["full"]
    assert me.estimate(me.layout(cfg, 16, "hccl")).peak_bytes < me.estimate(me.layout(cfg, 8, "hccl")).peak_bytes


def test_op_level_sac_keeps_four_of_seven_matmul_outputs():
    """all_mm keeps every matmul output; op recomputes wk, wo and w3 (the 2nd, 4th and 6th)."""
    lay = me.layout(tiny('training.activation_checkpoint="selective"'), 1, "gloo")
    op = dataclasses.replace(lay, ac_option="op")
    b, m = lay.micro_batch, lay.model
    T = b * lay.seq_len
    dropped = T * (m.kv_heads * m.head_dim + m.ffn_dim + m.d_model) * 4  # wk, w3, wo outputs, fp32
    assert me.block_saved_ac(lay, b, "selective") - me.block_saved_ac(op, b, "selective") == dropped


def test_seed_facts_70b_weights_and_per_card_share():
    cfg = load(configs_dir() / "llama_70b.toml")
    est = me.estimate(me.layout(cfg, 64, "hccl"))
    assert 137e9 <= est.weights_bytes <= 141e9  # "70B in bf16 is 140 GB of weights"
    per_card = est.weights_bytes / cfg.distributed.tp_size
    assert per_card == pytest.approx(17.5e9, rel=0.02)  # "17.5 GB per card with tp_size 8"


def test_seed_facts_7b_weights_fit_one_card_training_does_not_without_sharding():
    cfg = load(configs_dir() / "llama_7b.toml")
    card = 64 * 2**30
    one = me.estimate(me.layout(cfg, 1, "hccl"))
    assert one.weights_bytes < card
    assert 16 * one.params > card  # fp32 params + grads + AdamW
    assert one.peak_bytes > card
    assert not one.layout.fsdp and me.estimate(me.layout(cfg, 8, "hccl")).layout.fsdp


def test_pipeline_stages_are_estimated_separately():
    cfg = tiny("model.n_layers=4", "distributed.pp_size=2", "distributed.pp_microbatches=2")
    est = me.estimate(me.layout(cfg, 2, "gloo"), accelerator=False)
    assert [s.stage for s in est.stages] == [0, 1] and all(s.layers == 2 for s in est.stages)
    assert est.stages[0].peak_bytes != est.stages[1].peak_bytes
    assert est.worst.peak_bytes == max(s.peak_bytes for s in est.stages)
    assert math.isclose(est.peak_bytes, est.worst.peak_bytes)


def _torch_interleaved_backwards(pp: int, n: int, rank: int, chunks: int = 2) -> list:
    """(chunk, micro-batches held per chunk) before each backward of `rank`, replayed from the
    action list torch's own ScheduleInterleaved1F1B builds (no process group needed)."""
    from types import SimpleNamespace

    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    stages = [
        SimpleNamespace(
            group_rank=rank,
            group_size=pp,
            stage_index=c * pp + rank,
            num_stages=pp * chunks,
            is_first=False,
            is_last=False,
            submod=None,
        )
        for c in range(chunks)
    ]
    order = schedules.ScheduleInterleaved1F1B(stages, n_microbatches=n).pipeline_order[rank]
    held, out = [0] * chunks, []
    for action in filter(None, order):
        chunk = action.stage_index // pp
        if action.computation_type == schedules._ComputationType.FORWARD:
            held[chunk] += 1
        else:
            out.append((chunk, tuple(held)))
            held[chunk] -= 1
    return out


@pytest.mark.parametrize("pp,n", [(2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (4, 12)])
def test_interleaved_holdings_follow_torchs_schedule(pp, n):
    for rank in range(pp):
        assert me.interleaved_backwards(n, 2, pp, rank) == _torch_interleaved_backwards(pp, n, rank), rank


def test_interleaved_last_rank_holds_a_round_on_its_first_chunk_and_one_on_its_last():
    """pp 8, 8 micro-batches (torchtitan's 405B Interleaved1F1B run): the last rank runs 8
    forwards of its first stage before its last stage's first forward + backward, so it holds
    8 + 1 micro-batches, not 2 of each (which double-counted the logits of its last stage)."""
    cfg = tiny(
        "model.n_layers=16",
        "distributed.pp_size=8",
        'distributed.pp_schedule="interleaved_1f1b"',
        "distributed.pp_microbatches=8",
        'training.activation_checkpoint="full"',
        "model.vocab_size=4096",
    )
    lay = me.layout(cfg, 8, "gloo")
    first, _ = me._held(lay, 7, 2)
    assert first[1] == (8, 1) and first[0] == (8, 0)
    rank0_first, _ = me._held(lay, 0, 2)
    assert rank0_first[1] == (8, 8)
    est = me.estimate(lay, accelerator=False)
    last = est.stages[7]
    acts = next(t for t in last.terms if t.name == "activations")
    b = lay.micro_batch
    block = me.block_saved_ac(lay, b, "full")
    # the loss gradient of the last stage: 8 x chunk 0 (one block) + 1 x chunk 1 (one block + head)
    assert last.phase.startswith("backward start (loss gradient)")
    assert acts.bytes == 8 * block + block + me.head_saved(lay, b, False, True)
