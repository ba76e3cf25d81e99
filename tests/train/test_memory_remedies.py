"""Verdict and remedies: the verdict's three bands, and for configs that do not fit, remedies
that the trainer accepts, that are re-estimated on the changed config, and that come in
the documented order (config changes by memory saved, then more cards)."""

from __future__ import annotations

import dataclasses

import pytest

from titan_train.config.job import load, validate
from titan_train.config.paths import configs_dir
from titan_train.memory import estimate as me
from titan_train.memory import remedies as mr

GiB = 2**30
CARD = int(60.96 * GiB)


# The shipped 7B and 70B as they were before issue 21 made them fit their cards (no AC, the
# whole local batch per micro-batch, the loss at once): configs that do not fit, for remedies.
UNFIT = ['training.activation_checkpoint="none"', "training.grad_accum_steps=1", "training.loss_chunks=1"]


def unfit(name: str, sets=()):
    return load(configs_dir() / f"{name}.toml", UNFIT + list(sets))


def seven_b(world: int = 8):
    return unfit("llama_7b"), mr.Target(world, CARD, "hccl", accelerator=True)


def test_verdict_bands_follow_the_error_margin():
    cfg, target = seven_b()
    est = mr.estimate_for(cfg, target)
    peak, m = est.peak_bytes, me.ERROR_MARGIN
    assert mr.verdict(est, int(peak * (1 + m)) + 1).status == mr.FITS
    assert mr.verdict(est, int(peak * (1 + m)) - 1024).status == mr.TIGHT
    assert mr.verdict(est, peak).status == mr.TIGHT
    assert mr.verdict(est, int(peak * (1 - m)) + 1024).status == mr.TIGHT
    assert mr.verdict(est, int(peak * (1 - m)) - 1024).status == mr.OVER
    v = mr.verdict(est, CARD)
    assert v.status == mr.OVER and v.headroom_bytes == CARD - peak < 0


def test_remedies_for_7b_on_8_cards_are_valid_re_estimated_and_ordered():
    cfg, target = seven_b()
    base = mr.estimate_for(cfg, target)
    found = mr.remedies(cfg, target, base)
    assert found, "a config that does not fit must get remedies"
    config_changes = [r for r in found if not r.flags]
    more_cards = [r for r in found if r.flags]
    assert found == config_changes + more_cards  # new hardware last
    for group in (config_changes, more_cards):
        saved = [r.saved_bytes for r in group]
        assert saved == sorted(saved, reverse=True)  # most memory saved first
    for r in found:
        world = int(r.flags.split()[-1]) if r.flags else target.world_size
        changed = unfit("llama_7b", r.sets)  # the --set lines as the trainer reads them
        validate(changed, world)
        again = mr.estimate_for(changed, target, world)
        assert again.peak_bytes == r.estimate.peak_bytes  # re-estimated on the changed config
        assert r.saved_bytes == base.peak_bytes - again.peak_bytes > 0
        assert r.verdict == mr.verdict(again, CARD)
    top = found[0]
    assert top.sets == ['training.activation_checkpoint="full"'] and top.verdict.status == mr.FITS


def test_op_level_sac_is_a_remedy_between_keeping_every_matmul_and_full_ac():
    """7B without AC: torchtitan's op-level SAC saves more than keeping every matmul, less
    than full AC; a config already on it is not offered it again."""
    cfg, target = seven_b()
    found = mr.remedies(cfg, target, mr.estimate_for(cfg, target))
    saved = {r.title.split(" (")[0]: r.saved_bytes for r in found}
    op = 'training.selective_ac_option="op"'
    assert [r.sets for r in found if op in r.sets][0][0] == 'training.activation_checkpoint="selective"'
    sel, op_sac, full = (saved[k + " activation checkpointing"] for k in ("selective", "op-level selective", "full"))
    assert sel < op_sac < full
    on_op = unfit("llama_7b", ['training.activation_checkpoint="selective"', op])
    assert not any(op in r.sets for r in mr.remedies(on_op, target, mr.estimate_for(on_op, target)))


def test_cpu_offload_is_ranked_by_what_it_saves():
    """The seed's OOM remedy is a candidate like any other: its place is its saving."""
    for name, world in (("llama_7b", 1), ("llama_7b", 8), ("llama_70b", 64)):
        cfg = unfit(name)
        target = mr.Target(world, CARD, "hccl", accelerator=True)
        found = [r for r in mr.remedies(cfg, target) if not r.flags and not r.title.startswith("combined")]
        offload = next(r for r in found if r.sets == ["distributed.cpu_offload=true"])
        params = me.estimate(me.layout(cfg, world, "hccl")).stages[0]
        state = {t.name: t.bytes for t in params.terms}
        # what it saves is at least the device's params + optimizer state it moves to the host
        assert offload.saved_bytes >= state["params (sharded, fp32)"] + state["optimizer state"]
        assert found.index(offload) == sum(1 for r in found if r.saved_bytes > offload.saved_bytes)


def test_no_offload_or_allocator_margin_on_cpu():
    cfg = unfit("llama_7b", ['distributed.backend="gloo"'])
    target = mr.Target(1, 16 * GiB, "gloo", accelerator=False)
    assert all("cpu_offload" not in " ".join(r.sets) for r in mr.remedies(cfg, target))
    assert mr.estimate_for(cfg, target).worst.margin_bytes == 0


def test_when_nothing_fits_alone_a_combination_comes_first():
    cfg, target = seven_b(world=1)
    found = mr.remedies(cfg, target)
    assert not any(r.verdict.status == mr.FITS for r in found[1:] if not r.title.startswith("combined"))
    combo = found[0]
    assert combo.title.startswith("combined: ") and len(combo.sets) >= 2
    assert len({s.split("=")[0] for s in combo.sets}) == len(combo.sets)  # each key once
    assert combo.verdict.status == mr.FITS
    assert not any("seq_len" in s for s in combo.sets)  # what is trained stays


def test_a_config_that_fits_gets_a_fits_verdict_and_no_refusal():
    cfg = load(configs_dir() / "llama_debug.toml")
    status, line = mr.preflight(cfg, mr.Target(1, 8 * GiB, "gloo", accelerator=False), "test")
    assert status == mr.FITS and "needs about" in line and "remedy" not in line


def test_preflight_line_names_the_estimate_the_memory_and_the_top_remedy():
    cfg, target = seven_b()
    status, line = mr.preflight(cfg, target, "NPU 0")
    est = mr.estimate_for(cfg, target)
    assert status == mr.OVER
    assert f"{est.peak_bytes / GiB:.1f} GiB per rank" in line and f"{CARD / GiB:.1f} GiB (NPU 0)" in line
    assert 'top remedy: --set training.activation_checkpoint="full"' in line
    assert "\n" not in line


def test_pipeline_remedy_sets_its_micro_batches():
    cfg, target = seven_b()
    pp = [r for r in mr.remedies(cfg, target) if any(s.startswith("distributed.pp_size") for s in r.sets)]
    assert pp and all(any(s.startswith("distributed.pp_microbatches") for s in r.sets) for r in pp)


def test_tp_remedy_respects_head_counts():
    cfg = unfit("llama_70b")  # 8 kv heads: tp cannot exceed 8
    found = mr.remedies(cfg, mr.Target(64, CARD, "hccl", accelerator=True))
    assert not any(s.startswith("distributed.tp_size") for r in found for s in r.sets)
    small = dataclasses.replace(cfg, distributed=dataclasses.replace(cfg.distributed, tp_size=2))
    tps = [
        s
        for r in mr.remedies(small, mr.Target(64, CARD, "hccl", True))
        for s in r.sets
        if s.startswith("distributed.tp_size")
    ]
    assert tps and all(int(s.split("=")[1]) in (4, 8) for s in tps)


@pytest.mark.parametrize("world", [64, 128])
def test_70b_full_ac_fits_a_910b(world):
    cfg = unfit("llama_70b", ['training.activation_checkpoint="full"'])
    assert mr.verdict(mr.estimate_for(cfg, mr.Target(world, CARD, "hccl", True)), CARD).status == mr.FITS
